"""The ``agentfly`` command line.

``agentfly rollout [--config FILE] [key=value ...] --output OUT.jsonl`` runs rollouts alone with
the same config as training and writes one JSON line per chain plus a summary. Both override
styles work and may be mixed: the seeds' Hydra-style ``agent.run_config.num_chains=4`` and
LightningCLI-style ``--agent.run_config.num_chains 4``. ``agentfly fit`` (or ``train``, as the seeds spell it)
trains with the same config; ``validate``/``test`` roll out the validation set.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from agentfly import __version__


def _rollout(args: argparse.Namespace) -> int:
    from agentfly.config import ConfigError, config_to_yaml, load_config
    from agentfly.rollout.runner import run_rollout

    try:
        cfg = load_config(args.overrides, config_file=args.config, check_required=False)
    except ConfigError as e:
        print(f"agentfly: config error: {e}", file=sys.stderr)
        return 2
    if args.print_config:
        print(config_to_yaml(cfg))
        return 0
    try:
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
        cfg = load_config(args.overrides, config_file=args.config)
    except ConfigError as e:
        print(f"agentfly: config error: {e}", file=sys.stderr)
        return 2
    if args.print_config or cfg.trainer.print_config:
        print(config_to_yaml(cfg))
        if args.print_config:
            return 0
    try:
        metrics = run_fit(cfg, stage=args.command)
    except (ValueError, FileNotFoundError, KeyError) as e:
        print(f"agentfly: {e}", file=sys.stderr)
        return 2
    shown = {k: round(v, 4) for k, v in sorted(metrics.items()) if k.startswith(("val/", "critic/score"))}
    print(json.dumps(shown, indent=2))
    return 0


def dotted_flags_to_overrides(extra: list[str]) -> list[str]:
    """LightningCLI-style ``--a.b value`` / ``--a.b=value`` flags as ``a.b=value`` overrides."""
    out, i = [], 0
    while i < len(extra):
        arg = extra[i]
        if not arg.startswith("-") and "=" in arg:  # a key=value after a flag
            out.append(arg)
            i += 1
            continue
        if not arg.startswith("--") or "." not in arg.split("=", 1)[0]:
            raise SystemExit(f"agentfly: unrecognised argument {arg!r}")
        if "=" in arg:
            out.append(arg[2:])
            i += 1
        elif i + 1 < len(extra):
            out.append(f"{arg[2:]}={extra[i + 1]}")
            i += 2
        else:
            raise SystemExit(f"agentfly: {arg} needs a value")
    return out


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
        ("validate", "roll out the validation set with the (resumed) actor"),
        ("test", "same as validate"),
    ):
        sp = sub.add_parser(name, help=helptext)
        sp.add_argument("overrides", nargs="*", help="key=value config overrides (Hydra syntax)")
        sp.add_argument("--config", help="a YAML config (e.g. conf/examples/gsm8k_calculator.yaml)")
        sp.add_argument("--print_config", action="store_true", help="print the resolved config and exit")
        sp.set_defaults(func=_fit)
    return parser


def main(argv: list[str] | None = None) -> int:
    # agentfly's own warnings; Lightning and Ray keep their own handlers (no double lines)
    log = logging.getLogger("agentfly")
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.WARNING)
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args, extra = parser.parse_known_args(argv)
    if extra:
        args.overrides = [*getattr(args, "overrides", []), *dotted_flags_to_overrides(extra)]
    if args.command is None:
        parser.print_help()
        return 0
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
