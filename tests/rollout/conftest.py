"""Fixtures of the rollout tests."""

from __future__ import annotations

import pytest

from agentfly.models.tiny import build_tiny_model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))
