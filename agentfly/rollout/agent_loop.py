"""The agent loop: multi-turn chains of generate → parse → run tools → observe, token-exact.

For every prompt, ``num_chains`` chains share a group id; at most ``max_concurrent_chains`` run at
once. Each chain asks the engine pool for one turn at a time; the pool merges the turns of all
waiting chains into one batched engine call, so a chain waiting on a slow tool holds no one back.

Token exactness: the prompt is rendered and tokenized once; each turn appends the ids the engine
sampled (trained on, with the engine's log-probabilities), then the template's text between turns for the tool
observations tokenized on its own (not trained on). Sampled text is decoded only to parse tool
calls and to record the chat; it is never re-encoded. A turn that calls a folding tool
(``summarize``) drops the history: the next turn starts a new segment (:mod:`agentfly.rollout.folding`).

Environments (:mod:`agentfly.rollout.tools.environment`): a chain whose agent has environment
tools gets its environments when it starts (reset with its data row) and gives them back when it
ends; each turn's environment reward (any tool's ``ToolResult.reward``) goes to
``Trajectory.turn_rewards``, the observation it acted on to ``Trajectory.turn_anchors``, and each
episode's record to ``Trajectory.environments``, before the reward scores the chain.

Finish reasons: ``answer`` (the agent gave a final answer or called the ``answer`` tool),
``no_tool_call`` (a turn with no tool call), ``episode_over`` (an environment's episode ended),
``env_failed`` (an environment failed: an infrastructure failure), ``max_turns``, ``max_model_len`` (the next turn or
observation would not fit in the context), ``max_response_len`` (nor in the response budget,
``actor_rollout_ref.rollout.response_length``), ``prompt_too_long`` (the prompt leaves no room
to generate: nothing is sampled or scored, and only its first token is kept so that a collated
batch stays within the context), ``error`` (the chain failed; recorded, never raised).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agentfly.core.images import ImageInput, ImagePrompt
from agentfly.core.trajectory import ToolCallRecord, Trajectory
from agentfly.rollout.agents.base import Agent, ToolCallRequest
from agentfly.rollout.data import question_of
from agentfly.rollout.engines.base import SamplingParams
from agentfly.rollout.engines.caller_thread import run_sync
from agentfly.rollout.execution.workers import WorkerPool, WorkerStartError
from agentfly.rollout.folding import fold_chain
from agentfly.rollout.phase_timer import PhaseTimer
from agentfly.rollout.prompt import RenderedPrompt, render_prompt
from agentfly.rollout.rewards import ascore_trajectory
from agentfly.rollout.rewards.base import NO_POLICY
from agentfly.rollout.rewards.chain import text_of
from agentfly.rollout.rewards.overlong import OverlongBuffer
from agentfly.rollout.templates.base import ChatTemplate
from agentfly.rollout.tools.base import CUT_OFF, ToolResult
from agentfly.rollout.tools.breaker import ToolBreakers, ToolBroken
from agentfly.rollout.tools.call import run_tool_call
from agentfly.rollout.tools.environment import (
    environment_records,
    environment_tools,
    start_environments,
)
from agentfly.rollout.unseen_tools import (
    explain_invalid_arguments,
    explain_uncalled_tools,
    shows_tool_schemas,
)
from agentfly.rollout.vision import (
    IMAGE_MARKER,
    ImageError,
    VisionProcessor,
    row_image_bytes,
    user_content,
)

if TYPE_CHECKING:
    from agentfly.rollout.resampling import Resampler

logger = logging.getLogger(__name__)

RESEED_STRIDE = 1_000_003
"""Seed distance between two attempts of one chain: more than any group's chain indices."""


def chain_seed(seed: int, group_id: int, chain_index: int, attempt: int = 0) -> int:
    """The sampling seed of chain ``chain_index`` of group ``group_id``, from the base ``seed``.

    Attempt 0 is the chain's first run; attempt ``a`` > 0 re-runs it after a failure
    (:mod:`agentfly.rollout.resampling`) with a seed that no run of a chain of the same group
    used (for chain indices below :data:`RESEED_STRIDE`).
    """
    return seed + group_id * 1009 + chain_index + attempt * RESEED_STRIDE


