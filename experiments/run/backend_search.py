"""One backend's settings search on a tier's node (`experiment.search`): each candidate a backend entry of its own
(`experiments.config.search`), measured as a server group with the SLO search; its objective is the highest
throughput within the workload's targets (an image's p99; a token's TTFT and TPOT p99), which at the tier's fixed price
is the lowest cost per image, or per 1M output tokens. The strategy
(`experiments.run.settings_search`) picks which candidates to measure; the winner's deploy files go into the tier
folder and onto the tier run under `deploy/<backend>/`.

Every probe is a real trial, logged and keyed like any other (params `search_of`, `search_values`, `search_start`),
so a resumed sweep reuses what was measured: a candidate whose SLO summary is already `ok` is not started again.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from typing import Any

from experiments.config.choices import SearchStrategy
from experiments.config.schema import TierbenchConfig
from experiments.config.search import add_candidate, space_of
from experiments.measure.efficiency import Bottleneck
from experiments.measure.slo_names import SloNames
from experiments.plan import TrialGroup
from experiments.results.records import Status, TrialRecord
from experiments.run.server_group import Finish
from experiments.run.settings_search import SearchOutcome, SearchSpace, search_settings
from experiments.run.slo import SloTargets
from serving.workloads.registry import workload as workload_named

log = logging.getLogger(__name__)

SEARCH_FILE = "search.json"

# Runs one candidate's server group: (its trials, the finish callback every record goes through).
RunGroup = Callable[[TrialGroup, Finish], None]


class BackendSearch:
    """Searches the settings of `group.variant` on the tier's node."""

    def __init__(self, cfg: TierbenchConfig, group: TrialGroup, run_group: RunGroup, finish: Finish,
                 done_slo: Callable[[TrialGroup], TrialRecord | None]) -> None:
        self.cfg = cfg
        self.group = group
        self.run_group = run_group
        self.finish = finish
        self.done_slo = done_slo  # the ok SLO summary of a candidate's group measured earlier (resume), or None
        self.strategy = SearchStrategy(cfg.experiment.search.strategy)
        workload = workload_named(cfg.experiment.workload)
        self.targets = SloTargets.of(cfg.experiment.slo, workload)
        self.objective = SloNames.of(workload).max_throughput  # the highest throughput within the targets
        self.unit = next(m.unit for m in workload.metrics if m.name == workload.throughput)
        self.space = SearchSpace.of(space_of(cfg, group.variant))
        self.start = self.space.nearest(cfg.backends[group.variant].as_served(cfg.model))
        self.candidates: dict[str, float | None] = {}  # entry name -> objective (normalised points share one)
        self.at_max: dict[str, TrialRecord] = {}  # entry name -> its SLO summary (its highest load within the SLO)
        self.names: dict[tuple, str] = {}  # point -> entry name
        # A candidate that lost more top-1 than this is measured, never chosen (experiment.accuracy.max_top1_drop).
        self.accuracy_bound = cfg.experiment.accuracy.max_top1_drop

    def run(self) -> SearchOutcome:
        log.info("settings search (%s) of %s over %s: %d points, from %s", self.strategy, self.group.variant,
                 dict(self.space.settings), self.space.size, self.space.values(self.start))
        outcome = search_settings(self.space, self._objective, self.strategy, self.start, self._saturated)
        best = outcome.best
        log.info("settings search of %s: %d candidates measured (%d points probed of %d); best %s", self.group.variant,
                 len(self.candidates), outcome.probes, self.space.size,
                 "none within the SLO" if best is None else
                 f"{self.space.values(best)} at {outcome.value(best):.1f} {self.unit} within "
                 f"{self.targets.describe()} ({outcome.gain or float('nan'):.2f}x the start); stopped by "
                 f"{self.stopped_by(outcome)}")
        return outcome

    def entry_of(self, point: tuple) -> str:
        """The backend entry measuring `point` (added to `cfg.backends` when first asked for)."""
        if point not in self.names:
            self.names[point] = add_candidate(self.cfg, self.group.variant, self.space.values(point))
        return self.names[point]

    def _saturated(self, values: dict[str, Any]) -> bool:
        """The candidate at `values` kept its GPU busy (verdict `compute`) at its highest load within the SLO."""
        summary = self.at_max.get(self.entry_of(self.space.point_of(values)))
        return summary is not None and summary.tags.get("bottleneck") == Bottleneck.COMPUTE

    def stopped_by(self, outcome: SearchOutcome) -> str:
        """Why the search ended where it did, in a sentence (the report and search.json say it)."""
        if outcome.stopped_at_limit is not None:
            return f"the hardware: {self.entry_of(outcome.stopped_at_limit)} kept the GPU busy (compute-bound)"
        if self.strategy is SearchStrategy.GRID:
            return "grid: every point was measured"
        return "no neighbour of the best point served more within the SLO"

    def summary(self, outcome: SearchOutcome) -> dict[str, Any]:
        """What the search measured and chose: `deploy/<backend>/search.json`. Each point carries what held it back
        at its highest load within the SLO (its share of the runtime's ceiling, GPU busy, the verdict)."""
        def point_row(point: tuple, value: float | None) -> dict[str, Any]:
            name = self.entry_of(point)
            row = {"entry": name, "values": self.space.values(point), self.objective: value}
            summary = self.at_max.get(name)
            if summary is not None:
                row.update({k: v for k, v in summary.metrics.items() if k.endswith("_at_max") and k != "slo_max_load"})
                row.update({k: summary.tags[k] for k in ("bottleneck", "bottleneck_evidence") if k in summary.tags})
            return row
        best = outcome.best
        return {"backend": self.group.variant, "strategy": str(self.strategy),
                **self.targets.metrics(),
                "space": {k: list(v) for k, v in self.space.settings}, "points": self.space.size,
                "points_probed": outcome.probes, "candidates_measured": len(self.candidates),
                "start": point_row(self.start, outcome.value(self.start)),
                "best": None if best is None else point_row(best, outcome.value(best)), "gain_over_start": outcome.gain,
                "measured": [point_row(p, v) for p, v in outcome.measured.items()],
                "stopped_by": self.stopped_by(outcome)}

    def _objective(self, values: dict[str, Any]) -> float | None:
        point = self.space.point_of(values)
        name = self.entry_of(point)
        if name not in self.candidates:
            self.candidates[name] = self._measure(name, values, point == self.start)
        return self.candidates[name]

    def _measure(self, name: str, values: dict[str, Any], start: bool) -> float | None:
        group = TrialGroup(name, [dataclasses.replace(t, variant=name) for t in self.group.trials])
        earlier = self.done_slo(group)
        if earlier is not None:
            log.info("settings search: %s already measured (resumed)", name)
            self.at_max[name] = earlier
            return _throughput_at_slo(earlier, self.objective)
        slo: list[TrialRecord] = []
        params = {"search_of": self.group.variant, "search_strategy": str(self.strategy),
                  "search_values": json.dumps(values, sort_keys=True), "search_start": str(start).lower()}

        drops: list[float] = []

        def finish(record: TrialRecord, logs: dict[str, str]) -> None:
            record.params.update(params)
            if "top1_drop" in record.metrics:
                drops.append(float(record.metrics["top1_drop"]))
            if record.tags.get("run_level", "trial") == "slo":
                slo.append(record)
            else:
                record.tags.setdefault("phase", "settings_search")
            self.finish(record, logs)

        log.info("settings search of %s: measuring %s", self.group.variant, name)
        self.run_group(group, finish)
        if slo:
            self.at_max[name] = slo[-1]
        bound = self.accuracy_bound
        if bound is not None and drops and max(drops) > bound:
            log.info("settings search: %s lost %.2f points of top-1, more than experiment.accuracy.max_top1_drop="
                     "%g: measured, never chosen", name, max(drops), bound)
            return None
        return _throughput_at_slo(slo[-1], self.objective) if slo else None


def _throughput_at_slo(record: TrialRecord, objective: str) -> float | None:
    """The candidate's objective: its highest throughput within the SLO (`objective`, in the workload's unit); 0 when
    no load met it, None when it failed."""
    if record.status != Status.OK:
        return None
    return float(record.metrics.get(objective, 0.0)) if record.metrics.get("slo_met") else 0.0
