"""``agentfly serve --config C [key=value ...]``: the configured model, template and tool-call
parser behind an OpenAI-compatible endpoint, to evaluate a checkpoint with any OpenAI client.

The config is the one ``agentfly fit`` and ``agentfly rollout`` take: ``actor_rollout_ref.model.path``
(a trained run's ``hf_actor`` export, say), ``agent.init_config.template``, the agent type whose
parser reads tool calls, the engine (``actor_rollout_ref.rollout.name``) and the sampling
defaults (``actor_rollout_ref.rollout.temperature``, ``top_p``, ``top_k``,
``agent.run_config.generation_config.max_tokens``), which a request's own values replace. The
server runs until interrupted (Ctrl-C or SIGTERM), then stops its engines.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def build_service(cfg: Any, request_timeout: float) -> tuple[Any, Any]:
    """``(session, service)``: the rollout side of ``cfg`` built (engines, template, agent) and
    the chat service over it; close the session when done."""
    from agentfly.models.paths import resolve_model_paths
    from agentfly.rollout.endpoint.service import ChatService
    from agentfly.rollout.runner import build_rollout
    from agentfly.run.plan import plan_rollout
    from agentfly.run.topology import Hardware, resolve_topology

    topology = resolve_topology(cfg, Hardware.detect())
    plan_rollout(cfg, topology)  # the cheap checks first, then a Hub id is resolved
    plan = plan_rollout(resolve_model_paths(cfg, needs_critic=False), topology)
    plan.harness = None  # a harness program is for training; serving answers any client
    session = build_rollout(plan)
    loop = session.loop
    model = plan.engine_kwargs.get("model")
    service = ChatService(
        engine=session.pool, tokenizer=session.tokenizer, template=loop.template, agent=loop.agent,
        model_name=Path(str(model)).name if model else "agentfly", sampling=loop.sampling,
        max_model_len=loop.max_model_len, request_timeout=request_timeout,
    )
    return session, service


async def _serve_forever(service: Any, host: str, port: int, api_key: str | None) -> None:
    from agentfly.core.errors import InputError
    from agentfly.rollout.endpoint.http import ChatServer

    server = ChatServer(service, host=host, port=port, api_key=api_key)
    try:
        url = await server.start()
    except OSError as e:  # the address is taken or not this machine's: the user's to change
        raise InputError(f"cannot listen on {host}:{port} ({e.strerror or e}): choose another --host "
                         "or --port (--port 0 picks a free one)") from e
    print(f"agentfly serve: {url}/v1 (model {service.model_name!r}); Ctrl-C stops it", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


def serve(cfg: Any, *, host: str, port: int, api_key: str | None, request_timeout: float) -> int:
    """Serve ``cfg``'s model until interrupted (Ctrl-C or SIGTERM); the exit status."""
    from agentfly.core.shutdown import ray_stopped_at_exit, sigterm_exits
    from agentfly.rollout.engines.caller_thread import run_sync
    from agentfly.run.errors import USER_ERRORS

    try:
        with sigterm_exits(), ray_stopped_at_exit():
            session, service = build_service(cfg, request_timeout)
            try:
                run_sync(session.pool, _serve_forever(service, host, port, api_key))
            except KeyboardInterrupt:
                print("agentfly serve: stopped", file=sys.stderr)
            finally:
                session.close()
    except USER_ERRORS as e:  # the user's: one line; a bug: its traceback
        print(f"agentfly: {e}", file=sys.stderr)
        return 2
    return 0
