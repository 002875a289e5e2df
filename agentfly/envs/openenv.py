"""Any OpenEnv environment server, by URL: one WebSocket session per environment (per chain).

OpenEnv (github.com/meta-pytorch/OpenEnv) serves an environment over a WebSocket at
``<url>/ws``; each connection is a session of its own. Messages are JSON: the client sends
``{"type": "reset", "data": {...reset arguments}}``, ``{"type": "step", "data": {...action
fields}}`` and ``{"type": "close"}``; the server answers ``{"type": "observation", "data":
{"observation": {...}, "reward": r, "done": d}}`` or ``{"type": "error", "data": {"message",
"code"}}``. This client speaks that protocol itself with ``websockets`` rather than through the
``openenv`` package, whose import needs ``mcp`` 1.x where vLLM needs 2.x.

Text in, text out: an action's text goes into the action field named ``action_field`` (others
from ``action_fields``); the observation's text is its field ``observation_field`` (or the whole
observation as JSON). The task row's ``reset_kwargs`` and the seed go to the server's reset. Every
message waits at most ``timeout`` seconds.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

from agentfly.envs.base import Env, EnvCrashed, EnvError, EnvUnavailable, StepResult, register_env


@register_env("openenv")
class OpenEnvEnv(Env):
    """A session with an OpenEnv server.

    Args:
        url: the server's base URL (``http://host:port`` or ``ws://host:port``).
        action_field: the action's field that receives the action text.
        action_fields: other fields sent with every action.
        observation_field: the observation's text field (None: the observation as JSON).
        goal_field: the observation field holding the task's goal, if any.
        actions_field: the observation field listing admissible actions, if any.
        timeout: seconds to connect and for each reply.
        max_steps: steps after which the episode is truncated.
    """

    def __init__(self, url: str, action_field: str = "message", action_fields: Mapping[str, Any] | None = None,
                 observation_field: str | None = None, goal_field: str | None = None,
                 actions_field: str | None = None, timeout: float = 60.0, max_steps: int | None = None) -> None:
        super().__init__(max_steps=max_steps)
        try:
            from websockets.sync.client import connect
        except ImportError as e:
            raise EnvUnavailable(f"openenv: the websockets package is missing ({e}): pip install websockets") from e
        base = url.rstrip("/")
        for http, ws in (("https://", "wss://"), ("http://", "ws://")):
            if base.startswith(http):
                base = ws + base[len(http):]
        self.url = f"{base}/ws"
        self.action_field, self.action_fields = action_field, dict(action_fields or {})
        self.observation_field, self.goal_field, self.actions_field = observation_field, goal_field, actions_field
        self.timeout = timeout
        try:
            # entered by hand: the session outlives this call (closed in close())
            self._socket = connect(self.url, open_timeout=timeout, close_timeout=min(timeout, 5.0),
                                   max_size=2**24).__enter__()
        except (OSError, TimeoutError) as e:
            raise EnvUnavailable(f"openenv: cannot connect to {self.url}: {e}") from e

    def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        if self._socket is None:
            raise EnvError("openenv: the session is closed")
        from websockets.exceptions import ConnectionClosed

        try:
            self._socket.send(json.dumps(message))
            reply = json.loads(self._socket.recv(timeout=self.timeout))
        except TimeoutError as e:
            raise TimeoutError(f"openenv: no reply to {message['type']} from {self.url} within {self.timeout:g} s") from e
        except ConnectionClosed as e:
            raise EnvCrashed(f"openenv: the server at {self.url} closed the session during {message['type']}: {e}") from e
        if reply.get("type") == "error":
            data = reply.get("data") or {}
            raise EnvError(f"openenv server {self.url}: {data.get('message', 'error')} ({data.get('code', '?')})")
        return reply.get("data") or {}

    def _text(self, observation: dict[str, Any]) -> str:
        if self.observation_field is None:
            return json.dumps(observation, sort_keys=True)
        return str(observation.get(self.observation_field, ""))

    def _info(self, observation: dict[str, Any]) -> dict[str, Any]:
        info: dict[str, Any] = {"observation": observation}
        if self.actions_field and self.actions_field in observation:
            info["admissible_actions"] = list(observation[self.actions_field])
        return info

    def _reset(self, task: dict[str, Any], seed: int | None) -> tuple[str, dict[str, Any]]:
        arguments = dict(task.get("reset_kwargs") or {})
        if seed is not None:
            arguments.setdefault("seed", seed)
        data = self._request({"type": "reset", "data": arguments})
        observation = data.get("observation") or {}
        info = self._info(observation)
        info["goal"] = str(observation.get(self.goal_field, "")) if self.goal_field else task.get("question", "")
        return self._text(observation), info

    def _step(self, action: str) -> StepResult:
        data = self._request({"type": "step", "data": {**self.action_fields, self.action_field: action}})
        observation = data.get("observation") or {}
        return StepResult(self._text(observation), float(data.get("reward") or 0.0),
                          terminated=bool(data.get("done")), info=self._info(observation))

    def close(self) -> None:
        if self._socket is None:
            return
        socket, self._socket = self._socket, None
        with contextlib.suppress(Exception):  # the server may be gone already
            socket.send(json.dumps({"type": "close"}))
        socket.close()
