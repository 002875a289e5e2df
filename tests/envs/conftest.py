"""Shared environment fixtures: one small TextWorld game per session, and what each test needs
from the machine (Java, Stockfish) with the reason it skips without it."""

from __future__ import annotations

import shutil

import pytest

from agentfly.envs.chess import find_stockfish


def needs(module: str) -> None:
    pytest.importorskip(module, reason=f"needs the {module} package (pip install 'agentfly[envs]')")


@pytest.fixture(scope="session")
def textworld_game(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The task row of one generated tw-simple game (difficulty 1, seed 3): ~7 s, once."""
    needs("textworld")
    from agentfly.envs.textworld import make_game

    return make_game(tmp_path_factory.mktemp("textworld"), "tw-simple", 1, seed=3)


requires_java = pytest.mark.skipif(
    shutil.which("java") is None,
    reason="needs a Java runtime for ScienceWorld (bash scripts/install_system_packages.sh installs one)",
)
requires_stockfish = pytest.mark.skipif(
    find_stockfish() is None,
    reason="needs Stockfish (bash scripts/install_system_packages.sh installs it)",
)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_gone(*pids: int, within: float = 5.0) -> bool:
    """Whether all of ``pids`` are gone within ``within`` seconds (a SIGKILL takes a moment)."""
    import time

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False
