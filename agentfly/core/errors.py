"""``ConfigError``: a config that cannot be used.

It sits below every layer: the config layer, the run's plan, the topology and the model paths raise
it without importing one another.
"""

from __future__ import annotations


class ConfigError(ValueError):
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
