"""A tier job's ceiling: which runtimes its backends run, timed in-process on its node before any server starts
(`experiments.measure.ceiling`), kept in the tier folder, and set against every trial the job finishes
(`experiments.measure.efficiency`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.measure.ceiling import NodeCeiling, describe, measure_on_node, read_ceiling
from experiments.measure.efficiency import efficiency_metrics, verdict
from experiments.plan import TrialGroup
from experiments.results.records import Status, TrialRecord
from serving.backend import Backend
from serving.node import NodeInfo
from serving.runtime import Runtime

if TYPE_CHECKING:
    from experiments.config.schema import TierbenchConfig
    from serving.model_config import ModelConfig

log = logging.getLogger(__name__)


class TierCeiling:
    """The runtimes of a tier job's backends and their in-process ceiling on its node."""

    def __init__(self, cfg: TierbenchConfig, node: NodeInfo, backend_of: Callable[[str], Backend]) -> None:
        self.cfg = cfg
        self.node = node
        self.backend_of = backend_of  # entry name -> its backend on this node (not started)
        self.runtimes: dict[str, Runtime | None] = {}  # entry name -> its runtime
        self.ceiling: NodeCeiling | None = None

    def runtime_of(self, variant: str, backend: Backend | None = None) -> Runtime | None:
        """The runtime of `backends.<variant>` on this node (`backend`: that entry's, when already built)."""
        if variant not in self.runtimes:
            try:
                self.runtimes[variant] = (backend or self.backend_of(variant)).runtime()
            except Exception as exc:  # noqa: BLE001 - a backend that cannot be built has no ceiling
                log.debug("no runtime for %s: %s", variant, exc)
                self.runtimes[variant] = None
        return self.runtimes[variant]

    def needed(self, groups: list[TrialGroup]) -> list[Runtime]:
        """The runtimes of the groups that have something to run on this node, each once."""
        found: dict[str, Runtime] = {}
        for group in groups:
            backend = self.backend_of(group.variant)
            if all(backend.unsupported_reason(t.protocol, t.input_format) for t in group.trials):
                continue
            runtime = self.runtime_of(group.variant, backend)
            if runtime is not None:
                found.setdefault(runtime.key, runtime)
        return list(found.values())

    def measure(self, groups: list[TrialGroup], model: ModelConfig, ray_options: dict[str, Any],
                folder_file: Path) -> bool:
        """Time the groups' runtimes on the node (or read what this tier folder already holds for the same node and
        runtimes: a resumed sweep); writes `ceiling.json` into the tier folder. Never fails the sweep. True when it
        wrote a new `ceiling.json` (to log on the tier run)."""
        if not self.cfg.ceiling.enabled:
            log.info("ceiling: off (ceiling.enabled=false): trials carry no efficiency figures")
            return False
        runtimes = self.needed(groups)
        if not runtimes:
            return False
        earlier = read_ceiling(folder_file)
        if earlier is not None and earlier.hostname == self.node.hostname and all(
                r.key in earlier.timings or r.key in earlier.errors for r in runtimes):
            self.ceiling = earlier
            log.info("ceiling: reusing the timing in %s", folder_file)
            return False
        log.info("ceiling: timing %d runtime(s) in-process on %s before any server starts: %s", len(runtimes),
                 self.node.hostname, ", ".join(r.key for r in runtimes))
        needed = sorted({int(b) for b in self.cfg.experiment.batch_sizes})
        try:
            self.ceiling = measure_on_node(model, runtimes, needed, self.cfg.ceiling, ray_options,
                                           self.node.ray_gpus)
        except Exception as exc:  # noqa: BLE001 - the trials still run, without efficiency figures
            log.warning("ceiling: not measured on %s (%s): trials carry no efficiency figures", self.node.hostname,
                        exc)
            return False
        for line in describe(self.ceiling):
            log.info("ceiling: %s", line)
        folder_file.write_text(json.dumps(self.ceiling.to_json(), indent=1))
        return True

    def annotate(self, record: TrialRecord) -> None:
        """An `ok` trial's efficiency against its runtime's ceiling, and the verdict on what holds it back."""
        if self.ceiling is None or record.status != Status.OK or record.tags.get("run_level", "trial") != "trial":
            return
        runtime = self.runtime_of(record.trial.variant)
        timing = self.ceiling.timing(runtime.key if runtime else None)
        if timing is None:
            return
        record.params["ceiling_runtime"] = runtime.key
        record.metrics.update(efficiency_metrics(record.metrics, timing, record.trial.batch_size))
        judged = verdict(record.metrics, record.params, runtime.on_gpu, float(self.cfg.experiment.client_cpu_limit),
                         self.node.cpu_count)
        record.tags.update(judged.tags())

