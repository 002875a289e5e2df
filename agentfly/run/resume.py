"""What a fit that resumes keeps its word on: a finished run trains nothing, and a config that
differs from the checkpoint's is named, and refused where it changes what the checkpoint means.

Every checkpoint records the config of the run that wrote it (``agentfly_config``: the composed
config as dotted keys, :func:`config_record`, written by
:class:`~agentfly.callbacks.config_record.ConfigRecord`). Before a fit resumes from a checkpoint
(``resume_mode=auto``, ``resume_path`` or ``--ckpt_path``), :func:`check_resume` compares:

- the checkpoint already holds the run's iterations (``trainer.total_training_steps``, or
  ``total_epochs`` passes): :class:`RunComplete`, and nothing starts;
- the models it holds (actor, reference, critic) are not the ones this config trains (the
  estimator decides the critic, ``use_kl_loss``/``use_kl_in_reward`` the reference): refused,
  whatever is set, since its state cannot be loaded into this run;
- a key of :data:`MEANING_KEYS` differs (the base model, the estimator, the chat format the
  weights were trained to read and write): refused unless ``trainer.resume_changed_config=true``;
- any other key differs: named in a warning, the keys of :data:`SCHEDULE_KEYS` (how long the run
  goes, what it logs) apart from those that change the training.

Keys of :data:`UNCOMPARED_KEYS` say how to resume and where the run lives, not what it trains. A
checkpoint written before the record existed has no config to compare: that is said once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from agentfly.callbacks.config_record import RECORD_KEY
from agentfly.core.errors import ConfigError

logger = logging.getLogger(__name__)


#: Keys whose change makes the checkpoint mean something else: resuming across one is refused
#: unless ``trainer.resume_changed_config=true``.
MEANING_KEYS = (
    "actor_rollout_ref.model.path",  # the base weights (and the reference, the tokenizer)
    "critic.model.path",
    "algorithm.adv_estimator",  # what the critic and the advantages are
    "agent.init_config.template",  # the chat format the weights were trained on
    "agent.init_config.agent_type",  # the action format they learned to write
    "agent.init_config.tool_parser_name",
    # the adapter's shape and scale: what its checkpointed weights are
    "actor_rollout_ref.model.lora.rank",
    "actor_rollout_ref.model.lora.alpha",
    "actor_rollout_ref.model.lora.target_modules",
)
#: Keys that change only how long the run goes, how often it saves and validates, and what it
#: logs: named in the note, apart from the keys that change the training.
SCHEDULE_KEYS = (
    "trainer.total_training_steps", "trainer.total_epochs", "trainer.save_freq", "trainer.test_freq",
    "trainer.val_before_train", "trainer.logger", "trainer.project_name", "trainer.experiment_name",
    "trainer.num_threads", "trainer.callbacks",
)
#: Keys not compared: they say how to resume and where the run lives.
UNCOMPARED_KEYS = (
    "trainer.resume_mode", "trainer.resume_from_path", "trainer.resume_changed_config",
    "trainer.default_local_dir", "trainer.print_config",
)
MODELS = ("actor", "reference", "critic")  # the module's models, as its state_dict names them
# the keys that decide which of MODELS a run holds (named when a checkpoint's models differ)
_STRUCTURE_KEYS = (
    "algorithm.adv_estimator", "critic.model.path", "actor_rollout_ref.actor.use_kl_loss",
    "algorithm.use_kl_in_reward", "actor_rollout_ref.model.lora.rank",
)


class RunComplete(Exception):
    """The checkpoint a fit would resume from already holds every iteration of the run."""


def config_record(cfg: Any) -> dict[str, Any]:
    """The composed config as ``{dotted key: value}`` (plain values; a mapping's leaves each)."""
    from agentfly.config.keys import plain

    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict) and value:
                walk(value, f"{prefix}{key}.")
            else:
                out[f"{prefix}{key}"] = value

    walk(plain(cfg), "")
    return out


@dataclass
class CheckpointHeader:
    """What a checkpoint says about its run, its tensors not read.

    Attributes:
        iteration: RL iterations done (optimizer steps of an ``agentfly sft`` run).
        config: its run's :func:`config_record` (None: written before the record existed).
        models: which of :data:`MODELS` its state holds.
        stage: the command that wrote it: ``fit``, or ``sft`` (``agentfly_stage``).
    """

    iteration: int
    config: dict[str, Any] | None
    models: tuple[str, ...]
    stage: str = "fit"


def read_header(path: str) -> CheckpointHeader:
    """The checkpoint's :class:`CheckpointHeader` (its tensors memory-mapped, not read)."""
    import torch

    ckpt = torch.load(path, mmap=True, map_location="cpu", weights_only=False)
    held = {key.split(".", 1)[0] for key in ckpt.get("state_dict", {})}
    return CheckpointHeader(
        iteration=int(ckpt.get("agentfly_iteration", 0)),
        config=ckpt.get(RECORD_KEY),
        models=tuple(m for m in MODELS if m in held),
        stage=str(ckpt.get("agentfly_stage", "fit")),
    )


