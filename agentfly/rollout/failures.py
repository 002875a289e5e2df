"""Failure-aware groups: a chain the system failed never enters an advantage baseline as a reward.

A chain the infrastructure broke scores 0 (the agent loop records a failure, it never raises),
and that 0 is not a measurement of the policy: inside a GRPO/RLOO group it lowers the baseline
and raises the advantages of its siblings, under PPO it teaches the critic a false value. So,
per ``algorithm.failed_chains``, before the batch is collated:

- ``resample`` (the default): the failed chains alone are rolled out again, each as soon as it
  fails (same data row, group id and chain index, a fresh seed: :mod:`agentfly.rollout.resampling`),
  up to ``algorithm.max_resamples`` times and within ``algorithm.resample_budget_s`` past the
  first round; a group still failing after that is dropped whole.
- ``drop``: every group with a failed chain is dropped whole (its siblings and its greedy
  baseline chain with it), so the iteration trains on fewer prompts.
- ``keep``: failed chains stay in the batch with their reward of 0 (counted, nothing else), the
  behaviour of trainers that do not tell the two zeros apart; for fault-injection runs.

When every group is dropped the iteration has nothing sound to train on: :class:`FailedChainsError`
stops the run, naming the failures. A whole batch lost after the re-samples is a broken tool,
reward, engine or configuration, not bad luck, and skipping the update would only repeat the
failure every iteration with the data position moving on.

What counts as an infrastructure failure (:func:`failure_reason`), and what does not:

- ``engine``: the chain ended on an engine error (``EngineLostError``, ``EngineTimeoutError``,
  ``EngineStartError``: a dead or stuck engine actor). ``chain_error``: any other exception
  out of the chain (``finish_reason == "error"``): a parser, template or resource bug, which
  no output of the model should be able to cause.
- ``tool_timeout``: a tool call ran past the harness's deadline (``Tool.timeout``, counted from
  when a worker took it): the tool gave no answer at all. ``tool_queue_timeout``: the call
  waited past the worker pool's queue bound (``agent.run_config.workers.queue_timeout``) and
  never ran: the pool is too small for the calls in flight. ``tool_worker_died``: the process running the tool died (a crash, a signal,
  the worker's memory limit). ``tool_malformed_output``: the tool returned something that is
  not text (a bug in the tool). ``tool_unavailable``: the service behind the tool failed (the
  search API unreachable or answering 5xx: ``ToolUnavailableError``). ``tool_env_<kind>``: the
  chain's environment failed during a call (``env_timeout``: a step past its ``step_timeout``,
  ``env_crashed``: its process died, ``env_raised``: its code raised, ``env_closed``,
  ``env_unavailable``, ``env_error``; :mod:`agentfly.rollout.tools.environment`). One such call
  fails the chain, whatever its reward: the chain
  saw an error the healthy system would not have shown it.
- ``env_start``: the chain's environment did not start (its process, or ``reset`` on the
  chain's data row: ``EnvironmentStartError``).
- ``reward_<kind>``: the reward function failed (``timeout``, ``queue_timeout``,
  ``exception``, ``malformed``, ``worker_died``, ``output_too_large``, ``missing_field``,
  ``bad_signature``; see :mod:`agentfly.rollout.rewards.call`; an LLM judge's
  ``judge_timeout``, ``judge_unreachable``, ``judge_error``, ``unparseable_verdict``,
  ``judge_unconfigured``: :mod:`agentfly.rollout.rewards.llm_judge`): the 0 it records is no
  verdict on the response.

The model's own faults keep their real reward and stay: a malformed call
(``invalid_arguments``), an unknown tool, a tool that raised on the model's arguments
(``exception``: tools refuse inputs by raising, e.g. ``search`` on an empty query), an
observation too large for the worker's reply (``output_too_large``: the model asked for it), no
answer, a wrong answer, ``max_turns``, ``max_model_len``/``max_response_len``, a truncated turn.
``prompt_too_long`` is the data's: every chain of the prompt ends alike, so a re-sample cannot
help (and the data module drops such rows before they are drawn).

Tool timeouts, the hard case. A tool that runs the model's code (``code_interpreter``) stops a
runaway cell at its own limit (``cell_timeout``) and answers the model with that, as the
``cell_timeout`` error kind; the interpreter dying of the model's allocation is likewise an
observation. These are verdicts on the model's code (an infinite loop deserves its 0): verl's
``SandboxFusionTool`` hands a run's failed status to the model as text, Prime Intellect's SWE
environments score too many command timeouts 0 without marking an error, and Harbor/rLLM's
taxonomy grades an agent's own timeout and calls only the grader's failures infrastructure. The harness's deadline ``Tool.timeout`` is a backstop on the tool
itself (120 s for ``code_interpreter``, beyond its 10 s cells): passing it means the tool or
its service hung, the case NeMo-RL #3470 found entering GRPO baselines as legitimate zeros. A
tool that runs the model's work must bound it itself and answer, as ``code_interpreter`` does.

Departures and costs. A re-sample draws from the same policy, so the kept group is a draw from
the policy given that no infrastructure failed on the way; a chain that calls a flaky tool more
often is slightly less likely to be kept (NeMo-RL's re-dispatch and tinker-cookbook's retries
share this). The re-sampling budget bounds the rollout's time, not only its re-runs: a chain
whose runs fail slowly (hung calls) gets fewer re-runs before its group is dropped than one whose
runs fail fast. Dropping instead removes whole prompts (never part of a group, which would change
the group size the estimator's baseline assumes).

Several ranks: a dropped group shrinks this rank's batch, and the update runs one backward per
micro-batch, each a collective under DDP (the gradient all-reduce) and FSDP (the all-gathers):
ranks with different batch sizes would wait on each other forever. So ``drop`` is refused at
plan time with more than one rank, and a ``resample`` that cannot complete a group raises
:class:`FailedChainsError` there instead of dropping it (``can_drop=False``); the other ranks
stop with it at the hand-over (:func:`agentfly.core.ranks.fail_together`) instead of waiting on
it in the update's collectives.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Literal, NamedTuple, Protocol

from agentfly.core.trajectory import Trajectory
from agentfly.rollout.engines.errors import EngineLostError, EngineStartError, EngineTimeoutError
from agentfly.rollout.summary import failure_counts
from agentfly.rollout.tools.base import INFRA_TOOL_ERRORS


class ResampleRecord(Protocol):
    """What :func:`complete_groups` reads of the rollout's re-sampling
    (:class:`agentfly.rollout.resampling.Resampler`, which imports this module)."""

    replaced: list[tuple[Trajectory, str]]
    past_budget: int

    def settings(self) -> str: ...


FailedChains = Literal["resample", "drop", "keep"]
POLICIES: tuple[str, ...] = ("resample", "drop", "keep")

#: exceptions out of a chain that are the engine's
ENGINE_ERRORS = frozenset(e.__name__ for e in (EngineLostError, EngineTimeoutError, EngineStartError))


#: failure reasons that are the user's own code raising or answering wrongly, whatever the model
#: wrote: a run that ends on nothing else is named as that, not as the infrastructure's
USER_CODE_FAILURES = frozenset({
    "reward_exception", "reward_missing_field", "reward_bad_signature", "reward_malformed",
    "tool_malformed_output",
})


class FailedChainsError(RuntimeError):
    """The rollout cannot give a batch without chains the infrastructure failed."""


class Completed(NamedTuple):
    """What :func:`complete_groups` keeps.

    Attributes:
        trajectories: the training chains of the kept groups, in rollout order, re-runs in the
            places of the chains they replace.
        baselines: the greedy baseline chains of the kept groups (empty without baselines).
        metrics: ``rollout/failed_chains`` (chain runs that failed for an infrastructure
            reason; a re-run that fails again counts again) and ``rollout/failed_chains/<reason>``,
            ``rollout/resampled_chains`` (re-runs), ``rollout/dropped_groups`` and
            ``rollout/dropped_chains`` (training chains left out with them); and the failures
            of every run, re-run, dropped or kept: ``rollout/failures/tool``,
            ``rollout/failures/reward``, ``rollout/failures/chain`` and their kinds
            (:func:`agentfly.rollout.summary.failure_counts`), so that a count of one kind of
            failure is the same wherever it is read.
    """

    trajectories: list[Trajectory]
    baselines: list[Trajectory]
    metrics: dict[str, float]


def describe_policy(policy: FailedChains, max_resamples: int) -> str:
    """What becomes of a training chain the infrastructure failed, under ``policy``, in words
    (the warning of a failed reward says it); validation scores it 0 whatever the policy."""
    if policy == "resample":
        what = (
            f"a training chain is rolled out again (algorithm.failed_chains=resample, up to "
            f"{max_resamples} times, then its group is dropped)"
        )
    elif policy == "drop":
        what = "a training chain's group is dropped from the batch (algorithm.failed_chains=drop)"
    else:
        what = "a training chain is trained on with reward 0 (algorithm.failed_chains=keep)"
    return f"{what}; a validation chain counts as reward 0"


def failure_reason(traj: Trajectory) -> str | None:
    """Why the infrastructure failed this chain (see the module docstring), or None: the chain's
    reward, whatever it is, is the model's."""
    if traj.finish_reason == "error":  # the agent loop records "<ExceptionClass>: <message>"
        name = (traj.error or "").split(":", 1)[0].strip()
        if name == "EnvironmentStartError":
            return "env_start"
        return "engine" if name in ENGINE_ERRORS else "chain_error"
    for call in traj.tool_calls:
        if not call.ok and call.error in INFRA_TOOL_ERRORS:
            return f"tool_{call.error}"
    if traj.reward_failed:
        return f"reward_{traj.reward_error or 'unknown'}"
    return None


