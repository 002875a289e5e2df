"""The ``agentfly`` command line.

``agentfly rollout [--config FILE] [key=value ...] --output OUT.jsonl`` runs rollouts alone with
the same config as training and writes one JSON line per chain plus a summary. Both override
styles work and may be mixed: the seeds' Hydra-style ``agent.run_config.num_chains=4`` and
LightningCLI-style ``--agent.run_config.num_chains 4``. ``agentfly fit`` (or ``train``, as the seeds spell it)
trains with the same config; ``validate``/``test`` roll out the validation set with the weights
of ``--ckpt_path`` (LightningCLI's flag; for ``fit`` the checkpoint to resume from), else of the
checkpoint ``trainer.resume_mode`` finds, else of the base model (said once).

``fit`` and ``rollout`` end in order on SIGTERM as on an error (:mod:`agentfly.shutdown`): the
engines, the tool workers and a Ray they started are stopped before the process exits (143).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

import yaml

from agentfly import __version__


def _rollout(args: argparse.Namespace) -> int:
    from agentfly.config import ConfigError, config_to_yaml, load_config
    from agentfly.rollout.runner import run_rollout

    try:
        cfg = load_config(args.overrides, config_file=args.config, check_required=False, default_task=True)
    except ConfigError as e:
        print(f"agentfly: config error: {e}", file=sys.stderr)
        return 2
    if args.print_config:
        print(config_to_yaml(cfg))
        return 0
    from agentfly.shutdown import ray_stopped_at_exit, sigterm_exits

    try:
        with sigterm_exits(), ray_stopped_at_exit():
            summary = run_rollout(cfg, args.output, split=args.split, limit=args.limit)
    except (ValueError, FileNotFoundError, KeyError, RuntimeError) as e:
        print(f"agentfly: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    if summary.get("chains") and summary.get("failures/chain") == summary["chains"]:
        print(f"agentfly: every chain failed; first error: {summary.get('first_error')}", file=sys.stderr)
        return 1
    return 0


def _fit(args: argparse.Namespace) -> int:
    from agentfly.config import ConfigError, config_to_yaml, load_config
    from agentfly.fit import run_fit

    try:
        cfg = load_config(args.overrides, config_file=args.config, default_task=True)
    except ConfigError as e:
        print(f"agentfly: config error: {e}", file=sys.stderr)
        return 2
    if args.print_config or cfg.trainer.print_config:
        print(config_to_yaml(cfg))
        if args.print_config:
            return 0
    from agentfly.rollout.engines.errors import EngineLostError, EngineStartError
    from agentfly.shutdown import sigterm_exits

    try:
        with sigterm_exits():  # run_fit stops what the run started, however it ends
            metrics = run_fit(cfg, stage=args.command, ckpt_path=args.ckpt_path)
    except (ValueError, FileNotFoundError, KeyError, EngineStartError, EngineLostError) as e:
        print(f"agentfly: {e}", file=sys.stderr)
        return 2
    shown = {k: round(v, 4) for k, v in sorted(metrics.items()) if k.startswith(("val/", "critic/score"))}
    print(json.dumps(shown, indent=2))
    return 0


def dotted_flags_to_overrides(extra: list[str]) -> list[str]:
    """LightningCLI-style flags as ``key=value`` overrides.

    ``--a.b value`` / ``--a.b=value`` set a key; ``--a.l+=value`` (or ``--a.l+ value``) appends to a
    list key. ``--trainer.callbacks+=NAME`` adds a callback and the ``--trainer.callbacks.init_args.K V``
    (or ``--trainer.callbacks.K V``) flags after it give its arguments, as in LightningCLI.
    """
    out: list[str] = []
    callbacks: list[dict] = []  # added on this command line, in order
    slots: list[int] = []  # where each one goes in `out`
    i = 0
    while i < len(extra):
        arg = extra[i]
        if not arg.startswith("-") and "=" in arg:  # a key=value after a flag
            out.append(arg)
            i += 1
            continue
        name = arg.split("=", 1)[0]
        if not arg.startswith("--") or "." not in name:
            raise SystemExit(f"agentfly: unrecognised argument {arg!r}")
        if "=" in arg:
            key, value = arg[2:].split("=", 1)
            i += 1
        elif i + 1 < len(extra):
            key, value = arg[2:], extra[i + 1]
            i += 2
        else:
            raise SystemExit(f"agentfly: {arg} needs a value")
        if key in ("trainer.callbacks+", "trainer.callbacks"):  # --trainer.callbacks+=NAME
            callbacks.append({"class_path": value, "init_args": {}})
            slots.append(len(out))
            out.append("")
        elif key.startswith("trainer.callbacks."):
            if not callbacks:
                raise SystemExit(f"agentfly: {arg} comes before any --trainer.callbacks+=CLASS")
            field = key[len("trainer.callbacks."):]
            field = field[len("init_args."):] if field.startswith("init_args.") else field
            callbacks[-1]["init_args"][field] = yaml.safe_load(value)
        else:
            out.append(f"{key}={value}")  # key ends with '+' for --a.l+=x: key+=value
    for slot, spec in zip(slots, callbacks, strict=True):
        out[slot] = "trainer.callbacks+=" + json.dumps([spec])
    return out


def split_dotted_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """Take the ``--a.b[=value]`` flags (and their values) out of ``argv``, in order, before argparse
    sees them (argparse would give a flag's value to the positional overrides)."""
    rest: list[str] = []
    flags: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--") and "." in arg.split("=", 1)[0]:
            flags.append(arg)
            if "=" not in arg and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                flags.append(argv[i + 1])
                i += 1
        else:
            rest.append(arg)
        i += 1
    return rest, flags


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentfly", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"agentfly {__version__}")
    sub = parser.add_subparsers(dest="command")
    ro = sub.add_parser("rollout", help="run rollouts alone and write trajectories as JSONL")
    ro.add_argument("overrides", nargs="*", help="key=value config overrides (Hydra syntax)")
    ro.add_argument("--config", help="a YAML config (e.g. conf/examples/gsm8k_calculator.yaml)")
    ro.add_argument("--output", "-o", default="rollouts.jsonl", help="where to write the chains")
    ro.add_argument("--split", choices=["train", "val"], default="train", help="which data files")
    ro.add_argument("--limit", type=int, help="roll out only the first N rows")
    ro.add_argument("--print_config", action="store_true", help="print the resolved config and exit")
    ro.set_defaults(func=_rollout)
    for name, helptext in (
        ("fit", "train (the seeds' `python -m agentfly.cli train ...` is the same command)"),
        ("train", "same as fit"),
        ("validate", "roll out the validation set with a checkpoint's actor (--ckpt_path, or the "
         "one trainer.resume_mode finds; else the base model)"),
        ("test", "same as validate"),
    ):
        sp = sub.add_parser(name, help=helptext)
        sp.add_argument("overrides", nargs="*", help="key=value config overrides (Hydra syntax)")
        sp.add_argument("--config", help="a YAML config (e.g. conf/examples/gsm8k_calculator.yaml)")
        sp.add_argument("--print_config", action="store_true", help="print the resolved config and exit")
        sp.add_argument(
            "--ckpt_path",
            help="a checkpoint: fit resumes from it, validate/test score it (instead of the one "
            "trainer.resume_mode finds)",
        )
        sp.set_defaults(func=_fit)
    return parser


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted (not when it was made), so a
    process that calls :func:`main` more than once, redirecting stderr between calls, never writes
    to a stream that has been closed."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    # agentfly's own warnings; Lightning and Ray keep their own handlers (no double lines)
    log = logging.getLogger("agentfly")
    if not log.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.WARNING)
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    rest, flags = split_dotted_flags(argv)
    args, extra = parser.parse_known_args(rest)
    if extra or flags:
        args.overrides = [*getattr(args, "overrides", []), *dotted_flags_to_overrides([*extra, *flags])]
    if args.command is None:
        parser.print_help()
        return 0
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