def planned_models(plan: Any) -> tuple[str, ...]:
    """Which of :data:`MODELS` the run of ``plan`` trains or holds."""
    kl = plan.module.get("kl")  # an agentfly sft run's module has no KL term, no critic
    # with LoRA the reference is the actor with its adapter off: no model of its own
    reference = kl is not None and kl.needs_reference and not plan.module["model"].lora.enabled
    held = {"actor": True, "reference": reference, "critic": plan.module.get("critic") is not None}
    return tuple(m for m in MODELS if held[m])


@dataclass
class Change:
    key: str
    was: Any
    now: Any

    def __str__(self) -> str:
        return f"{self.key}: {self.was!r} -> {self.now!r}"


def changes(recorded: dict[str, Any], current: dict[str, Any]) -> list[Change]:
    """Keys both configs have whose values differ (:data:`UNCOMPARED_KEYS` aside), sorted."""
    return [
        Change(key, recorded[key], current[key])
        for key in sorted(recorded.keys() & current.keys())
        if key not in UNCOMPARED_KEYS and recorded[key] != current[key]
    ]


def _length_key(cfg: Any) -> str:
    """The key that sets the run's length, with its value."""
    steps = cfg.trainer.total_training_steps
    return f"trainer.total_training_steps={steps}" if steps else f"trainer.total_epochs={cfg.trainer.total_epochs}"


def check_resume(cfg: Any, plan: Any, ckpt: str) -> list[str]:
    """Whether the fit of ``cfg`` may resume from ``ckpt``; returns the notes to say once.

    Args:
        cfg: the composed config given now.
        plan: its :class:`~agentfly.plan.RunPlan` (iterations, models, ``resume_changed_config``).
        ckpt: the checkpoint the fit would resume from.

    Raises:
        ConfigError: another command wrote the checkpoint (``agentfly sft``'s for a fit, a
            fit's for ``agentfly sft``), the checkpoint's models are not this run's, or a key of
            :data:`MEANING_KEYS` differs without ``trainer.resume_changed_config=true``.
        RunComplete: the checkpoint holds ``plan.iterations`` iterations or more.
    """
    header = read_header(ckpt)
    stage = plan.stage
    if header.stage != stage:
        raise ConfigError(
            f"cannot resume from {ckpt}: agentfly {header.stage} wrote it, and this is agentfly "
            f"{stage}; start a new run (another trainer.default_local_dir) with "
            f"actor_rollout_ref.model.path=<its run>/hf_actor to start from its weights"
        )
    found = changes(header.config, config_record(cfg)) if header.config is not None else []
    wanted = planned_models(plan)
    if header.models and header.models != wanted:
        why = "; ".join(str(c) for c in found if c.key in _STRUCTURE_KEYS) or "the config"
        raise ConfigError(
            f"cannot resume from {ckpt}: it holds the models {list(header.models)}, this config "
            f"trains {list(wanted)} ({why}); start a new run, with "
            f"actor_rollout_ref.model.path=<its run>/hf_actor to start from its actor"
        )
    refused = [c for c in found if c.key in MEANING_KEYS]
    if refused and not plan.resume_changed_config:
        raise ConfigError(
            f"cannot resume from {ckpt}: these keys differ from the config it was written with, "
            f"and change what it means: {'; '.join(map(str, refused))}. Start a new run "
            f"(trainer.resume_mode=disable, or another trainer.default_local_dir), or set "
            f"trainer.resume_changed_config=true to resume anyway"
        )
    if header.iteration >= plan.iterations:
        length = _length_key(cfg)
        raise RunComplete(
            f"the run is complete: {ckpt} holds iteration {header.iteration} of {plan.iterations} "
            f"({length}); nothing to train. Raise {length.split('=')[0]} to train further; "
            f"trainer.resume_mode=disable or another trainer.default_local_dir starts a new run"
        )
    return _notes(ckpt, header, found)


def _notes(ckpt: str, header: CheckpointHeader, found: list[Change]) -> list[str]:
    if header.config is None:
        return [f"{ckpt} records no config (written by an earlier agentfly): the config is not compared"]
    schedule = [c for c in found if c.key in SCHEDULE_KEYS]
    training = [c for c in found if c.key not in SCHEDULE_KEYS]
    notes = []
    if training:
        notes.append(
            f"resuming from {ckpt} with keys that differ from the config it was written with: "
            f"{'; '.join(map(str, training))}"
        )
    if schedule:
        notes.append(f"resuming from {ckpt} with a new schedule or logging: {'; '.join(map(str, schedule))}")
    return notes
