"""The ``--help`` a person reads: the keys users set most, by section, each with its default and
the first sentence of its help; the full listing is ``--help-all`` (jsonargparse's, every key)
and ``docs/configuration.md``.

The text of each key comes from where the key is declared (the docstrings that the full listing
shows too), so the two cannot disagree; only the choice of keys is written here.
"""

from __future__ import annotations

import textwrap
from typing import Any

#: ``agentfly fit``'s keys, by section, in the order a new task sets them
FIT_KEYS: dict[str, tuple[str, ...]] = {
    "your task (rows, tools, reward)": (
        "data.train_files", "data.val_files", "data.prompt_key", "agent.init_config.plugins",
        "agent.init_config.tools", "agent.init_config.reward_name", "agent.init_config.system_prompt",
    ),
    "the model and its chat format": (
        "actor_rollout_ref.model.path", "agent.init_config.agent_type", "agent.init_config.template",
        "agent.init_config.max_model_len", "actor_rollout_ref.model.lora.rank",
    ),
    "rollouts": (
        "data.train_batch_size", "agent.run_config.num_chains", "agent.run_config.max_turns",
        "agent.run_config.generation_config.max_tokens", "actor_rollout_ref.rollout.response_length",
        "actor_rollout_ref.rollout.temperature", "actor_rollout_ref.rollout.name",
        "actor_rollout_ref.rollout.gpu_memory_utilization", "data.val_batch_size",
    ),
    "the update": (
        "algorithm.adv_estimator", "actor_rollout_ref.actor.optim.lr",
        "actor_rollout_ref.actor.ppo_mini_batch_size", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "actor_rollout_ref.actor.ppo_epochs", "actor_rollout_ref.actor.use_kl_loss",
        "actor_rollout_ref.actor.kl_loss_coef", "actor_rollout_ref.actor.entropy_coeff",
        "actor_rollout_ref.actor.policy_loss.loss_mode",
    ),
    "the run": (
        "trainer.total_training_steps", "trainer.default_local_dir", "trainer.save_freq", "trainer.test_freq",
        "trainer.val_before_train", "trainer.resume_mode", "trainer.logger", "trainer.n_gpus_per_node",
        "trainer.nnodes", "trainer.rollout_mode", "trainer.seed", "trainer.precision",
    ),
}

SFT_KEYS: dict[str, tuple[str, ...]] = {
    "the data": (
        "data.train_files", "data.val_files", "data.format", "data.messages_key", "data.min_reward",
        "data.max_length", "data.train_batch_size", "data.micro_batch_size_per_gpu",
    ),
    "the model and its chat format (as agentfly fit will roll it out)": (
        "actor_rollout_ref.model.path", "agent.init_config.agent_type", "agent.init_config.template",
        "agent.init_config.tools", "agent.init_config.system_prompt", "agent.init_config.plugins",
        "actor_rollout_ref.model.lora.rank", "actor_rollout_ref.actor.optim.lr",
    ),
    "the run": (
        "trainer.total_epochs", "trainer.total_training_steps", "trainer.default_local_dir",
        "trainer.save_freq", "trainer.test_freq", "trainer.logger", "trainer.n_gpus_per_node",
        "trainer.precision",
    ),
}

SFT_OPTIONS = """options:
  --config FILE, -c FILE   a YAML file of the same sections
  --ckpt_path CKPT         the checkpoint to resume
  --print_config           print the composed config and exit
  --help-all               every key with its type, default and help
"""

FIT_USAGE = """usage: agentfly {stage} [--config FILE] [KEY=VALUE | --KEY VALUE ...] [--ckpt_path CKPT]

{what}

Keys are AgentFly's and verl's, in Hydra's grammar (a.b=c, +a.b=c, ~a.b, a.l=[x,y]) or as
--a.b value flags; --config FILE reads a YAML file of the same sections (`--print_config` writes
one). A later source wins. With no --config and no data.train_files, the demo task runs.
"""

