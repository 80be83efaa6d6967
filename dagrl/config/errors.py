"""The error every pre-flight check raises: one line naming the key or file and the fix."""
from __future__ import annotations


class ConfigError(ValueError):
    """A configuration or input problem found before any model is built; the CLI exits with code 2."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
