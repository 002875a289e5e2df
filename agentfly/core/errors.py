"""``InputError``: what the user gave cannot be used; ``ConfigError``: a config that cannot be used.

They sit below every layer: the config layer, the run's plan, the topology and the model paths raise
them without importing one another. The command line answers an ``InputError`` with its message
and exit status 2; any other exception is a bug, shown with its traceback (exit status 1).
"""

from __future__ import annotations


class InputError(ValueError):
    """What the user gave cannot be used: a config, a data file, a checkpoint, a plugin, a name, or
    a machine smaller than the config asks for. The message names it and what to do."""


class ConfigError(InputError):
    """A config that cannot be used: unknown key, wrong type, invalid choice or contradiction.

    The message names every offending key (all problems found in one pass, one per line).

    Attributes:
        errors: the individual problems, each a message that names its key.
    """

    def __init__(self, errors: str | list[str]) -> None:
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        if len(self.errors) == 1:
            message = self.errors[0]
        else:
            message = f"{len(self.errors)} config errors:\n" + "\n".join(
                f"  - {e}" for e in self.errors
            )
        super().__init__(message)
