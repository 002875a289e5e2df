"""The transformers engine: a hand-written sampling loop over ``model(...)`` with a KV cache.

The embedded default and the test engine. Prompts are left-padded into one batch (``n`` rows
per prompt; each prompt may bring its own sampling parameters); position ids come from the
attention mask (cumulative sum − 1) so padding does not shift positions. Identical prompts (a
request's ``n`` rows, GRPO's chains of one task) are prefilled once and their KV cache gathered
to every row; a row that finishes leaves the batch (and the cache) at once, so the steps after it
compute only the rows still generating. A hand-written loop rather than
``model.generate`` gives the exact log-probabilities defined in
:mod:`agentfly.rollout.engines.base` and stop strings that keep the completing token.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentfly.core.weights import LoraAdapter
from agentfly.models.attention import use_grouped_sdpa
from agentfly.rollout.engines.base import (
    Engine,
    GenerationOutput,
    SamplingParams,
    check_request,
    register_engine,
)
from agentfly.rollout.engines.sampling import draw_uniforms, sample_tokens
from agentfly.rollout.engines.weights import read_weights

if TYPE_CHECKING:
    import torch

    from agentfly.rollout.engines.base import Weights


@register_engine("transformers", aliases=("hf",))
class TransformersEngine(Engine):
    """Serve a Hugging Face causal LM with plain PyTorch (and a LoRA adapter on it once one is
    loaded: :meth:`load_weights` takes a :class:`~agentfly.core.weights.LoraAdapter`).

    Args:
        model: checkpoint directory (or hub name, if the hub is reachable).
        dtype: ``"float32"``, ``"bfloat16"``, ``"float16"`` or ``"auto"`` (the checkpoint's).
        max_model_len: longest prompt + generation; the config's ``max_position_embeddings``
            when None.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...; None picks CUDA when available.
        seed: seeds the engine's generator (used by requests without their own seed).
        max_num_seqs: rows (prompts × n) per forward batch; larger requests run in chunks.
        tokenizer: tokenizer directory when it differs from ``model``.
        attn_implementation: passed to ``from_pretrained`` (``"sdpa"``, ``"eager"``...); None
            = transformers' choice, with ``sdpa`` upgraded to
            :mod:`agentfly.models.attention`'s grouped variant (same outputs, no K/V copy on CPU).
        trust_remote_code: let transformers run model and tokenizer code shipped with the
            checkpoint.
    """

    serves_adapters = True

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        dtype: str = "float32",
        max_model_len: int | None = None,
        device: str | None = None,
        seed: int = 0,
        max_num_seqs: int = 256,
        tokenizer: str | os.PathLike[str] | None = None,
        attn_implementation: str | None = None,
        trust_remote_code: bool = False,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        torch_dtype = dtype if dtype == "auto" else getattr(torch, dtype)
        kwargs: dict[str, Any] = {"dtype": torch_dtype, "trust_remote_code": trust_remote_code}
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        self.model = AutoModelForCausalLM.from_pretrained(os.fspath(model), **kwargs)
        if not attn_implementation:
            use_grouped_sdpa(self.model)
        self.model.to(self.device).eval()
        self._tokenizer = AutoTokenizer.from_pretrained(
            os.fspath(tokenizer or model), trust_remote_code=trust_remote_code
        )
        config_len = getattr(self.model.config, "max_position_embeddings", None) or 4096
        self.max_model_len = min(max_model_len or config_len, config_len)
        self.max_num_seqs = max_num_seqs
        self.pad_token_id = self._pad_token_id()
        self.eos_token_ids = self._eos_token_ids()
        # CPU generators on every device: draws cost no CUDA launch, and a seed gives the same
        # uniforms on the CPU and the GPU (see sampling.draw_uniforms)
        self.generator = torch.Generator().manual_seed(seed)
        self._sleeping = False
        self._adapter_config: dict[str, Any] | None = None  # the LoRA adapter served, if any

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def generate(
        self,
        prompts: list[list[int]],
        sampling: SamplingParams | Sequence[SamplingParams],
    ) -> list[list[GenerationOutput]]:
        import torch

        params = check_request(prompts, sampling, self.max_model_len)
        if self._sleeping:
            self.wake_up()
        generators = [self._generator_for(sp, torch) for sp in params]  # one per prompt
        rows = [
            _Row(list(p), sp, generators[i], prompt_index=i)
            for i, (p, sp) in enumerate(zip(prompts, params, strict=True))
            for _ in range(sp.n)
        ]
        outputs: list[GenerationOutput] = []
        with _no_cudnn_attention(self.device):
            for start in range(0, len(rows), self.max_num_seqs):
                outputs += self._generate_rows(rows[start : start + self.max_num_seqs])
        grouped: list[list[GenerationOutput]] = [[] for _ in prompts]
        for row, out in zip(rows, outputs, strict=True):
            grouped[row.prompt_index].append(out)
        return grouped

    def load_weights(self, weights: Weights | LoraAdapter) -> None:
        import torch

        if isinstance(weights, LoraAdapter):
            self._load_adapter(weights)
            return
        state = read_weights(weights)
        own = self.model.state_dict()
        unknown = sorted(set(state) - set(own))
        if unknown:
            raise KeyError(
                f"{len(unknown)} weight names are not parameters of the served model, e.g. "
                f"{unknown[:3]} (expected names like {list(own)[:2]})"
            )
        with torch.no_grad():
            for name, tensor in state.items():
                target = own[name]
                if target.shape != tensor.shape:
                    raise ValueError(
                        f"{name}: shape {tuple(tensor.shape)} != {tuple(target.shape)}"
                    )
                target.copy_(tensor.to(device=target.device, dtype=target.dtype))

    def _load_adapter(self, adapter: LoraAdapter) -> None:
        """Serve the base model with ``adapter`` on it (peft's LoRA layers); the first adapter
        wraps the model, later ones replace its weights.

        Raises:
            ValueError: the adapter's config differs from the one served.
        """
        from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

        if self._adapter_config is None:
            self.model = get_peft_model(self.model, LoraConfig(**adapter.config)).eval()
            self._adapter_config = dict(adapter.config)
        elif adapter.config != self._adapter_config:
            raise ValueError(
                f"the adapter's config {adapter.config} differs from the one served "
                f"({self._adapter_config}); start a new engine"
            )
        weights = {k: v.to(self.device) for k, v in adapter.weights.items()}
        result = set_peft_model_state_dict(self.model, weights)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise KeyError(f"{len(unexpected)} adapter weights fit no LoRA layer, e.g. {unexpected[:3]}")

    def sleep(self) -> None:
        """Move the model to CPU and free the CUDA cache (no-op on CPU)."""
        import torch

        if self.device.type == "cuda" and not self._sleeping:
            self.model.to("cpu")
            torch.cuda.empty_cache()
            self._sleeping = True

    def wake_up(self) -> None:
        if self._sleeping:
            self.model.to(self.device)
            self._sleeping = False

    # -- the sampling loop ----------------------------------------------------------------

    def _generator_for(self, sampling: SamplingParams, torch: Any) -> torch.Generator:
        """The engine's generator, or a fresh one for a seeded request (shared by its n rows)."""
        if sampling.seed is None:
            return self.generator
        return torch.Generator().manual_seed(sampling.seed)

    def _generate_rows(self, rows: list[_Row]) -> list[GenerationOutput]:
        import torch

        device = self.device
        limits = [min(r.sampling.max_tokens, self.max_model_len - len(r.prompt)) for r in rows]
        stop_ids = [self._stop_ids(r.sampling) for r in rows]
        # identical prompts (a request's n rows, or chains of one task) are prefilled once
        distinct: dict[tuple[int, ...], int] = {}
        inverse = [distinct.setdefault(tuple(r.prompt), len(distinct)) for r in rows]
        unique = list(distinct)
        input_ids, attention_mask, position_ids = self._left_padded(unique, torch)  # (U, L) each

        # per-row sampling settings, on the device once per batch (rows leaving are dropped
        # with the cache), so a decode step copies nothing to the device but its uniforms
        temperature = torch.tensor([r.sampling.temperature for r in rows], dtype=torch.float32)
        top_p = torch.tensor([r.sampling.top_p for r in rows], dtype=torch.float32)
        top_k = torch.tensor([r.sampling.top_k for r in rows], dtype=torch.long)
        temperature, top_p, top_k = (t.to(device) for t in (temperature, top_p, top_k))

        with torch.inference_mode():
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=_growing_cache(self.model, reserve=max(limits)),
                use_cache=True,
                logits_to_keep=1,
            )
            cache = out.past_key_values
            expand = torch.tensor(inverse, device=device)  # (B,) row -> its prompt
            if len(unique) < len(rows):
                cache.reorder_cache(expand)  # (U, ...) -> (B, ...)
            logits = out.logits[:, -1, :].float().index_select(0, expand)  # (B, V)
            attention_mask = attention_mask.index_select(0, expand)  # (B, L)
            positions = position_ids[:, -1:].index_select(0, expand)  # (B, 1)
            active = list(range(len(rows)))  # rows still generating, in batch order
            for step in range(max(limits)):
                live = [rows[i] for i in active]
                chosen, chosen_logprobs = sample_tokens(
                    logits,
                    temperature,  # (A,)
                    top_p,
                    top_k,
                    draw_uniforms(self._groups(live), device),
                    truncated=any(_truncates(r.sampling) for r in live if not r.sampling.greedy),
                )
                keep = self._append_step(
                    rows, active, chosen.tolist(), chosen_logprobs.tolist(), stop_ids, limits, step
                )
                if not keep:
                    break
                if len(keep) < len(active):  # finished rows leave the batch and its cache
                    kept = torch.tensor(keep, device=device)
                    cache.reorder_cache(kept)
                    chosen = chosen.index_select(0, kept)
                    attention_mask = attention_mask.index_select(0, kept)
                    positions = positions.index_select(0, kept)
                    temperature, top_p, top_k = (
                        t.index_select(0, kept) for t in (temperature, top_p, top_k)
                    )
                    active = [active[j] for j in keep]
                attention_mask = torch.cat(
                    [attention_mask, attention_mask.new_ones((len(active), 1))], -1
                )  # (A, L + step + 1)
                positions = positions + 1
                out = self.model(
                    input_ids=chosen[:, None],
                    attention_mask=attention_mask,
                    position_ids=positions,
                    past_key_values=cache,
                    use_cache=True,
                )
                cache = out.past_key_values
                logits = out.logits[:, -1, :].float()  # (A, V)
        return [
            GenerationOutput(token_ids=r.tokens, logprobs=r.logprobs, finish_reason=r.finish or "length")
            for r in rows
        ]

    def _left_padded(self, prompts: list[tuple[int, ...]], torch: Any) -> tuple[Any, Any, Any]:
        """``prompts`` left-padded on the device: input ids, attention mask, position ids.
        Shape: (U, L) each."""
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, prompt in enumerate(prompts):
            input_ids[i, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[i, width - len(prompt) :] = 1
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        return input_ids, attention_mask, (attention_mask.cumsum(-1) - 1).clamp(min=0)

    def _append_step(
        self, rows: list[_Row], active: list[int], chosen: list[int], logprobs: list[float],
        stop_ids: list[Any], limits: list[int], step: int,
    ) -> list[int]:
        """Append a decode step's token to each active row, and mark the rows it finishes (a
        stop token or string: ``stop``; their token limit: ``length``). Returns the positions in
        ``active`` of the rows that go on."""
        keep: list[int] = []
        for j, i in enumerate(active):
            row = rows[i]
            row.tokens.append(chosen[j])
            row.logprobs.append(logprobs[j])
            if chosen[j] in stop_ids[i] or self._hits_stop(row):
                row.finish = "stop"
            elif step + 1 >= limits[i]:
                row.finish = "length"
            else:
                keep.append(j)
        return keep

    @staticmethod
    def _groups(rows: list[_Row]) -> list[tuple[list[int], Any]]:
        """Sampled rows grouped by generator, in row order (greedy rows draw nothing)."""
        groups: dict[int, tuple[list[int], Any]] = {}
        for i, row in enumerate(rows):
            if not row.sampling.greedy:
                groups.setdefault(id(row.generator), ([], row.generator))[0].append(i)
        return list(groups.values())

    def _stop_ids(self, sampling: SamplingParams) -> set[int]:
        ids = set(sampling.stop_token_ids or ())
        return ids if sampling.ignore_eos else ids | self.eos_token_ids

    def _hits_stop(self, row: _Row) -> bool:
        """Whether the row's last token completed one of its stop strings.

        Only the text of the last few tokens is decoded: an earlier occurrence would already
        have stopped the row.
        """
        stops = row.sampling.stop
        if not stops:
            return False
        window = max(len(s) for s in stops) + 2  # a token carries at least one character
        tail = self._tokenizer.decode(row.tokens[-window:], skip_special_tokens=False)
        return any(s and s in tail for s in stops)

    def _pad_token_id(self) -> int:
        for tid in (self._tokenizer.pad_token_id, self._tokenizer.eos_token_id):
            if tid is not None:
                return int(tid)
        return 0

    def _eos_token_ids(self) -> set[int]:
        ids: set[int] = set()
        if self._tokenizer.eos_token_id is not None:
            ids.add(int(self._tokenizer.eos_token_id))
        gen_config = getattr(self.model, "generation_config", None)
        eos = getattr(gen_config, "eos_token_id", None)
        if eos is not None:
            ids |= {int(e) for e in (eos if isinstance(eos, list | tuple) else [eos])}
        return ids


def _growing_cache(model: Any, reserve: int) -> Any:
    """A ``DynamicCache`` whose layers grow in place (see :func:`_growing_layer_class`).

    Models with other layer kinds (sliding windows, linear attention...) keep transformers' own
    cache.
    """
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    cache = DynamicCache(config=model.config)
    if cache.layers and all(type(layer) is DynamicLayer for layer in cache.layers):
        layer_class = _growing_layer_class()
        cache.layers = [layer_class(reserve) for _ in cache.layers]
    return cache


@functools.cache
def _growing_layer_class() -> type:
    """The cache layer class, built on first use (transformers is imported lazily here)."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        """transformers' ``DynamicLayer`` with room to grow.

        ``DynamicLayer.update`` concatenates, copying the whole cache into fresh memory every
        decode step (its cost on the benchmarks: bench/README.md). Here keys and values are views into buffers with ``reserve`` spare positions, so a step
        writes its one column in place; the buffers are reallocated only when full or when
        something replaced the tensors (``crop``, ``batch_select_indices``). ``reorder_cache``
        (rows leaving the batch) selects rows of the buffers themselves.
        """

        def __init__(self, reserve: int) -> None:
            super().__init__()
            self.reserve = reserve
            self._keys: Any = None
            self._values: Any = None

        def _owns(self) -> bool:
            return (
                self._keys is not None
                and self.keys.numel() > 0
                and self.keys.data_ptr() == self._keys.data_ptr()
                and self.keys.shape[0] == self._keys.shape[0]
            )

        def update(
            self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any
        ) -> tuple[Any, Any]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            old = self.keys.shape[-2] if self.keys.numel() else 0
            new = old + key_states.shape[-2]
            if (
                self._keys is None
                or self._keys.shape[0] != key_states.shape[0]
                or new > self._keys.shape[-2]
                or (old and not self._owns())  # the cached tensors were replaced
            ):
                batch, heads, _, dim = key_states.shape
                keys = key_states.new_empty(batch, heads, new + self.reserve, dim)
                values = value_states.new_empty(
                    batch, value_states.shape[1], new + self.reserve, value_states.shape[-1]
                )
                if old:
                    keys[..., :old, :] = self.keys
                    values[..., :old, :] = self.values
                self._keys, self._values = keys, values
            self._keys[..., old:new, :] = key_states
            self._values[..., old:new, :] = value_states
            self.keys, self.values = self._keys[..., :new, :], self._values[..., :new, :]
            return self.keys, self.values

        def reorder_cache(self, beam_idx: Any) -> None:
            if not self._owns():
                super().reorder_cache(beam_idx)
                return
            n = self.keys.shape[-2]
            self._keys = self._keys.index_select(0, beam_idx.to(self._keys.device))
            self._values = self._values.index_select(0, beam_idx.to(self._values.device))
            self.keys, self.values = self._keys[..., :n, :], self._values[..., :n, :]

    return GrowingLayer


def _no_cudnn_attention(device: Any) -> Any:
    """On CUDA, SDPA without its cuDNN backend for the duration (elsewhere: nothing).

    Decoding changes the key length every step, and cuDNN attention builds (NVRTC-compiles) a
    graph for each new shape, so a rollout with cuDNN spends most of its time compiling (figures
    in bench/README.md); flash and memory-efficient attention build nothing per shape. SDPA's
    backend flags are process-wide: a training step running meanwhile does not use cuDNN either.
    """
    import contextlib

    if getattr(device, "type", device) != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(
        [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    )


def _truncates(sampling: SamplingParams) -> bool:
    """Whether a row's top-k / top-p limits what it may draw (a vocabulary-wide sort)."""
    return sampling.top_p < 1 or sampling.top_k > 0


@dataclass
class _Row:
    """One sample being generated."""

    prompt: list[int]
    sampling: SamplingParams
    generator: Any
    prompt_index: int
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str | None = None
