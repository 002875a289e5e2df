"""The generation-engine interface, its records, and the engine registry.

Every engine (the transformers one here, vLLM elsewhere) takes token ids and returns token ids
with the log-probability of each sampled token; the agent loop never hands an engine text.

Log-probabilities: ``log_softmax(logits / temperature)`` at the sampled token (raw logits when
``temperature == 0``), computed *before* top-k / top-p truncation, in fp32. This is what the
trainer recomputes from the same ids (vLLM's ``logprobs_mode="processed_logprobs"`` minus the
truncation), so the rollout log-probs and the trainer's old log-probs agree up to numerics.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeAlias

from agentfly.core.registry import Registry

if TYPE_CHECKING:
    import torch

    Weights: TypeAlias = (
        Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]] | str | PathLike[str]
    )

FinishReason = Literal["stop", "length"]


@dataclass
class SamplingParams:
    """How to sample one request (vLLM's names and meanings).

    Args:
        n: samples per prompt.
        temperature: softmax temperature; 0 means greedy.
        top_p: nucleus mass kept (1.0 keeps all).
        top_k: most likely tokens kept (-1 or 0 keeps all).
        max_tokens: new tokens per sample at most (also bounded by the engine's max_model_len).
        stop: strings that end a sample; the tokens up to and including the one completing the
            string are kept.
        stop_token_ids: token ids that end a sample (kept in the output), in addition to EOS.
        ignore_eos: do not stop at the tokenizer's / model's EOS ids.
        seed: seeds this request's sampling (its own generator, shared by its n samples, so the
            samples do not depend on the rest of the batch); None draws from the engine's own
            seeded generator.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 256
    stop: list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        self.stop = [self.stop] if isinstance(self.stop, str) else self.stop

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class GenerationOutput:
    """One sample, as token ids: whoever needs its text (the agent loop) decodes them.

    Shapes (G = generated length):
        token_ids: (G,) the sampled ids, a stop token or stop-completing token included.
        logprobs: (G,) log-probability of each sampled id (see the module docstring).

    ``weights_version`` names the policy that sampled it: the version the engine's host was
    given with its latest weights (0: the weights it loaded at start).
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    extras: dict[str, Any] = field(default_factory=dict)
    weights_version: int = 0


class Engine(ABC):
    """Generates continuations of token-id prompts.

    Attributes:
        max_model_len: longest prompt + generation the engine accepts, in tokens.
    """

    max_model_len: int
    #: :meth:`load_weights` takes a :class:`~agentfly.core.weights.LoraAdapter` (a LoRA actor's
    #: engines then receive its adapter; others receive its merged weights)
    serves_adapters: ClassVar[bool] = False
    #: :meth:`generate` reads a prompt's images (:class:`~agentfly.core.images.ImagePrompt`), so a
    #: vision-language actor may roll out with it; an engine handed token ids only does not
    takes_images: ClassVar[bool] = False

    @property
    @abstractmethod
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer of the served model."""

    @abstractmethod
    def generate(
        self,
        prompts: list[list[int]],
        sampling: SamplingParams | Sequence[SamplingParams],
    ) -> list[list[GenerationOutput]]:
        """Sample ``n`` continuations of every prompt.

        Args:
            prompts: token ids per prompt.
            sampling: one ``SamplingParams`` for all prompts, or one per prompt (as vLLM takes
                them), which lets a pool batch requests with different parameters.

        Returns:
            One list per prompt, in order, of that prompt's ``n`` outputs.

        Raises:
            ValueError: a prompt leaves no room to generate within ``max_model_len``.
        """

    @abstractmethod
    def load_weights(self, weights: Weights) -> None:
        """Replace the weights: a state dict, ``(name, tensor)`` pairs, a ``.safetensors`` file
        or a Hugging Face checkpoint directory. Names are the served model's parameter names.
        An engine that :attr:`serves_adapters` also takes a
        :class:`~agentfly.core.weights.LoraAdapter`, served on its base weights."""

    def sleep(self) -> None:  # noqa: B027  (a no-op unless the engine has memory to free)
        """Free accelerator memory between rollouts (no-op where meaningless)."""

    def wake_up(self) -> None:  # noqa: B027
        """Undo :meth:`sleep`."""

    def free_prefix_cache(self) -> int:
        """Drop the K/V kept for prompt prefixes in memory of the engine's own; returns the bytes
        freed. 0 here: an engine that keeps none, or keeps them in memory reserved either way
        (vLLM's prefix cache lives in its KV cache, sized by ``gpu_memory_utilization``)."""
        return 0

    def stats(self) -> dict[str, Any]:
        """The engine's own figures (the prefix cache's size...), added to the pool's stats."""
        return {}

    def close(self) -> None:  # noqa: B027
        """Release what the engine holds outside this process (shared memory, workers)."""


def _as_engine(obj: Any, spec: str) -> type[Engine]:
    """A ``module:attr`` engine: a subclass of :class:`Engine`."""
    if isinstance(obj, type) and issubclass(obj, Engine):
        return obj
    raise TypeError(f"expected a subclass of agentfly.rollout.engines.Engine, got {obj!r}")


ENGINES: Registry[type[Engine]] = Registry("generation engine", coerce=_as_engine)


def register_engine(name: str, *, aliases: tuple[str, ...] = ()):
    """Class decorator registering an :class:`Engine` under ``name``."""

    def decorator(cls: type[Engine]) -> type[Engine]:
        ENGINES.register(name, cls, aliases=aliases)
        return cls

    return decorator


def create_engine(name: str, **kwargs: Any) -> Engine:
    """Build the engine registered as ``name`` with its keyword arguments."""
    return ENGINES.get(name)(**kwargs)


def per_prompt(
    prompts: list[list[int]], sampling: SamplingParams | Sequence[SamplingParams]
) -> list[SamplingParams]:
    """One ``SamplingParams`` per prompt."""
    if isinstance(sampling, SamplingParams):
        return [sampling] * len(prompts)
    params = list(sampling)
    if len(params) != len(prompts):
        raise ValueError(f"{len(params)} sampling params for {len(prompts)} prompts")
    return params


def check_request(
    prompts: list[list[int]],
    sampling: SamplingParams | Sequence[SamplingParams],
    max_model_len: int,
) -> list[SamplingParams]:
    """Validate a generate request; returns one ``SamplingParams`` per prompt.

    Raises:
        ValueError: a prompt is empty or leaves no room to generate within ``max_model_len``.
    """
    params = per_prompt(prompts, sampling)
    for i, p in enumerate(prompts):
        if not p:
            raise ValueError(f"prompt {i} is empty")
        if len(p) >= max_model_len:
            raise ValueError(
                f"prompt {i} has {len(p)} tokens; max_model_len={max_model_len} "
                "leaves no room to generate"
            )
    return params
