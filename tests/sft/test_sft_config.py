"""``agentfly sft``'s keys keep the promise ``agentfly fit``'s do: each key changes what a component
of the run receives (its plan, :func:`agentfly.run.sft_plan.plan_sft`) or is refused with the reason;
a key of ``agentfly fit`` that supervised training does not read is refused, saying why; verl's
SFT spellings land on the keys they name; ``--print_config`` reads back."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import pytest

from agentfly.config.keys import verl_key_table
from agentfly.config.schema_sft import sft_key_table
from agentfly.config.sft import load_sft_config, view_yaml
from agentfly.core.errors import ConfigError
from agentfly.run.sft_plan import check_sft_batches, plan_sft
from agentfly.run.topology import Hardware
from tests.config.plans import PLUGIN

TWO_GPUS = Hardware(gpus=2, cpus=8)
EXAMPLES = 64  # training examples the plans are made for

BASE = [
    "actor_rollout_ref.model.path={data}/models/policy",
    "data.train_files=[{data}/train.jsonl]",
    "data.val_files=[{data}/val.jsonl]",
    "agent.init_config.tools=[calculator]",
    "data.train_batch_size=8",
    "trainer.logger=[console,wandb]",
    "trainer.n_gpus_per_node=2",
    "trainer.total_training_steps=10",
    "trainer.test_freq=5",
]
FSDP = ["actor_rollout_ref.actor.strategy=fsdp"]
COSINE = ["optim.warmup_style=cosine"]
A = "actor_rollout_ref."
OPT = A + "actor.optim."

# key -> (new value, context, the part of the plan it must change)
CHANGES: dict[str, tuple[str, list[str], str]] = {
    "data.train_files": ("[{data}/other.jsonl]", [], "train_files"),
    "data.val_files": ("[{data}/other.jsonl]", [], "val_files"),
    "data.format": ("rollouts", [], "examples.format"),
    "data.messages_key": ("conversation", [], "examples.messages_key"),
    "data.min_reward": ("0.5", ["data.format=rollouts"], "examples.min_reward"),
    "data.max_length": ("100", [], "examples.max_length"),
    "data.bad_rows": ("skip", [], "bad_rows"),
    "data.train_batch_size": ("16", [], "module.update.mini_batch_size"),
    "data.micro_batch_size_per_gpu": ("2", [], "module.update.micro_batch_size"),
    "data.shuffle": ("false", [], "datamodule.shuffle"),
    "data.seed": ("7", [], "datamodule.seed"),
    "agent.init_config.agent_type": ("react", [], "rollout.agent_type"),
    "agent.init_config.template": ("qwen2.5", [], "rollout.template"),
    "agent.init_config.tools": ("[calculator,answer]", [], "rollout.tools"),
    "agent.init_config.tool_parser_name": ("react", [], "rollout.tool_parser"),
    "agent.init_config.system_prompt": ("Be brief.", [], "rollout.system_prompt"),
    "agent.init_config.tool_config": ("{calculator: {timeout: 3}}", [], "rollout.tool_config.calculator"),
    "agent.init_config.plugins": ("[{data}/plugin.py]", [], "rollout.plugins"),
    A + "model.path": ("{data}/models/other", [], "module.model.path"),
    A + "model.enable_gradient_checkpointing": ("true", [], "module.update.gradient_checkpointing"),
    A + "model.enable_activation_offload": ("true", [], "module.update.activation_offload"),
    A + "model.trust_remote_code": ("true", [], "module.model.trust_remote_code"),
    A + "model.use_remove_padding": ("true", [], "module.model.remove_padding"),
    A + "model.override_config.attn_implementation": ("eager", [], "module.model.attn_implementation"),
    A + "model.use_fused_kernels": ("true", [], "module.model.fused_logprobs"),
    A + "model.lora.rank": ("8", [], "module.model.lora.rank"),
    A + "model.lora.alpha": ("32", [A + "model.lora.rank=8"], "module.model.lora.alpha"),
    A + "model.lora.target_modules": ("[q_proj,v_proj]", [A + "model.lora.rank=8"], "module.model.lora.target_modules"),
    A + "model.lora.export": ("adapter", [A + "model.lora.rank=8"], "callbacks"),
    A + "actor.strategy": ("fsdp", [], "trainer.strategy"),
    A + "actor.grad_clip": ("0.5", [], "module.update.grad_clip"),
    OPT + "lr": ("1e-5", [], "module.optim.lr"),
    OPT + "lr_warmup_steps_ratio": ("0.5", [OPT + "lr_warmup_steps=-1"], "module.optim.warmup_steps"),
    OPT + "lr_warmup_steps": ("3", [], "module.optim.warmup_steps"),
    OPT + "weight_decay": ("0.1", [], "module.optim.weight_decay"),
    OPT + "betas": ("[0.9,0.95]", [], "module.optim.betas"),
    OPT + "warmup_style": ("cosine", [], "module.optim.warmup_style"),
    OPT + "min_lr_ratio": ("0.1", COSINE, "module.optim.min_lr_ratio"),
    OPT + "num_cycles": ("1.0", COSINE, "module.optim.num_cycles"),
    A + "actor.fsdp_config.reshard_after_forward": ("false", FSDP, "module.fsdp.reshard_after_forward"),
    A + "actor.fsdp_config.fsdp_size": ("1", FSDP, "module.fsdp.size"),
    A + "actor.fsdp_config.model_dtype": ("bf16", [], "module.model.dtype"),  # under every strategy
    "trainer.project_name": ("other", ["trainer.default_local_dir=/runs/x"], "loggers"),
    "trainer.experiment_name": ("other", ["trainer.default_local_dir=/runs/x"], "loggers"),
    "trainer.logger": ("[console,tensorboard]", [], "loggers"),
    "trainer.n_gpus_per_node": ("1", [], "topology.devices"),
    "trainer.nnodes": ("2", [], "topology.nodes"),
    "trainer.device": ("cpu", [], "topology.accelerator"),
    "trainer.total_training_steps": ("20", [], "iterations"),
    "trainer.total_epochs": ("2", ["trainer.total_training_steps=null"], "iterations"),
    "trainer.save_freq": ("3", [], "callbacks"),
    "trainer.test_freq": ("2", [], "trainer.val_check_interval"),
    "trainer.val_before_train": ("false", [], "val_before_train"),
    "trainer.resume_mode": ("disable", [], "resume_mode"),
    "trainer.resume_from_path": ("/ckpt/b.ckpt", ["trainer.resume_mode=resume_path", "trainer.resume_from_path=/ckpt/a.ckpt"], "resume_from_path"),
    "trainer.resume_changed_config": ("true", [], "resume_changed_config"),
    "trainer.default_local_dir": ("/runs/other", [], "run_dir"),
    "trainer.seed": ("7", [], "seed"),
    "trainer.num_threads": ("1", [], "num_threads"),
    "trainer.precision": ("bf16-mixed", [], "trainer.precision"),
    "trainer.callbacks": ("[LearningRateMonitor]", [], "user_callbacks"),
}
# key -> (a value this build cannot honour, context)
REFUSED = {
    A + "actor.fsdp_config.param_offload": ("true", FSDP),  # without the optimizer's
    A + "actor.fsdp_config.optimizer_offload": ("true", FSDP),  # without the parameters'
}
ELSEWHERE = {"trainer.print_config"}  # acts in the command line (test below)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sft_plans")
    for name in ("policy", "other"):  # model paths are checked when a run is planned
        (root / "models" / name).mkdir(parents=True)
    (root / "plugin.py").write_text(PLUGIN)
    return root


def compose(args: list[str]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_sft_config(args)


def base(data: Path) -> list[str]:
    return [arg.replace("{data}", str(data)) for arg in BASE]


def plan_of(args: list[str], hw: Hardware = TWO_GPUS) -> dict[str, Any]:
    out = dataclasses.asdict(plan_sft(compose(args), EXAMPLES, hw))
    out.pop("notes")
    return out


def differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{prefix}{k}.")]
    return [prefix.rstrip(".")] if a != b else []


def test_every_key_has_a_case():
    leaves = set(sft_key_table()[0]) | {"trainer.precision", "trainer.callbacks"}
    covered = set(CHANGES) | set(REFUSED) | ELSEWHERE
    assert sorted(leaves - covered) == [], "keys without a case: add them to CHANGES or REFUSED"
    assert sorted(covered - leaves) == []


@pytest.mark.parametrize("key", sorted(CHANGES))
def test_changing_the_key_changes_what_a_component_receives(data, key):
    value, context, receives = CHANGES[key]
    args = [*base(data), *context]
    before = plan_of(args)
    after = plan_of([*args, f"{key}={value.replace('{data}', str(data))}"])
    changed = differences(before, after)
    assert any(c == receives or c.startswith(receives + ".") for c in changed), f"{key}={value}: {changed}"


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_a_value_this_build_cannot_honour_is_refused(data, key):
    value, context = REFUSED[key]
    with pytest.raises(ConfigError, match="not supported"):
        compose([*base(data), *context, f"{key}={value}"])


def test_offloading_parameters_and_optimizer_together_reaches_the_module(data):
    offload = [f"{A}actor.fsdp_config.param_offload=true", f"{A}actor.fsdp_config.optimizer_offload=true"]
    changed = differences(plan_of([*base(data), *FSDP]), plan_of([*base(data), *FSDP, *offload]))
    assert "module.fsdp.offload" in changed


def test_every_key_of_fit_that_sft_does_not_read_is_refused_saying_why(data):
    """Each is refused before anything is parsed, in the words of ``agentfly sft`` (the test sets
    each key to its own default: the refusal is the key's, not its value's)."""
    import yaml

    fit_leaves = verl_key_table()[0]
    foreign = sorted(set(fit_leaves) - set(sft_key_table()[0]))
    assert "algorithm.adv_estimator" in foreign and "actor_rollout_ref.actor.ppo_epochs" in foreign
    for key in foreign:
        value = yaml.safe_dump(fit_leaves[key][1], default_flow_style=True).strip().removesuffix("\n...")
        with pytest.raises(ConfigError) as err:
            compose([*base(data), f"{key}={value}"])
        assert f"agentfly sft does not read {key}, a key of agentfly fit" in str(err.value), key


def test_an_unknown_key_is_refused_with_close_matches(data):
    with pytest.raises(ConfigError, match=r"unknown key 'data.max_lenght'.*did you mean 'data.max_length'"):
        compose([*base(data), "data.max_lenght=3"])
    with pytest.raises(ConfigError, match=r"data.max_length: Not of type PositiveInt"):
        compose([*base(data), "data.max_length=0"])


def test_verls_sft_spellings_land_on_the_keys_they_name(data):
    spelled_here = ("actor_rollout_ref.model.path", "trainer.total_training_steps")
    cfg = compose([
        *(a for a in base(data) if not a.startswith(spelled_here)), f"model.partial_pretrain={data}/models/other", "optim.lr=0.5", "optim.clip_grad=0.25",
        "optim.warmup_steps_ratio=0.1", "optim.lr_scheduler=cosine", "model.strategy=ddp",
        "model.enable_gradient_checkpointing=true", "model.fsdp_config.fsdp_size=2",
        "data.multiturn.messages_key=chat", "trainer.max_steps=7",
    ])
    actor = cfg.actor_rollout_ref.actor
    assert cfg.actor_rollout_ref.model.path == f"{data}/models/other"
    assert (actor.optim.lr, actor.grad_clip, actor.optim.lr_warmup_steps_ratio) == (0.5, 0.25, 0.1)
    assert (actor.optim.warmup_style, actor.strategy, actor.fsdp_config.fsdp_size) == ("cosine", "ddp", 2)
    assert cfg.actor_rollout_ref.model.enable_gradient_checkpointing is True
    assert (cfg.data.messages_key, cfg.trainer.total_training_steps) == ("chat", 7)


def test_contradictions_are_refused(data):
    with pytest.raises(ConfigError, match=r"data.min_reward=0.5 filters rollout records"):
        compose([*base(data), "data.min_reward=0.5"])
    with pytest.raises(ConfigError, match=r"data.micro_batch_size_per_gpu=16 is larger than data.train_batch_size=8"):
        compose([*base(data), "data.micro_batch_size_per_gpu=16"])
    with pytest.raises(ConfigError, match=r"data\.train_files is required"):
        compose([f"actor_rollout_ref.model.path={data}/models/policy"])


def test_batches_split_over_the_ranks_that_run(data):
    cfg = compose([*base(data), "data.micro_batch_size_per_gpu=3", "data.train_batch_size=9"])
    with pytest.raises(ConfigError) as err:
        check_sft_batches(cfg, world=2, examples=4)
    said = str(err.value)
    assert "data.train_batch_size=9 does not split over the 2 training ranks" in said
    assert "data.micro_batch_size_per_gpu=3 must divide the rank's share" in said
    assert "data.train_batch_size=9 is larger than the 4 training examples" in said
    assert check_sft_batches(compose(base(data)), world=2, examples=8) == 4


def test_print_config_reads_back(data, tmp_path, capsys):
    from agentfly.cli import main

    args = [*base(data), "optim.lr=0.5", "--trainer.precision=bf16-mixed"]
    assert main(["sft", *args, "--print_config"]) == 0
    printed = capsys.readouterr().out
    (tmp_path / "printed.yaml").write_text(printed)
    assert "precision: bf16-mixed" in printed and "adv_estimator" not in printed
    assert view_yaml(compose([f"--config={tmp_path / 'printed.yaml'}"])) == view_yaml(compose(args))


def test_print_config_as_a_key_prints_before_the_run(data, capsys, monkeypatch):
    from agentfly.cli import main

    monkeypatch.setattr("agentfly.run.sft.build", lambda *a, **k: (None, None, None, None, None))
    monkeypatch.setattr("agentfly.run.sft.run", lambda *a, **k: {})
    assert main(["sft", *base(data)]) == 0
    assert "train_batch_size: 8" not in capsys.readouterr().out
    assert main(["sft", *base(data), "trainer.print_config=true"]) == 0
    assert "train_batch_size: 8" in capsys.readouterr().out
