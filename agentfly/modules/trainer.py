"""Lightning's ``Trainer`` with verl's ``trainer.*`` keys as arguments.

``agentfly fit`` is a ``LightningCLI`` (:mod:`agentfly.cli`) whose ``trainer`` group is this
class: every ``lightning.pytorch.Trainer`` argument is there (``--trainer.precision``,
``--trainer.callbacks``, ``--trainer.logger`` ...) next to the RL loop's own keys. The
Trainer arguments that verl's keys express are not separate settings: ``max_steps`` is
``total_training_steps`` (RL iterations, not optimizer steps), ``max_epochs`` is
``total_epochs``, ``devices``/``num_nodes``/``accelerator`` are ``n_gpus_per_node``/``nnodes``/
``device``, ``default_root_dir`` is ``default_local_dir`` and ``strategy`` is
``actor_rollout_ref.actor.strategy`` (:data:`agentfly.config.aliases.ALIASES` translates them).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from jsonargparse.typing import NonNegativeInt, PositiveInt
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities.warnings import PossibleUserWarning

from agentfly.modules.settings import CriticSettings
from agentfly.modules.trainer_args import MANAGED, PLANNED_TRAINER_ARGS  # noqa: F401  (re-exported)

#: Warnings of Lightning and torch that ask nothing an agentfly user can do: (message pattern,
#: category, why it does not apply). Silenced while the trainer is built and while it runs.
UNACTIONABLE_WARNINGS: tuple[tuple[str, type[Warning], str], ...] = (
    (r"Found \d+ module\(s\) in eval mode at the start of training", PossibleUserWarning,
     "the frozen reference model is in eval mode on purpose"),
    (r"The `srun` command is available on your system but is not used", PossibleUserWarning,
     "a run started without srun is one on this machine by choice (examples/slurm runs srun)"),
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning,
     "Lightning's batch transfer calls a torch API that torch deprecates; nothing in agentfly's"),
)


class _NoAdvertisement(logging.Filter):
    """Drops Lightning's "💡 Tip" lines (an offer of a hosted logging service), which a run of
    agentfly prints at every start and a user has no reason to act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡 Tip")


logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_NoAdvertisement())


@contextlib.contextmanager
def unactionable_warnings_silenced() -> Iterator[None]:
    """Within: :data:`UNACTIONABLE_WARNINGS` are not shown."""
    with warnings.catch_warnings():
        for pattern, category, _ in UNACTIONABLE_WARNINGS:
            warnings.filterwarnings("ignore", message=pattern, category=category)
        yield


def slurm_launched() -> bool:
    """Whether SLURM launched this process (``srun``), asked without Lightning's hint to use
    ``srun`` when it is installed but not used (:data:`UNACTIONABLE_WARNINGS`)."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    with unactionable_warnings_silenced():
        return SLURMEnvironment.detect()


def cpu_bf16_is_native() -> bool:
    """Whether this CPU computes bf16 in hardware (AVX512-BF16 or AMX, what oneDNN's bf16
    kernels need). Without it torch emulates bf16 matrix products: a SmolLM2-135M update step
    (batch 3 x 256 tokens, 2 cores, an AMD EPYC without AVX512) took 193 s under bf16 autocast
    and 7.8 s in fp32."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch without oneDNN: read the CPU's flags
        try:
            flags = Path("/proc/cpuinfo").read_text().split()
        except OSError:
            return False
        return "avx512_bf16" in flags or "amx_bf16" in flags


def warn_if_bf16_is_emulated(precision: Any, on_cpu: bool) -> None:
    """Warn when a bf16 ``trainer.precision`` trains on a CPU that emulates bf16 (the run goes
    on: the numbers are bf16's, only slower)."""
    if on_cpu and str(precision).startswith("bf16") and not cpu_bf16_is_native():
        warnings.warn(
            f"trainer.precision={precision} on a CPU without bf16 instructions (AVX512-BF16/AMX): "
            "torch emulates them (an update step measured 25x slower than with trainer.precision=32-true)",
            stacklevel=2,
        )


