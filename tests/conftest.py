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


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(task root, model, run): `agentfly fit` of ``trainer.total_training_steps=2`` on two ``a+b``
    rows (:func:`tests.fit_runs.fit_args`), run to its end: ``iter_000001.ckpt``,
    ``iter_000002.ckpt`` and ``last.ckpt``. One per pytest process, read by the tests that inspect
    a finished run; each copies what it changes."""
    from agentfly.cli import main
    from tests.fit_runs import fit_args, write_task

    root, model = write_task(tmp_path_factory.mktemp("finished_run"), [(1, 2), (3, 4)])
    run = root / "run"
    assert main(fit_args(root, model, run, 2)) == 0
    assert {p.name for p in (run / "checkpoints").iterdir()} == {"iter_000001.ckpt", "iter_000002.ckpt", "last.ckpt"}
    return root, model, run


# Files whose tests assert on wall-clock time (deadlines, start-up races, signals) or share one
# machine-wide service (the private SLURM cluster): `make test` runs them after the rest, alone,
# so that a test running beside them on the other core cannot make them late.
SERIAL = (
    "tests/slurm/",
    "tests/faults/",
    "tests/test_no_orphans.py",
    "tests/test_kill_resume.py",
    "tests/envs/test_env_orphans.py",
    "tests/envs/test_process.py",
    "tests/rollout/test_workers.py",
    "tests/rollout/test_rewards_base.py",
    "tests/rollout/test_rewards_code.py",
    "tests/rollout/test_tools_base.py",
    "tests/rollout/test_tools_calculator.py",
    "tests/rollout/test_resources.py",
    "tests/rollout/test_sandbox.py",
    "tests/rollout/test_env_chains.py",
    "tests/rollout/test_engine_pool_resources.py",
)


#: the examples end to end on the real model (minutes each): marked ``examples``, run by
#: `make test-examples` (CI runs it after `make test`), not by `make test`. What guards their
#: code inside `make test`: tests/test_example_configs.py (every stage config of every example
#: composes and validates), tests/test_gui_example.py (the stage driver, examples/stages.py, end
#: to end on a tiny model), tests/models/test_smollm2.py (the real model converted, one chain
#: through the agent loop) and tests/envs/test_textworld.py (the games, their tool and reward).
EXAMPLES = ("tests/test_smollm2_example.py", "tests/test_textworld_example.py")
#: the longest tests: run first where they are selected (started early, the two processes'
#: loads even out behind them)
FIRST = EXAMPLES


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` skip on machines without a CUDA device, and those marked
    ``needs_bwrap`` where bubblewrap cannot run (saying why; ``make test`` installs it where it
    can, and tests/rollout/test_sandbox_escape.py checks the refusal without it). Tests in the
    files of ``SERIAL`` are marked ``serial``, those of ``EXAMPLES`` ``examples``; those of
    ``FIRST`` run first."""
    import torch

    root = Path(__file__).resolve().parents[1]
    where = {item: item.path.resolve().relative_to(root).as_posix() for item in items}
    for item in items:
        if where[item].startswith(SERIAL):
            item.add_marker(pytest.mark.serial)
        if where[item].startswith(EXAMPLES):
            item.add_marker(pytest.mark.examples)
    items.sort(key=lambda item: not where[item].startswith(FIRST))  # stable: the rest keep their order

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
