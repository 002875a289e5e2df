"""``python -m agentfly.cli ...`` and the ``agentfly`` command (AgentFly's ``python -m agentfly.cli
train key=value ...`` spelling included): :func:`agentfly.cli.main`, then the process ends within
a deadline (:mod:`agentfly.core.process_exit`)."""

from agentfly.cli import main
from agentfly.core.process_exit import run_and_exit


def run() -> None:
    """The ``agentfly`` command."""
    run_and_exit(main)


if __name__ == "__main__":
    run()
