"""The ``@tool`` decorator, the ``Tool`` record, the tool registry and ``ToolResult``.

A tool is a plain Python function (sync or async) whose type hints and Google-style docstring
become the JSON schema shown to the model::

    @tool(name="weather")
    def weather(city: str, unit: Literal["C", "F"] = "C") -> str:
        '''Current temperature in a city.

        Args:
            city: the city's name.
            unit: the temperature unit.
        '''

A *stateful* tool also takes a parameter named ``resource``: the per-chain object made by its
``resource_factory`` (a Python session, a browser...), acquired from a ``ResourcePool`` and
released when the chain ends. That parameter is not part of the schema.

A tool returns a ``str`` (the observation), any JSON-serialisable value (dumped as JSON), or a
``ToolResult`` when it needs to say more (end the chain, report an error kind, an environment's
reward for the step).

An *environment* tool (``@tool(environment="webshop", ...)``, see
:mod:`agentfly.rollout.tools.environment`) is a stateful tool whose resource is one of
:mod:`agentfly.envs`; the tools naming the same environment share one per chain.

A tool with *settings* (a corpus path, a size limit) declares them with ``@tool(settings=Cls)``
and takes a parameter named ``settings`` (left out of the schema, like ``resource``)::

    @dataclass(frozen=True)
    class WeatherSettings:
        unit: Literal["C", "F"] = "C"

    @tool(settings=WeatherSettings)
    def weather(city: str, settings: WeatherSettings) -> str: ...

``agent.init_config.tool_config.weather.unit=F`` then reaches ``WeatherSettings(unit="F")`` for
that run (see :mod:`agentfly.rollout.tools.settings`); ``tool.configure(unit="F")`` does the
same from Python. A stateful tool's ``resource_factory`` receives the settings too when it takes
a ``settings`` parameter.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from agentfly.core.registry import Registry
from agentfly.rollout.tools.schema import function_schema
from agentfly.rollout.tools.settings import configure_tool, declared_settings

# Error kinds a ToolResult may carry.
UNKNOWN_TOOL = "unknown_tool"
INVALID_ARGUMENTS = "invalid_arguments"
CUT_OFF = "cut_off"  # the turn reached max_tokens inside the call: it could not be read
TIMEOUT = "timeout"
QUEUE_TIMEOUT = "queue_timeout"
EXCEPTION = "exception"
MALFORMED_OUTPUT = "malformed_output"
WORKER_DIED = "worker_died"
OUTPUT_TOO_LARGE = "output_too_large"
UNAVAILABLE = "unavailable"
#: tool error kinds that fail the chain (the harness's verdicts on the tool, not on the call)
INFRA_TOOL_ERRORS = frozenset(
    {TIMEOUT, QUEUE_TIMEOUT, WORKER_DIED, MALFORMED_OUTPUT, UNAVAILABLE}
    | {f"env_{kind}" for kind in ("timeout", "crashed", "raised", "closed", "unavailable", "error")}
)

RUNS_IN = ("process", "thread")
"""Where a sync stateless tool runs: a worker process (default) or a daemon thread."""


class ToolUnavailableError(RuntimeError):
    """Raised by a tool when the service it depends on failed (unreachable, an HTTP 5xx, a
    reply in no known shape): the infrastructure's fault, not the call's. The chain it happens
    to is failed (``tool_unavailable`` in :mod:`agentfly.rollout.failures`) instead of scored
    on it; a tool that refuses the model's input raises anything else."""


@dataclass
class ToolResult:
    """What a tool call gives back to the agent loop.

    Attributes:
        observation: the text shown to the model (an error message when ``ok`` is false).
        ok: whether the call succeeded.
        error: a short error kind when it did not: ``"unknown_tool"``, ``"invalid_arguments"``,
            ``"timeout"`` (it ran past its timeout), ``"queue_timeout"`` (it waited past the
            worker pool's queue bound and never ran: the pool is too small), ``"exception"``,
            ``"malformed_output"``, ``"worker_died"`` (the
            worker process running the call died), ``"output_too_large"`` (the result,
            pickled, passed the worker pool's reply cap) or ``"unavailable"`` (the service
            behind the tool failed: :class:`ToolUnavailableError`).
        ends_chain: the chain stops after this call (the ``answer`` tool, an environment's
            episode that ended).
        final_answer: the chain's final response when ``ends_chain``.
        finish_reason: the chain's finish reason when ``ends_chain`` (None: ``answer``).
        reward: the reward this call earned its turn: an environment's reward for the step it
            took, or any tool's own (None: none). It goes to ``Trajectory.turn_rewards`` and
            enters the token rewards with ``algorithm.use_turn_rewards``.
        images: images the call shows the model beside ``observation``, as PNG bytes (a GUI
            environment's screenshot after the step, ``capture_screenshot``); empty for text.
        shown_as_json: the type of a value the tool returned instead of text, which
            ``observation`` shows as JSON (None: the tool returned text); said once per tool.
    """

    observation: str
    ok: bool = True
    error: str | None = None
    ends_chain: bool = False
    final_answer: str | None = None
    finish_reason: str | None = None
    reward: float | None = None
    images: list[bytes] = field(default_factory=list)
    shown_as_json: str | None = None

    @classmethod
    def failure(cls, error: str, observation: str) -> ToolResult:
        return cls(observation=observation, ok=False, error=error)


