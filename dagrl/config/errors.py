"""The error every pre-flight check raises (one line naming the key or file and the fix), `require` that raises
it, and `Problems`, which collects the independent ones of a whole pre-flight."""

from __future__ import annotations

from dagrl.config.tree import recording


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


SKIPPED = type("Skipped", (), {"__repr__": lambda self: "SKIPPED"})()  # what a check that did not pass returns


class Problems:
    """Pre-flight's findings, so that one run reports every independent problem (one line each, in check order).

    `run(check, *args)` runs one group of related checks (it stops at its own first problem) and returns its value,
    or SKIPPED when it failed or could not run: a check given a SKIPPED value (it needs what an earlier one failed
    to produce) is not run, and one that read a config key already reported is dropped, as it would only repeat
    that problem or trip over the bad value."""

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []
        self.keys: set[str] = set()

    def run(self, check, *args, **kwargs):
        if any(arg is SKIPPED for arg in [*args, *kwargs.values()]):
            return SKIPPED
        with recording() as reads:
            try:
                result = check(*args, **kwargs)
            except ConfigError as error:
                if error.key not in self.keys and not reads & self.keys:
                    self.errors.append(error)
                    self.keys.add(error.key)
                return SKIPPED
            except Exception:  # noqa: BLE001 - a bad value already reported broke this check: skip it
                if reads & self.keys:
                    return SKIPPED
                raise
        return SKIPPED if reads & self.keys else result

    def raise_if_any(self) -> None:
        if len(self.errors) > 1:
            raise ConfigErrors(self.errors)
        if self.errors:
            raise self.errors[0]


def require(condition: bool, key: str, message: str) -> None:
    if not condition:
        raise ConfigError(key, message)
