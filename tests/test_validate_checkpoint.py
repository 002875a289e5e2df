"""`agentfly validate` / `test` score the weights they name: a trained checkpoint's validation
equals the fit's own final validation (greedy, so deterministic), and differs from the base
model's; a fit resumed with `--ckpt_path` rolls out from the checkpoint's weights. Each way of
naming the checkpoint (`--ckpt_path`, `resume_mode=resume_path`, `resume_mode=auto`), the
in-process engine and a Ray pool of one engine."""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentfly.cli import main
from tests.fit_runs import fit_args, rows, write_task
from tests.rewards import FINGERPRINT

VAL_KEYS = ("val/val/reward", "val/val/tool_call_rate", "val/val/turns/mean")


def args(root, model, run, stage="fit", steps=2, extra=()):
    """``fit_args`` with the fingerprint reward, one turn, a high learning rate (the greedy
    responses change within two iterations) and the command ``stage``."""
    return [
        stage,
        *fit_args(root, model, run, steps, [
            f"agent.init_config.reward_name={FINGERPRINT}",
            "agent.run_config.max_turns=1",
            "actor_rollout_ref.actor.optim.lr=1e-2",
            *extra,
        ])[1:],
    ]


def val_rows(run):
    return [{k: r[k] for k in VAL_KEYS} for r in rows(run) if r.get(VAL_KEYS[0])]


def responses(path):
    return [json.loads(line)["response_text"] for line in path.read_text().splitlines()]


@dataclass
class Trained:
    root: Path  # the task files
    model: Path  # the base model
    run: Path  # the fit's run directory
    base: dict[str, str]  # the validation figures before training
    final: dict[str, str]  # and after it
    base_text: list[str]  # the greedy validation responses before training
    final_text: list[str]  # and after it


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Trained:
    """Two iterations with a validation before (the base model's) and after (the final one)."""
    root, model = write_task(tmp_path_factory.mktemp("validate"), [(1, 2), (3, 4), (5, 6), (7, 8)])
    run = root / "run"
    assert main(args(root, model, run, extra=["trainer.val_before_train=True", "trainer.test_freq=0"])) == 0
    base, final = val_rows(run)
    trajectories = run / "trajectories"
    base_text = responses(trajectories / "val_trajectories_iter000000.jsonl")
    final_text = responses(trajectories / "val_trajectories_iter000002.jsonl")
    assert len(base_text) == len(final_text) == 2
    assert base_text != final_text  # training changed the greedy responses...
    assert base != final  # ... and so the figures
    return Trained(root, model, run, base, final, base_text, final_text)


@pytest.mark.parametrize(
    "stage, how, engines",
    [("validate", "--ckpt_path", 0), ("test", "auto", 0), ("validate", "resume_path", 1)],
)
def test_validating_a_trained_checkpoint_reports_the_trained_policy(
    trained, tmp_path, tmp_path_factory, monkeypatch, stage, how, engines
):
    t = trained
    # Ray's socket paths must stay under 108 bytes: the session's temporary root, not tmp_path
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path_factory.getbasetemp()))
    ckpt = t.run / "checkpoints" / "last.ckpt"
    out = tmp_path / "out"
    extra = [f"actor_rollout_ref.rollout.num_engines={engines}"]
    if how == "auto":  # the checkpoint that resume_mode=auto finds in the run directory
        (out / "checkpoints").mkdir(parents=True)
        shutil.copy(ckpt, out / "checkpoints" / "last.ckpt")
        extra.append("trainer.resume_mode=auto")
    elif how == "resume_path":
        extra += ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={ckpt}"]
    command = args(t.root, t.model, out, stage, extra=extra)
    if how == "--ckpt_path":
        command += ["--ckpt_path", str(ckpt)]
    assert main(command) == 0
    if how == "auto":  # a folder holding checkpoints is a training run's: the test writes its own
        out = out / stage
    assert val_rows(out) == [t.final]  # the fit's final figures, to the last digit
    assert responses(out / "trajectories" / "val_trajectories_iter000002.jsonl") == t.final_text