@dataclass(frozen=True)
class Tool:
    """A registered tool: its function, schema and running limits.

    Attributes:
        name: the name the model calls it by.
        fn: the Python function.
        schema: the OpenAI function-calling schema.
        stateful: whether ``fn`` takes a per-chain ``resource``.
        resource_factory: makes a fresh resource (zero arguments); stateful tools only.
        timeout: seconds a call may run before it is abandoned with a timeout observation,
            counted from when it starts (in a worker process: when a worker takes it).
        max_output_chars: observations are cut to this length, with a marker.
        max_resources: at most this many resources of this tool live at once (``None``: the
            pool's default).
        aliases: other names the model may use.
        settings_type: the class (or function) whose keyword parameters are the tool's own
            settings; None when it has none.
        settings: the bound settings (``settings_type(**values)``), passed to ``fn`` and to a
            ``resource_factory`` that take ``settings``; the defaults' instance until
            :meth:`configure` binds others (None when some setting has no default).
        runs_in: where a sync stateless call runs: ``"process"``, a worker process of the
            :class:`~agentfly.rollout.execution.workers.WorkerPool` (killed at the timeout, its memory
            limited); ``"thread"``, a daemon thread of the trainer (code declared safe: it can
            be abandoned at the timeout, not stopped). Stateful tools run in threads (their
            resource lives in the trainer) and async tools on the event loop.
        io_bound: a call mostly waits (on a network service, a subprocess) instead of
            computing; when such a tool runs in the worker processes and
            ``agent.run_config.workers.num_workers`` is unset, the pool gets a worker per
            chain in flight instead of one per CPU core
            (:func:`~agentfly.rollout.execution.workers.default_num_workers`).
        environment: the :mod:`agentfly.envs` environment the tool acts on (stateful tools):
            the tools naming the same environment share one resource per chain, started with
            the chain (:mod:`agentfly.rollout.tools.environment`); None for other tools.
        folds_context: a successful call folds the chain's history: the turns so far are
            dropped and its observation joins the first prompt's user message, the next turn
            starting a new training segment (AgentFly's ``summarize``;
            :mod:`agentfly.rollout.folding`).
        prepare: loads what every call shares (an index, a corpus, an encoder) where the run
            starts, outside any call's deadline: called with the bound ``settings`` once per
            run by :func:`agentfly.rollout.runner.build_rollout` (None: nothing to load). A
            thread tool's calls then find it loaded; a tool in worker processes loads its own.
    """

    name: str
    fn: Callable[..., Any]
    schema: dict[str, Any]
    stateful: bool = False
    resource_factory: Callable[[], Any] | None = None
    timeout: float = 30.0
    max_output_chars: int = 10_000
    max_resources: int | None = None
    aliases: tuple[str, ...] = field(default=())
    settings_type: Callable[..., Any] | None = None
    settings: Any = None
    runs_in: str = "process"
    io_bound: bool = False
    environment: str | None = None
    folds_context: bool = False
    prepare: Callable[[Any], Any] | None = None

    @property
    def resource_key(self) -> str:
        """What the chain's resource of this tool is kept under: its environment, shared by
        the tools acting on it, else the tool's own name."""
        return self.environment or self.name

    @property
    def description(self) -> str:
        return self.schema["function"]["description"]

    @property
    def parameters(self) -> dict[str, Any]:
        return self.schema["function"]["parameters"]

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    @property
    def runs_in_process(self) -> bool:
        """Whether calls go to the worker processes (sync, stateless, not ``runs_in="thread"``)."""
        return self.runs_in == "process" and not self.stateful and not self.is_async

    @property
    def takes_settings(self) -> bool:
        return "settings" in inspect.signature(self.fn).parameters

    def configure(self, **settings: Any) -> Tool:
        """A copy of this tool with ``settings`` bound (its own, and ``timeout``,
        ``max_output_chars``, ``max_resources``); see :func:`~agentfly.rollout.tools.settings.configure_tool`."""
        return configure_tool(self, settings)

    def new_resource(self) -> Any:
        """A fresh per-chain resource from ``resource_factory`` (given the settings if it takes them)."""
        if self.resource_factory is None:
            raise ValueError(f"tool {self.name!r} is not stateful: it has no resource factory")
        if _takes(self.resource_factory, "settings"):
            return self.resource_factory(settings=self.settings)
        return self.resource_factory()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (no validation, timeout or truncation)."""
        if self.takes_settings and "settings" not in kwargs:
            kwargs["settings"] = self.settings
        return self.fn(*args, **kwargs)


def _takes(fn: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False


def _default_settings(settings_type: Callable[..., Any] | None) -> Any:
    """``settings_type()`` when every setting has a default, else None."""
    if settings_type is None:
        return None
    if any(s.required for s in declared_settings(settings_type)[0].values()):
        return None
    return settings_type()


def _as_tool(obj: Any, spec: str) -> Tool:
    """A ``module:attr`` tool: a ``Tool``, or a plain function registered under its own name."""
    if isinstance(obj, Tool):
        return obj
    if inspect.isfunction(obj) or inspect.iscoroutinefunction(obj):
        known = next((t for t in map(TOOLS.get, TOOLS) if t.fn is obj), None)
        return known if known is not None else tool(obj)  # once, whatever the spec's spelling
    raise TypeError(f"expected a function or an @tool, got {type(obj).__name__}")


TOOLS: Registry[Tool] = Registry("tool", coerce=_as_tool)


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    stateful: bool = False,
    resource_factory: Callable[[], Any] | None = None,
    timeout: float = 30.0,
    max_output_chars: int = 10_000,
    max_resources: int | None = None,
    aliases: Iterable[str] = (),
    settings: Callable[..., Any] | None = None,
    runs_in: str = "process",
    io_bound: bool = False,
    environment: str | None = None,
    folds_context: bool = False,
    prepare: Callable[[Any], Any] | None = None,
) -> Any:
    """Register a function as a tool; usable as ``@tool`` or ``@tool(name=...)``.

    Args:
        fn: the function, when used without parentheses.
        name: the tool's name (default: the function's name).
        description: overrides the docstring's description.
        stateful: the function takes a per-chain ``resource`` parameter.
        resource_factory: makes a fresh resource; required when ``stateful``.
        timeout: seconds a call may run before it is abandoned (not counting its wait for
            a worker process).
        max_output_chars: observations longer than this are truncated.
        max_resources: cap on live resources of this tool (stateful tools).
        aliases: other names for the tool.
        settings: a class (a dataclass, or any callable) whose keyword parameters are the
            tool's own settings; the function takes its instance as ``settings``.
        runs_in: ``"process"`` (default) or ``"thread"`` for a sync stateless tool whose code
            is trusted to share the trainer's process (see :class:`Tool`).
        io_bound: calls mostly wait rather than compute (see :class:`Tool`): the default
            worker pool is then sized to the chains in flight, not to the CPU count.
        environment: the environment a stateful tool acts on, shared with the other tools
            naming it (see :class:`Tool`).
        folds_context: a successful call folds the chain's history (see :class:`Tool`).
        prepare: loads what the calls share where the run starts (see :class:`Tool`).

    Returns:
        The registered ``Tool`` (still callable like the function).
    """

    if runs_in not in RUNS_IN:
        raise ValueError(f"runs_in must be one of {', '.join(RUNS_IN)}, got {runs_in!r}")

    def decorate(f: Callable[..., Any]) -> Tool:
        tool_name = name or f.__name__
        takes_settings = _takes(f, "settings") or (
            resource_factory is not None and _takes(resource_factory, "settings")
        )
        if settings is None and _takes(f, "settings"):
            raise TypeError(f"tool {tool_name!r} takes 'settings' but declares none (settings=...)")
        if settings is not None and not takes_settings:
            raise TypeError(
                f"tool {tool_name!r} declares settings but neither it nor its resource_factory "
                "takes a 'settings' parameter"
            )
        takes_resource = "resource" in inspect.signature(f).parameters
        if stateful and (resource_factory is None or not takes_resource):
            raise TypeError(
                f"stateful tool {tool_name!r} needs a resource_factory and a 'resource' parameter"
            )
        if not stateful and takes_resource:
            raise TypeError(f"tool {tool_name!r} takes 'resource' but is not stateful=True")
        if environment is not None and not stateful:
            raise TypeError(f"tool {tool_name!r} acts on an environment but is not stateful=True")
        registered = Tool(
            name=tool_name,
            fn=f,
            schema=function_schema(f, tool_name, description),
            stateful=stateful,
            resource_factory=resource_factory,
            timeout=timeout,
            max_output_chars=max_output_chars,
            max_resources=max_resources,
            aliases=tuple(aliases),
            settings_type=settings,
            settings=_default_settings(settings),
            runs_in=runs_in,
            io_bound=bool(io_bound),
            environment=environment,
            folds_context=bool(folds_context),
            prepare=prepare,
        )
        TOOLS.register(tool_name, registered, aliases=registered.aliases)
        return registered

    return decorate(fn) if fn is not None else decorate


def get_tool(name: str) -> Tool:
    """The tool registered under ``name`` or one of its aliases (``UnknownNameError`` if none)."""
    return TOOLS.get(name)


def tool_schemas(names: Iterable[str]) -> list[dict[str, Any]]:
    """The schemas of the named tools, in order, for the chat template's tool list."""
    return [get_tool(n).schema for n in names]