def complete_groups(
    trajs: Sequence[Trajectory],
    policy: FailedChains = "resample",
    *,
    resampler: ResampleRecord | None = None,
    baselines: Sequence[Trajectory] | None = None,
    can_drop: bool = True,
    others_kept: bool = False,
) -> Completed:
    """Keep failed chains out of the batch: count the re-runs, drop the groups still failing, per
    ``policy``.

    Args:
        trajs: one rollout's training chains, each the last run of its chain (a re-run in the
            place of the runs it replaced); a group is the chains sharing a ``group_id``.
        policy: ``resample``, ``drop`` or ``keep`` (module docstring).
        resampler: what re-ran the failed chains as the rollout ran (``resample``): its
            ``replaced`` runs are counted beside the failures of ``trajs``.
        baselines: the greedy baseline chain of each group (ReMax); a failed one fails its
            group like a training chain does, and it is re-run or dropped with it.
        can_drop: False where a dropped group would hang the update (several ranks): a group
            that cannot be completed raises instead.
        others_kept: ``trajs`` are part of a batch whose other groups stay (the groups of a
            batch rolled out again), so dropping all of them still leaves a batch to train on.

    Returns:
        The kept chains and baselines, and the counts to log (:class:`Completed`). Nothing
        failed: the same chains, in the same order, and zero counts.

    Raises:
        FailedChainsError: every group was dropped, or one had to be and ``can_drop`` is False;
            the message counts the failures by reason and quotes the first ones.
        ValueError: an unknown ``policy``.
    """
    if policy not in POLICIES:
        raise ValueError(f"failed_chains must be one of {', '.join(POLICIES)}, got {policy!r}")
    chains = [*trajs, *(baselines or [])]  # the baselines' places follow the training chains'
    reasons: list[str | None] = [failure_reason(t) for t in chains]
    failed = [i for i, r in enumerate(reasons) if r is not None]
    replaced = sorted(
        resampler.replaced if resampler is not None else [],
        key=lambda run: (run[0].group_id, run[0].chain_index),
    )  # the order the runs ended in is the clock's: the message quotes them in chain order
    # every failed run counts: the ones re-run and the last ones
    counts = Counter([r for _, r in replaced] + [reasons[i] for i in failed])
    dropped = set() if policy == "keep" else {chains[i].group_id for i in failed}
    n = len(trajs)
    kept = [t for t in chains[:n] if t.group_id not in dropped]
    seen = [*replaced, *((chains[i], reasons[i]) for i in failed)]
    summary = _summary(counts, _first_errors(seen), len(replaced))
    settings = f"algorithm.failed_chains={policy}"
    if policy == "resample" and resampler is not None:
        settings += f", {resampler.settings()}"
        if resampler.past_budget:
            settings += f"; {resampler.past_budget} failed run(s) not re-run past the budget"
    if dropped and not can_drop:
        raise FailedChainsError(
            f"{len(dropped)} group(s) still had a chain failed by the infrastructure "
            f"({settings}), and a group cannot be dropped with several ranks (their batches "
            f"would differ in size and the update's collectives would wait forever); {summary}"
        )
    if n and not kept and not others_kept:
        code = set(counts) <= USER_CODE_FAILURES  # the reward's (or a tool's) own code, every time
        by = ("your code: the reward function (or a tool) failed on every group, not the model "
              "nor the machine" if code else "the infrastructure")
        raise FailedChainsError(
            f"every group of this rollout had a chain failed by {by} ({settings}): nothing is "
            f"left to train on; {summary}"
        )
    every_run = [*chains, *(run for run, _ in replaced)]
    metrics = {
        **{f"rollout/{k}": float(v) for k, v in failure_counts(every_run).items()},
        "rollout/failed_chains": float(counts.total()),
        **{f"rollout/failed_chains/{r}": float(c) for r, c in sorted(counts.items())},
        "rollout/resampled_chains": float(len(replaced)),
        "rollout/dropped_groups": float(len(dropped)),
        "rollout/dropped_chains": float(n - len(kept)),
    }
    kept_baselines = [t for t in chains[n:] if t.group_id not in dropped]
    return Completed(kept, kept_baselines, metrics)


def _first_errors(failed: list[tuple[Trajectory, str | None]], limit: int = 3) -> list[str]:
    """Up to ``limit`` different failures, each with the first chain it happened to: the chain's
    error, else the failing tool call's observation."""
    seen: dict[str, str] = {}
    for traj, reason in failed:
        if reason and reason.startswith("tool_"):
            call = next(c for c in traj.tool_calls if not c.ok and c.error in INFRA_TOOL_ERRORS)
            text = call.observation[:200]
        else:
            text = (traj.error or reason or "")[:200]
        seen.setdefault(text, f"group {traj.group_id} chain {traj.chain_index}: {text}")
        if len(seen) == limit:
            break
    return list(seen.values())


def _summary(counts: Counter, errors: list[str], resampled: int) -> str:
    by_reason = ", ".join(f"{r} ×{c}" for r, c in sorted(counts.items()))
    return (
        f"{counts.total()} failed chain run(s) ({by_reason}), {resampled} re-run(s); "
        f"first of each: " + " | ".join(errors)
    )