def test_without_a_checkpoint_validate_scores_the_base_model_and_says_so(trained, tmp_path, caplog):
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING, logger="agentfly"):
        assert main(args(trained.root, trained.model, out, "validate")) == 0
    said = [r.getMessage() for r in caplog.records if "validating the base model" in r.getMessage()]
    assert len(said) == 1 and "resume_mode=auto found none" in said[0], said
    assert val_rows(out) == [trained.base]
    assert responses(out / "trajectories" / "val_trajectories_iter000000.jsonl") == trained.base_text


def test_fit_with_ckpt_path_resumes_from_the_checkpoints_weights(trained, tmp_path):
    """Iteration 2 of a fit resumed from iteration 1's checkpoint rolls out exactly what the
    uninterrupted fit's iteration 2 did: same sampled responses, hence the same fingerprints."""
    run, out = trained.run, tmp_path / "out"
    command = args(trained.root, trained.model, out, extra=["trainer.val_before_train=True"])
    assert main([*command, "--ckpt_path", str(run / "checkpoints" / "iter_000001.ckpt")]) == 0
    assert [float(r["training/iteration"]) for r in rows(out) if r.get("training/iteration")] == [2.0]
    assert not val_rows(out)  # a resumed fit does not validate "before training"

    def rollout_rewards(path):
        return {r["iteration"]: r["rewards"] for r in map(json.loads, path.read_text().splitlines())}

    resumed = rollout_rewards(out / "trajectories" / "rollouts_rank0.jsonl")
    straight = rollout_rewards(run / "trajectories" / "rollouts_rank0.jsonl")
    assert set(resumed) == {2}
    assert resumed[2] == straight[2]


@pytest.mark.parametrize(
    "extra, ckpt, message",
    [
        ([], "missing", "--ckpt_path {missing} does not exist"),
        (["trainer.resume_mode=resume_path", "trainer.resume_from_path={missing}"], None,
         "trainer.resume_from_path={missing} does not exist"),
        (["trainer.resume_mode=disable"], "trained", "contradicts trainer.resume_mode=disable"),
    ],
)
def test_a_checkpoint_that_is_missing_or_contradicted_stops_before_anything_starts(
    trained, tmp_path, capsys, extra, ckpt, message
):
    missing = tmp_path / "nowhere" / "last.ckpt"
    out = tmp_path / "out"
    command = args(trained.root, trained.model, out, "validate", extra=[e.format(missing=missing) for e in extra])
    if ckpt:
        command += ["--ckpt_path", str(missing if ckpt == "missing" else trained.run / "checkpoints" / "last.ckpt")]
    assert main(command) == 2
    assert message.format(missing=missing) in capsys.readouterr().err
    assert not out.exists()  # no run directory, no model loaded


@pytest.mark.parametrize(("stage", "named"), [("validate", "would score the base model"),
                                              ("fit", "would start at iteration 1 and overwrite it")])
def test_a_finished_run_without_a_checkpoint_is_not_scored_as_the_base_model_nor_overwritten(
    trained, tmp_path, capsys, stage, named
):
    """A run folder holding hf_actor/ and no checkpoint (what trainer.save_freq=-1 leaves): the
    command refuses, naming save_freq and what to give instead, and touches nothing there."""
    out = tmp_path / "finished"
    shutil.copytree(trained.run / "hf_actor", out / "hf_actor")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    assert main(args(trained.root, trained.model, out, stage)) == 2
    err = capsys.readouterr().err
    assert named in err and "save_freq=-1 keeps none" in err and f"{out}/hf_actor" in err
    assert "trainer.resume_mode=disable" in err
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_validating_a_fit_s_own_folder_writes_beside_it_never_over_it(trained, tmp_path):
    """``agentfly validate`` on the fit's folder (its checkpoint found there): the fit's config
    record, metrics and trajectories stay byte for byte; the validation's go to ``<run>/validate``."""
    run = tmp_path / "run"
    shutil.copytree(trained.run, run)
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert main(args(trained.root, trained.model, run, "validate", extra=["trainer.resume_mode=auto"])) == 0
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert {k: v for k, v in after.items() if k.parts[0] != "validate"} == before
    assert val_rows(run / "validate") == [trained.final]
    assert (run / "validate" / "config.yaml").exists()
