"""What a config asks of the machine, against what the machine has: ranks, engines, devices.

AgentFly's commands are written for GPU machines (``trainer.n_gpus_per_node=8``,
``tensor_model_parallel_size=2``). :func:`resolve_topology` turns such a request into what will
actually run here, so that nothing waits for a GPU or a Ray slot that does not exist:

- ``trainer.device=auto`` (the default) with no visible GPU is the **CPU fallback**: one CPU
  training process per node (or the ranks SLURM launched), one engine, tensor parallelism 1;
  each reduction is said once in :attr:`Topology.notes`, and GPU-only settings the run cannot
  use are named there too (:mod:`agentfly.config.inactive`).
- ``trainer.device=cpu`` asks for ``n_gpus_per_node`` CPU processes (DDP over gloo) explicitly;
  GPU-only settings set together with it are refused.
- ``trainer.device=cuda`` (or ``auto`` with GPUs) needs the GPUs it names: asking for more than
  are visible is refused, naming both counts.

Batch sizes are then checked against the ranks that will run (:func:`check_batches`), not the
ranks the config names. Nothing here imports torch until :meth:`Hardware.detect` is called.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from agentfly.core.errors import ConfigError


@dataclass(frozen=True)
class Hardware:
    """What this process can use.

    Attributes:
        gpus: CUDA devices visible to this process.
        cpus: CPU cores.
        slurm_tasks: ranks ``srun`` launched for this job (``SLURM_NTASKS``), None outside SLURM.
        ray_address: the Ray cluster to join (``RAY_ADDRESS``), or ``"running"`` when this
            process is already connected to one; None: the engine pool starts a one-node Ray with
            this machine's CPUs and GPUs.
    """

    gpus: int = 0
    cpus: int = 1
    slurm_tasks: int | None = None
    ray_address: str | None = None

    @classmethod
    def detect(cls) -> Hardware:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        import sys

        tasks = os.environ.get("SLURM_NTASKS")
        address = os.environ.get("RAY_ADDRESS") or None
        if address is None and "ray" in sys.modules and sys.modules["ray"].is_initialized():
            address = "running"
        return cls(
            gpus=gpus,
            cpus=os.cpu_count() or 1,
            slurm_tasks=int(tasks) if tasks else None,
            ray_address=address,
        )


@dataclass(frozen=True)
class Topology:
    """Where a run's training ranks and rollout engines go.

    Attributes:
        accelerator: ``"gpu"`` or ``"cpu"`` (Lightning's accelerator name).
        devices: training ranks per node.
        nodes: nodes.
        num_engines: rollout engines (Ray actors); 0 = one engine inside the training process.
        tensor_parallel: devices per engine (vLLM tensor parallelism); 1 on the CPU.
        gpus_per_engine: GPUs a Ray engine actor reserves (0 on the CPU).
        cuda_engines: the engines run on GPUs.
        notes: what the CPU fallback changed, each said once when the run starts (nothing
            when it changed nothing: ``n_gpus_per_node=1`` is one CPU process, which
            Lightning's own "GPU available: False" line already says).
        cpu_fallback: ``trainer.device=auto`` on a machine without a GPU.
    """

    accelerator: str
    devices: int
    nodes: int
    num_engines: int
    tensor_parallel: int
    gpus_per_engine: int
    cuda_engines: bool
    notes: tuple[str, ...] = field(default=())
    cpu_fallback: bool = False

    @property
    def world_size(self) -> int:
        return self.devices * self.nodes


def offload_keys(cfg: Any) -> list[str]:
    """The offload settings that are on: they move GPU memory to the CPU, so need a GPU."""
    ref, critic = cfg.actor_rollout_ref.ref, cfg.critic
    settings = (
        ("actor_rollout_ref.actor.fsdp_config.param_offload", cfg.actor_rollout_ref.actor.fsdp_config.param_offload),
        ("actor_rollout_ref.ref.fsdp_config.param_offload", ref.fsdp_config.param_offload),
        ("critic.model.fsdp_config.param_offload", critic.model.fsdp_config.param_offload),
        ("actor_rollout_ref.model.enable_activation_offload", cfg.actor_rollout_ref.model.enable_activation_offload),
        ("critic.model.enable_activation_offload", critic.model.enable_activation_offload),
    )
    return [key for key, on in settings if on]


@dataclass
class _Placement:
    """What one branch of :func:`resolve_topology` decides."""

    accelerator: str
    devices: int
    tensor_parallel: int
    num_engines: int
    cuda_engines: bool


def _on_cpu(cfg: Any, hw: Hardware, device: str, errors: list[str], notes: list[str]) -> _Placement:
    """The CPU's placement: ``trainer.device=cpu``, or ``auto`` on a machine without a GPU (the
    fallback, which says what it reduced)."""
    trainer, rollout = cfg.trainer, cfg.actor_rollout_ref.rollout
    requested, nodes = int(trainer.n_gpus_per_node), int(trainer.nnodes)
    tp = int(rollout.tensor_model_parallel_size)
    if device == "cpu":
        devices = requested
        if tp > 1:
            errors.append(
                f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} splits an engine "
                "over GPUs, and trainer.device=cpu runs on the CPU; set it to 1"
            )
        errors += [
            f"{key}=True moves GPU memory to the CPU, and trainer.device=cpu has no GPU "
            "memory; set it to False" for key in offload_keys(cfg)
        ]
    else:
        devices = requested if hw.slurm_tasks else 1
        said = f"{devices} CPU process{'' if devices == 1 else 'es'} per node"
        if devices != requested:
            notes.append(
                f"no GPU: running on the CPU (trainer.n_gpus_per_node={requested} -> {said}; "
                "trainer.device=cpu runs n_gpus_per_node CPU processes)"
            )
        if tp > 1:
            notes.append(
                f"no GPU: actor_rollout_ref.rollout.tensor_model_parallel_size={tp} -> 1 "
                "(an engine on the CPU is not split)"
            )
    # one training process with transformers engines: the engine lives in it (no Ray, no
    # weight copy through an object store, no idle engine process holding cores)
    in_process = devices == 1 and nodes == 1 and not hw.ray_address and rollout.name == "transformers"
    default = 0 if in_process else 1
    engines = default if rollout.num_engines is None else int(rollout.num_engines)
    if device == "auto" and rollout.num_engines is None and requested > 1:
        notes.append(f"no GPU: one rollout engine (trainer.n_gpus_per_node={requested} asked for more)")
    return _Placement("cpu", devices, 1, engines, cuda_engines=False)


def _on_gpus(cfg: Any, hw: Hardware, errors: list[str]) -> _Placement:
    """The GPUs' placement: ``n_gpus_per_node`` ranks per node, engines on the GPUs."""
    trainer, rollout = cfg.trainer, cfg.actor_rollout_ref.rollout
    devices, nodes = int(trainer.n_gpus_per_node), int(trainer.nnodes)
    tp = int(rollout.tensor_model_parallel_size)
    if hw.gpus == 0:
        errors.append(
            f"trainer.device={trainer.device} but no CUDA device is visible; use "
            "trainer.device=auto (the CPU when there is no GPU) or trainer.device=cpu"
        )
    elif devices > hw.gpus and not hw.slurm_tasks:
        errors.append(
            f"trainer.n_gpus_per_node={devices} but this machine shows {hw.gpus} GPU"
            f"{'' if hw.gpus == 1 else 's'}; set trainer.n_gpus_per_node<={hw.gpus}"
        )
    if rollout.name == "transformers" and tp > 1:
        errors.append(
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}: the transformers "
            "engine runs on one device; use actor_rollout_ref.rollout.name=vllm for tensor "
            "parallelism, or set it to 1"
        )
    total_gpus = max(hw.gpus, 1) * nodes
    # one training process on one GPU with a transformers engine: the engine shares the process
    # and the GPU (as on the CPU: no Ray, no weight copy through an object store)
    in_process = devices == 1 and nodes == 1 and not hw.ray_address and rollout.name == "transformers"
    default = 0 if in_process else max(1, devices * nodes // tp)
    engines = default if rollout.num_engines is None else int(rollout.num_engines)
    if engines * tp > total_gpus and not errors:
        errors.append(
            f"{engines} rollout engine{'s' if engines != 1 else ''} × tensor_model_parallel_size"
            f"={tp} need {engines * tp} GPUs; {nodes} node(s) × {hw.gpus} GPU(s) = {total_gpus}: "
            "lower actor_rollout_ref.rollout.num_engines or tensor_model_parallel_size"
        )
    return _Placement("gpu", devices, tp, engines, cuda_engines=True)


def resolve_topology(cfg: Any, hw: Hardware) -> Topology:
    """The ranks and engines ``cfg`` will run with on ``hw``.

    Raises:
        ConfigError: a request the machine cannot meet (``trainer.device=cuda`` without a GPU,
            more GPUs per node than are visible, an engine that needs more GPUs than exist, a
            GPU-only setting with ``trainer.device=cpu``), naming the key and what exists.
    """
    device = "cuda" if cfg.trainer.device == "gpu" else str(cfg.trainer.device)
    errors: list[str] = []
    notes: list[str] = []
    if device == "cpu" or (device == "auto" and hw.gpus == 0):
        placed = _on_cpu(cfg, hw, device, errors, notes)
    else:
        placed = _on_gpus(cfg, hw, errors)
    engines, tp, cuda_engines = placed.num_engines, placed.tensor_parallel, placed.cuda_engines
    if engines > 0 and not hw.ray_address and not errors:
        from agentfly.rollout.engines.capacity import local_capacity_problem

        gpus_each = tp if cuda_engines else 0
        problem = local_capacity_problem(
            engines, 1.0, gpus_each, hw.cpus, hw.gpus if cuda_engines else None
        )
        if problem:  # each engine actor reserves a CPU (and its GPUs) of the Ray started here
            errors.append(f"actor_rollout_ref.rollout.num_engines={engines}: {problem}")
    if errors:
        raise ConfigError(errors)
    return Topology(
        accelerator=placed.accelerator,
        devices=placed.devices,
        nodes=int(cfg.trainer.nnodes),
        num_engines=engines,
        tensor_parallel=tp,
        gpus_per_engine=tp if cuda_engines and engines > 0 else 0,
        cuda_engines=cuda_engines,
        notes=tuple(notes),
        cpu_fallback=device == "auto" and hw.gpus == 0,
    )


def check_batches(cfg: Any, world_size: int, needs_critic: bool) -> None:
    """Mini-batches split evenly over the ranks that will run; micro-batches divide them.

    Raises:
        ConfigError: naming the key, the rank count and where it came from.
    """
    errors: list[str] = []
    prompts = int(cfg.data.train_batch_size)
    if prompts % world_size:
        errors.append(
            f"data.train_batch_size={prompts} does not split over the {world_size} training ranks "
            "that will run"
        )
    sections = [("actor_rollout_ref.actor", cfg.actor_rollout_ref.actor)]
    if needs_critic:
        sections.append(("critic", cfg.critic))
    for prefix, section in sections:
        mini = int(section.ppo_mini_batch_size)
        micro = section.ppo_micro_batch_size_per_gpu
        if mini % world_size:
            errors.append(
                f"{prefix}.ppo_mini_batch_size={mini} must split evenly over the {world_size} "
                "data-parallel ranks that will run"
            )
            continue
        per_rank = mini // world_size
        if micro is not None and per_rank % int(micro):
            errors.append(
                f"{prefix}.ppo_micro_batch_size_per_gpu={micro} must divide the per-rank "
                f"mini-batch {prefix}.ppo_mini_batch_size / {world_size} ranks = {per_rank}"
            )
    if errors:
        raise ConfigError(errors)
