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
  weights were trained to read and write, the prompts per iteration): refused unless
  ``trainer.resume_changed_config=true``. One this run does not use (``critic.model.path`` under
  GRPO, which trains no critic: :mod:`agentfly.config.inactive`'s rules) is named, not refused;
  the keys that decide what is used (the estimator, the LoRA rank) are meaning keys themselves;
- any other key differs: named in a warning, the keys of :data:`SCHEDULE_KEYS` (how long the run
  goes, what it logs) apart from those that change the training.

Every key either record holds is compared. A key the checkpoint's record lacks (written by an
agentfly before the key existed) is compared at its default (:func:`key_defaults`; a default
that follows another key, as ``data.seed`` follows ``trainer.seed``, at that key's recorded
value): the value its writer ran with, since a key is added with the default that keeps the
earlier behaviour, and that is how Lightning's ``load_from_checkpoint`` fills a hyperparameter a
checkpoint lacks. So a meaning key set now to other than its default is refused even against a
record that never held it. A key the record holds that this config lacks (one renamed or
removed since, a Lightning argument set then) is named with ``(not set)``.

Keys of :data:`UNCOMPARED_KEYS` say how to resume and where the run lives, not what it trains. A
checkpoint written before the record existed has no config to compare: that is said once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from agentfly.callbacks.config_record import RECORD_KEY
from agentfly.config.inactive import inactive_reason
from agentfly.core.errors import ConfigError

logger = logging.getLogger(__name__)


#: Keys whose change makes the checkpoint mean something else: resuming across one is refused
#: unless ``trainer.resume_changed_config=true``.
MEANING_KEYS = (
    "actor_rollout_ref.model.path",  # the base weights (and the reference, the tokenizer)
    "critic.model.path",
    "algorithm.adv_estimator",  # what the critic and the advantages are
    "data.train_batch_size",  # the prompts of each iteration: which ones the resumed run sees
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


class _NotSet:
    """The value of a key a record lacks and that has no default: one renamed or removed, a
    Lightning argument left at Lightning's default."""

    def __repr__(self) -> str:
        return "(not set)"


NOT_SET = _NotSet()


@dataclass
class Change:
    """One key whose value differs between the checkpoint's record and this config.

    Attributes:
        note: where the value of a key one record lacks was taken from.
        unused: why the key has no effect in this run (it is named, never refused).
    """

    key: str
    was: Any
    now: Any
    note: str = ""
    unused: str = ""

    def __str__(self) -> str:
        why = "; ".join(w for w in (self.note, self.unused and f"no effect: {self.unused}") if w)
        return f"{self.key}: {self.was!r} -> {self.now!r}" + (f" ({why})" if why else "")


def key_defaults(stage: str = "fit") -> dict[str, Any]:
    """Every key's default, as a config record holds it (``agentfly sft``'s ``data.*`` for ``sft``)."""
    from agentfly.config.keys import verl_key_table

    leaves = verl_key_table()[0]
    if stage == "sft":
        from agentfly.config.schema_sft import sft_key_table

        leaves = {k: v for k, v in leaves.items() if not k.startswith("data.")} | sft_key_table()[0]
    return {key: default for key, (_, default) in leaves.items()}


def _walk(node: Any, parts: list[str]) -> Any:
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return NOT_SET
        node = node[part]
    return node


def _value(record: dict[str, Any], key: str, defaults: dict[str, Any]) -> tuple[Any, str]:
    """``key``'s value in ``record``, and, when the record lacks the key, where the value comes
    from: its default, or the recorded value of the key its default follows; else
    :data:`NOT_SET`."""
    from agentfly.config.load import FOLLOWS

    if key in record:
        return record[key], ""
    if key in FOLLOWS and defaults.get(key) is None:
        return _value(record, FOLLOWS[key], defaults)[0], f"the value of {FOLLOWS[key]}"
    if key in defaults:
        return defaults[key], "its default"
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):  # under a free-form mapping: that mapping's default
        if isinstance(defaults.get(prefix := ".".join(parts[:i])), dict):
            value = _walk(defaults[prefix], parts[i:])
            return value, "its default" if value is not NOT_SET else ""
    return NOT_SET, ""


def changes(
    recorded: dict[str, Any], current: dict[str, Any], defaults: dict[str, Any] | None = None
) -> list[Change]:
    """Keys whose values differ between the two records (:data:`UNCOMPARED_KEYS` aside), sorted.

    A key one record lacks is taken at its value there by :func:`_value` (``defaults``: the
    keys' defaults, :func:`key_defaults` when None). A mapping one record holds whole (empty)
    while the other holds keys under it is compared through those keys.
    """
    defaults = key_defaults() if defaults is None else defaults
    out = []
    for key in sorted(recorded.keys() | current.keys()):
        if key in UNCOMPARED_KEYS:
            continue
        other = current if key in recorded else recorded
        if key not in other and any(k.startswith(key + ".") for k in other):
            continue
        was, was_note = _value(recorded, key, defaults)
        now, now_note = _value(current, key, defaults)
        if was != now:
            note = f"the checkpoint's record lacks it: {was_note}" if was_note else ""
            out.append(Change(key, was, now, note or (now_note and f"this config lacks it: {now_note}")))
    return out


def _length_key(cfg: Any) -> str:
    """The key that sets the run's length, with its value."""
    steps = cfg.trainer.total_training_steps
    return f"trainer.total_training_steps={steps}" if steps else f"trainer.total_epochs={cfg.trainer.total_epochs}"


def check_resume(cfg: Any, plan: Any, ckpt: str) -> list[str]:
    """Whether the fit of ``cfg`` may resume from ``ckpt``; returns the notes to say once.

    Args:
        cfg: the composed config given now.
        plan: its :class:`~agentfly.run.plan.RunPlan` (iterations, models, ``resume_changed_config``).
        ckpt: the checkpoint the fit would resume from.

    Raises:
        ConfigError: another command wrote the checkpoint (``agentfly sft``'s for a fit, a
            fit's for ``agentfly sft``), the checkpoint's models are not this run's, or a key of
            :data:`MEANING_KEYS` that this run uses differs (a key the checkpoint's record lacks
            at its default) without ``trainer.resume_changed_config=true``.
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
    found = []
    if header.config is not None:
        found = changes(header.config, config_record(cfg), key_defaults(stage))
    wanted = planned_models(plan)
    if header.models and header.models != wanted:
        why = "; ".join(str(c) for c in found if c.key in _STRUCTURE_KEYS) or "the config"
        raise ConfigError(
            f"cannot resume from {ckpt}: it holds the models {list(header.models)}, this config "
            f"trains {list(wanted)} ({why}); start a new run, with "
            f"actor_rollout_ref.model.path=<its run>/hf_actor to start from its actor"
        )
    for change in found:
        if change.key in MEANING_KEYS:
            change.unused = inactive_reason(cfg, change.key) or ""
    refused = [c for c in found if c.key in MEANING_KEYS and not c.unused]
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
