"""The composed config as the schemas' own objects, once, at the edge: every engine function receives a
`TierbenchConfig` (and its parts), never a `DictConfig`, so a key is an attribute the type checker knows and a
backend's settings are its settings class, built once (the schema holds only those in `backends`: a bare mapping there
is refused when the config is composed, `experiments.config.compose`).

Interpolations (`${now:...}` in `sweep_id`, `${gpu.name}`) are resolved here; Hydra copies the resolver cache to
every job of a multirun, so the tiers of one sweep still share their `sweep_id`."""

from __future__ import annotations

import dataclasses

from omegaconf import DictConfig, ListConfig, Node, OmegaConf, open_dict

from experiments.config.errors import not_allowed
from experiments.config.schema import TierbenchConfig

# What to do about a value the config leaves unset (`???`), by key; other keys get the generic advice.
MISSING_ADVICE = {"gpu.price_per_hour_usd": "set a price >= 0 in USD per hour for this tier"}


def typed(cfg: DictConfig | TierbenchConfig) -> TierbenchConfig:
    """`cfg` as a `TierbenchConfig`; ConfigError for an unset value or a key its schema does not have."""
    if isinstance(cfg, TierbenchConfig):
        return cfg
    if "hydra" in cfg:  # a callback's config, or composed with return_hydra_config: Hydra's node is not the sweep's
        cfg = cfg.copy()
        with open_dict(cfg):
            del cfg["hydra"]
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        key = missing[0]
        raise not_allowed(key, "???", MISSING_ADVICE.get(key, f"set {key} (the config leaves it unset)"))
    check_known_keys(cfg)
    return OmegaConf.to_object(cfg)


def check_known_keys(node: Node, path: str = "") -> None:
    """Every key a schema's node holds is one of its settings: Hydra's `+key=value` adds a key past the schema's own
    check (a typo, `+experiment.windw_s=2`, would otherwise be carried along and read by nothing)."""
    if isinstance(node, ListConfig):
        for index in range(len(node)):
            check_known_keys(node._get_node(index), f"{path}[{index}]")
        return
    if not isinstance(node, DictConfig) or node._is_none() or node._is_missing():
        return
    schema = OmegaConf.get_type(node)
    keys = [f.name for f in dataclasses.fields(schema)] if dataclasses.is_dataclass(schema) else None
    for key in node.keys():
        where = f"{path}.{key}" if path else str(key)
        if keys is not None and key not in keys:
            raise not_allowed(where, OmegaConf.to_container(node, resolve=False).get(key),
                              f"not a setting of {schema.__name__} (its settings: {keys})")
        check_known_keys(node._get_node(key), where)
