"""LightningCLI conventions on `agentfly fit`: `--trainer.<Trainer argument>` flags, aliases of
agentfly's own keys (`--trainer.max_steps` = RL iterations), `--trainer.callbacks+=`, and errors
for arguments agentfly manages itself."""

from __future__ import annotations

import json

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelSummary

from agentfly.cli import load_config, main
from agentfly.config import ConfigError
from agentfly.fit import build_trainer
from tests.test_fit import fit_args, rows, task  # noqa: F401  (the fixture)


class Recorder(pl.Callback):
    """Writes one line per training batch it sees, with its own init argument."""

    def __init__(self, path: str, tag: str = "") -> None:
        self.path, self.tag = path, tag

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        with open(self.path, "a") as f:
            f.write(json.dumps({"tag": self.tag, "iteration": pl_module.iteration}) + "\n")


def test_trainer_flags_and_added_callbacks_reach_the_fit(task, tmp_path):  # noqa: F811
    root, model = task
    run, seen = tmp_path / "run", tmp_path / "seen.jsonl"
    args = [a for a in fit_args(root, model, run, 5) if not a.startswith("trainer.total_training_steps")]
    flags = [
        "--trainer.max_steps", "2",  # the LightningCLI spelling of total_training_steps: RL iterations
        "--trainer.callbacks+=tests.test_cli_lightning.Recorder",
        "--trainer.callbacks.init_args.path", str(seen),
        "--trainer.callbacks.tag", "hello",
        "--trainer.callbacks+=LearningRateMonitor",  # a bare name: lightning.pytorch.callbacks
    ]
    assert main([*args, *flags]) == 0
    lines = [json.loads(line) for line in seen.read_text().splitlines()]
    assert lines == [{"tag": "hello", "iteration": 1}, {"tag": "hello", "iteration": 2}]
    assert [float(r["training/iteration"]) for r in rows(run) if r.get("training/iteration")] == [1.0, 2.0]


def test_other_trainer_arguments_pass_through(task, tmp_path):  # noqa: F811
    root, model = task
    overrides = fit_args(root, model, tmp_path / "run", 1)[1:]
    cfg = load_config([*overrides, "trainer.detect_anomaly=true", "trainer.enable_model_summary=false"])
    assert dict(cfg.trainer.lightning) == {"detect_anomaly": True, "enable_model_summary": False}
    threads = torch.get_num_threads()
    try:
        trainer, *_ = build_trainer(load_config([*overrides, "trainer.detect_anomaly=true",
                                                 "trainer.enable_model_summary=false", "trainer.num_threads=1"]))
        assert torch.get_num_threads() == 1  # trainer.num_threads
    finally:
        torch.set_num_threads(threads)
    assert trainer._detect_anomaly is True
    assert not any(isinstance(c, ModelSummary) for c in trainer.callbacks)
    plain, *_ = build_trainer(load_config(overrides))
    assert plain._detect_anomaly is False
    assert any(isinstance(c, ModelSummary) for c in plain.callbacks)


def test_both_styles_resolve_to_one_config(capsys):
    assert main(["fit", "--print_config", "--trainer.max_steps", "5", "--data.train_batch_size=32",
                 "--trainer.devices", "1", "--trainer.precision", "32"]) == 0
    lightning_style = capsys.readouterr().out
    assert main(["fit", "--print_config", "trainer.total_training_steps=5", "data.train_batch_size=32",
                 "trainer.n_gpus_per_node=1", "trainer.lightning.precision=32"]) == 0
    assert capsys.readouterr().out == lightning_style
    assert "precision: 32" in lightning_style


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.gradient_clip_val=1.0", "actor_rollout_ref.actor.grad_clip"),
        ("trainer.accumulate_grad_batches=2", "ppo_micro_batch_size_per_gpu"),
        ("trainer.precison=32", "did you mean 'trainer.precision'"),
        ("trainer.enable_checkpointing=true", "trainer.save_freq"),
        ("trainer.lightning.no_such_argument=1", "unknown key 'trainer.lightning.no_such_argument'"),
        ("trainer.total_epochs+=3", "not a list"),
    ],
)
def test_managed_and_unknown_trainer_arguments_are_refused(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        load_config([override], default_task=True)


def test_unknown_callback_stops_before_any_model_loads(task, tmp_path, capsys):  # noqa: F811
    root, model = task
    args = fit_args(root, model, tmp_path / "run", 1, ["trainer.callbacks+=NoSuchCallback"])
    assert main(args) == 2
    assert "NoSuchCallback" in capsys.readouterr().err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_lightningcli_style_yaml_file(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        "trainer:\n"
        "  max_steps: 4\n"
        "  precision: 32\n"
        "  callbacks:\n"
        "    - class_path: lightning.pytorch.callbacks.LearningRateMonitor\n"
        "      init_args: {logging_interval: step}\n"
    )
    cfg = load_config(["trainer.callbacks+=ModelSummary"], config_file=config, check_required=False)
    assert cfg.trainer.total_training_steps == 4
    assert dict(cfg.trainer.lightning) == {"precision": 32}
    specs = [c if isinstance(c, str) else c.class_path for c in cfg.trainer.callbacks]
    # appended after the file's; LightningCLI resolves the bare name to its class path
    assert specs == ["lightning.pytorch.callbacks.LearningRateMonitor", "lightning.pytorch.callbacks.ModelSummary"]
