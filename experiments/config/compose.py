"""Compose the config tree (`conf/`) with Hydra: the one way entry points, benchmarks and tests do it. A key the
schemas don't have or a value of the wrong type becomes one ConfigError naming the key, the value and what is
allowed, like every other bad input."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from experiments.config.errors import ConfigError, not_allowed
from serving.paths import REPO_ROOT
from serving.settings import BackendSettings

if TYPE_CHECKING:
    from experiments.config.schema import TierbenchConfig

CONF_DIR = REPO_ROOT / "conf"


def options(group: str) -> list[str]:
    """The options of a config group: its files under conf/<group>/, those in subfolders as `<folder>/<name>`
    (e.g. model=examples/onnx)."""
    folder = CONF_DIR / group
    return sorted(p.relative_to(folder).with_suffix("").as_posix() for p in folder.rglob("*.yaml"))


def compose(overrides: Sequence[str] = (), return_hydra_config: bool = False) -> DictConfig:
    """`conf/config.yaml` with `overrides` in Hydra's command-line syntax; ConfigError when they don't fit."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import ConfigCompositionException

    import experiments.config.schema  # noqa: F401 - registers the schemas

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return hydra_compose("config", overrides=list(overrides), return_hydra_config=return_hydra_config)
    except ConfigCompositionException as exc:
        raise composition_error(exc, overrides) from None


def load_config(overrides: Sequence[str] = ()) -> TierbenchConfig:
    """`compose(overrides)` as the typed config the engine takes (`experiments.config.typed`), not yet validated."""
    from experiments.config.typed import typed

    return typed(compose(overrides))


# What to give instead of a value of the wrong type, by what OmegaConf says of it.
TYPE_FIXES = {"converted to Integer": "give a whole number, e.g. 3", "converted to Float": "give a number, e.g. 0.5",
              "is not a valid bool": "give true or false"}

# Keys that moved, and where to: a command line of an earlier version gets the new spelling.
MOVED_KEYS = {"serving.triton_server": "Triton's server is a setting of each Triton entry now: "
                                       "backends.<entry>.server=auto|native|bundled (e.g. backends.triton_onnx.server="
                                       "bundled)",
             "gpu.gpu_name_patterns": "a tier names its GPU exactly now: gpu.gpu_names=[its NVML names] and "
                                      "gpu.gpu_memory_gib=[low,high] (GiB; [] for any)"}


def composition_error(exc: Exception, overrides: Sequence[str]) -> ConfigError:
    """Hydra's refusal as one line: the override it refused, its value, and what the schema takes."""
    cause = exc.__cause__
    full_key = getattr(cause, "full_key", None)
    if not full_key:
        return ConfigError(" ".join(str(exc).split()))
    if f"is not a subclass of {BackendSettings.__name__}" in str(getattr(cause, "msg", "")):
        return _bare_backend_entry(str(full_key), overrides)
    key, value = _override_for(full_key, overrides)
    schema = getattr(cause, "object_type", None)
    if isinstance(cause, AttributeError | KeyError) and dataclasses.is_dataclass(schema):
        if full_key in MOVED_KEYS:
            return not_allowed(key, value, MOVED_KEYS[full_key])
        keys = [f.name for f in dataclasses.fields(schema)]
        return not_allowed(key, value, f"not a setting of {schema.__name__} (its settings: {keys})")
    advice = " ".join(str(exc).splitlines()[1:])  # Hydra's, e.g. "To append to your config use +..."
    reason = str(getattr(cause, "msg", cause)).splitlines()[0]  # OmegaConf adds the key and types on more lines
    fix = next((fix for said, fix in TYPE_FIXES.items() if said in reason), None)
    return not_allowed(key, value, reason + "".join(f"; {text}" for text in (fix, advice) if text))


def _bare_backend_entry(name: str, overrides: Sequence[str]) -> ConfigError:
    """`+backends.<name>={...}`: a bare mapping where `backends` holds a backend class's settings (OmegaConf names
    only the entry, not its parent)."""
    from serving.registry import backend_settings

    key, value = _override_for(f"backends.{name}", overrides)
    return not_allowed(key, value, f"an entry extends its class's settings: add it with +backend@backends.{name}="
                       f"<{' | '.join(backend_settings())}>, then set its keys (e.g. backends.{name}.dynamic_batching="
                       "true)")


def _override_for(full_key: str, overrides: Sequence[str]) -> tuple[str, Any]:
    """The override that set `full_key` (or a key inside or above it) as (key, value); the key alone if none."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group
        if key == full_key or full_key.startswith((f"{key}.", f"{key}[")) or key.startswith(f"{full_key}."):
            return key, override.value()
    return full_key, None
