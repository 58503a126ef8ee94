"""One Ray cluster for all the jobs of a multirun (`gpu=a100,rtx4090 -m`).

A Hydra callback (named in conf/config.yaml) opens the cluster before the first job: it starts the emulated or
local cluster, or joins the one at `cluster.address`, and checks that every requested tier has a live node or an
autoscaler node type that offers it, so a missing tier stops the multirun before anything is placed (exit 2). The
jobs, in parallel as Ray tasks (the Ray launcher, the default) or one after another in this process
(`hydra/launcher=basic`), find Ray connected and use it; after the last job the callback stops what it started.
The callback keeps no state of its own: Hydra ships it to every job.
"""

from __future__ import annotations

import atexit
import logging
import sys
from typing import TYPE_CHECKING, Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from experiments.cluster.connection import ClusterView, RayConnection, TierUnavailableError
from experiments.cluster.tiers import known_tiers

if TYPE_CHECKING:
    from experiments.config.schema import TierbenchConfig

log = logging.getLogger("tierbench")

_connection: RayConnection | None = None  # the multirun's cluster, owned by the driver process


def requested_tiers(config: DictConfig) -> list[str]:
    """The tiers a multirun will run: the values swept for `gpu` (or the one configured)."""
    overrides = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
    for override in overrides:
        if override.get_key_element() not in ("gpu", "+gpu"):
            continue
        if isinstance(override.value(), Glob):
            return override.value().filter(sorted(known_tiers()))
        if override.is_sweep_override():
            return list(override.sweep_string_iterator())
        return [override.get_value_element_as_str()]
    return [str(config.gpu.name)]


def close_cluster() -> None:
    """Stop what the multirun started (idempotent; also registered at exit, for a multirun that raised)."""
    global _connection
    if _connection is not None:
        connection, _connection = _connection, None
        connection.close()


class ClusterCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _connection
        from experiments.cluster.placement import PlacementError
        from experiments.config.errors import ConfigError
        from experiments.config.typed import typed
        from experiments.config.validation import clients_only, validate

        tiers = requested_tiers(config)
        try:
            sweep = typed(config)
            validate(sweep)
            connection = RayConnection(sweep.cluster, log_to_driver=True,
                                       client_tiers=tuple(tiers) if clients_only(sweep) else ())
            view = connection.open(tiers)
        except (ConfigError, TierUnavailableError, PlacementError) as exc:
            log.error("%s", exc)
            sys.exit(2)
        _connection = connection
        atexit.register(close_cluster)
        have = {tier: len(nodes) for tier, nodes in sorted(view.tiers.items())}
        log.info("Ray cluster (%s): %d live nodes, tiers %s; running tiers %s", sweep.cluster.name,
                 len(view.nodes), have, tiers)
        if connection.autoscaling is not None:
            starts = [tier for tier in tiers if tier not in have]
            log.info("tiers %s have no live node: the autoscaler starts one per tier job (%s)", starts,
                     connection.autoscaling.describe())
        _create_sweep_run(sweep, tiers, view)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        close_cluster()
        if config.report:   # every tier's trials are logged by now: one report across them
            from experiments.config.typed import typed
            from experiments.report.publish import sweep_answer

            print("\n".join(sweep_answer(typed(config))), flush=True)


def _create_sweep_run(config: TierbenchConfig, tiers: list[str], view: ClusterView) -> None:
    """The MLflow store, experiment and sweep run, created once here rather than raced for by parallel jobs
    (two processes creating a new SQLite store at once break its schema migration)."""
    from experiments.results.tracking import Tracker, tracking_uri

    emulated = bool(config.cluster.emulated) or any(
        view.is_emulated(node) for tier in tiers for node in view.tiers.get(tier, []))
    tracker = Tracker(tracking_uri(config.mlflow.tracking_uri), config.mlflow.experiment)
    tracker.sweep_run(str(config.sweep_id), {"emulated": "true" if emulated else "false"})
