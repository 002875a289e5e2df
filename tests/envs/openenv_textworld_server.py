"""An OpenEnv server (the ``openenv`` package's own app) wrapping agentfly's TextWorld environment,
for tests/envs/test_openenv.py: ``python -m tests.envs.openenv_textworld_server PORT``.

Each WebSocket session gets its own game; ``reset`` takes the ``game_file``."""

from __future__ import annotations

import sys
from typing import Any

import uvicorn
from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app
from pydantic import Field

from agentfly.envs.textworld import TextWorldEnv


class CommandAction(Action):
    command: str = Field(description="a TextWorld command")


class GameObservation(Observation):
    text: str = ""
    goal: str = ""
    admissible_commands: list[str] = Field(default_factory=list)


class TextWorldOpenEnv(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._game = TextWorldEnv(max_steps=None)
        self._state = State()

    def reset(self, seed: int | None = None, episode_id: str | None = None, game_file: str = "", **kwargs: Any) -> GameObservation:
        text, info = self._game.reset({"game_file": game_file}, seed)
        self._state = State(episode_id=episode_id, step_count=0)
        return GameObservation(text=text, goal=info["goal"], admissible_commands=info["admissible_actions"])

    def step(self, action: CommandAction, timeout_s: float | None = None, **kwargs: Any) -> GameObservation:
        result = self._game.step(action.command)
        self._state.step_count += 1
        return GameObservation(text=result.observation, admissible_commands=result.info["admissible_actions"],
                               reward=result.reward, done=result.done)

    @property
    def state(self) -> State:
        return self._state

    def close(self) -> None:
        self._game.close()


app = create_fastapi_app(TextWorldOpenEnv, CommandAction, GameObservation, max_concurrent_envs=4)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
