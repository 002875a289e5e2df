"""A breaker per tool: a tool whose calls keep failing stops the run, naming it and the counts.

A tool that hangs, dies or is unreachable on every call would otherwise fail every chain, one
timeout at a time, for as long as the run lasts, and re-sampling would roll them all out again.
So each tool's calls are counted as the harness judges them (:func:`record`): *failed* for the
infrastructure (the kinds of :data:`agentfly.rollout.tools.base.INFRA_TOOL_ERRORS`: ``timeout``,
``queue_timeout``, ``worker_died``, ``malformed_output``, ``unavailable``, an environment's
failure) or *answered* (a result, or an exception the tool raised: a tool refuses the model's
input by raising, so a raise says nothing about the tool). A call that never reached the tool
(arguments that do not fit its schema) is not counted. Two rules trip a tool's breaker
(:class:`Breaker`, pure counting):

- **first calls**: its first ``first_calls`` calls all failed, and all the same way (the same
  kind): the tool cannot work here (a service that does not answer, a missing binary);
- **failure rate**: of its last ``window`` calls, a share of at least ``failure_rate`` failed
  (a service that went down mid-run).

Both count calls in the order they started, once they have ended (see :class:`Breaker`).

A tripped breaker raises :class:`ToolBroken` out of the rollout (and every later call of the
tool raises it at once): the run stops with a message naming the tool, the counts by kind and
the first failure's observation. :class:`ToolBreakers` also says failures as they happen: a
warning at each tool's first failure of each kind, then a count at most every
:data:`LOG_EVERY_S` seconds while they go on; :func:`failed_calls` is the process's running
total, shown on the progress bar.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass, field

from agentfly.rollout.tools.base import INFRA_TOOL_ERRORS

logger = logging.getLogger(__name__)

LOG_EVERY_S = 10.0  # a tool's running count of failures is logged at most this often

_total_lock = threading.Lock()
_total_failed = 0


def failed_calls() -> int:
    """Tool calls failed for the infrastructure in this process so far (every run's)."""
    return _total_failed


class ToolBroken(RuntimeError):
    """A tool's breaker tripped: its calls keep failing (see the module docstring)."""


@dataclass
class Breaker:
    """One tool's counts and its two rules (see the module docstring); no clock, no logging.

    Calls are taken in the order they started (:meth:`start` numbers them), never in the order
    they ended: a hung call ends at its timeout, after the quick answers of calls that started
    beside it, and a quick failure before a slow answer, so the last calls to end are not a fair
    sample. A rule looks only at calls that have all ended: the first ``first_calls`` started,
    or the last ``window`` started before the oldest call still running.

    Args:
        first_calls: the first-calls rule's N (0: off).
        window: the failure-rate rule's window, in calls (0: off).
        failure_rate: the failure-rate rule's share, in [0, 1].
    """

    first_calls: int
    window: int
    failure_rate: float
    started: int = 0
    calls: int = 0  # ended with a verdict
    tripped: str | None = None  # why, once it has
    failed: collections.Counter[str] = field(default_factory=collections.Counter)
    _first: collections.Counter[str] = field(default_factory=collections.Counter)
    _pending: set[int] = field(default_factory=set)
    #: call -> whether it failed: the window's calls, and those ended after it
    _ended: dict[int, bool] = field(default_factory=dict)

    def start(self) -> int:
        """Number a call that starts."""
        self._pending.add(self.started)
        self.started += 1
        return self.started - 1

    def end(self, call: int, kind: str | None) -> str | None:
        """Count call ``call``'s verdict (``kind``: its failure's kind, None when it answered);
        why the breaker trips with it (None: it does not, or it had tripped before)."""
        self._pending.discard(call)
        self.calls += 1
        if kind is not None:
            self.failed[kind] += 1
        if call < self.first_calls:
            self._first["" if kind is None else kind] += 1
        if self.window:
            self._ended[call] = kind is not None
        if self.tripped is not None:
            return None
        self.tripped = self._why()
        return self.tripped

    def drop(self, call: int) -> None:
        """Call ``call`` ended with no verdict (cancelled): it counts for neither rule."""
        self._pending.discard(call)

    def _why(self) -> str | None:
        if self.first_calls and self._first.total() == self.first_calls and len(self._first) == 1:
            (kind,) = self._first
            if kind:
                return f"its first {self.first_calls} calls all failed the same way ({kind})"
        if not self.window:
            return None
        running = min(self._pending, default=self.started)
        settled = sorted(c for c in self._ended if c < running)[-self.window :]
        for old in [c for c in self._ended if c < running and c not in settled]:
            del self._ended[old]
        failed = sum(self._ended[c] for c in settled)
        if len(settled) == self.window and failed >= self.failure_rate * self.window:
            return (
                f"{failed} of its last {self.window} calls failed, at least the failure rate "
                f"{self.failure_rate:g}"
            )
        return None


class ToolBreakers:
    """The breakers of one run's tools, by tool name, and the warnings as failures happen.

    Args:
        first_calls: see :class:`Breaker` (``agent.run_config.tool_breaker.first_calls``).
        window: see :class:`Breaker` (``...tool_breaker.window``).
        failure_rate: see :class:`Breaker` (``...tool_breaker.failure_rate``).
    """

    def __init__(self, first_calls: int, window: int, failure_rate: float) -> None:
        if first_calls < 0 or window < 0 or not 0.0 <= failure_rate <= 1.0:
            raise ValueError(
                f"tool_breaker: first_calls and window must be >= 0 and failure_rate in [0, 1], "
                f"got {first_calls}, {window}, {failure_rate}"
            )
        self.settings = (int(first_calls), int(window), float(failure_rate))
        self._breakers: dict[str, Breaker] = {}
        self._broken: dict[str, ToolBroken] = {}
        self._first_failure: dict[str, str] = {}
        self._logged: dict[str, float] = {}
        self._lock = threading.Lock()

    def check(self, tool: str) -> None:
        """Raise the tool's :class:`ToolBroken` when its breaker has tripped."""
        if tool in self._broken:
            raise self._broken[tool]

    def start(self, tool: str) -> int:
        """A call of ``tool`` starts: its number (:meth:`Breaker.start`); raises the tool's
        :class:`ToolBroken` when its breaker has tripped."""
        self.check(tool)
        with self._lock:
            return self._breaker(tool).start()

    def cancel(self, tool: str, call: int) -> None:
        """Call ``call`` of ``tool`` ended without a verdict (cancelled, or the run stopping)."""
        with self._lock:
            self._breaker(tool).drop(call)

    def record(self, tool: str, call: int, kind: str | None, observation: str = "") -> None:
        """Count call ``call`` of ``tool`` (``kind``: its error kind, None when it answered);
        warn about a failure, and raise :class:`ToolBroken` when the breaker trips."""
        failed = kind in INFRA_TOOL_ERRORS
        with self._lock:
            breaker = self._breaker(tool)
            first_of_kind = failed and breaker.failed[kind] == 0
            why = breaker.end(call, kind if failed else None)
            if failed:
                self._first_failure.setdefault(tool, observation[:300])
            if why is not None and tool not in self._broken:
                self._broken[tool] = ToolBroken(self._message(tool, breaker, why))
        if failed:
            self._say(tool, breaker, kind, observation, first_of_kind)
        self.check(tool)

    def _breaker(self, tool: str) -> Breaker:
        if tool not in self._breakers:
            self._breakers[tool] = Breaker(*self.settings)
        return self._breakers[tool]

    def _say(self, tool: str, b: Breaker, kind: str, observation: str, first: bool) -> None:
        global _total_failed
        with _total_lock:
            _total_failed += 1
        now = time.monotonic()
        if first:
            logger.warning(
                "tool %r failed (%s) on call %d: %s", tool, kind, b.calls, observation[:300]
            )
            self._logged[tool] = now
        elif now - self._logged.get(tool, now) >= LOG_EVERY_S:
            logger.warning("tool %r: %s", tool, _counts(b))
            self._logged[tool] = now

    def _message(self, tool: str, b: Breaker, why: str) -> str:
        first_calls, window, rate = self.settings
        longer = (
            f" A call that needs longer than its deadline gets one with "
            f"agent.init_config.tool_config.{tool}.timeout=SECONDS."
            if b.failed.get("timeout") else ""
        )
        return (
            f"tool {tool!r} keeps failing: {why}; {_counts(b)}. The first failure said: "
            f"{self._first_failure.get(tool, '')!r}.{longer} The run stops here rather than fail "
            f"every chain that calls it (agent.run_config.tool_breaker: first_calls={first_calls}, "
            f"window={window}, failure_rate={rate:g}; 0 turns a rule off)"
        )


def _counts(b: Breaker) -> str:
    kinds = ", ".join(f"{k} ×{n}" for k, n in sorted(b.failed.items()))
    return f"{b.failed.total()} of {b.calls} calls failed ({kinds or 'none'})"
