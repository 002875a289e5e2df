"""`agentfly fit` as a LightningCLI: `--help` documents verl's keys, `--print_config` prints a
config that `--config` reads back into the same run, and user code outside the package (an
`AgentRLModule` subclass by `--model.class_path`, a callback by `--trainer.callbacks+=`) runs in
the fit with its own `init_args`. LightningCLI's conventions on agentfly's keys:
`--trainer.<Trainer argument>` flags, aliases of agentfly's own keys (`--trainer.max_steps` = RL
iterations), `--trainer.callbacks+=`, and errors for arguments agentfly manages itself."""

from __future__ import annotations

import csv
import json
import re
import sys
import textwrap

import lightning.pytorch as pl
import pytest
import torch
import yaml
from lightning.pytorch.callbacks import ModelSummary

from agentfly.cli import load_config, main
from agentfly.config import ConfigError
from agentfly.run.fit import build_trainer
from tests.fit_runs import fit_args, rows

# user code, written into a folder outside the repository (tmp) and imported from there
USER_PACKAGE = "agentfly_cli_user_pkg"
USER_MODULE = '''
import json

from agentfly.modules.rl_module import AgentRLModule


class MyModule(AgentRLModule):
    """The RL module, plus one line per training step with its own init argument."""

    def __init__(self, marker: int = 0, out: str = "", **kwargs):
        super().__init__(**kwargs)
        self.marker, self.out = marker, out

    def training_step(self, batch, batch_idx):
        result = super().training_step(batch, batch_idx)
        with open(self.out, "a") as f:
            f.write(json.dumps({"class": type(self).__name__, "marker": self.marker,
                                "iteration": self.iteration}) + "\\n")
        return result
'''
USER_DATAMODULE = '''
import json

from agentfly.rollout.datamodule import RolloutDataModule


class MyData(RolloutDataModule):
    """The rollout data module, plus one line per training batch with its own init argument."""

    def __init__(self, tag: str = "", out: str = "", **kwargs):
        super().__init__(**kwargs)
        self.tag, self.out = tag, out

    def rollout(self, rows):
        batch = super().rollout(rows)
        with open(self.out, "a") as f:
            f.write(json.dumps({"tag": self.tag, "prompts": len(rows)}) + "\\n")
        return batch
'''
USER_CALLBACK = '''
import json

import lightning.pytorch as pl


class CountingCallback(pl.Callback):
    """One line per training batch (one batch = one RL iteration)."""

    def __init__(self, out: str):
        self.out = out

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        with open(self.out, "a") as f:
            f.write(json.dumps({"iteration": pl_module.iteration, "global_step": trainer.global_step,
                                "batch_idx": batch_idx}) + "\\n")
'''


def exit_code(argv: list[str]) -> int:
    """``main(argv)``'s status, whether it returns it or LightningCLI exits with it (``--help``,
    ``--print_config``)."""
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code or 0)


def help_entries(text: str) -> dict[str, str]:
    """``--key`` -> its help text (wrapped lines joined), from argparse's options section."""
    entries: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        m = re.match(r"^  (--[\w.\-+]+)(.*)$", line)
        if m:
            key = m.group(1)
            entries[key] = m.group(2)
        elif key is not None and line.startswith("    "):
            entries[key] += " " + line.strip()
        else:
            key = None
    return {k: " ".join(v.split()) for k, v in entries.items()}


