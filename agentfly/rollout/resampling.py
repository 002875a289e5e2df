"""Failed chains re-sampled as they fail, within a time budget (``algorithm.failed_chains=resample``).

The agent loop asks :meth:`Resampler.rerun` as each chain run ends. A run the infrastructure
failed (:func:`~agentfly.rollout.failures.failure_reason`) then runs again at once, in its
chain's place (same data row, group id and chain index; the next attempt's seed,
:func:`~agentfly.rollout.agent_loop.chain_seed`), beside the chains still running, instead of
after the whole round. With a tool that hangs on some calls, a hung chain's re-run starts when
its call times out, while the other hung calls still wait: the re-runs overlap the first round
(every chain's first run) rather than adding a round after it.

The budget, ``algorithm.resample_budget_s``: once the first round has ended, a re-run starts only
if it would end within the budget of that moment, counting it to take as long as the run it
replaces took (a hung chain's re-run: one more timeout). Unset (``null``, the default), the budget
is the deadline of the tool calls that timed out in the rollout so far (the longest, each tool's
``timeout``), or 30 s (``@tool``'s default deadline) while none has: a rollout whose calls to a
tool hang then ends about one of its deadlines after its first round (its healthy time and
about two deadlines), and chains whose failures are quick (a tool's process ending, a reward
raising) get several re-runs. A chain whose first run failed is
re-run whatever the time: its failure belongs to the first round, which the rollout waits for
anyway. A chain refused a re-run keeps its failed run, like a chain past ``max_resamples``:
counted, its group dropped (:func:`~agentfly.rollout.failures.complete_groups`). So a rollout
whose failures take alike long (hung calls) ends about the budget after its first round, its
first round being its healthy time and one timeout; a re-run that takes longer than the run it
replaces (a fast failure re-run into a hang) can end later, by at most its own run, each of
whose waits has a deadline (the tools', the reward's, the engine's). Nothing waits for a round.

A failure no re-run can change is not re-run: a reward's ``missing_field`` or ``bad_signature``
(the row or the function is wrong, whatever the model writes), and a run that fails exactly as
the chain's previous run did (a reward raising the same exception, with the same message, on a
new response: the reward's code, not bad luck; timeouts and dead workers are always re-run). Such runs are counted in
:attr:`Resampler.repeated`; their chains stay failed and their groups are dropped.

Determinism: attempt ``a`` of a chain samples with the same seed whenever it runs, so a rollout
whose runs fail alike keeps the same chains whatever the order the runs end in, as long as the
budget refuses no re-run; a rollout in which nothing fails is the rollout without re-sampling.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agentfly.core.trajectory import Trajectory
from agentfly.rollout.failures import failure_reason
from agentfly.rollout.tools.base import TIMEOUT

#: the unset budget while no tool call has timed out: ``@tool``'s default deadline
NO_TIMEOUT_BUDGET_S = 30.0
#: failures a re-run cannot change (the data row or the reward function is wrong)
NEVER_RERUN = frozenset({"reward_missing_field", "reward_bad_signature"})
#: failures of the reward's own code: a second one with the same error text is not re-run
#: (a timeout, a dead worker or a hung tool is the machine's and may pass: always re-run)
REPEATS_CHECKED = frozenset({"reward_exception", "reward_malformed"})

class Resampler:
    """Decides, as each chain run ends, whether its chain runs again at once; records the failed
    runs it had re-run. One per rollout: the agent loop calls :meth:`start` when it starts a
    batch of chains (one batch at a time), then :meth:`rerun` as each of their runs ends.

    Args:
        max_resamples: re-runs of a chain at most.
        budget_s: seconds past the first round within which a re-run must be expected to end
            (module docstring); 0: no re-run starts once the first round has ended; None: the
            longest deadline of the tool calls that timed out so far, else 30 s.
        clock: the time in seconds (:func:`time.monotonic`; tests give their own).

    Attributes:
        replaced: each failed run that was re-run, with its failure reason, in the order the
            runs ended.
        past_budget: failed runs not re-run because of the budget (their chains stay failed).
        repeated: failed runs not re-run because no re-run can change them: a kind in
            :data:`NEVER_RERUN`, or the chain's previous run failed identically.
    """

    def __init__(
        self,
        max_resamples: int = 3,
        budget_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_resamples < 0:
            raise ValueError(f"max_resamples must be >= 0, got {max_resamples}")
        if budget_s is not None and not budget_s >= 0:  # NaN too
            raise ValueError(f"resample_budget_s must be >= 0, got {budget_s}")
        self.max_resamples = max_resamples
        self.budget_s = budget_s
        self.clock = clock
        self.replaced: list[tuple[Trajectory, str]] = []
        self.past_budget = 0
        self.repeated = 0
        self._last_failure: dict[tuple[int, int], tuple[str, str | None]] = {}  # by (group, chain)
        self._deadlines: dict[str, float] = {}  # each tool's timeout, by name
        self._timed_out: float | None = None  # the longest deadline of a call that timed out
        self._first_runs = 0  # first runs of the batch still running
        self._started = 0.0  # when the batch started
        self._round_end: float | None = None  # when the batch's last first run ended

    def start(self, chains: int, deadlines: dict[str, float] | None = None) -> None:
        """A batch of ``chains`` chains starts its first runs; ``deadlines``: the timeout of each
        tool they may call, by name (what an unset budget is made of)."""
        self._deadlines = dict(deadlines or {})
        self._first_runs = chains
        self._started = self.clock()
        self._round_end = self._started if chains == 0 else None

    @property
    def first_round_s(self) -> float | None:
        """Seconds the last batch's first round took (None while it runs)."""
        return None if self._round_end is None else self._round_end - self._started

    def first_run_ended(self) -> None:
        """A chain's first run ended (:meth:`rerun` says so itself; a chain that ends without
        running, such as a row whose images cannot be used, says it here): the last one ends
        the first round, after which the budget applies."""
        self._first_runs -= 1
        if self._first_runs == 0:
            self._round_end = self.clock()

    def rerun(self, traj: Trajectory, attempt: int, seconds: float) -> bool:
        """Whether the chain whose run ``traj`` just ended runs again now.

        Args:
            traj: the run that ended.
            attempt: its attempt: 0 for the chain's first run, 1 for its first re-run...
            seconds: how long the run took.
        """
        now = self.clock()
        if attempt == 0:
            self.first_run_ended()
        reason = failure_reason(traj)
        if reason is None:
            return False
        self._note_timeouts(traj)
        chain, failure = (traj.group_id, traj.chain_index), (reason, traj.error)
        previous = self._last_failure.get(chain) if attempt > 0 else None
        self._last_failure[chain] = failure
        if reason in NEVER_RERUN or (reason in REPEATS_CHECKED and previous == failure):
            self.repeated += 1
            return False
        if attempt >= self.max_resamples:
            return False
        past_round = attempt > 0 and self._round_end is not None
        if past_round and now - self._round_end + seconds > self.budget():
            self.past_budget += 1
            return False
        self.replaced.append((traj, reason))
        return True

    def _note_timeouts(self, traj: Trajectory) -> None:
        for call in traj.tool_calls:
            if call.error == TIMEOUT and call.name in self._deadlines:
                deadline = self._deadlines[call.name]
                self._timed_out = max(self._timed_out or 0.0, deadline)

    def budget(self) -> float:
        """The budget now: the configured one, or, unset, the longest deadline of the tool calls
        that timed out so far (30 s while none has)."""
        if self.budget_s is not None:
            return self.budget_s
        return NO_TIMEOUT_BUDGET_S if self._timed_out is None else self._timed_out

    def settings(self) -> str:
        """The keys that bound the re-runs, with their values, for a message."""
        budget = f"null ({self.budget():g} s)" if self.budget_s is None else f"{self.budget_s:g}"
        said = f"max_resamples={self.max_resamples}, resample_budget_s={budget}"
        if self.repeated:
            said += f"; {self.repeated} failed run(s) not re-run: they would fail the same way"
        return said