class AgentflyTrainer(pl.Trainer):
    def __init__(
        self,
        *,
        project_name: str = "agentfly",
        experiment_name: str = "default",
        logger: list[Literal["console", "wandb", "tensorboard", "csv"] | Logger] | None = None,
        callbacks: list[Callback] | None = None,
        n_gpus_per_node: PositiveInt = 8,
        nnodes: PositiveInt = 1,
        device: Literal["auto", "cuda", "gpu", "cpu"] = "auto",
        total_training_steps: PositiveInt | None = None,
        total_epochs: PositiveInt = 30,
        save_freq: int = -1,
        test_freq: int = -1,
        val_before_train: bool = True,
        critic_warmup: NonNegativeInt = CriticSettings.warmup_iterations,
        resume_mode: Literal["auto", "disable", "resume_path"] = "auto",
        resume_from_path: str | None = None,
        resume_changed_config: bool = False,
        default_local_dir: str = "checkpoints/${trainer.project_name}/${trainer.experiment_name}",
        seed: int = 42,
        print_config: bool = False,
        num_threads: PositiveInt | None = None,
        rollout_mode: Literal["sync", "one_step_off", "async"] = "sync",
        max_staleness: PositiveInt = 1,
        **kwargs: Any,
    ) -> None:
        """The RL loop's settings and Lightning's.

        Args:
            project_name: logger project.
            experiment_name: logger run name.
            logger: ``console`` (the progress bar), ``csv`` (always on: ``<run>/metrics``),
                ``tensorboard``, ``wandb``, or a Lightning ``Logger`` (class path with
                ``init_args``); ``None`` = ``[console]``.
            callbacks: further Lightning callbacks (class paths with ``init_args``); agentfly's
                own come first.
            n_gpus_per_node: devices per node (Lightning ``devices``).
            nnodes: nodes (Lightning ``num_nodes``).
            device: ``auto`` (GPUs when present, else the CPU), ``cuda`` (= ``gpu``) or ``cpu``.
            total_training_steps: RL iterations (rollout + update), not optimizer steps;
                ``None`` = ``total_epochs`` passes over the training set.
            total_epochs: passes over the training set when ``total_training_steps`` is ``None``.
            save_freq: checkpoint every N iterations and at the end; ``-1`` (verl's default)
                keeps none: the run leaves only ``hf_actor/`` (no resume, no ``validate`` of a
                checkpoint; an interrupt still checkpoints the last finished iteration).
            test_freq: validate every N iterations; ``-1`` = never (nor at the end).
            val_before_train: validate once before the first update.
            critic_warmup: iterations that update only the critic.
            resume_mode: ``auto`` (the newest intact checkpoint in ``default_local_dir``),
                ``disable`` or ``resume_path`` (``resume_from_path``).
            resume_from_path: the checkpoint of ``resume_mode=resume_path``.
            resume_changed_config: resume even when a key that changes what the checkpoint
                means (the model, the estimator, the chat format: :data:`agentfly.run.resume.MEANING_KEYS`)
                differs from the config the checkpoint was written with; ``False`` refuses such a
                resume, naming the keys (other differing keys are named, not refused).
            default_local_dir: the run directory (checkpoints, metrics, trajectories, report).
            seed: global seed (``seed_everything``, the data order, the engines).
            print_config: print the composed config before training.
            num_threads: torch threads in each training process; ``None`` = torch's default
                (with ``rollout_mode`` other than ``sync`` on a CPU machine: the cores the
                engines do not get, see ``rollout_mode``).
            rollout_mode: ``sync`` (each iteration rolls out on the weights of the update
                before it: on-policy), ``one_step_off`` (iteration k + 1 rolls out on the
                weights of update k − 1 while update k runs) or ``async`` (rollouts run up to
                ``max_staleness`` iterations ahead; new weights reach the engines as each update
                ends). See :mod:`agentfly.rollout.producer`. Off ``sync`` on a CPU machine the
                engines get half the cores and the trainer the other half, and the trainer all
                of them while the in-process engine has no rollout to run.
            max_staleness: in ``async`` mode, how many policy versions (actor updates) older than
                the policy training on it a sampled token may be; an older chain's group is
                rolled out again, and counted (``rollout/stale_refused_chains``).
            kwargs: ``lightning.pytorch.Trainer`` arguments.
        """
        # the RL loop's arguments are the schema of their keys: the run's plan reads them from the
        # composed config, and the agentfly callbacks it builds hold them
        names = [x for x in logger or [] if isinstance(x, str)]
        if names:
            raise TypeError(
                f"AgentflyTrainer(logger={names}): logger names become Logger instances when the "
                "run is planned (agentfly.run.plan.plan_loggers); pass instances here"
            )
        with unactionable_warnings_silenced():
            super().__init__(logger=list(logger or []) or False, callbacks=callbacks, **kwargs)
        warn_if_bf16_is_emulated(self.precision, isinstance(self.accelerator, CPUAccelerator))

    def fit(self, *args: Any, **kwargs: Any) -> None:
        with unactionable_warnings_silenced():
            super().fit(*args, **kwargs)

    def validate(self, *args: Any, **kwargs: Any) -> Any:
        with unactionable_warnings_silenced():
            return super().validate(*args, **kwargs)

    def test(self, *args: Any, **kwargs: Any) -> Any:
        with unactionable_warnings_silenced():
            return super().test(*args, **kwargs)

    def predict(self, *args: Any, **kwargs: Any) -> Any:
        with unactionable_warnings_silenced():
            return super().predict(*args, **kwargs)

    def save_checkpoint(self, filepath: Any, weights_only: bool | None = False, storage_options: Any = None) -> None:
        """Lightning's, whole by default (``weights_only=False``): a checkpoint of a run holds the
        optimizers, the loops, the KL controller's and the data order's state beside the weights,
        so that a resumed run goes on as the uninterrupted one would."""
        super().save_checkpoint(filepath, weights_only=weights_only, storage_options=storage_options)
