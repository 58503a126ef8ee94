"""The command line checked before Hydra starts anything: a malformed override or an unknown config-group option
(also inside a sweep such as `gpu=a100,tpu -m`) stops here, in one line."""

from __future__ import annotations

from experiments.config.compose import CONF_DIR, options
from experiments.config.errors import ConfigError


def check_overrides(args: list[str]) -> None:
    """Refuse a malformed override or an unknown config-group option (e.g. `gpu=tpu`, also inside a sweep
    `gpu=a100,tpu`) in one line, before Hydra composes anything."""
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    known, _ = get_args_parser().parse_known_args(args)  # Hydra's own CLI parser: flags vs overrides
    overrides = [a for a in known.overrides if not a.lstrip("+~").startswith(("hydra.", "hydra/"))]
    parser = OverridesParser.create()
    for text in overrides:
        try:
            (override,) = parser.parse_overrides([text])
        except OverrideParseException as exc:
            gist = str(exc).strip().splitlines()[0]
            raise ConfigError(f"override {text!r} is malformed ({gist}): write key=value, lists as "
                              "key=[1,8], a sweep over values as key=a,b with -m") from None
        group = override.key_or_group
        if override.package is not None or not (CONF_DIR / group).is_dir() or override.is_delete():
            continue
        allowed = options(group)
        for value in override.sweep_string_iterator() if override.is_sweep_override() else [override.value()]:
            if str(value) not in allowed:
                raise ConfigError(f"{group}={value!r} is not allowed: choose from {allowed} (files in conf/{group}/)")
