"""A resume keeps its word (:mod:`agentfly.run.resume`): a finished run trains nothing and says it is
complete, a config that differs from the checkpoint's is named, a change of what the checkpoint
means is refused unless ``trainer.resume_changed_config=true``, and a checkpoint whose models this
config does not train is refused outright. A run that stops on an error leaves ``error.txt``
beside its ``config.yaml``.

The finished two-iteration run (`finished_run`, tests/conftest.py) is shared; each test works on
its own copy of it."""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

import pytest
import torch

from agentfly.cli import main
from tests.fit_runs import fit_args, rows


def copy_run(run: Path, dest: Path) -> Path:
    """The run directory copied file by file (``iter_000002.ckpt`` no longer a link to ``last.ckpt``)."""
    shutil.copytree(run, dest, copy_function=shutil.copyfile)
    return dest


def trained_iterations(run: Path) -> list[float]:
    return [float(r["training/iteration"]) for r in rows(run) if r.get("training/iteration")]


def last_iteration(run: Path) -> int:
    return torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["agentfly_iteration"]


def said(caplog) -> str:
    return "\n".join(r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("last_ckpt", ["intact", "truncated"])
def test_a_finished_run_resumed_trains_nothing_and_says_it_is_complete(finished_run, tmp_path, capsys, caplog, last_ckpt):
    """The same command again (``resume_mode=auto``, the default); with ``last.ckpt`` truncated the
    resume falls back to ``iter_000002.ckpt``, the run's last iteration, all the same."""
    root, model, run = finished_run
    out = copy_run(run, tmp_path / "run")
    if last_ckpt == "truncated":
        with open(out / "checkpoints" / "last.ckpt", "r+b") as f:
            f.truncate(1000)
    versions = sorted(p.name for p in (out / "metrics").iterdir())
    with caplog.at_level(logging.WARNING, logger="agentfly"):
        assert main(fit_args(root, model, out, 2)) == 0
    err = capsys.readouterr().err
    used = out / "checkpoints" / ("last.ckpt" if last_ckpt == "intact" else "iter_000002.ckpt")
    assert f"the run is complete: {used} holds iteration 2 of 2 (trainer.total_training_steps=2)" in err, err
    assert trained_iterations(out) == [1.0, 2.0]  # no third iteration
    assert sorted(p.name for p in (out / "metrics").iterdir()) == versions  # nothing started
    if last_ckpt == "truncated":
        assert f"resuming from {used}, the newest intact one" in said(caplog)
    else:
        assert last_iteration(out) == 2


def test_a_resume_names_the_keys_that_differ_and_its_report_times_add_up(finished_run, tmp_path, caplog):
    """Tools and turns changed (training keys), the length raised (a schedule key): the resume
    goes on and names each key with both values. The stale ``error.txt`` of an earlier launch is
    gone; the report's time line gives this launch's training inside this launch's time."""
    root, model, run = finished_run
    out = copy_run(run, tmp_path / "run")
    (out / "error.txt").write_text("an earlier launch's error")
    changed = ["agent.init_config.tools=[answer]", "agent.run_config.max_turns=1"]
    with caplog.at_level(logging.WARNING, logger="agentfly"):
        assert main(fit_args(root, model, out, 3, changed)) == 0
    text = said(caplog)
    assert "agent.init_config.tools: ['calculator', 'answer'] -> ['answer']" in text, text
    assert "agent.run_config.max_turns: 2 -> 1" in text, text
    assert "trainer.total_training_steps: 2 -> 3" in text, text
    assert trained_iterations(out) == [1.0, 2.0, 3.0] and last_iteration(out) == 3
    assert not (out / "error.txt").exists()
    line = (out / "report.md").read_text().splitlines()[2]
    this_launch = re.search(r"this launch: 1 iteration, training (\d+) s, (\d+) s in all", line)
    assert this_launch, line
    assert int(this_launch[1]) <= int(this_launch[2]), line


def test_a_change_of_what_the_checkpoint_means_is_refused_unless_told(finished_run, tmp_path, capsys, caplog):
    """Another model folder (the same weights, copied) and another chat template: refused before
    anything starts, naming both keys and the way on; with ``trainer.resume_changed_config=true``
    the run resumes and names them."""
    root, model, run = finished_run
    out = copy_run(run, tmp_path / "run")
    other = Path(shutil.copytree(model, tmp_path / "other_model"))
    changed = [f"agent.init_config.model_name_or_path={other}", "agent.init_config.template=qwen2.5-no-system-tool"]
    versions = sorted(p.name for p in (out / "metrics").iterdir())
    assert main(fit_args(root, model, out, 3, changed)) == 2
    err = capsys.readouterr().err
    assert f"actor_rollout_ref.model.path: '{model}' -> '{other}'" in err, err
    assert "agent.init_config.template: 'qwen2.5' -> 'qwen2.5-no-system-tool'" in err, err
    assert "trainer.resume_changed_config=true" in err
    assert sorted(p.name for p in (out / "metrics").iterdir()) == versions
    assert not (out / "error.txt").exists()  # refused as the config was read: nothing ran

    with caplog.at_level(logging.WARNING, logger="agentfly"):
        assert main(fit_args(root, model, out, 3, [*changed, "trainer.resume_changed_config=true"])) == 0
    assert "agent.init_config.template: 'qwen2.5' -> 'qwen2.5-no-system-tool'" in said(caplog)
    assert trained_iterations(out) == [1.0, 2.0, 3.0]


def test_a_checkpoint_without_the_models_this_config_trains_is_refused_even_when_told(finished_run, tmp_path, capsys):
    """GAE trains a critic the GRPO checkpoint does not hold: its state cannot be loaded, so the
    resume is refused before anything starts, naming the models and the key, and
    ``trainer.resume_changed_config=true`` does not change that."""
    root, model, run = finished_run
    out = copy_run(run, tmp_path / "run")
    gae = ["algorithm.adv_estimator=gae", f"critic.model.path={model}"]
    for told in ([], ["trainer.resume_changed_config=true"]):
        assert main(fit_args(root, model, out, 3, [*gae, *told])) == 2
        err = capsys.readouterr().err
        assert "it holds the models ['actor', 'reference'], this config trains ['actor', 'reference', 'critic']" in err, err
        assert "algorithm.adv_estimator: 'grpo' -> 'gae'" in err, err
        assert "Traceback" not in err


def test_a_run_that_stops_on_an_error_leaves_a_folder_that_says_so(finished_run, tmp_path):
    """It fails as training starts, its config written: ``error.txt`` beside ``config.yaml``
    names the error, with the traceback."""
    root, model, _ = finished_run
    out = tmp_path / "run"
    command = fit_args(root, model, out, 2, ["--trainer.callbacks+=tests.planted.Fail"])
    with pytest.raises(RuntimeError, match="planted failure"):
        main(command)
    assert (out / "config.yaml").is_file()
    note = (out / "error.txt").read_text()
    assert "agentfly fit stopped on an error" in note
    assert "error: RuntimeError: planted failure" in note
    assert "the launch's config: config.yaml" in note
    assert "Traceback (most recent call last)" in note and "tests/planted.py" in note
