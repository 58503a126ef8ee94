"""The one error bad input raises, on its own so every checker can import it without importing the others."""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A config value is not allowed; the message names the key, the value and what is allowed, and ends with the
    page that explains refused input (its keys are in the configuration reference)."""

    docs = "docs/troubleshooting.md#bad-input"

    def __str__(self) -> str:
        return f"{super().__str__()} ({self.docs})"


def not_allowed(key: str, value: Any, allowed: str) -> ConfigError:
    return ConfigError(f"{key}={value!r} is not allowed: {allowed}")
