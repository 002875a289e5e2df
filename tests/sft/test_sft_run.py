"""``agentfly sft`` end to end: the shipped example (conf/examples/sft_demo.yaml) for 2 steps, with
one bad row added and skipped. One run serves most assertions: the run folder is a fit's
(config.yaml that reads back, metrics, checkpoints, hf_actor), the loss is logged, bad rows are
named; a copy of it is resumed."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from agentfly.cli import main
from agentfly.config.sft import load_sft_config, view_yaml
from agentfly.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "conf" / "examples" / "sft_demo.yaml"
DEMO_DATA = ROOT / "agentfly" / "demo" / "data"
STEPS = 2
pytestmark = pytest.mark.slow


def args(root: Path, run: Path, steps: int = STEPS) -> list[str]:
    return [
        "sft", "--config", str(CONFIG),
        f"data.train_files=[{DEMO_DATA / 'sft_train.jsonl'},{root / 'bad.jsonl'}]",
        "data.bad_rows=skip",
        f"trainer.total_training_steps={steps}",
        f"trainer.default_local_dir={run}",
        "trainer.logger=[csv]",
        "trainer.save_freq=1",
    ]


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory) -> tuple[Path, Path, str]:
    """The example, ``STEPS`` steps: ``(root, run directory, what it said on stderr)``."""
    root = tmp_path_factory.mktemp("sft")
    (root / "bad.jsonl").write_text('{"messages": [{"role": "user", "content": "no answer"}]}\n')
    run = root / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        import io
        import logging

        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        logging.getLogger("agentfly").addHandler(handler)
        try:
            assert main(args(root, run)) == 0
        finally:
            logging.getLogger("agentfly").removeHandler(handler)
    return root, run, stream.getvalue()


def metric_rows(run: Path, version: int = 0) -> list[dict[str, str]]:
    with (run / "metrics" / f"version_{version}" / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def test_the_run_folder_is_a_fits(sft_run):
    _, run, _ = sft_run
    assert (run / "config.yaml").is_file() and (run / "metrics" / "version_0" / "metrics.csv").is_file()
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["iter_000001.ckpt", "iter_000002.ckpt", "last.ckpt"]
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= {p.name for p in (run / "hf_actor").iterdir()}
    # config.yaml is agentfly sft's keys, and reads back to the same config
    again = load_sft_config(config_file=run / "config.yaml")
    assert view_yaml(again) == (run / "config.yaml").read_text()
    assert again.trainer.total_training_steps == STEPS and "adv_estimator" not in (run / "config.yaml").read_text()


def test_the_loss_is_logged_per_step_and_validated_before_and_after(sft_run):
    _, run, _ = sft_run
    rows = metric_rows(run)
    train = [r for r in rows if r.get("train/loss")]
    assert [float(r["training/iteration"]) for r in train] == [1.0, 2.0]
    assert all(float(r["train/loss"]) > 0 and float(r["train/assistant_tokens"]) > 0 for r in train)
    assert float(train[0]["data/train_examples"]) == 64 and float(train[0]["data/train_bad_rows"]) == 1
    assert len([r for r in rows if r.get("val/loss")]) == 2  # before training and at the end


def test_a_skipped_row_is_named_by_file_and_line(sft_run):
    root, run, said = sft_run
    named = f"{root / 'bad.jsonl'}:1: no assistant turn"
    assert (run / "bad_rows.txt").read_text().startswith(named)
    assert named in said and "1 row(s) left out" in said


def test_the_checkpoint_and_the_export_hold_the_trained_policy(sft_run):
    from safetensors.torch import load_file

    _, run, _ = sft_run
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert (ckpt["agentfly_stage"], ckpt["agentfly_iteration"]) == ("sft", STEPS)
    assert ckpt["agentfly_config"]["data.format"] == "messages"
    exported = load_file(run / "hf_actor" / "model.safetensors")
    base = load_file(ROOT / "agentfly" / "demo" / "model" / "model.safetensors")
    name = "model.layers.0.mlp.down_proj.weight"
    assert torch.equal(exported[name], ckpt["state_dict"][f"actor.{name}"])
    assert not torch.equal(exported[name], base[name])  # trained


def test_a_copy_resumes_where_it_stopped_and_a_finished_run_says_so(sft_run, tmp_path, capsys):
    root, run, _ = sft_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    assert main(args(root, copy)) == 0
    assert "the run is complete" in capsys.readouterr().err
    assert main(args(root, copy, steps=STEPS + 1)) == 0
    resumed = [r for r in metric_rows(copy, version=1) if r.get("train/loss")]
    assert [float(r["training/iteration"]) for r in resumed] == [STEPS + 1.0]


def test_a_fit_does_not_resume_from_an_sft_checkpoint(sft_run):
    from agentfly.run.resume import check_resume

    _, run, _ = sft_run
    with pytest.raises(ConfigError, match="agentfly sft wrote it, and this is agentfly fit"):
        check_resume(None, SimpleNamespace(stage="fit"), str(run / "checkpoints" / "last.ckpt"))


def test_agentfly_sft_alone_runs_the_example(capsys):
    """With no file and no data.train_files, the default task is the example (printed, not run)."""
    assert main(["sft", "--print_config"]) == 0
    printed = capsys.readouterr().out
    assert "sft_train.jsonl" in printed and "qwen2.5-no-system-tool" in printed
