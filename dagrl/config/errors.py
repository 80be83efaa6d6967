"""The error every pre-flight check raises: one line naming the key or file and the fix."""
from __future__ import annotations


class ConfigError(ValueError):
    """A configuration or input problem found before any model is built; the CLI exits with code 2."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class ConfigErrors(ConfigError):
    """Several independent problems found by one pre-flight: str() is their lines, one each, in the order found
    (the CLI prints each as its own `dagrl: error:` line); `key` is the first one's."""

    def __init__(self, errors: list[ConfigError]) -> None:
        super().__init__(errors[0].key, "\n".join(str(error) for error in errors))
        self.errors = list(errors)


class RunError(RuntimeError):
    """A run stopped on purpose, for a reason the user can fix (a reward function failing with
    reward_model.on_error=raise, ...): the CLI prints its one-line message, without a traceback, and exits with 1."""
