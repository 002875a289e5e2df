"""The ``agentfly`` command line.

Subcommands arrive with the trainer (``fit``, ``validate``, ``test``) and the rollout layer
(``rollout``); until then the command reports the version and what is available.
"""

from __future__ import annotations

import argparse
import sys

from agentfly import __version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentfly", description=__doc__)
    parser.add_argument("--version", action="version", version=f"agentfly {__version__}")
    parser.add_argument("command", nargs="?", help="subcommand")
    args, _ = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    print(f"agentfly {__version__}: subcommand {args.command!r} is not available yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
