"""The one error bad input raises, on its own so every checker can import it without importing the others."""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A config value is not allowed; the message names the key, the value and what is allowed, and ends with the
    page that explains refused input (its keys are in the configuration reference)."""

    docs = "docs/troubleshooting.md#bad-input"

    def __str__(self) -> str:
        return f"{self.problem} ({self.docs})"

    @property
    def problem(self) -> str:
        """The message without the page: a part's problem (`experiments.config.checks`)."""
        return super().__str__()


def refuse(key: str, value: Any, allowed: str) -> str:
    """The one line a refused value gets: `key=value is not allowed: what is` (a part's problem,
    `experiments.config.checks`)."""
    return f"{key}={value!r} is not allowed: {allowed}"


def not_allowed(key: str, value: Any, allowed: str) -> ConfigError:
    return ConfigError(refuse(key, value, allowed))
