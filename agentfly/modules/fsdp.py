"""FSDP for the actor, critic and reference: the Lightning strategy from verl's keys, the
sharding applied in ``configure_model``, and the actor's full weights gathered from the shards
(for the engines and the Hugging Face export, :mod:`agentfly.core.weights`).

agentfly optimises manually (several forward passes and backward calls inside one
``training_step``), which Lightning's ``FSDPStrategy`` (FSDP1, one root wrapper) does not support
(Lightning-AI/pytorch-lightning#19685). So ``actor.strategy=fsdp`` uses FSDP2 (``fully_shard``)
through Lightning's ``ModelParallelStrategy``: each model is sharded on its own, one unit per
transformer block (the model class's ``_no_split_modules``, e.g. ``Qwen2DecoderLayer``) plus the
model itself, so calling the actor, the reference or the critic directly works. From verl's keys:

- ``fsdp_config.param_offload`` → ``CPUOffloadPolicy`` (parameters, gradients and the optimizer
  state live on the CPU together, so ``optimizer_offload`` goes with it and alone is refused;
  GPUs only); the actor, the reference and the critic each take their own ``fsdp_config``;
- ``fsdp_config.reshard_after_forward`` → the same ``fully_shard`` argument (false = ZeRO-2);
- ``fsdp_config.fsdp_size`` > 0 and smaller than the world → hybrid sharding (shard within groups
  of that size, replicate across them);
- checkpoints hold the full state (one file on rank 0), so they resume on any number of ranks.

FSDP2 runs on CPU ranks too (gloo): the tests shard a tiny model over two CPU processes.
"""

from __future__ import annotations

from typing import Any

from agentfly.core.weights import full_state, is_sharded

__all__ = [
    "block_classes", "fsdp_strategy", "full_state", "is_sharded", "shard_mesh", "shard_model",
    "total_norm",
]


def block_classes(model: Any) -> tuple[type, ...]:
    """The transformer block classes inside ``model`` (its ``_no_split_modules``)."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    return tuple({type(m) for m in model.modules() if type(m).__name__ in names})


def fsdp_strategy(world_size: int) -> Any:
    """Lightning's ``ModelParallelStrategy`` for data-parallel FSDP2 over ``world_size`` ranks."""
    from lightning.pytorch.strategies import ModelParallelStrategy

    return ModelParallelStrategy(
        data_parallel_size=world_size, tensor_parallel_size=1, save_distributed_checkpoint=False
    )


def shard_mesh(device_mesh: Any, fsdp_size: int) -> Any:
    """The mesh to shard over: the data-parallel ranks, or (replicate, shard) groups of ``fsdp_size``."""
    dp = device_mesh["data_parallel"]
    world = dp.size()
    if fsdp_size <= 0 or fsdp_size >= world:
        return dp
    if world % fsdp_size:
        raise ValueError(f"fsdp_config.fsdp_size={fsdp_size} does not divide the {world} data-parallel ranks")
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(
        dp.device_type, (world // fsdp_size, fsdp_size), mesh_dim_names=("replicate", "shard")
    )


def shard_model(model: Any, mesh: Any, *, offload: bool = False, reshard_after_forward: bool = True) -> Any:
    """``fully_shard`` every transformer block of ``model``, then the model itself (in place)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    policy = CPUOffloadPolicy() if offload and mesh.device_type != "cpu" else OffloadPolicy()
    kwargs = {"mesh": mesh, "reshard_after_forward": reshard_after_forward, "offload_policy": policy}
    blocks = block_classes(model)
    for module in list(model.modules()):
        if blocks and isinstance(module, blocks):
            fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    return model


def total_norm(grad_norm: Any) -> float:
    """``clip_grad_norm_``'s result as a float (a DTensor under FSDP2)."""
    full = getattr(grad_norm, "full_tensor", None)
    return float(full() if full is not None else grad_norm)
