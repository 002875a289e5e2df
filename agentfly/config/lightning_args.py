"""Lightning ``Trainer`` arguments on agentfly's command line (LightningCLI conventions).

``--trainer.max_steps 100`` and the other ``pl.Trainer`` arguments work in ``agentfly fit`` as they
do in LightningCLI. Those that agentfly's own keys already express are aliases of those keys
(:data:`agentfly.config.aliases.ALIASES`: ``max_steps`` is ``trainer.total_training_steps``,
RL iterations). The rest land in ``trainer.lightning``, handed to ``pl.Trainer`` as they are
(``--trainer.precision bf16-true``, ``--trainer.profiler simple``, ``--trainer.max_time
00:01:00:00``), except the few that would break how agentfly drives training, which are refused
with the key to use instead (:data:`MANAGED`). ``trainer.callbacks`` adds callbacks:
``--trainer.callbacks+=LearningRateMonitor`` (a class of ``lightning.pytorch.callbacks`` or any
dotted class path) followed by ``--trainer.callbacks.init_args.NAME VALUE`` for its arguments.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any

#: pl.Trainer arguments agentfly sets itself, with what to use instead.
MANAGED: dict[str, str] = {
    "callbacks": "trainer.callbacks",
    "logger": "trainer.logger (console, csv, tensorboard, wandb)",
    "enable_checkpointing": "trainer.save_freq",
    "accumulate_grad_batches": "actor_rollout_ref.actor.ppo_mini_batch_size / ppo_micro_batch_size_per_gpu",
    "gradient_clip_val": "actor_rollout_ref.actor.grad_clip",
    "gradient_clip_algorithm": "actor_rollout_ref.actor.grad_clip (norm clipping)",
    "val_check_interval": "trainer.test_freq",
    "check_val_every_n_epoch": "trainer.test_freq",
    "limit_train_batches": "trainer.total_training_steps",
    "use_distributed_sampler": "nothing (the rollout data module shards prompts by rank)",
    "reload_dataloaders_every_n_epochs": "nothing (prompts are drawn per iteration)",
    "plugins": "nothing (not supported from the command line)",
    # spelled by agentfly's own keys (aliases on the command line and in YAML)
    "max_steps": "trainer.total_training_steps (= --trainer.max_steps)",
    "max_epochs": "trainer.total_epochs (= --trainer.max_epochs)",
    "devices": "trainer.n_gpus_per_node (= --trainer.devices)",
    "num_nodes": "trainer.nnodes (= --trainer.num_nodes)",
    "accelerator": "trainer.device (= --trainer.accelerator)",
    "strategy": "actor_rollout_ref.actor.strategy (= --trainer.strategy)",
    "default_root_dir": "trainer.default_local_dir (= --trainer.default_root_dir)",
}


@functools.cache
def trainer_arguments() -> frozenset[str]:
    """The keyword arguments of ``lightning.pytorch.Trainer``."""
    from lightning.pytorch import Trainer

    return frozenset(p for p in inspect.signature(Trainer.__init__).parameters if p != "self")


def check_lightning_kwargs(kwargs: dict[str, Any]) -> list[str]:
    """Problems with ``trainer.lightning``: unknown Trainer arguments and managed ones."""
    import difflib

    errors = []
    known = trainer_arguments()
    for name in kwargs:
        if name in MANAGED:
            errors.append(
                f"trainer.{name} (trainer.lightning.{name}): agentfly sets this Trainer argument itself; "
                f"use {MANAGED[name]}"
            )
        elif name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            errors.append(f"trainer.lightning.{name} is not an argument of lightning.pytorch.Trainer{hint}")
    return errors


def callback_spec(spec: Any) -> tuple[str, dict[str, Any]]:
    """``(class path, init args)`` from ``"Name"``, ``"pkg.mod.Name"`` or ``{class_path, init_args}``."""
    if isinstance(spec, str):
        return spec, {}
    if isinstance(spec, dict) and isinstance(spec.get("class_path"), str):
        extra = set(spec) - {"class_path", "init_args"}
        if extra:
            raise ValueError(f"trainer.callbacks entry {spec!r}: unknown field(s) {sorted(extra)}")
        return spec["class_path"], dict(spec.get("init_args") or {})
    raise ValueError(
        f"trainer.callbacks entry {spec!r}: expected a class path or {{class_path: ..., init_args: {{...}}}}"
    )


def resolve_class(path: str) -> type:
    """A callback class from a dotted path, or a bare name in ``lightning.pytorch.callbacks``."""
    module_name, _, name = path.rpartition(".")
    module_name = module_name or "lightning.pytorch.callbacks"
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"trainer.callbacks: cannot import {path!r} ({exc})") from exc
    if not inspect.isclass(cls):
        raise ValueError(f"trainer.callbacks: {path!r} is not a class")
    return cls


def build_callbacks(specs: list[Any]) -> list[Any]:
    """Instantiate ``trainer.callbacks`` entries; each must be a Lightning ``Callback``."""
    from lightning.pytorch.callbacks import Callback

    out = []
    for spec in specs:
        path, init_args = callback_spec(spec)
        cls = resolve_class(path)
        if not issubclass(cls, Callback):
            raise ValueError(f"trainer.callbacks: {path!r} is not a lightning.pytorch Callback")
        try:
            out.append(cls(**init_args))
        except TypeError as exc:
            raise ValueError(f"trainer.callbacks: {path}({init_args}) failed: {exc}") from exc
    return out
