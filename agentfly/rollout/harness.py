"""Training an agent program someone already has (``agent.harness``): each chain runs the user's
program against an OpenAI-compatible endpoint of its own, and the chain's trajectory is what the
engine was given and sampled for its requests (:mod:`agentfly.rollout.endpoint.chain`).

:class:`HarnessLoop` is the agent loop with the built-in turns replaced: for every rollout it
starts a :class:`~agentfly.rollout.endpoint.http.ChatServer` in its event loop (the engine pool batches the
programs' requests like any chains' turns), gives each chain an endpoint and a key, and runs

- ``agent.harness.command``: a shell command, once per chain, in a process group of its own,
  with ``OPENAI_BASE_URL`` (the chain's endpoint), ``OPENAI_API_KEY`` (its key),
  ``AGENTFLY_TASK`` (a file holding the row as JSON) and ``AGENTFLY_CHAIN`` (``group/chain``) in
  its environment; its answer is the last line of its standard output (a program that prints
  nothing fails its chain; an empty last line is an empty answer);
- ``agent.harness.function``: ``module:attr``, an ``async def f(task: dict, client)`` awaited in
  the rollout's event loop with an ``openai.AsyncOpenAI`` client bound to the chain's endpoint;
  its answer is what it returns (a string).

The configured reward scores the answer as ``prediction`` with the row's fields and the
trajectory, as for built-in chains. Every wait has a deadline: the program's (``timeout``; the
command's whole process group is killed at it, and at the chain's end whatever is left of it)
and each engine call's (``request_timeout``, answered 504). A program that hangs, exits
non-zero, prints nothing, raises, or never asks the model fails its chain only, with a message
naming what it did (``finish_reason`` ``error``; counted as failed chains are); a malformed
request is answered 400 and counted (``rollout/harness_malformed``), and named in the chain's
error when the program then fails. A chain that reached a limit (``max_turns``, the context)
ends with that finish reason whatever its program does next.

A chain whose program rewrote its history trains as several segments (one row each); each gets
the chain's reward (``Trajectory.segment_reward`` ``broadcast``), so every segment carries the
chain's outcome. With ``agent.harness.sandbox=true`` a command runs in the code sandbox
(bubblewrap; :func:`~agentfly.rollout.execution.sandbox_isolation.program_command`): a read-only
file system with the working directory read-only and a private ``/tmp``, its own processes, a
uid of its own under a root trainer, only its endpoint's variables, and the host's network (its
endpoint is on this host). Otherwise it runs as the trainer's user, with the trainer's
environment and files.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import os
import signal
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from agentfly.core.trajectory import Trajectory
from agentfly.rollout.agent_loop import AgentLoop
from agentfly.rollout.endpoint.chain import ChainRecord
from agentfly.rollout.endpoint.http import ChatServer
from agentfly.rollout.endpoint.service import ChatService
from agentfly.rollout.engines.base import SamplingParams
from agentfly.rollout.prompt import RenderedPrompt

logger = logging.getLogger(__name__)

STDERR_SHOWN = 600
"""Characters of a failed command's standard error quoted in its chain's error."""


class HarnessFailure(RuntimeError):
    """The program failed its chain; the message names what it did."""


@dataclass
class Harness:
    """``agent.harness``: the program each chain runs.

    Attributes:
        command: a shell command run once per chain (see the module docstring).
        function: ``module:attr`` of an ``async def f(task, client) -> str``.
        timeout: seconds the program may run.
        request_timeout: seconds each engine call may take.
        sandbox: run the command in the code sandbox.
        failures: whose fault a program's failure is: ``infrastructure`` (failed chains'
            policy) or ``model`` (reward 0, kept in its group).
    """

    command: str | None = None
    function: str | None = None
    timeout: float = 300.0
    request_timeout: float = 120.0
    sandbox: bool = False
    failures: str = "infrastructure"

    def __post_init__(self) -> None:
        if (self.command is None) == (self.function is None):
            raise ValueError("agent.harness needs exactly one of command and function")
        if self.failures not in ("infrastructure", "model"):
            raise ValueError(f"agent.harness.failures={self.failures!r}: one of 'infrastructure', 'model'")
        if self.sandbox and self.command is None:
            raise ValueError("agent.harness.sandbox=true needs agent.harness.command: a function "
                             "runs in the trainer's own process")

    def resolve_function(self) -> Any:
        """The harness function, checked: importable and ``async``.

        Raises:
            ValueError: naming what is wrong with ``agent.harness.function``.
        """
        from agentfly.core.plugins import import_object

        assert self.function is not None
        try:
            fn = import_object(self.function)
        except Exception as e:
            raise ValueError(f"agent.harness.function={self.function!r} cannot be imported: {e}") from e
        if not inspect.iscoroutinefunction(fn):
            raise ValueError(f"agent.harness.function={self.function!r} must be an async function "
                             "(async def f(task: dict, client) -> str); a blocking one would stall "
                             "every chain's requests")
        params = list(inspect.signature(fn).parameters.values())
        if len(params) < 2:
            raise ValueError(f"agent.harness.function={self.function!r} must take (task, client)")
        return fn


def _tail(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip()
    return text[-STDERR_SHOWN:]


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class HarnessLoop(AgentLoop):
    """The agent loop whose chains are the user's program (see the module docstring).

    Args:
        harness: the program (:class:`Harness`).
        model_name: the model's name in the endpoint's replies.
        **kwargs: :class:`~agentfly.rollout.agent_loop.AgentLoop`'s arguments; ``agent`` is the
            agent type whose parser reads the replies' tool calls (its tools are not run: the
            program runs its own).
    """

    def __init__(self, *, harness: Harness, model_name: str = "agentfly", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if self.vision is not None:
            raise ValueError("agent.harness with a vision-language model is not built: the "
                             "endpoint takes text messages only")
        self.harness = harness
        self.model_name = model_name
        self._function = harness.resolve_function() if harness.function else None
        self._server: ChatServer | None = None
        self._http: Any = None  # the function harness's clients' shared connection pool

    async def _rollout(self, rows, prompt_key, group_offset, passes, retry=None):  # type: ignore[override]
        service = ChatService(
            engine=self.engine, tokenizer=self.tokenizer, template=self.template, agent=self.agent,
            model_name=self.model_name, sampling=self.sampling, max_model_len=self.max_model_len,
            request_timeout=self.harness.request_timeout,
        )
        self._server = ChatServer(service)
        await self._server.start()
        if self._function is not None:  # one connection pool for every chain's client
            import openai

            self._http = openai.DefaultAsyncHttpxClient(timeout=self.harness.request_timeout + 5.0)
        try:
            return await super()._rollout(rows, prompt_key, group_offset, passes, retry)
        finally:
            if self._http is not None:
                await self._http.aclose()
                self._http = None
            await self._server.stop()
            self._server = None

    async def _chain(
        self, row: dict[str, Any], prompt: RenderedPrompt, group_id: int, chain_index: int,
        sampling: SamplingParams,
    ) -> Trajectory:
        assert self._server is not None
        traj = Trajectory(prompt_ids=[], group_id=group_id, chain_index=chain_index, row=dict(row))
        record = ChainRecord(
            traj, tokenizer=self.tokenizer, template=self.template, agent=self.agent,
            sampling=sampling, max_model_len=self.max_model_len,
            max_response_len=self.max_response_len, max_turns=self.max_turns,
        )
        url, token = self._server.open_chain(record)
        began = time.perf_counter()
        answer, failure = None, None
        try:
            with self._timer("harness"):
                answer = await self._run(row, url, token, f"{group_id}/{chain_index}")
        except HarnessFailure as e:
            failure = str(e)
        finally:
            self._server.close_chain(token)
        seconds = time.perf_counter() - began
        traj.harness = {"requests": record.requests, "breaks": record.breaks,
                        "malformed": len(record.malformed)}
        if record.breaks:
            traj.segment_reward = "broadcast"
        if record.malformed and failure is not None:
            failure += f"; it sent {len(record.malformed)} malformed request(s), the first: {record.malformed[0]}"
        if record.finish_reason == "prompt_too_long" or not traj.prompt_ids:
            traj.prompt_ids = (traj.prompt_ids or list(prompt.ids))[:1]  # a collated batch stays small
            traj.response_ids, traj.loss_mask, traj.rollout_logprobs = [], [], []
            traj.turn_ids, traj.policy_versions = [], []
            traj.finish_reason = record.finish_reason or "error"
            traj.error = failure or (f"prompt_too_long: {record.finish_reason}" if record.finish_reason
                                     else "the harness answered without asking the model")
            if traj.finish_reason == "error":
                logger.warning("chain %s/%s: %s", group_id, chain_index, traj.error)
            return traj  # nothing sampled: nothing to score
        if record.finish_reason is not None:  # a limit ended the chain; the program's end is its own
            traj.finish_reason = record.finish_reason
            traj.final_response = answer if answer is not None else record.last_content
        elif failure is not None and self.harness.failures == "model":
            # the model's fault: scored 0 where it stands, in its group's baseline (no reward is
            # asked of an answer the program never gave)
            traj.finish_reason, traj.error, traj.reward = "program_failed", failure, 0.0
            if self.train_on_last_turn:
                traj.mask_all_but_last_turn()
            return traj
        elif failure is not None:
            traj.finish_reason, traj.error = "error", failure
            logger.warning("chain %s/%s failed after %.1f s: %s", group_id, chain_index, seconds, failure)
        else:
            traj.finish_reason, traj.final_response = "answer", answer or ""
        await self._finish(traj)  # scored as a built-in chain is, a failed one included
        return traj

    async def _run(self, row: dict[str, Any], url: str, token: str, chain: str) -> str:
        """The program's answer for ``row``; raises :class:`HarnessFailure` naming what it did."""
        if self._function is not None:
            return await self._run_function(row, url, token)
        return await self._run_command(row, url, token, chain)

    async def _run_function(self, row: dict[str, Any], url: str, token: str) -> str:
        import openai

        timeout = self.harness.timeout
        # a client of its own (its URL and key are the chain's) over the rollout's connections:
        # a client's own pool would build an SSL context per chain, the most of a chain's cost
        client = openai.AsyncOpenAI(base_url=url, api_key=token, max_retries=0,
                                    timeout=self.harness.request_timeout + 5.0, http_client=self._http)
        name = self.harness.function
        try:
            answer = await asyncio.wait_for(self._function(dict(row), client), timeout)
        except (TimeoutError, asyncio.TimeoutError):  # one class from 3.11 on, two on 3.10
            raise HarnessFailure(f"harness function {name} did not return within {timeout:g} s "
                                 "(agent.harness.timeout)") from None
        except Exception as e:
            raise HarnessFailure(f"harness function {name} raised {type(e).__name__}: {e}") from None
        if not isinstance(answer, str):
            raise HarnessFailure(f"harness function {name} returned {type(answer).__name__}, not the "
                                 "answer as a string")
        return answer

    @staticmethod
    def _sandboxed(command: str, task_file: str, env: dict[str, str]) -> list[str]:
        """``command`` in the code sandbox (:func:`~agentfly.rollout.execution.sandbox_isolation.program_command`):
        the working directory and the task file read-only, the host's network (its endpoint is
        on this host), only ``env``, ``AGENTFLY_TASK`` and the sandbox's own variables set."""
        from agentfly.rollout.execution.sandbox_isolation import program_command

        os.chmod(task_file, 0o644)  # a root trainer's sandbox runs as a uid of its own
        cwd = os.getcwd()
        inside = "/tmp/agentfly-task.json"
        return program_command(
            ["sh", "-c", command], env={**env, "AGENTFLY_TASK": inside},
            read_only=[(cwd, cwd), (task_file, inside)], chdir=cwd,
        )

    async def _run_command(self, row: dict[str, Any], url: str, token: str, chain: str) -> str:
        command, timeout = self.harness.command, self.harness.timeout
        assert command is not None
        with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="agentfly-task-", delete=False) as f:
            json.dump(row, f, ensure_ascii=False, default=str)
            task_file = f.name
        given = {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": token, "AGENTFLY_CHAIN": chain}
        proc = None
        try:
            if self.harness.sandbox:
                argv = self._sandboxed(command, task_file, given)
                proc = await asyncio.create_subprocess_exec(
                    *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE, start_new_session=True,
                )
            else:
                proc = await asyncio.create_subprocess_shell(
                    command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE, env={**os.environ, **given, "AGENTFLY_TASK": task_file},
                    start_new_session=True,
                )
            try:
                out, err = await asyncio.wait_for(proc.communicate(), timeout)
            except (TimeoutError, asyncio.TimeoutError):  # one class from 3.11 on, two on 3.10
                raise HarnessFailure(f"harness command {command!r} did not finish within {timeout:g} s "
                                     "(agent.harness.timeout); its processes were killed") from None
        finally:
            if proc is not None:
                _kill_group(proc.pid)  # the program's children die with its chain
                if proc.returncode is None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(proc.wait(), 10.0)
            with contextlib.suppress(OSError):
                os.unlink(task_file)
        if proc.returncode != 0:
            raise HarnessFailure(f"harness command {command!r} exited with status {proc.returncode}: "
                                 f"{_tail(err) or '(no standard error)'}")
        text = out.decode("utf-8", "replace")
        if not text:
            raise HarnessFailure(f"harness command {command!r} printed nothing: its answer is the "
                                 "last line of its standard output")
        return text.rstrip("\n").rsplit("\n", 1)[-1].strip()  # an empty last line: an empty answer
