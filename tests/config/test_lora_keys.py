"""The LoRA keys as AgentFly's scripts and verl spell them reach one node each, and decide what
the engines receive: the adapter where the engine serves one, else the merged weights."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentfly.config import ConfigError
from agentfly.modules.settings import LoraSettings
from agentfly.run.plan import plan_run
from agentfly.run.topology import Hardware
from tests.config.plans import base, compose, write_plan_data

# AgentFly's SWE script (examples/train_scripts/swe/train_swe_r2e_gym_tools.slurm), its LoRA
# lines verbatim, the shell variables expanded: both spellings of rank and alpha, and merge
AGENTFLY_SWE_LORA = [
    "actor_rollout_ref.model.lora_rank=32",
    "actor_rollout_ref.model.lora_alpha=64",
    "actor_rollout_ref.model.lora.rank=32",
    "actor_rollout_ref.model.lora.alpha=64",
    "actor_rollout_ref.model.target_modules=all-linear",
    "actor_rollout_ref.model.lora.merge=True",
]
GPUS = Hardware(gpus=2, cpus=8)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_plan_data(tmp_path_factory.mktemp("lora_keys"))


def plan(data: Path, *args: str):
    return plan_run(compose([*base(data), *args]), GPUS)


def weight_sync(p) -> dict:
    return dict(p.callbacks)["WeightSyncCallback"]


def test_agentfly_s_lora_keys_reach_the_module(data):
    p = plan(data, *AGENTFLY_SWE_LORA)
    assert p.module["model"].lora == LoraSettings(rank=32, alpha=64.0, target_modules="all-linear", merge=True)
    assert weight_sync(p) == {"send_adapter": False}  # merge: the engines get merged weights


def test_two_spellings_with_two_values_are_refused(data):
    with pytest.raises(ConfigError, match=re.escape("lora_rank=8 and actor_rollout_ref.model.lora.rank=16")):
        compose([*base(data), "actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora.rank=16"])


def test_target_modules_as_a_list(data):
    p = plan(data, "actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.target_modules=[q_proj,v_proj]")
    assert p.module["model"].lora.target_modules == ("q_proj", "v_proj")


@pytest.mark.parametrize(
    ("engine", "merge", "adapter", "vllm_rank"),
    [("transformers", False, True, None), ("transformers", True, False, None),
     ("vllm", False, True, 8), ("vllm", True, False, None)],
)
def test_engines_get_the_adapter_unless_merge(data, engine, merge, adapter, vllm_rank):
    p = plan(data, "actor_rollout_ref.model.lora_rank=8", f"actor_rollout_ref.rollout.name={engine}",
             f"actor_rollout_ref.model.lora.merge={merge}")
    assert weight_sync(p) == {"send_adapter": adapter}
    assert p.rollout.engine_kwargs.get("max_lora_rank") == vllm_rank  # vLLM's LoRA layers


def test_an_engine_that_serves_no_adapter_gets_merged_weights(data):
    p = plan(data, "actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.rollout.name=scripted")
    assert weight_sync(p) == {"send_adapter": False}


def test_no_adapter_at_rank_0(data):
    p = plan(data)
    assert not p.module["model"].lora.enabled
    assert weight_sync(p) == {"send_adapter": False}