def test_help_all_lists_the_verl_keys_with_type_and_default(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # no wrapping inside a default such as 1e-06
    assert exit_code(["fit", "--help-all"]) == 0
    entries = help_entries(capsys.readouterr().out)
    expected = {
        "--actor_rollout_ref.actor.optim.lr": "(type: NonNegativeFloat, default: 1e-06)",
        "--critic.optim.lr": "(type: NonNegativeFloat, default: 1e-05)",
        "--trainer.save_freq": "(type: int, default: -1)",
        "--agent.run_config.max_turns": "(type: PositiveInt, default: 3)",
        "--algorithm.adv_estimator": "(type: str, default: gae)",
        "--algorithm.kl_ctrl.type": "(type: Literal['fixed', 'adaptive'], default: fixed)",
        "--trainer.seed": "(type: int, default: 42)",
    }
    for key, type_and_default in expected.items():
        assert key in entries, f"{key} not in --help"
        assert entries[key].endswith(type_and_default), (key, entries[key])
    assert "--trainer.callbacks" in entries and "--model" in entries  # LightningCLI's own groups


def short_help_keys(text: str) -> dict[str, tuple[str, str]]:
    """``key`` -> (its default as printed, its help line(s)) from the short ``--help``."""
    out: dict[str, tuple[str, str]] = {}
    key = None
    for line in text.splitlines():
        m = re.match(r"^  ([a-z_]+\.[\w.]+)=(.*)$", line)
        if m:
            key = m.group(1)
            out[key] = (m.group(2), "")
        elif key is not None and line.startswith("      "):
            out[key] = (out[key][0], (out[key][1] + " " + line.strip()).strip())
    return out


@pytest.mark.parametrize("stage", ["fit", "validate"])
def test_help_is_a_page_of_the_keys_set_most_with_their_defaults(stage, capsys):
    assert exit_code([stage, "--help"]) == 0
    text = capsys.readouterr().out
    assert len(text.splitlines()) <= 200
    keys = short_help_keys(text)
    # the defaults a run gets when the key is not set (the composed ones: logger None is the console)
    assert keys["trainer.save_freq"][0] == "-1" and "keeps none" in keys["trainer.save_freq"][1]
    assert keys["trainer.logger"][0] == "[console]"
    assert keys["actor_rollout_ref.actor.optim.lr"][0] == "1e-06"
    assert keys["algorithm.adv_estimator"][0] == "gae"
    assert keys["data.train_batch_size"][0] == "1024"
    assert keys["agent.run_config.num_chains"][1].startswith("chains (trajectories) per prompt")
    # the data keys first, and the way to everything else
    assert next(iter(keys)) == "data.train_files"
    for option in ("--config", "--ckpt_path", "--print_config", "--help-all"):
        assert option in text


def test_sft_and_rollout_help_name_their_config_words(capsys):
    assert exit_code(["sft", "--help"]) == 0
    text = capsys.readouterr().out
    assert len(text.splitlines()) <= 200 and "data.format=messages" in text and "--help-all" in text
    assert exit_code(["rollout", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--config FILE" in text and "KEY=VALUE" in text and "--limit" in text


def metric_rows(run) -> list[dict[str, str]]:
    """The run's metrics without the wall-clock columns.

    The CSV's columns are the losses, rewards, lr, grad norms, rollout statistics, step/epoch,
    and wall-clock measurements: ``timing/*`` (``timing/iteration_s``, ``timing/rollout_s``,
    ``timing/update_s``, ``timing/tokens_per_s``...) and ``rollout/tokens_per_s``. Two runs of the
    same command with the same ``trainer.seed`` were checked to agree on every other column, to
    the last digit; the clock columns never agree, so they are dropped (and only they).
    """
    with open(run / "metrics" / "version_0" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    clock = re.compile(r"^timing/|_per_s$")
    return [{k: v for k, v in r.items() if not clock.search(k)} for r in rows]


def test_print_config_reads_back_into_the_same_run(task, tmp_path, capsys):
    root, model = task
    direct, from_file = tmp_path / "direct", tmp_path / "from_file"
    args = fit_args(root, model, direct, 2, ["trainer.seed=7"])

    assert exit_code([*args, "--print_config"]) == 0
    printed = capsys.readouterr().out
    config = tmp_path / "c.yaml"
    config.write_text(printed)
    assert yaml.safe_load(printed)["trainer"]["seed"] == 7
    assert not direct.exists()  # printing starts nothing

    assert exit_code(args) == 0
    assert exit_code(["fit", "--config", str(config), f"trainer.default_local_dir={from_file}"]) == 0

    a, b = metric_rows(direct), metric_rows(from_file)
    assert [float(r["training/iteration"]) for r in a] == [1.0, 2.0]
    assert float(a[0]["actor/lr"]) == pytest.approx(1e-3)  # the tiny args, not the defaults
    assert float(a[-1]["actor/kl_loss"]) > 0  # the update moved the weights: a real number to compare
    assert b == a
    # both runs saved the config that --config reads, the same but for the run directory
    saved = {run: yaml.safe_load((run / "config.yaml").read_text()) for run in (direct, from_file)}
    assert saved[from_file]["trainer"].pop("default_local_dir") == str(from_file)
    assert saved[direct]["trainer"].pop("default_local_dir") == str(direct)
    assert saved[direct] == saved[from_file]


@pytest.fixture(scope="module")
def user_code_fit(task, tmp_path_factory):
    """One 2-iteration fit with a module subclass and a callback from a package outside the
    repository, each given by class path with its own init_args: ``(run, steps, batches)``."""
    root, model = task
    base = tmp_path_factory.mktemp("user_code")
    pkg = base / "site" / USER_PACKAGE
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "mymodule.py").write_text(textwrap.dedent(USER_MODULE))
    (pkg / "cb.py").write_text(textwrap.dedent(USER_CALLBACK))
    (pkg / "data.py").write_text(textwrap.dedent(USER_DATAMODULE))
    run, steps, batches = base / "run", base / "steps.jsonl", base / "batches.jsonl"
    flags = [
        "--model.class_path", f"{USER_PACKAGE}.mymodule.MyModule",
        "--model.init_args.marker", "7",
        "--model.init_args.out", str(steps),
        f"--trainer.callbacks+={USER_PACKAGE}.cb.CountingCallback",
        "--trainer.callbacks.init_args.out", str(batches),
        "--data.class_path", f"{USER_PACKAGE}.data.MyData",
        "--data.init_args.tag", "mine",
        "--data.init_args.out", str(base / "rollouts.jsonl"),
    ]
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(base / "site"))
        try:
            assert exit_code(fit_args(root, model, run, 2, flags)) == 0
        finally:
            for name in [m for m in sys.modules if m == USER_PACKAGE or m.startswith(USER_PACKAGE + ".")]:
                del sys.modules[name]
    return run, steps, batches


def test_a_data_module_subclass_outside_the_package_rolls_out(user_code_fit):
    run, _, _ = user_code_fit
    # verl's data.* keys still reach it (fit_args' batch), beside its own init_args
    got = lines(run.parent / "rollouts.jsonl")
    assert got == [{"tag": "mine", "prompts": 2}] * 2  # one rollout per iteration, data.train_batch_size=2
    saved = yaml.safe_load((run / "config.yaml").read_text())["data"]
    assert saved["class_path"] == f"{USER_PACKAGE}.data.MyData" and saved["init_args"]["tag"] == "mine"


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_module_subclass_outside_the_package_trains(user_code_fit):
    run, steps, _ = user_code_fit
    assert lines(steps) == [{"class": "MyModule", "marker": 7, "iteration": 1},
                            {"class": "MyModule", "marker": 7, "iteration": 2}]
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False, map_location="cpu")
    assert ckpt["agentfly_iteration"] == 2
    assert any(k.startswith("actor.") for k in ckpt["state_dict"])
    assert (run / "checkpoints" / "iter_000001.ckpt").exists()
    saved = yaml.safe_load((run / "config.yaml").read_text())["model"]
    assert saved["class_path"] == f"{USER_PACKAGE}.mymodule.MyModule"
    assert saved["init_args"]["marker"] == 7


def test_a_callback_by_class_path_sees_every_iteration(user_code_fit):
    _, _, batches = user_code_fit
    got = lines(batches)
    assert [r["iteration"] for r in got] == [1, 2]  # one RL iteration per training batch
    assert [r["batch_idx"] for r in got] == [0, 1]
    # global_step counts optimizer steps (fit_args: two mini-batches per iteration), so only its order
    assert 0 < got[0]["global_step"] < got[1]["global_step"]


# ------------------------------------------------ LightningCLI conventions on agentfly's keys


class Recorder(pl.Callback):
    """Writes one line per training batch it sees, with its own init argument."""

    def __init__(self, path: str, tag: str = "") -> None:
        self.path, self.tag = path, tag

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        with open(self.path, "a") as f:
            f.write(json.dumps({"tag": self.tag, "iteration": pl_module.iteration}) + "\n")


def test_trainer_flags_and_added_callbacks_reach_the_fit(task, tmp_path):
    root, model = task
    run, seen = tmp_path / "run", tmp_path / "seen.jsonl"
    args = [a for a in fit_args(root, model, run, 5) if not a.startswith("trainer.total_training_steps")]
    flags = [
        "--trainer.max_steps", "2",  # the LightningCLI spelling of total_training_steps: RL iterations
        "--trainer.callbacks+=tests.test_lightning_cli.Recorder",
        "--trainer.callbacks.init_args.path", str(seen),
        "--trainer.callbacks.tag", "hello",
        "--trainer.callbacks+=LearningRateMonitor",  # a bare name: lightning.pytorch.callbacks
    ]
    assert main([*args, *flags]) == 0
    lines = [json.loads(line) for line in seen.read_text().splitlines()]
    assert lines == [{"tag": "hello", "iteration": 1}, {"tag": "hello", "iteration": 2}]
    assert [float(r["training/iteration"]) for r in rows(run) if r.get("training/iteration")] == [1.0, 2.0]


def test_other_trainer_arguments_pass_through(task, tmp_path):
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


def test_unknown_callback_stops_before_any_model_loads(task, tmp_path, capsys):
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
