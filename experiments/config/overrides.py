"""The command line checked before Hydra starts anything: a malformed override, an unknown config-group option
(also inside a sweep such as `gpu=a100,tpu -m`) or a key or value the schemas refuse stops here, in one line."""

from __future__ import annotations

from typing import Any

from experiments.config.compose import CONF_DIR, compose, options
from experiments.config.errors import ConfigError


def check_overrides(args: list[str]) -> None:
    """Raise ConfigError for the first override of `args` (a command line) that cannot compose."""
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    known, _ = get_args_parser().parse_known_args(args)  # Hydra's own CLI parser: flags vs overrides
    texts = [a for a in known.overrides if not a.lstrip("+~").startswith(("hydra.", "hydra/"))]
    parser = OverridesParser.create()
    parsed = []
    for text in texts:
        try:
            (override,) = parser.parse_overrides([text])
        except OverrideParseException as exc:
            gist = str(exc).strip().splitlines()[0]
            raise ConfigError(f"override {text!r} is malformed ({gist}): write key=value, lists as "
                              "key=[1,8], a sweep over values as key=a,b with -m") from None
        _check_group_option(override)
        parsed.append((text, override))
    for point in _sweep_points(parsed):
        compose(point)


def _check_group_option(override: Any) -> None:
    group = override.key_or_group
    if override.package is not None or not (CONF_DIR / group).is_dir() or override.is_delete():
        return
    allowed = options(group)
    for value in _values(override):
        if str(value) not in allowed:
            raise ConfigError(f"{group}={value!r} is not allowed: choose from {allowed} (files in conf/{group}/)")


def _values(override: Any) -> list[Any]:
    """The values an override sets: one, or each of a sweep's (a glob over a group's options included)."""
    from hydra.core.override_parser.types import Glob

    if isinstance(override.value(), Glob):
        return override.value().filter(options(override.key_or_group))
    if override.is_discrete_sweep():
        return list(override.sweep_string_iterator())
    return [] if override.is_sweep_override() else [override.value()]


def _sweep_points(parsed: list[tuple[str, Any]]) -> list[list[str]]:
    """Enough single configs to compose every value of every sweep once (not their product). An interval sweep
    (for optimising sweepers) has no values to try and is left out."""
    values = [_values(o) if o.is_sweep_override() else None for _, o in parsed]
    count = max((len(v) for v in values if v), default=1)
    return [[text if swept is None else f"{override.get_key_element()}={swept[min(i, len(swept) - 1)]}"
             for (text, override), swept in zip(parsed, values, strict=True) if swept != []]
            for i in range(count)]
