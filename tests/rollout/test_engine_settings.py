"""Where the rollout engines run: ``trainer.device`` decides for them too."""

from __future__ import annotations

from agentfly.cli import load_config
from agentfly.run.plan import plan_rollout
from agentfly.run.topology import Hardware, resolve_topology

ONE_GPU = Hardware(gpus=1, cpus=8)


def _settings(model, *overrides, hw=ONE_GPU):
    base = [f"agent.init_config.model_name_or_path={model}", "algorithm.adv_estimator=grpo", "trainer.n_gpus_per_node=1",
            "agent.init_config.reward_name=math_equal_reward"]
    cfg = load_config([*base, *overrides])
    return plan_rollout(cfg, resolve_topology(cfg, hw))


def test_trainer_device_cpu_keeps_the_engine_on_the_cpu_beside_a_gpu(tiny_model_dir):
    plan = _settings(tiny_model_dir, "trainer.device=cpu")
    assert plan.engine_kwargs["device"] == "cpu"
    assert plan.engine_kwargs["dtype"] == "float32"  # rollout.dtype (bf16) is a GPU setting
    assert plan.pool_kwargs["num_gpus_per_engine"] == 0


def test_a_visible_gpu_takes_the_engine_unless_told_otherwise(tiny_model_dir):
    plan = _settings(tiny_model_dir)  # trainer.device=auto
    assert "device" not in plan.engine_kwargs  # the engine picks CUDA itself
    assert plan.engine_kwargs["dtype"] == "bfloat16"  # actor_rollout_ref.rollout.dtype's default
    # one GPU, one process, the transformers engine: it shares the training process (no Ray)
    assert plan.num_engines == 0
    plan = _settings(tiny_model_dir, "actor_rollout_ref.rollout.num_engines=1")
    assert plan.num_engines == 1
    assert plan.pool_kwargs["num_gpus_per_engine"] == 1  # a Ray actor holding the GPU
