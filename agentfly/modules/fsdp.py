"""FSDP for the actor, critic and reference: the Lightning strategy from the seed keys, and the
actor's full weights gathered from the shards (for the engines and the Hugging Face export).

``actor.strategy=fsdp`` builds Lightning's ``FSDPStrategy`` with

- one FSDP unit per transformer block (the model class's ``_no_split_modules``, e.g.
  ``Qwen2DecoderLayer``), so each block's parameters are gathered only while it runs;
- ``fsdp_config.param_offload`` / ``optimizer_offload`` → ``cpu_offload=True`` (FSDP keeps
  parameters, gradients and the optimizer state on the CPU together: either key turns it on);
- ``fsdp_config.reshard_after_forward: false`` → ``SHARD_GRAD_OP`` (ZeRO-2), else ``FULL_SHARD``;
- ``fsdp_config.fsdp_size`` > 0 and smaller than the world → ``HYBRID_SHARD`` (shard within
  groups of that size, replicate across them);
- full (not sharded) checkpoints, so a checkpoint resumes on any number of ranks.

Gradient checkpointing is the models' own (``enable_gradient_checkpointing``). FSDP (torch's
``FullyShardedDataParallel``) needs GPUs: on CPUs ``fit`` uses DDP instead and says so.
"""

from __future__ import annotations

from typing import Any


def block_classes(model_path: str) -> set[type]:
    """The transformer block classes of the model at ``model_path`` (its ``_no_split_modules``)."""
    import importlib

    import transformers
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path)
    names: set[str] = set()
    for arch in config.architectures or []:
        cls = getattr(transformers, arch, None)
        names.update(getattr(cls, "_no_split_modules", None) or [])
    found: set[type] = set()
    for arch in config.architectures or []:
        cls = getattr(transformers, arch, None)
        if cls is None:
            continue
        module = importlib.import_module(cls.__module__)
        found.update(getattr(module, n) for n in names if hasattr(module, n))
    return found


def fsdp_strategy(fsdp_config: Any, model_paths: list[str], world_size: int) -> Any:
    """Lightning's ``FSDPStrategy`` from an ``fsdp_config`` section (see the module docstring)."""
    from lightning.pytorch.strategies import FSDPStrategy

    policy: set[type] = set()
    for path in model_paths:
        policy |= block_classes(path)
    size = int(fsdp_config.fsdp_size)
    if 0 < size < world_size:
        sharding = "HYBRID_SHARD"
    elif not fsdp_config.reshard_after_forward:
        sharding = "SHARD_GRAD_OP"
    else:
        sharding = "FULL_SHARD"
    kwargs: dict[str, Any] = {}
    if sharding == "HYBRID_SHARD":
        kwargs["device_mesh"] = (world_size // size, size)
    return FSDPStrategy(
        auto_wrap_policy=policy or None,
        cpu_offload=bool(fsdp_config.param_offload or fsdp_config.optimizer_offload),
        sharding_strategy=sharding,
        state_dict_type="full",
        use_orig_params=True,  # frozen (reference) and trained parameters side by side
        **kwargs,
    )


def full_actor_state(trainer: Any, pl_module: Any, *, everywhere: bool = False) -> dict[str, Any] | None:
    """The actor's full state dict, gathered from the shards under FSDP.

    Every rank must call it (under FSDP it is a collective). Returns the state on rank 0, and on
    every rank when ``everywhere`` (each rank has its own engine); ``None`` on the others.
    Without FSDP each rank already holds the full weights.
    """
    from lightning.pytorch.strategies import FSDPStrategy

    if not isinstance(trainer.strategy, FSDPStrategy):
        return {k: v.detach() for k, v in pl_module.actor.state_dict().items()}
    from torch.distributed.fsdp import FullStateDictConfig, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    root = trainer.strategy.model
    config = FullStateDictConfig(offload_to_cpu=True, rank0_only=not everywhere)
    with FSDP.state_dict_type(root, StateDictType.FULL_STATE_DICT, config):
        full = root.state_dict()
    if not full:
        return None
    prefix = _actor_prefix(full)
    return {k[len(prefix):]: v for k, v in full.items() if k.startswith(prefix)}


def _actor_prefix(state: dict[str, Any]) -> str:
    """Where the actor's keys start in the root's state dict (``actor.`` or ``module.actor.``...)."""
    for key in state:
        head, sep, _ = key.partition("actor.")
        if sep and (not head or head.endswith(".")):
            return head + "actor."
    raise KeyError("no actor parameters in the FSDP state dict")
