"""Compose the config tree (`conf/`) with Hydra: the one way entry points, benchmarks and tests do it."""

from __future__ import annotations

from collections.abc import Sequence

from omegaconf import DictConfig

from serving.paths import REPO_ROOT

CONF_DIR = REPO_ROOT / "conf"


def options(group: str) -> list[str]:
    """The options of a config group: its files under conf/<group>/."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def compose(overrides: Sequence[str] = (), return_hydra_config: bool = False) -> DictConfig:
    """`conf/config.yaml` with `overrides` in Hydra's command-line syntax."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    import experiments.config.schema  # noqa: F401 - registers the schemas

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides), return_hydra_config=return_hydra_config)
