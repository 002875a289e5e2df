"""What a vision-language actor cannot run with yet is refused when the run is planned, naming
the key (``agentfly.run.plan.check_vision``); a text model with the same keys is not."""

from __future__ import annotations

import pytest

from agentfly.core.errors import ConfigError
from agentfly.run.plan import plan_run
from agentfly.run.topology import Hardware
from tests.config.plans import base, compose, write_plan_data

TWO_GPUS = Hardware(gpus=2, cpus=8)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from agentfly.models.tiny_vl import build_tiny_vl_model

    root = write_plan_data(tmp_path_factory.mktemp("vision_plan"))
    build_tiny_vl_model(root / "models" / "vl")
    return root


def test_a_vision_model_refuses_a_critic_packing_and_vllm(data):
    vl = f"actor_rollout_ref.model.path={data}/models/vl"
    with pytest.raises(ConfigError, match=r"adv_estimator='gae' needs a critic, which is not built for vision"):
        plan_run(compose([*base(data), vl]), TWO_GPUS)
    grpo = [*base(data), vl, "algorithm.adv_estimator=grpo"]
    with pytest.raises(ConfigError, match=r"use_remove_padding=true: padding-free packing of rows holding images"):
        plan_run(compose([*grpo, "actor_rollout_ref.model.use_remove_padding=true"]), TWO_GPUS)
    with pytest.raises(ConfigError, match=r"rollout.name='vllm' does not take images yet"):
        plan_run(compose([*grpo, "actor_rollout_ref.rollout.name=vllm"]), TWO_GPUS)
    assert plan_run(compose(grpo), TWO_GPUS).iterations > 0  # and without them it plans


def test_a_text_model_plans_with_the_same_keys(data, tmp_path):
    from agentfly.models.tiny import build_tiny_model

    text = build_tiny_model(tmp_path / "text")
    args = [*base(data), f"actor_rollout_ref.model.path={text}", "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.model.use_remove_padding=true"]
    assert plan_run(compose(args), TWO_GPUS).iterations > 0