FIT_WHAT = {
    "fit": "Train an agent by RL: roll out the prompts with the current weights, reward the chains,\n"
           "update. The run folder is trainer.default_local_dir.",
    "validate": "Roll out the validation set with a checkpoint's actor (--ckpt_path, or the one\n"
                "trainer.resume_mode finds) and report its metrics in <run>/validate/.",
    "test": "Roll out the validation set with a checkpoint's actor, as validate does, into <run>/test/.",
    "predict": "Roll out the validation set with a checkpoint's actor; the chains go to <run>/predict/.",
}

FIT_OPTIONS = """options:
  --config FILE, -c FILE   a YAML file of verl's sections, or one --print_config wrote
  --ckpt_path CKPT         the checkpoint to resume or to validate (else trainer.resume_mode's)
  --print_config           print the composed config and exit (=skip_default: only what differs)
  --help-all               every key with its type, default and help (also docs/configuration.md)
  --data.help CLASS        the arguments of a data module of your own (--data.class_path CLASS)
"""


def first_sentence(text: str | None, width: int = 94) -> list[str]:
    """A help text's first sentence (up to a full stop outside brackets), without reST's double
    backticks, wrapped to two lines at most."""
    if not text:
        return []
    flat = " ".join(text.replace("``", "`").split())
    depth, end = 0, len(flat)
    for i, ch in enumerate(flat):
        depth += (ch in "([{") - (ch in ")]}")
        if ch == "." and depth == 0 and (i + 1 == len(flat) or flat[i + 1] == " "):
            end = i
            break
    lines = textwrap.wrap(flat[:end], width)
    return lines[:1] + ([lines[1] + (" …" if len(lines) > 2 else "")] if len(lines) > 1 else [])


def shown(value: Any) -> str:
    """A default as one writes it on the command line."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(shown, value)) + "]"
    return str(value)


def key_lines(keys: dict[str, tuple[str, ...]], helps: dict[str, tuple[str | None, Any]]) -> list[str]:
    """Each section's keys as ``key=default`` and the first sentence of its help beneath.

    ``helps``: ``{key: (help text, default)}``; a key it lacks is a bug in the list above.
    """
    lines = []
    for title, names in keys.items():
        lines += ["", f"{title}:"]
        for name in names:
            text, default = helps[name]
            lines.append(f"  {name}={shown(default)}")
            lines += [f"      {line}" for line in first_sentence(text)]
    return lines


def parser_helps(*parsers: Any) -> dict[str, tuple[str | None, Any]]:
    """``{key: (help, default)}`` of every option of jsonargparse ``parsers`` (a subclass group's
    ``init_args`` folded into the group's name: ``data.init_args.seed`` is ``data.seed``)."""
    out: dict[str, tuple[str | None, Any]] = {}
    for parser in parsers:
        for action in parser._actions:
            dest = str(action.dest).replace(".init_args.", ".")
            out.setdefault(dest, (action.help, action.default))
    return out


def fit_help(stage: str, parser: Any, data_parser: Any, defaults: dict[str, Any]) -> str:
    """``agentfly <stage> --help``: usage, the keys users set most and the options.

    ``parser``: ``agentfly fit``'s; ``data_parser``: one holding the default data module's
    arguments (the fit parser shows a subclass group's only under ``--data.help``);
    ``defaults``: ``{key: default}`` where the composed default differs from the signature's
    (``trainer.logger``'s ``None`` is ``[console]``).
    """
    helps = parser_helps(parser, data_parser)
    helps.update({k: (helps[k][0], v) for k, v in defaults.items() if k in helps})
    return page(FIT_USAGE.format(stage=stage, what=FIT_WHAT[stage]), key_lines(FIT_KEYS, helps), FIT_OPTIONS)


def sft_help(usage: str, parser: Any) -> str:
    """``agentfly sft --help``: its usage, the keys set most and the options."""
    return page(usage, key_lines(SFT_KEYS, parser_helps(parser)), SFT_OPTIONS)


def page(head: str, body: list[str], options: str) -> str:
    return "\n".join([head.rstrip(), *body, "", options.rstrip(), ""])
