"""Checks a composed config before anything starts: one clear error naming the key, the value and the fix.

Types and key names are the schemas' job (`experiments.config.schema`, when the config is composed); what a type
cannot say (allowed names, ranges, settings that need each other) each part of the typed tree checks itself
(`experiments.config.checks`), backend settings by their own classes (`BackendSettings.check`). `validate` walks the
tree."""

from __future__ import annotations

from typing import TYPE_CHECKING

from experiments.config.checks import parts
from experiments.config.errors import ConfigError

if TYPE_CHECKING:
    from experiments.config.schema import TierbenchConfig


def validate(cfg: TierbenchConfig) -> None:
    """Raise ConfigError on the first part of `cfg` (`experiments.config.typed`) with a problem: every part's `check`
    in the tree's order, the whole config's rules between parts last; then, once every one passed, what loads a file
    (`check_loaded`: the model the user brings, run on a batch; the prompts, with the model's tokenizer). Settles the
    cluster's switches a backend asks for (`cluster.serve_direct_ingress`)."""
    walked = list(parts(cfg))
    for key, part in walked:
        _raise(part.check(key, cfg))
    for key, part in walked:
        _raise(part.check_loaded(key, cfg))


def _raise(problems: list[str]) -> None:
    if problems:
        raise ConfigError("; ".join(problems))


def clients_only(cfg: TierbenchConfig) -> bool:
    """Every backend of the experiment is a server tierbench does not start (an endpoint): the tier's node only hosts
    the clients, and this machine may stand for the tier."""
    return all(not cfg.backends[name].launches_server for name in cfg.experiment.backends if name in cfg.backends)
