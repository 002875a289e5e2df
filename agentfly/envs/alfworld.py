"""ALFWorld: household tasks (ALFRED's scenes as text games) on TextWorld's engine.

Needs the ``alfworld`` package (``pip install 'agentfly[alfworld]'``; its install compiles a
planner for minutes) and the user's game files: the ``json_2.1.1`` folder that
``alfworld-download`` fetches (into ``$ALFWORLD_DATA``, by default ``~/.cache/alfworld``), laid out
as ``json_2.1.1/<split>/<task type>-.../trial_.../game.tw-pddl`` with splits ``train``,
``valid_seen`` and ``valid_unseen``. Without them the environment refuses to start, naming the
folder it looked in (:func:`alfworld_data_dir`), so a run stops before anything starts.

A task row names a game by ``task_id`` (its ``trial_...`` folder, as AgentFly's rows do) and
``split`` (default ``train``), or by ``game_file``. Reward: 1.0 on the step that completes the
task (ALFWorld's own reward is whether the game is won), 0 otherwise; ``terminated`` when won.
The info of ``reset`` has the ``goal`` (the first observation's "Your task is to: ..." line) and
``admissible_actions``; each info has ``expert_plan`` (ALFWorld's hand-coded expert's next action).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from agentfly.envs.base import Env, EnvUnavailable, EnvUsageError, StepResult, register_env

SPLITS = ("train", "valid_seen", "valid_unseen")
DATA_FOLDER = "json_2.1.1"
HOW_TO_GET_DATA = (
    "install ALFWorld (pip install 'agentfly[alfworld]') and run `alfworld-download`, which puts the "
    f"game files in $ALFWORLD_DATA (default ~/.cache/alfworld); or copy a {DATA_FOLDER} folder there "
    "and pass its parent as the environment's data_dir"
)


def alfworld_data_dir(data_dir: str | Path | None = None) -> Path:
    """The ALFWorld data folder (``data_dir``, else ``$ALFWORLD_DATA``, else ``~/.cache/alfworld``).

    Raises:
        EnvUnavailable: it has no ``json_2.1.1`` folder; the message names the path and how to get it.
    """
    folder = Path(data_dir or os.environ.get("ALFWORLD_DATA") or "~/.cache/alfworld").expanduser()
    if not (folder / DATA_FOLDER).is_dir():
        raise EnvUnavailable(f"alfworld: no game files at {folder / DATA_FOLDER}; {HOW_TO_GET_DATA}")
    return folder


def find_game(data_dir: Path, task_id: str, split: str = "train") -> Path:
    """The ``game.tw-pddl`` of ``task_id`` (a ``trial_...`` folder) in ``split``."""
    if split not in SPLITS:
        raise EnvUsageError(f"alfworld: split must be one of {SPLITS}, got {split!r}")
    found = sorted((data_dir / DATA_FOLDER / split).glob(f"*/{task_id}/game.tw-pddl"))
    if not found:
        raise EnvUsageError(f"alfworld: no game {task_id!r} in {data_dir / DATA_FOLDER / split}")
    return found[0]


@register_env("alfworld")
class ALFWorldEnv(Env):
    """One ALFWorld game per episode.

    Args:
        data_dir: the folder holding ``json_2.1.1`` (see :func:`alfworld_data_dir`).
        max_steps: steps after which the episode is truncated (ALFWorld's evaluation uses 50).
    """

    def __init__(self, data_dir: str | None = None, max_steps: int | None = 50) -> None:
        super().__init__(max_steps=max_steps)
        self.data_dir = alfworld_data_dir(data_dir)
        try:
            import textworld
            from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
        except ImportError as e:
            raise EnvUnavailable(f"alfworld: the alfworld package is not installed ({e}); {HOW_TO_GET_DATA}") from e
        self._textworld = textworld
        self._wrappers = (AlfredDemangler, AlfredInfos)
        self._game: Any = None

    def _reset(self, task: dict[str, Any], seed: int | None) -> tuple[str, dict[str, Any]]:
        if task.get("game_file"):
            game_file = Path(task["game_file"])
        elif task.get("task_id"):
            game_file = find_game(self.data_dir, str(task["task_id"]), str(task.get("split", "train")))
        else:
            raise EnvUsageError(f"alfworld: the task row needs a 'task_id' or a 'game_file' (it has {sorted(task)})")
        self.close()
        infos = self._textworld.EnvInfos(won=True, admissible_commands=True, expert_type="handcoded",
                                         expert_plan=True, extras=["gamefile"])
        demangler, alfred_infos = self._wrappers
        self._game = self._textworld.start(str(game_file), request_infos=infos,
                                           wrappers=[demangler(shuffle=False), alfred_infos])
        state = self._game.reset()
        match = re.search(r"Your task is to: (.*)", state.feedback)
        return state.feedback, {"goal": match.group(1).strip() if match else "", **self._info(state),
                                "game_file": str(game_file)}

    def _step(self, action: str) -> StepResult:
        state, _, done = self._game.step(action)
        won = bool(state["won"])
        return StepResult(state.feedback, 1.0 if won else 0.0, terminated=bool(done) or won, info=self._info(state))

    @staticmethod
    def _info(state: Any) -> dict[str, Any]:
        return {"won": bool(state["won"]), "admissible_actions": list(state["admissible_commands"] or []),
                "expert_plan": list(state.get("expert_plan") or [])}

    def close(self) -> None:
        if self._game is not None:
            self._game.close()
            self._game = None