class AgentLoop:
    """Runs chains for a batch of data rows and returns scored trajectories.

    Args:
        engine: the engine pool (anything with ``async generate(prompts, sampling)``).
        tokenizer: the model's tokenizer (encode/decode only).
        template: the chat template.
        agent: the agent type (parser and prompting).
        reward: reward name or function; None leaves trajectories unscored.
        resources: the resource pool for stateful tools (None: throwaway resources per call; a
            local pool where the agent has environment tools).
        workers: the worker processes of sync tools and rewards (None: the process's default
            pool, :func:`~agentfly.rollout.execution.workers.default_pool`).
        reward_timeout: seconds a reward call may take (None: the reward's own
            ``@reward(timeout=)``).
        max_turns: assistant turns per chain at most.
        num_chains: chains per prompt (one group).
        max_concurrent_chains: cap on chains running at once (None: no cap).
        max_tokens: new tokens per turn at most.
        max_model_len: prompt + response tokens at most.
        max_response_len: response tokens (every turn's sampled tokens and the observations
            between them) at most; None: only ``max_model_len`` bounds them.
        overlong_buffer: DAPO's overlong penalty in the reward, ``{len, penalty_factor, log}``
            (:class:`~agentfly.rollout.rewards.overlong.OverlongBuffer`); None: off.
        temperature: sampling temperature (0: greedy).
        top_p: nucleus sampling mass.
        top_k: most likely tokens kept when sampling (-1: all).
        train_on_last_turn: keep the loss mask only on the last assistant turn.
        seed: base seed; chain ``k`` of group ``g`` samples with a seed derived from it, so a
            rerun gives the same trajectories. None samples from the engines' own generators.
        failed_chain_consequence: what becomes of a chain whose reward fails, in words, for
            the warning (in training: :func:`agentfly.rollout.failures.describe_policy`).
        tool_breaker: :class:`~agentfly.rollout.tools.breaker.ToolBreakers`' arguments: a
            tool whose calls keep failing stops the rollout (None: no breaker).
        vision: the model's image processor (:class:`~agentfly.rollout.vision.VisionProcessor`)
            for a vision-language model: a row's ``images`` and the images tools return enter
            the chain (placeholder tokens in the ids, the processed pixels in
            ``Trajectory.images``, both handed to the engine). None: a text model (a row or
            tool result with images fails its chain, naming why).
    """

    def __init__(
        self,
        *,
        engine: Any,
        tokenizer: Any,
        template: ChatTemplate,
        agent: Agent,
        reward: str | Callable[..., Any] | None = None,
        resources: Any = None,
        workers: WorkerPool | None = None,
        reward_timeout: float | None = None,
        max_turns: int = 3,
        num_chains: int = 1,
        max_concurrent_chains: int | None = None,
        max_tokens: int = 256,
        max_model_len: int = 2048,
        max_response_len: int | None = None,
        overlong_buffer: dict[str, Any] | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = -1,
        train_on_last_turn: bool = False,
        seed: int | None = None,
        failed_chain_consequence: str = NO_POLICY,
        tool_breaker: dict[str, Any] | None = None,
        vision: VisionProcessor | None = None,
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if num_chains < 1:
            raise ValueError(f"num_chains must be >= 1, got {num_chains}")
        self.engine = engine
        self.tokenizer = tokenizer
        self.template = template
        self.agent = agent
        # a template that hides the schemas the agent hands it: failed arguments get explained
        self._schemas_hidden = not shows_tool_schemas(template, agent)
        self._explained: set[str] = set()
        self.reward = reward
        if resources is None and environment_tools(agent.tools):
            from agentfly.rollout.tools.resources import ResourcePool

            resources = ResourcePool("local")
        self.resources = resources
        self.workers = workers
        self.reward_timeout = reward_timeout
        self.max_turns = max_turns
        self.num_chains = num_chains
        self.max_concurrent_chains = max_concurrent_chains
        self.max_model_len = max_model_len
        self.max_response_len = max_response_len
        self.overlong = None if overlong_buffer is None else OverlongBuffer(max_response_len or 0, **overlong_buffer)
        self.train_on_last_turn = train_on_last_turn
        self.seed = seed
        self.failed_chain_consequence = failed_chain_consequence
        self.breakers = ToolBreakers(**tool_breaker) if tool_breaker is not None else None
        self.vision = vision
        #: wall seconds of the last ``arun`` spent generating / in tools / scoring (union over chains)
        self.last_timing: dict[str, float] = {}
        self._timer = PhaseTimer()
        self.sampling = SamplingParams(
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            max_tokens=max_tokens,
            stop=template.stop,
            stop_token_ids=template.stop_token_ids(tokenizer),
        )

    # ------------------------------------------------------------------ public

    def run(self, rows: Sequence[dict[str, Any]], **kwargs: Any) -> list[Trajectory]:
        """:meth:`arun` from synchronous code (an in-process engine generates on this thread)."""
        return run_sync(self.engine, self.arun(rows, **kwargs))

    def run_with_baselines(
        self, rows: Sequence[dict[str, Any]], **kwargs: Any
    ) -> tuple[list[Trajectory], list[Trajectory]]:
        """:meth:`arun_with_baselines` from synchronous code."""
        return run_sync(self.engine, self.arun_with_baselines(rows, **kwargs))

    async def arun(
        self,
        rows: Sequence[dict[str, Any]],
        *,
        prompt_key: str | None = None,
        num_chains: int | None = None,
        group_offset: int = 0,
        greedy: bool = False,
        sampling: SamplingParams | None = None,
        retry: Resampler | None = None,
    ) -> list[Trajectory]:
        """Roll out ``num_chains`` chains for each row; trajectories come back row-major.

        Args:
            rows: data rows; the question is read from ``prompt_key`` (or the usual fields) and
                every field is passed to the reward.
            prompt_key: the field holding the question.
            num_chains: override the chains per prompt (validation uses 1).
            group_offset: added to each row's position to make its group id.
            greedy: sample greedily (validation).
            sampling: replace the loop's sampling parameters altogether.
            retry: asked as each chain run ends whether the chain runs again at once, in its
                place, with its next attempt's seed (failed chains: :mod:`~agentfly.rollout.resampling`).
        """
        n = num_chains or self.num_chains
        base = sampling or self.sampling
        if greedy:
            base = replace(base, temperature=0.0)
        (trajs,) = await self._rollout(rows, prompt_key, group_offset, [(range(n), base)], retry)
        return trajs

    async def arun_with_baselines(
        self,
        rows: Sequence[dict[str, Any]],
        *,
        prompt_key: str | None = None,
        group_offset: int = 0,
        retry: Resampler | None = None,
    ) -> tuple[list[Trajectory], list[Trajectory]]:
        """The ``num_chains`` sampled chains of every row and one greedy chain per row (ReMax's
        baseline), rolled out together so that the engine batches their turns.

        The greedy chain runs the same turns, tools and reward as the others at temperature 0;
        it shares its row's group id and takes chain index ``num_chains`` (its own tool
        resources). It comes back apart, for its reward only: it is not a training trajectory.
        A failed one is re-run greedily (``retry``, as in :meth:`arun`).

        Returns:
            ``(chains, baselines)``: the sampled chains row-major, and one greedy chain per row.
        """
        n = self.num_chains
        greedy = replace(self.sampling, temperature=0.0)
        passes = [(range(n), self.sampling), (range(n, n + 1), greedy)]
        chains, baselines = await self._rollout(rows, prompt_key, group_offset, passes, retry)
        return chains, baselines

    async def _rollout(
        self,
        rows: Sequence[dict[str, Any]],
        prompt_key: str | None,
        group_offset: int,
        passes: list[tuple[range, SamplingParams]],
        retry: Resampler | None = None,
    ) -> list[list[Trajectory]]:
        """Run every pass's chains of every row at once: a pass is (chain indices, sampling).

        Returns one row-major list of trajectories per pass. A sampled chain with a base ``seed``
        gets a seed derived from its group and chain index.
        """
        questions = [question_of(row, prompt_key, i) for i, row in enumerate(rows, 1)]
        self._timer = PhaseTimer()
        start = time.perf_counter()
        jobs = [
            (rows[i], questions[i], group_offset + i, k, base)
            for chains, base in passes
            for i in range(len(rows))
            for k in chains
        ]
        done = await self._run_chains(jobs, retry)
        if self._schemas_hidden:
            explain_invalid_arguments(done, self.agent.tool_names, self.template.name, self._explained)
            explain_uncalled_tools(done, self.agent.tool_names, self.template.name, self.agent.system_prompt, self._explained)
        self.last_timing = {f"{k}_s": v for k, v in self._timer.seconds.items()}
        self.last_timing["rollout_s"] = time.perf_counter() - start
        out, at = [], 0
        for chains, _ in passes:
            size = len(rows) * len(chains)
            out.append(done[at : at + size])
            at += size
        return out

    async def _run_chains(
        self,
        jobs: list[tuple[dict[str, Any], str, int, int, SamplingParams]],
        retry: Resampler | None,
    ) -> list[Trajectory]:
        """Run chains at once, at most ``max_concurrent_chains`` together; a job is (row,
        question, group id, chain index, sampling). A sampled chain with a base ``seed`` samples
        with :func:`chain_seed`'s seed of its attempt. A run that ``retry`` sends back runs
        again at once, in its chain's place, waiting for no other chain."""
        limit = self.max_concurrent_chains
        gate = asyncio.Semaphore(limit) if limit else contextlib.nullcontext()
        rendered: dict[tuple[str, str], RenderedPrompt] = {}  # a group's chains share their prompt

        def prompt_of(row: dict[str, Any], question: str) -> RenderedPrompt:
            key = (question, repr(row.get("images")))
            if key not in rendered:
                rendered[key] = self._render(row, question)
            return rendered[key]

        async def one(
            row: dict[str, Any], question: str, group_id: int, k: int, base: SamplingParams
        ) -> Trajectory:
            try:
                prompt, attempt = prompt_of(row, question), 0
            except ImageError as e:  # this row's images cannot be used: its chains fail alone
                if retry is not None:  # not re-run (the row stays unusable), but its first run is over
                    retry.first_run_ended()
                first = self._encode(question)[:1] or [0]  # as prompt_too_long: one token kept
                return Trajectory(prompt_ids=first, group_id=group_id, chain_index=k, row=dict(row),
                                  finish_reason="error", error=f"ImageError: {e}")
            while True:
                chain_sampling = base
                if self.seed is not None and not base.greedy:
                    chain_sampling = replace(base, seed=chain_seed(self.seed, group_id, k, attempt))
                async with gate:
                    began = time.perf_counter()
                    traj = await self._chain(row, prompt, group_id, k, chain_sampling)
                seconds = time.perf_counter() - began
                if retry is None or not retry.rerun(traj, attempt, seconds):
                    return traj
                attempt += 1

        if retry is not None:
            deadlines = {tool.name: tool.timeout for tool in self.agent.tools}
            retry.start(len(jobs), deadlines)
        return list(await asyncio.gather(*(one(*job) for job in jobs)))

    # ------------------------------------------------------------------ one chain

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _render(self, row: dict[str, Any], question: str) -> RenderedPrompt:
        """The chain's first prompt; a row with ``images`` puts them in the user message and
        their placeholder runs, widened to each image's tokens, in the ids."""
        if not row.get("images"):
            return render_prompt(self.agent, self.template, self.tokenizer, question)
        if self.vision is None:
            raise ImageError(
                f"the row has {len(row['images'])} images but the model has no image processor "
                f"(template {self.template.name!r}): use a vision-language model and template"
            )
        where = f"the row of group question {question[:40]!r}"
        images = [self.vision.process(b, where) for b in row_image_bytes(row, where)]
        messages = self.agent.initial_messages(question.replace(IMAGE_MARKER, ""))
        messages[-1] = {**messages[-1], "content": user_content(question, len(images))}
        tools = self.agent.template_tools()
        ids = self.vision.expand(self._encode(self.template.prompt(messages, tools)), images)
        return RenderedPrompt(messages, tools, ids, images)

    def _observation_images(
        self, observations: list[dict[str, Any]], results: list[ToolResult]
    ) -> list[ImageInput]:
        """The images the turn's tool results returned, processed, each placed in its tool
        message's content (in the last message when the agent joins observations)."""
        if not any(r.images for r in results):
            return []
        if self.vision is None:
            raise ImageError(
                f"a tool returned an image but the model has no image processor (template "
                f"{self.template.name!r})"
            )
        per_message = len(observations) == len(results)
        placed: dict[int, list[ImageInput]] = {}  # message -> its images, in result order
        for k, result in enumerate(results):
            target = k if per_message else len(observations) - 1
            placed.setdefault(target, []).extend(
                self.vision.process(b, f"the image of tool call {k}") for b in result.images
            )
        images: list[ImageInput] = []
        for target, processed in sorted(placed.items()):
            content = observations[target]["content"]
            items = content if isinstance(content, list) else [{"type": "text", "text": content}]
            observations[target]["content"] = [*({"type": "image"} for _ in processed), *items]
            images.extend(processed)
        return images

    async def _chain(
        self,
        row: dict[str, Any],
        prompt: RenderedPrompt,
        group_id: int,
        chain_index: int,
        sampling: SamplingParams,
    ) -> Trajectory:
        tools = prompt.tools
        traj = Trajectory(
            prompt_ids=list(prompt.ids),
            messages=list(prompt.messages),
            group_id=group_id,
            chain_index=chain_index,
            row=dict(row),
            images=list(prompt.images),
        )
        if len(prompt.ids) >= self.max_model_len:  # no room to generate: never sent, never trained
            traj.prompt_ids = prompt.ids[:1]  # a collated batch stays within the context
            traj.finish_reason = "prompt_too_long"
            traj.error = (
                f"prompt_too_long: the rendered prompt is {len(prompt.ids)} tokens, "
                f"max_model_len={self.max_model_len}"
            )
            logger.warning("chain %s/%s: %s", group_id, chain_index, traj.error)
            return traj  # unscored: there is no response to score
        chain_resources = None
        if self.resources is not None:
            chain_resources = self.resources.chain((group_id, chain_index))
        try:
            if chain_resources is not None:
                await start_environments(chain_resources, self.agent.tools, row, sampling.seed)
            await self._turns(traj, tools, sampling, chain_resources)
        except (WorkerStartError, ToolBroken):  # every chain would fail alike: the rollout stops
            raise
        except Exception as e:  # a broken chain is recorded, not raised
            logger.warning("chain %s/%s failed: %r", group_id, chain_index, e, exc_info=True)
            traj.finish_reason, traj.error = "error", f"{type(e).__name__}: {e}"
        finally:
            if chain_resources is not None:
                traj.environments = await environment_records(chain_resources, self.agent.tools)
                await chain_resources.release_all()
        await self._finish(traj)
        return traj

    async def _finish(self, traj: Trajectory) -> None:
        """A chain that ran: its loss mask on the last turn only (``train_on_last_turn``), its
        reward, DAPO's length penalty."""
        if self.train_on_last_turn:
            traj.mask_all_but_last_turn()
        if self.reward is not None:
            with self._timer("reward"):
                await ascore_trajectory(
                    self.reward, traj, timeout=self.reward_timeout, workers=self.workers,
                    consequence=self.failed_chain_consequence,
                )
            if self.overlong is not None:
                self.overlong.shape(traj)

    async def _turns(
        self, traj: Trajectory, tools: Any, sampling: SamplingParams, chain_resources: Any
    ) -> None:
        content, anchor = "", text_of(traj.messages[-1].get("content")) if traj.messages else ""
        for turn in range(self.max_turns):
            budget, limit = self._budget(traj)
            if budget <= 0:
                traj.finish_reason = limit
                break
            turn_sampling = replace(sampling, max_tokens=min(sampling.max_tokens, budget))
            with self._timer("generation"):
                ids = ImagePrompt(traj.input_ids, traj.images) if traj.images else traj.input_ids
                (out,) = (await self.engine.generate([ids], turn_sampling))[0]
            token_ids, logprobs = list(out.token_ids), list(out.logprobs)
            # An image pad the model wrote stands for no pixels: the turn is cut before it and the
            # chain ends there ("image_token"), so its ids and images still agree for the trainer.
            cut = self.vision.first_placeholder(token_ids) if self.vision is not None else None
            if cut is not None:
                token_ids, logprobs = token_ids[:cut], logprobs[:cut]
            traj.append_sampled(token_ids, logprobs, getattr(out, "weights_version", 0))
            traj.num_turns += 1
            traj.turn_rewards.append(0.0)
            traj.turn_anchors.append(anchor)  # the observation this turn acts on (GiGPO's state)
            text = self.tokenizer.decode(token_ids, skip_special_tokens=False)
            content, closed = self.template.split_turn(text)
            traj.messages.append({"role": "assistant", "content": content})
            if cut is not None:
                traj.final_response, traj.finish_reason = content, "image_token"
                return
            if out.finish_reason == "length":
                traj.truncated = True
            parsed = self.agent.parse(content)
            if out.finish_reason == "length" and parsed.calls and parsed.calls[-1].error is not None:
                # the last call could not be read because the turn stopped inside it: say that,
                # to the model and in the counts, rather than "not valid JSON"
                parsed.calls[-1] = replace(
                    parsed.calls[-1], error_kind=CUT_OFF,
                    error=f"the tool call was cut off: the turn reached its limit of "
                          f"{turn_sampling.max_tokens} tokens before the call ended; write a shorter one",
                )
            if not parsed.calls:
                traj.final_response = parsed.answer if parsed.answer is not None else content
                traj.finish_reason = "answer" if parsed.answer is not None else "no_tool_call"
                if out.finish_reason == "length" and budget <= sampling.max_tokens:
                    traj.finish_reason = limit
                return
            with self._timer("tools"):
                results = await asyncio.gather(
                    *(self._call(c, chain_resources) for c in parsed.calls)
                )
            for call, result in zip(parsed.calls, results, strict=True):
                traj.tool_calls.append(ToolCallRecord(
                    call.name, call.arguments, result.observation, result.ok, result.error, turn,
                    result.reward,
                ))
                traj.turn_rewards[turn] += result.reward or 0.0
            anchor = "\n".join(r.observation for r in results)
            ended = next((r for r in results if r.ends_chain), None)
            if ended is not None:
                traj.final_response = ended.final_answer or ""
                traj.finish_reason = ended.finish_reason or "answer"
                return
            if turn == self.max_turns - 1:
                break
            fold = next((r for c, r in zip(parsed.calls, results, strict=True)
                         if r.ok and getattr(self._tool(c.name), "folds_context", False)), None)
            if fold is not None and traj.images:
                raise ImageError("folding the history of a chain that holds images is not built")
            if fold is not None:  # the history is dropped: the next turn starts a new segment
                fold_chain(traj, fold.observation, self.template, tools, self.tokenizer)
                continue
            observations = self.agent.observation_messages(
                parsed.calls, [r.observation for r in results]
            )
            new_images = self._observation_images(observations, results)
            between_ids = self._encode(
                self.template.between_turns([*traj.messages, *observations], tools, closed=closed)
            )
            if new_images:
                assert self.vision is not None
                between_ids = self.vision.expand(between_ids, new_images)
            room, limit = self._budget(traj)
            if len(between_ids) >= room:  # the observation would leave no room for another turn
                traj.finish_reason = limit
                traj.final_response = content
                return
            traj.append_observation(between_ids)
            traj.images.extend(new_images)
            traj.messages.extend(observations)
        if not traj.finish_reason:
            traj.finish_reason = "max_turns"
        traj.final_response = traj.final_response or content

    def _budget(self, traj: Trajectory) -> tuple[int, str]:
        """Tokens the chain may still add, and the limit that binds (its finish reason)."""
        return traj.room(self.max_model_len, self.max_response_len)

    async def _call(self, call: ToolCallRequest, chain_resources: Any) -> ToolResult:
        if call.error is not None:
            return ToolResult.failure(call.error_kind, f"Error: {call.error}.")
        tool = self._tool(call.name)
        if tool is None:
            known = ", ".join(self.agent.tool_names) or "none"
            return ToolResult.failure(
                "unknown_tool", f"Error: no tool named {call.name!r} is available (tools: {known})."
            )
        return await run_tool_call(
            tool, call.arguments, resource=chain_resources, workers=self.workers,
            breakers=self.breakers,
        )

    def _tool(self, name: str) -> Any:
        """The agent's own (configured) tool the model called by ``name`` or an alias."""
        return next(
            (t for t in self.agent.tools if name == t.name or name in getattr(t, "aliases", ())),
            None,
        )
