"""The one reader of ``agentfly sft``'s config: what each component of the run receives.

As :mod:`agentfly.run.plan` for ``agentfly fit``, and through :mod:`agentfly.run.job` where the two stages
share a part: the ranks (:func:`~agentfly.run.topology.resolve_topology`, with no engine), the agent,
tools and template the examples are laid out with (:func:`~agentfly.run.plan.plan_rollout`, the
rollout side ``agentfly fit`` would build from the same keys), the policy model and optimizer
(:mod:`agentfly.run.module_plan`), the Trainer and loggers (:func:`~agentfly.run.job.plan_trainer`,
:func:`~agentfly.run.job.plan_loggers`) and the iteration schedule (stop, checkpoint every
``trainer.save_freq`` steps, export to ``<run>/hf_actor``). One iteration is one optimizer step
on ``data.train_batch_size`` examples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentfly.config.keys import plain
from agentfly.core.errors import ConfigError
from agentfly.models.paths import check_model_paths
from agentfly.modules.settings import UpdateSettings
from agentfly.run.job import JobPlan, job_fields, plan_trainer
from agentfly.run.module_plan import fsdp_settings, model_dtype, model_settings, optimizer_settings
from agentfly.run.plan import plan_rollout
from agentfly.run.topology import Hardware, Topology, resolve_topology


@dataclass(kw_only=True)
class SFTPlan(JobPlan):
    """Everything an ``agentfly sft`` run builds: :class:`~agentfly.run.job.JobPlan`'s fields
    (``module``: :class:`~agentfly.modules.sft_module.AgentSFTModule`'s keyword arguments;
    ``datamodule``: :class:`~agentfly.sft.datamodule.SFTDataModule`'s, the examples and tokenizer
    aside; ``rollout``: the agent type, tools and template the examples are laid out with), and
    the examples' own part.

    Attributes:
        examples: :class:`~agentfly.sft.examples.ExampleMaker` keyword arguments (the renderer
            aside).
        train_files: the training files.
        val_files: the validation files.
        bad_rows: ``error`` or ``skip``.
    """

    examples: dict[str, Any]
    train_files: list[str] = field(default_factory=list)
    val_files: list[str] = field(default_factory=list)
    bad_rows: str = "error"
    stage: str = "sft"


def sft_topology(cfg: Any, hw: Hardware) -> Topology:
    """The training ranks ``cfg`` asks for on ``hw``: ``agentfly fit``'s topology with no
    rollout engine (supervised training generates nothing)."""
    from omegaconf import OmegaConf

    no_engine = OmegaConf.merge(cfg, {"actor_rollout_ref": {"rollout": {"num_engines": 0}}})
    return resolve_topology(no_engine, hw)


def check_sft_batches(cfg: Any, world: int, examples: int) -> int:
    """The rank's share of ``data.train_batch_size``.

    Raises:
        ConfigError: the batch does not split over the ranks, the micro-batch does not divide
            the share, or the batch is larger than the training examples.
    """
    batch, micro = int(cfg.data.train_batch_size), cfg.data.micro_batch_size_per_gpu
    errors = []
    if batch % world:
        errors.append(f"data.train_batch_size={batch} does not split over the {world} training ranks that will run")
    share = max(1, batch // world)
    if micro is not None and share % int(micro):
        errors.append(
            f"data.micro_batch_size_per_gpu={micro} must divide the rank's share of the batch, "
            f"data.train_batch_size / {world} ranks = {share}"
        )
    if batch > examples:
        errors.append(f"data.train_batch_size={batch} is larger than the {examples} training examples; lower it")
    if errors:
        raise ConfigError(errors)
    return share


def check_sft_vision(cfg: Any) -> None:
    """What a vision-language policy cannot be trained with yet: padding-free packing (rows
    holding images run whole, with the model's multimodal positions).

    Raises:
        ConfigError: naming the key.
    """
    from agentfly.models.loading import is_vision_model

    model = cfg.actor_rollout_ref.model
    path = Path(str(model.path)).expanduser()
    if not model.use_remove_padding or not (path / "config.json").is_file():
        return
    if is_vision_model(path, bool(model.trust_remote_code)):
        raise ConfigError(
            f"{path} is a vision-language model: actor_rollout_ref.model.use_remove_padding=true "
            "packs rows without their images; set it false"
        )


def example_settings(cfg: Any) -> dict[str, Any]:
    """How a row becomes an example: :class:`~agentfly.sft.examples.ExampleMaker`'s keyword
    arguments (the renderer aside)."""
    data = cfg.data
    return dict(
        format=str(data.format), messages_key=str(data.messages_key),
        min_reward=None if data.min_reward is None else float(data.min_reward),
        max_length=int(data.max_length),
    )


def plan_sft(cfg: Any, train_examples: int, hardware: Hardware | None = None) -> SFTPlan:
    """Everything an ``agentfly sft`` run of ``cfg`` builds on ``hardware`` (detected when None),
    ``train_examples`` being the training examples kept (they set the run's length when
    ``trainer.total_training_steps`` is unset: ``total_epochs`` passes, each of
    ``train_examples // data.train_batch_size`` steps).

    Raises:
        ConfigError: a model path that cannot be loaded, what the machine cannot run, batch
            sizes that do not split (:func:`check_sft_batches`), packing for a vision-language
            model (:func:`check_sft_vision`).
    """
    hw = hardware or Hardware.detect()
    topology = sft_topology(cfg, hw)
    check_model_paths(cfg, needs_critic=False)
    check_sft_vision(cfg)
    share = check_sft_batches(cfg, topology.world_size, train_examples)
    data, trainer = cfg.data, cfg.trainer
    actor, model = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.model
    steps = trainer.total_training_steps
    iterations = int(steps) if steps else max(1, train_examples // int(data.train_batch_size)) * int(trainer.total_epochs)
    micro = data.micro_batch_size_per_gpu
    update = UpdateSettings(
        name="actor",
        mini_batch_size=share,
        micro_batch_size=None if micro is None else int(micro),
        grad_clip=float(actor.grad_clip),
        gradient_checkpointing=bool(model.enable_gradient_checkpointing),
        activation_offload=bool(model.enable_activation_offload),
    )
    run_dir = Path(str(trainer.default_local_dir))
    callbacks: list[tuple[str, dict[str, Any]]] = [("IterationScheduleCallback", dict(
        total_iterations=iterations, checkpoint_dir=str(run_dir / "checkpoints"),
        save_freq=int(trainer.save_freq or -1), hf_dir=str(run_dir / "hf_actor"),
        hf_export=str(model.lora.export),
    )), ("InterruptCheckpoint", {"resume_mode": str(trainer.resume_mode)})]
    console = "console" in (plain(trainer.logger) or [])
    if console:
        callbacks.append(("IterationProgressBar", {"total_iterations": iterations}))
    return SFTPlan(
        **job_fields(cfg, topology, trainer_keys=_trainer_keys()),
        topology=topology,
        iterations=iterations,
        module=dict(
            model=model_settings(model, dtype=model_dtype(actor.fsdp_config)),
            update=update,
            optim=optimizer_settings(actor.optim, iterations),
            fsdp=fsdp_settings(actor.fsdp_config),
        ),
        datamodule=dict(
            train_batch_size=int(data.train_batch_size),
            val_batch_size=None if micro is None else int(micro),
            shuffle=bool(data.shuffle),
            seed=int(data.seed),
        ),
        examples=example_settings(cfg),
        rollout=plan_rollout(cfg, topology),
        callbacks=callbacks,
        trainer=plan_trainer(cfg, topology, needs_critic=False),
        train_files=[str(f) for f in data.train_files],
        val_files=[str(f) for f in data.val_files],
        bad_rows=str(data.bad_rows),
        num_threads=None if trainer.num_threads is None else int(trainer.num_threads),
    )


def _trainer_keys() -> set[str]:
    """The ``trainer.*`` names ``agentfly sft`` accepts."""
    from agentfly.config.schema_sft import sft_key_table

    return {k.removeprefix("trainer.") for k in sft_key_table()[0] if k.startswith("trainer.")}
