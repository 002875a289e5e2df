"""The transformers engine: a hand-written sampling loop over ``model(...)`` with a KV cache.

The embedded default and the test engine. Prompts are left-padded into one batch (``n`` rows
per prompt; each prompt may bring its own sampling parameters); position ids come from the
attention mask (cumulative sum − 1) so padding does not shift positions. Identical prompts (a
request's ``n`` rows, GRPO's chains of one task) are prefilled once and their KV cache gathered
to every row; a row that finishes leaves the batch (and the cache) at once, so the steps after it
compute only the rows still generating. A finished row's K/V go to a prefix cache
(:mod:`agentfly.rollout.engines.prefix_cache`, used through
:mod:`agentfly.rollout.engines.prefix_reuse`): a later prompt that begins with its sequence (a
chain's next turn) prefills only the rest. On CUDA (unless ``enforce_eager``) a call decodes
instead from static K/V slots with the step captured as a CUDA graph
(:mod:`agentfly.rollout.engines.static_decode`), a finished row's slot taking the next waiting
row (:mod:`agentfly.rollout.engines.continuous_batching`). Prompts holding images
(:class:`~agentfly.core.images.ImagePrompt`, a vision-language model's) prefill with their pixels
and the model's multimodal rotary positions (:mod:`agentfly.models.vision_inputs`) and decode
with the dynamic cache; they skip the prefix cache, whose keys (token ids) do not tell images
apart, and are prefilled once per distinct ids *and* images. A hand-written loop rather than
``model.generate`` gives the exact log-probabilities defined in
:mod:`agentfly.rollout.engines.base` and stop strings that keep the completing token.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import agentfly.rollout.engines.kv_cache as kv_cache
import agentfly.rollout.engines.static_decode as static_decode
from agentfly.core.images import ImageInput, prompt_images
from agentfly.core.weights import LoraAdapter
from agentfly.models.attention import use_grouped_sdpa
from agentfly.rollout.engines.base import (
    Engine,
    GenerationOutput,
    SamplingParams,
    check_request,
    register_engine,
)
from agentfly.rollout.engines.continuous_batching import ContinuousBatch
from agentfly.rollout.engines.prefix_cache import PrefillStats
from agentfly.rollout.engines.prefix_reuse import PrefixReuse
from agentfly.rollout.engines.sampling import draw_uniforms, sample_tokens, truncates
from agentfly.rollout.engines.weights import read_weights

if TYPE_CHECKING:
    import torch

    from agentfly.rollout.engines.base import Weights

logger = logging.getLogger(__name__)


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
        max_num_seqs: rows (prompts × n) per forward batch; larger requests run in chunks (on
            the static path: slots, a finished row's slot taking the next waiting row).
        tokenizer: tokenizer directory when it differs from ``model``.
        attn_implementation: passed to ``from_pretrained`` (``"sdpa"``, ``"eager"``...); None
            = transformers' choice, with ``sdpa`` upgraded to
            :mod:`agentfly.models.attention`'s grouped variant (same outputs, no K/V copy on CPU).
        trust_remote_code: let transformers run model and tokenizer code shipped with the
            checkpoint.
        enable_prefix_caching: keep the K/V of generated sequences so that a prompt extending
            one prefills only its new tokens (vLLM's name). Cleared by :meth:`load_weights`,
            :meth:`sleep` and :meth:`free_prefix_cache`; off, with a warning, for models whose
            cache is not transformers' plain ``DynamicLayer`` (sliding windows...).
        prefix_cache_max_gib: the most the kept K/V may take, in GiB (least recently used go
            first); the default holds ~45k tokens of SmolLM2-135M in float32 (46 kB a token).
        enforce_eager: decode with the dynamic cache, one eager forward per step (vLLM's name).
            False: static K/V slots with continuous batching, the decode step captured as a
            CUDA graph per (slots, length) bucket on CUDA and run eagerly elsewhere (so the CPU
            tests the same path). None (the default): True on every device, until the static
            path has been measured on a GPU (:func:`decodes_static`). Models whose cache or
            attention the slots do not support (sliding windows, flash attention...) decode
            dynamically, with a warning. The slots are dropped with the prefix cache
            (:meth:`free_prefix_cache`, before every update of a trainer on the same device),
            on :meth:`sleep` and on new weights' adapter.

    Attributes:
        prefill_stats: prompt tokens prefilled and reused from the prefix cache so far.
        static: whether calls decode from static slots (``enforce_eager`` resolved, False
            where the model does not support them).
    """

    serves_adapters = True
    takes_images = True

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
        enable_prefix_caching: bool = True,
        prefix_cache_max_gib: float = 2.0,
        enforce_eager: bool | None = None,
    ) -> None:
        import torch
        from transformers import AutoTokenizer

        from agentfly.models.loading import causal_lm_class

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        torch_dtype = dtype if dtype == "auto" else getattr(torch, dtype)
        kwargs: dict[str, Any] = {"dtype": torch_dtype, "trust_remote_code": trust_remote_code}
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        self.model = causal_lm_class(model, trust_remote_code).from_pretrained(os.fspath(model), **kwargs)
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
        self.prefill_stats = PrefillStats()
        self._prefixes = PrefixReuse(
            self.model, enabled=enable_prefix_caching, max_gib=prefix_cache_max_gib
        )
        self.static = decodes_static(enforce_eager)
        if self.static and (reason := static_decode.unsupported(self.model)):
            logger.warning("static decoding is off: %s; decoding with the dynamic cache", reason)
            self.static = False
        self._decoder: static_decode.StaticDecoder | None = None  # the last call's slots

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
            _Row(list(p), sp, generators[i], prompt_index=i, images=prompt_images(p))
            for i, (p, sp) in enumerate(zip(prompts, params, strict=True))
            for _ in range(sp.n)
        ]
        # prompts with images decode dynamically, without the prefix cache (module docstring)
        text_rows = [r for r in rows if not r.images]
        image_rows = [r for r in rows if r.images]
        with _no_cudnn_attention(self.device):
            if self.static:
                self._generate_static(text_rows)
            else:
                for start in range(0, len(text_rows), self.max_num_seqs):
                    self._generate_rows(text_rows[start : start + self.max_num_seqs])
            for start in range(0, len(image_rows), self.max_num_seqs):
                self._generate_rows(image_rows[start : start + self.max_num_seqs])
        grouped: list[list[GenerationOutput]] = [[] for _ in prompts]
        for row in rows:
            grouped[row.prompt_index].append(_output(row))
        return grouped

    def load_weights(self, weights: Weights | LoraAdapter) -> None:
        import torch

        self._prefixes.free()  # its K/V were computed with the old weights
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
            self._decoder = None  # its graph runs the modules the adapter wraps
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
            raise KeyError(
                f"{len(unexpected)} adapter weights fit no LoRA layer, e.g. {unexpected[:3]}"
            )

    def sleep(self) -> None:
        """Drop the prefix cache and the static slots (their graph reads the parameters where
        they are now); on CUDA, move the model to CPU and free the CUDA cache."""
        import torch

        self._prefixes.free()
        self._decoder = None
        if self.device.type == "cuda" and not self._sleeping:
            self.model.to("cpu")
            torch.cuda.empty_cache()
            self._sleeping = True

    def wake_up(self) -> None:
        if self._sleeping:
            self.model.to(self.device)
            self._sleeping = False

    def free_prefix_cache(self) -> int:
        """Drop the prefix cache's K/V (the next prompts prefill whole); returns the bytes freed.

        The static path's slots go with it (they are rebuilt at the next static call). In this
        process the memory goes back to torch's allocator, for a trainer on the same device to
        reuse; the allocator keeps it (no ``empty_cache``).
        """
        freed = self._prefixes.free()
        if self._decoder is not None:
            freed += self._decoder.nbytes()
            self._decoder = None
        return freed

    def stats(self) -> dict[str, Any]:
        """The prefix cache's bytes, blocks, budget and why it is off (None while on), and the
        prompt tokens prefilled and reused so far."""
        return {**self._prefixes.stats(), **vars(self.prefill_stats)}

    # -- the sampling loop ----------------------------------------------------------------

    def _generator_for(self, sampling: SamplingParams, torch: Any) -> torch.Generator:
        """The engine's generator, or a fresh one for a seeded request (shared by its n rows)."""
        if sampling.seed is None:
            return self.generator
        return torch.Generator().manual_seed(sampling.seed)

    def _generate_static(self, rows: list[_Row]) -> list[GenerationOutput]:
        """Decode ``rows`` from static slots, continuously batched (see the module docstring)."""
        if not rows:
            return []
        slots = static_decode.row_bucket(len(rows), self.max_num_seqs)
        need = max(min(len(r.prompt) + r.sampling.max_tokens, self.max_model_len) for r in rows)
        length = static_decode.length_bucket(need, self.max_model_len)
        batch = ContinuousBatch(
            self, rows, slots, lambda like: self._decoder_for(like, slots, length)
        )
        batch.run()
        return [_output(r) for r in rows]

    def _decoder_for(self, like: Any, slots: int, length: int) -> static_decode.StaticDecoder:
        """The decoder of ``slots`` slots of ``length`` positions: the last one if it fits, else
        a new one (capturing its graph on CUDA), which replaces it (one set of slots is kept)."""
        decoder = self._decoder
        if decoder is None or (decoder.rows, decoder.length) != (slots, length):
            self._decoder = None  # free the old slots before allocating new ones
            decoder = static_decode.StaticDecoder(
                self.model, like, rows=slots, length=length, capture=self.device.type == "cuda"
            )
            self._decoder = decoder
        return decoder

    def _generate_rows(self, rows: list[_Row]) -> list[GenerationOutput]:
        import torch

        device = self.device
        limits = [min(r.sampling.max_tokens, self.max_model_len - len(r.prompt)) for r in rows]
        stop_ids = [self._stop_ids(r.sampling) for r in rows]
        # identical prompts (a request's n rows, or chains of one task) are prefilled once
        distinct: dict[tuple[Any, ...], int] = {}
        inverse = [distinct.setdefault(r.key, len(distinct)) for r in rows]
        firsts = {k: r for r, k in zip(rows, inverse, strict=True)}
        images = [firsts[k].images for k in range(len(distinct))]
        remember = self._prefixes.store is not None and not any(images)

        # per-row sampling settings, on the device once per batch (rows leaving are dropped
        # with the cache), so a decode step copies nothing to the device but its uniforms
        temperature = torch.tensor([r.sampling.temperature for r in rows], dtype=torch.float32)
        top_p = torch.tensor([r.sampling.top_p for r in rows], dtype=torch.float32)
        top_k = torch.tensor([r.sampling.top_k for r in rows], dtype=torch.long)
        temperature, top_p, top_k = (t.to(device) for t in (temperature, top_p, top_k))

        with torch.inference_mode():
            prompts = [tuple(firsts[k].prompt) for k in range(len(distinct))]
            if any(images):
                out, attention_mask, position_ids = self._prefill_images(prompts, images, max(limits), torch)
            else:
                out, attention_mask, position_ids = self._prefill(prompts, max(limits), torch)
            cache = out.past_key_values
            expand = torch.tensor(inverse, device=device)  # (B,) row -> its prompt
            if len(distinct) < len(rows):
                cache.reorder_cache(expand)  # (U, ...) -> (B, ...)
            logits = out.logits[:, -1, :].float().index_select(0, expand)  # (B, V)
            attention_mask = attention_mask.index_select(0, expand)  # (B, C + S)
            # (B, 1), or (3, B, 1) for multimodal rotary positions
            positions = position_ids[..., -1:].index_select(-2, expand)
            active = list(range(len(rows)))  # rows still generating, in batch order
            for step in range(max(limits)):
                live = [rows[i] for i in active]
                chosen, chosen_logprobs = sample_tokens(
                    logits,
                    temperature,  # (A,)
                    top_p,
                    top_k,
                    draw_uniforms(self._groups(live), device),
                    truncated=any(truncates(r.sampling) for r in live if not r.sampling.greedy),
                )
                keep = self._append_step(
                    rows, active, chosen.tolist(), chosen_logprobs.tolist(), stop_ids, limits, step
                )
                if remember and len(keep) < len(active):
                    self._remember(rows, active, keep, cache, attention_mask)
                if not keep:
                    break
                if len(keep) < len(active):  # finished rows leave the batch and its cache
                    kept = torch.tensor(keep, device=device)
                    cache.reorder_cache(kept)
                    chosen = chosen.index_select(0, kept)
                    attention_mask = attention_mask.index_select(0, kept)
                    positions = positions.index_select(-2, kept)
                    temperature, top_p, top_k = (
                        t.index_select(0, kept) for t in (temperature, top_p, top_k)
                    )
                    active = [active[j] for j in keep]
                attention_mask = torch.cat(
                    [attention_mask, attention_mask.new_ones((len(active), 1))], -1
                )  # (A, C + S + step + 1)
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
        return [_output(r) for r in rows]

    def _prefill(
        self, prompts: list[tuple[int, ...]], decode_steps: int, torch: Any
    ) -> tuple[Any, Any, Any]:
        """One forward over ``prompts`` (:meth:`_prefill_inputs`'s batch), the LM head on each
        row's last position. Returns the model's output (logits (U, 1, V), its cache), the
        attention mask (U, C + S) and the position ids (U, S)."""
        input_ids, attention_mask, position_ids, cache = self._prefill_inputs(
            prompts, decode_steps, torch
        )  # (U, S), (U, C + S), (U, S), C cached positions
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return out, attention_mask, position_ids

    def _prefill_images(
        self, prompts: list[tuple[int, ...]], images: list[tuple[ImageInput, ...]], decode_steps: int,
        torch: Any,
    ) -> tuple[Any, Any, Any]:
        """:meth:`_prefill` for prompts holding images: every token prefilled (no prefix cache:
        its keys are token ids, which do not tell images apart), the images' pixel patches
        through the vision tower, and the model's multimodal rotary positions (3, U, S) from
        :func:`agentfly.models.vision_inputs.rope_positions`, as the trainer computes them."""
        from agentfly.models.vision_inputs import image_tensors, rope_positions

        input_ids, attention_mask = self._left_padded(prompts, torch)  # (U, S)
        self.prefill_stats.prefilled_tokens += sum(len(p) for p in prompts)
        pixel_values, grid_thw = image_tensors([im for row in images for im in row], self.device)
        position_ids = rope_positions(self.model, input_ids, attention_mask, grid_thw)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            pixel_values=pixel_values.to(self.model.dtype),
            image_grid_thw=grid_thw,
            past_key_values=kv_cache.growing_cache(self.model, reserve=decode_steps),
            use_cache=True,
            logits_to_keep=1,
        )
        return out, attention_mask, position_ids

    def _prefill_inputs(
        self, prompts: list[tuple[int, ...]], decode_steps: int, torch: Any
    ) -> tuple[Any, Any, Any, Any]:
        """The prefill's inputs: each prompt's cached prefix (C_u tokens, from the prefix cache)
        left-padded into a batch KV cache of C positions, and the rest of it (its suffix)
        left-padded after them.

        The attention mask masks both paddings (zeros inside a row are fine: transformers' mask
        is built by index, the causal part from the cache length); position ids count only a
        row's real tokens.

        Returns:
            input ids (U, S), attention mask (U, C + S), position ids (U, S), and the cache,
            with room for ``decode_steps`` more positions.
        """
        reused = self._prefixes.lookup(prompts)
        width = max(n for n, _ in reused)  # C
        suffixes = [p[n:] for p, (n, _) in zip(prompts, reused, strict=True)]
        input_ids, attention_mask = self._left_padded(suffixes, torch)  # (U, S) each
        self.prefill_stats.prefilled_tokens += sum(len(s) for s in suffixes)
        self.prefill_stats.reused_tokens += sum(n for n, _ in reused)
        reserve = decode_steps + (input_ids.shape[1] if width else 0)
        cache = kv_cache.growing_cache(self.model, reserve=reserve)
        if width:
            parts = [part for _, part in reused]
            cached_mask = kv_cache.fill_left_padded(cache, parts, width)  # (U, C)
            attention_mask = torch.cat([cached_mask, attention_mask], -1)  # (U, C + S)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)[:, width:]
        return input_ids, attention_mask, position_ids, cache

    def _remember(
        self, rows: list[_Row], active: list[int], keep: list[int], cache: Any, attention_mask: Any
    ) -> None:
        """Put the K/V of the rows finishing now (those of ``active`` not in ``keep``) in the
        prefix cache: their prompt and sampled tokens but the last (never fed to the model).

        Shapes: attention_mask (A, cache length), one row per entry of ``active``.
        """
        going_on = set(keep)
        finished = [
            (j, rows[i].prompt + rows[i].tokens[:-1])
            for j, i in enumerate(active)
            if j not in going_on
        ]
        self._prefixes.remember(finished, cache, attention_mask)

    def _left_padded(self, prompts: list[tuple[int, ...]], torch: Any) -> tuple[Any, Any]:
        """``prompts`` left-padded on the device: input ids and attention mask, (U, L) each."""
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, prompt in enumerate(prompts):
            input_ids[i, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[i, width - len(prompt) :] = 1
        return input_ids.to(self.device), attention_mask.to(self.device)

    def _append_step(
        self,
        rows: list[_Row],
        active: list[int],
        chosen: list[int],
        logprobs: list[float],
        stop_ids: list[Any],
        limits: list[int],
        step: int,
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


def decodes_static(enforce_eager: bool | None) -> bool:
    """Whether the engine decodes from static slots: only when asked (``enforce_eager=False``).
    Unset, every device decodes with the dynamic cache: the static path (CUDA graphs on a GPU)
    has been tested on the CPU only, so it is not the default until a GPU run measures it."""
    return enforce_eager is False


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


def _output(row: _Row) -> GenerationOutput:
    return GenerationOutput(
        token_ids=row.tokens, logprobs=row.logprobs, finish_reason=row.finish or "length"
    )


@dataclass
class _Row:
    """One sample being generated."""

    prompt: list[int]
    sampling: SamplingParams
    generator: Any
    prompt_index: int
    images: tuple[ImageInput, ...] = ()
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str | None = None

    @property
    def key(self) -> tuple[Any, ...]:
        """What makes two rows' prompts the same: their ids and their images' digests."""
        return (tuple(self.prompt), *(im.digest for im in self.images))
