"""Where the rollout engines run: ``trainer.device`` decides for them too."""

from __future__ import annotations

import torch

from agentfly.config import load_config
from agentfly.rollout.runner import engine_settings


def _settings(model, *overrides):
    base = [f"agent.init_config.model_name_or_path={model}", "algorithm.adv_estimator=grpo"]
    return engine_settings(load_config([*base, *overrides]))


def test_trainer_device_cpu_keeps_the_engine_on_the_cpu_beside_a_gpu(tiny_model_dir, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    _, _, kwargs, pool = _settings(tiny_model_dir, "trainer.device=cpu")
    assert kwargs["device"] == "cpu"
    assert kwargs["dtype"] == "float32"  # rollout.dtype (bf16) is a GPU setting
    assert pool["num_gpus_per_engine"] == 0


def test_a_visible_gpu_takes_the_engine_unless_told_otherwise(tiny_model_dir, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    _, _, kwargs, pool = _settings(tiny_model_dir)  # trainer.device=auto
    assert "device" not in kwargs  # the engine picks CUDA itself
    assert kwargs["dtype"] == "bfloat16"  # actor_rollout_ref.rollout.dtype's default
    assert pool["num_gpus_per_engine"] == 1
