"""Shared fixtures: a tiny random Qwen2 checkpoint with a locally trained tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding a tiny seeded Qwen2 model and its tokenizer (see agentfly.models.tiny)."""
    from agentfly.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_model"))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir: Path):
    """The tiny model's tokenizer, loaded as a PreTrainedTokenizerFast."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(tiny_model_dir)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` skip on machines without a CUDA device, and those marked
    ``needs_bwrap`` where bubblewrap cannot run (saying why; ``make test`` installs it where it
    can, and tests/rollout/test_sandbox_escape.py checks the refusal without it)."""
    import torch

    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs a CUDA device")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
    if any("needs_bwrap" in item.keywords for item in items):
        from agentfly.rollout.execution import sandbox_isolation

        problem = sandbox_isolation.bwrap_problem()
        if problem is not None:
            skip = pytest.mark.skip(reason=f"needs the code sandbox, but {problem}")
            for item in items:
                if "needs_bwrap" in item.keywords:
                    item.add_marker(skip)


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny model and six `a+b` questions (:func:`tests.fit_runs.write_task`): ``(root, model)``."""
    from tests.fit_runs import write_task

    return write_task(tmp_path_factory.mktemp("fit"), [(1, 2), (3, 4), (5, 6), (7, 8), (2, 2), (9, 1)])


@pytest.fixture
def ray_tmpdir(monkeypatch: pytest.MonkeyPatch):
    """A short RAY_TMPDIR of this test's own (Ray's socket paths must stay under 108 bytes, which
    pytest's tmp_path can exceed), removed afterwards."""
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    monkeypatch.setenv("RAY_TMPDIR", path)
    yield path
    shutil.rmtree(path, ignore_errors=True)
