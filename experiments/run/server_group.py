"""A server group: one backend started once on the tier's node, all its trials measured, always stopped.

Each server start is first checked against the PyTorch reference (`experiments.run.crosscheck`): a server that
computes something else is not measured. A failed trial (server crash, client error, timeout) is recorded with
the server's log, then the server and the client actors are restarted so the next trial starts clean; the rest
of the sweep goes on. With an SLO set (the workload's targets: `experiment.slo.p99_ms` for images, `ttft_p99_ms`
and/or `tpot_p99_ms` for tokens), each operating point is then searched for its highest load within it; a point whose
input format never has a figure the targets bound (an answer not streamed: no TTFT or TPOT) is recorded skipped, with
the reason, before anything starts. With `experiment.repeats` > 1 every trial is measured that many times, and
finished once, its repeats pooled (`experiments.run.repeats`).

A settings search hands its server from candidate to candidate (`ServerRelay`): a candidate whose settings the
running server can take on in place (`Backend.adopt`, e.g. Triton reloading one model) costs a reload, not a start.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hydra.utils import get_class

from experiments.config.schema import TierbenchConfig
from experiments.config.shares import tenants
from experiments.config.stacks import input_formats_of
from experiments.config.workloads import request_source
from experiments.measure.client_actor import ClientPool
from experiments.measure.efficiency import VERDICT_TAGS
from experiments.measure.slo_names import FIGURE_OF, SloNames
from experiments.measure.telemetry import NodeTelemetry, begin_node_telemetry
from experiments.plan import Trial, TrialGroup, trial_key
from experiments.results.records import Status, TrialRecord, error_reason
from experiments.run.crosscheck import CrosscheckResult, crosscheck_group
from experiments.run.repeats import Repeats
from experiments.run.slo import SloProbe, SloResult, SloTargets, search_slo
from experiments.run.trial import measurement_settings, new_record, priced_usd_per_hour, run_trial
from serving.backend import Backend, BackendContext, ServerHandle
from serving.model_config import ModelConfig
from serving.model_files import model_identity
from serving.node import NodeInfo
from serving.workloads.registry import workload as workload_named

log = logging.getLogger(__name__)

# The probe's figures an SLO summary repeats for its highest load within the target (`slo_<name>_at_max`).
AT_MAX = ("ceiling_share", "ceiling_share_best", "ceiling_share_resident", "gpu_util_pct")
# Called with a finished record and the server logs to keep beside it (empty unless the trial failed).
Finish = Callable[[TrialRecord, dict[str, str]], None]


def build_backend(cfg: TierbenchConfig, name: str, node: NodeInfo, ray_options: dict[str, Any],
                  emulated: bool = False, model: ModelConfig | None = None, tenant: int = 0) -> Backend:
    """The `_target_` class of `backends.<name>`, built with its typed settings, serving `model` (default
    `cfg.model`; the sweep passes the config reading the file staged on the node). A GPU tier (`gpu.requires_gpu`)
    holds its servers to the GPU, except in an emulated cluster (CPU nodes standing in for tiers, results tagged).
    `tenant`: which copy of the server this is on a shared card."""
    serving = cfg.serving
    context = BackendContext(
        name=name, model=cfg.model if model is None else model, node=node, ray_options=ray_options, host=serving.host,
        start_timeout_s=serving.start_timeout_s, stop_timeout_s=serving.stop_timeout_s,
        request_timeout_s=cfg.experiment.request_timeout_s, tier=cfg.gpu.name,
        warmup_batch_sizes=tuple(int(b) for b in cfg.experiment.batch_sizes),
        input_formats=input_formats_of(cfg.experiment, name),
        requires_gpu=bool(cfg.gpu.requires_gpu) and not emulated,
        inputs=request_source(cfg),
        tenant=tenant,
    )
    settings = cfg.backends[name]
    return get_class(settings._target_)(context, settings)


@dataclass(frozen=True)
class StagedModel:
    """The model config twice: reading its file from the copy staged on the tier node (what the servers load) and
    from the driver's own copy (what the cross-check's reference runs). Both are `cfg.model` for a seeded model."""

    on_node: ModelConfig
    in_driver: ModelConfig


class ServerRelay:
    """The running server a group left for the next (a settings search's candidates, one after another): the next
    group's backend adopts it when it can, else it is stopped before the next starts its own. Always `stop` it at
    the end."""

    def __init__(self) -> None:
        self.held: ServerGroup | None = None

    def hold(self, group: ServerGroup) -> None:
        """Keep `group`'s running server for the next group (its telemetry stops: the next samples its own)."""
        self.stop()
        group.stop_telemetry()
        self.held = group

    def pass_to(self, group: ServerGroup) -> ServerHandle | None:
        """The held server, taken over by `group`'s backend; None (the held one stopped) when it cannot take it.
        A failed takeover raises: the server is `group`'s then, and its stop stops it."""
        held, self.held = self.held, None
        if held is None:
            return None
        handle = group.backend.adopt(held.backend)
        if handle is None:
            log.info("%s needs a server of its own: stopping %s's", group.group.variant, held.group.variant)
            held.stop()
        return handle

    def stop(self) -> None:
        held, self.held = self.held, None
        if held is not None:
            held.stop()


class ServerGroup:
    """One backend's trials on the tier's node. On a shared card's tier (`gpu.gpu_share` 1/N, no MIG profile) the
    group starts N copies of its server on the card: the first is the one measured, cross-checked and logged; the
    others, its neighbours, are loaded alike through every trial's windows, and all of them stop together."""

    def __init__(self, cfg: TierbenchConfig, group: TrialGroup, node: NodeInfo, ray_options: dict[str, Any],
                 clients: ClientPool, finish: Finish, save_server_file: Callable[[str, str], None],
                 done_keys: set[str] | None = None, emulated: bool = False, model: StagedModel | None = None,
                 relay: ServerRelay | None = None) -> None:
        self.cfg = cfg
        workload = workload_named(cfg.experiment.workload)
        self.workload = workload
        self.image_model = workload.image_model
        self.slo_targets = SloTargets.of(cfg.experiment.slo, workload)  # none set: no SLO search
        self.slo_names = SloNames.of(workload)
        self.model = model or StagedModel(cfg.model, cfg.model)
        self.group = group
        self.node = node
        self.clients = clients
        self.finish = finish
        self.save_server_file = save_server_file
        self.done_keys = done_keys or set()
        self.ray_options = ray_options
        self.backend = build_backend(cfg, group.variant, node, ray_options, emulated, self.model.on_node)
        self.neighbours = [build_backend(cfg, group.variant, node, ray_options, emulated, self.model.on_node, tenant)
                           for tenant in range(1, tenants(cfg.gpu))]
        self.neighbour_handles: list[ServerHandle] = []
        self.handle: ServerHandle | None = None
        self.telemetry: NodeTelemetry | None = None
        self.check: CrosscheckResult | None = None
        self.measured: dict[Trial, TrialRecord] = {}
        # takes the running server over at the end, for the next group; None: stopped (always on a shared card: its
        # neighbours go with it)
        self.relay = relay if not self.neighbours else None

    def run(self, trials: list[Trial]) -> None:
        """Skip what the node can't run, start the server, measure the rest; every trial gets a record."""
        runnable = []
        for trial in trials:
            reason = self.backend.unsupported_reason(trial.protocol, trial.input_format)
            if reason:
                self.finish(new_record(self.cfg, trial, self.node, status=Status.SKIPPED, reason=reason), {})
            else:
                runnable.append(trial)
        slo_points = [p for p in self._slo_points(runnable) if not self._skip_search(p)]
        if not runnable and not slo_points:
            return
        try:
            for index, trial in enumerate(runnable):
                if not self._measure(trial, pending=runnable[index:]):
                    return
            for point in slo_points:
                self._search(point)
        finally:
            if self.relay is not None and self.handle is not None:
                self.relay.hold(self)
            else:
                self.stop()

    def _measure(self, trial: Trial, pending: list[Trial], phase: str = "grid") -> TrialRecord | None:
        """Measure one trial, `experiment.repeats` times (starting the server if needed); None when the server would
        not start. Repeats after the first run on a fresh server with `experiment.repeat_fresh_server`."""
        if self.cfg.experiment.repeats == 1:
            record = self._attempts(trial, pending, phase, self.finish)
        else:
            record = self._repeat(trial, pending, phase)
        if record is not None and record.status != Status.FAILED:
            self.measured[trial] = record
        return record

    def _repeat(self, trial: Trial, pending: list[Trial], phase: str) -> TrialRecord | None:
        """Measure `trial` once per repeat, each with its retries, until one fails; finish it once, its repeats
        pooled. None when the server would not start."""
        exp = self.cfg.experiment
        repeats = Repeats(trial, exp.repeats)
        for number in range(1, exp.repeats + 1):
            if number > 1 and exp.repeat_fresh_server and self.handle is not None:
                log.info("%s: repeat %d of %d on a fresh %s server", trial.name, number, exp.repeats,
                         self.group.variant)
                self.stop()
            record = self._attempts(trial, pending, phase, repeats.collector(number))
            if record is None or record.status != Status.OK:
                break
        pooled = repeats.pooled(self.cfg, self.node, self.handle)
        self.finish(pooled, repeats.server_logs)
        return None if record is None else pooled

    def _attempts(self, trial: Trial, pending: list[Trial], phase: str, finish: Finish, attempt: int = 1,
                  earlier: str | None = None) -> TrialRecord | None:
        """Measure `trial` once, its record to `finish`; None when the server would not start. A measurement that
        failed under a working cross-check is taken again on a fresh server, `experiment.trial_retries` times."""
        if self.handle is None and not self._start(pending, finish):
            return None
        if self.check is not None and not self.check.passed:  # computes something else: not worth measuring
            record = new_record(self.cfg, trial, self.node, self.handle, status=Status.FAILED,
                                reason=self.check.reason())
        else:
            record = run_trial(self.cfg, trial, self.backend, self.handle, self.node, self.clients, self.telemetry,
                               list(zip(self.neighbours, self.neighbour_handles, strict=True)))
        record.metrics.update(self.check.metrics_for(trial.protocol, trial.input_format)
                              if self.check is not None else {})
        if phase != "grid":
            record.tags["phase"] = phase
        if attempt > 1:
            record.tags["attempt"] = str(attempt)
            record.tags["earlier_failure"] = earlier or ""
        # Over its error budget the server answered, with errors: its result, unless they say a part of it broke.
        server_failed = record.tags.get("over_error_budget") != "true" \
            or self.backend.broke_under(str(record.params.get("first_errors", "")))
        if record.status == Status.FAILED and server_failed and (self.check is None or self.check.passed):
            retry = attempt <= self.cfg.experiment.trial_retries
            if retry:
                record.tags["retried"] = "true"
            server_logs = self.stop()
            if cause := self.backend.abort_cause(server_logs):
                record.reason = f"{record.reason}; {cause}"
            log.warning("%s failed (%s): restarting %s%s", trial.name, record.reason, self.group.variant,
                        f", then measuring it again (attempt {attempt + 1})" if retry else "")
            finish(record, server_logs)
            self.clients.restart()
            if retry:
                return self._attempts(trial, pending, phase, finish, attempt + 1, record.reason)
        else:
            finish(record, {})
        return record

    def _slo_points(self, runnable: list[Trial]) -> list[Trial]:
        """One trial per operating point (protocol, input format, batch) that still needs an SLO search."""
        if not self.slo_targets:
            return []
        points: dict[tuple, Trial] = {}
        for trial in self.group.trials:
            if trial in runnable or self.backend.unsupported_reason(trial.protocol, trial.input_format) is None:
                points.setdefault((trial.protocol, trial.input_format, trial.batch_size), trial)
        return [p for p in points.values() if self.slo_key(p) not in self.done_keys]

    def _skip_search(self, point: Trial) -> bool:
        """Record `point`'s SLO search as skipped, with the reason, where its input format never has a figure the
        targets bound (an answer not streamed has no TTFT or TPOT): no load of it could meet them. True when so."""
        reason = self.slo_targets.unmeetable(self.workload, point.input_format)
        if reason is None:
            return False
        self.finish(self._slo_summary(point, Status.SKIPPED, reason), {})
        return True

    def slo_key(self, point: Trial) -> str:
        """The key of the SLO summary of `point` (its operating point, in this group's settings)."""
        slo = dataclasses.asdict(self.cfg.experiment.slo)
        settings = self.cfg.backends[point.variant].identity()
        return trial_key(point.at_load(0), {**measurement_settings(self.cfg.experiment), "slo": slo}, settings,
                         model_identity(self.cfg.model) if self.image_model else {})

    def _search(self, point: Trial) -> None:
        exp = self.cfg.experiment
        loads = point.load_mode.slo_search_range(exp)

        targets, names = self.slo_targets, self.slo_names
        bounded = [FIGURE_OF.get(key, key) for key, _ in targets.bounds]

        def as_probe(record: TrialRecord | None) -> SloProbe | None:
            if record is None or record.status != Status.OK:
                return None
            m = record.metrics
            low, high = f"{names.throughput}_ci_low", f"{names.throughput}_ci_high"
            spread = (m[low], m[high]) if low in m and high in m else None
            return SloProbe(record.trial.load, m["latency_p99_ms"], m.get(names.throughput, 0.0),
                            overloaded=m.get("overloaded", 0.0) == 1, stable=m.get("stable", 1.0) == 1,
                            throughput_interval=spread, goodput_share=m.get("goodput_share"),
                            goodput=m.get(names.goodput), client_behind=m.get("client_behind", 0.0) == 1,
                            figures={name: m[name] for name in bounded if name in m})

        def measure_at(load: float) -> SloProbe | None:
            trial = point.at_load(load)
            return as_probe(self._measure(trial, pending=[trial], phase="slo_search"))

        known = {t.load: as_probe(r) for t, r in self.measured.items()
                 if (t.protocol, t.input_format, t.batch_size) == (point.protocol, point.input_format,
                                                                   point.batch_size)}
        rule = f" and goodput >= {exp.slo.min_goodput_share:.0%} of the offered" if exp.slo.min_goodput_share else ""
        log.info("SLO search %s%s for %s", targets.describe(), rule, point.name)
        result = search_slo(measure_at, targets, loads, known=known, names=names)
        self.finish(self._slo_record(point, result), {})

    def _slo_summary(self, point: Trial, status: str = Status.OK, reason: str | None = None) -> TrialRecord:
        """The SLO summary record of `point`: its key, name, targets and load limit, no figures yet."""
        base = point.at_load(0)
        record = new_record(self.cfg, base, self.node, self.handle, status=status, reason=reason)
        record.key = self.slo_key(point)
        record.run_name = f"{base.name.rsplit('/', 1)[0]}/slo-{self.slo_targets.tag()}"
        record.params.update(self.slo_targets.metrics(),
                             slo_load_limit=point.load_mode.slo_search_range(self.cfg.experiment).limit)
        record.tags["run_level"] = "slo"
        return record

    def _slo_record(self, point: Trial, result: SloResult) -> TrialRecord:
        record = self._slo_summary(point)
        record.metrics = result.metrics(priced_usd_per_hour(self.cfg, record.params))
        record.extra = {"slo": result.to_json()}
        if result.best is not None:
            record.metrics.update(self._at_max(point, result.best.load, record))
        return record

    def _at_max(self, point: Trial, load: float, summary: TrialRecord) -> dict[str, float]:
        """How much of its ceiling the highest load within the SLO used, and what held it back there (the probe's
        own figures and verdict, `experiments.measure.efficiency`), for the search and the report."""
        probe = self.measured.get(point.at_load(load))
        if probe is None:
            return {}
        for key in VERDICT_TAGS:
            if key in probe.tags:
                summary.tags[key] = probe.tags[key]
        if "ceiling_runtime" in probe.params:
            summary.params["ceiling_runtime"] = probe.params["ceiling_runtime"]
        return {f"slo_{name}_at_max": probe.metrics[name] for name in AT_MAX if name in probe.metrics}

    def _fail(self, pending: list[Trial], reason: str, logs: dict[str, str], finish: Finish | None) -> None:
        """Every pending trial fails with `reason`; the first (the one being measured) to `finish`."""
        for index, trial in enumerate(pending):
            record = new_record(self.cfg, trial, self.node, status=Status.FAILED, reason=reason)
            (finish if index == 0 and finish is not None else self.finish)(record, logs)

    def _start(self, pending: list[Trial], finish: Finish | None = None, attempts: int = 2) -> bool:
        """Start the server and check its outputs against the reference; a server that won't start or answer
        is tried once more (a stub can be slow to come up on a loaded node), then every pending trial fails
        with the reason and the server log (the first, the one being measured, to `finish`)."""
        for attempt in range(1, attempts + 1):
            try:
                self.handle = self.relay.pass_to(self) if self.relay is not None and attempt == 1 else None
                reloaded = self.handle is not None
                if not reloaded:
                    log.info("starting %s on %s for %d trials", self.group.variant, self.node.hostname, len(pending))
                    self.handle = self.backend.start()
                self.handle.params["server_start"] = "reload" if reloaded else "process"
                for name, text in self.handle.artifacts.items():
                    self.save_server_file(name, text)
                off_gpu = self.backend.gpu_mismatch(self.handle) or self._start_neighbours()
                if off_gpu:  # nothing to retry: the same server would land on the CPU again
                    log.error("%s", off_gpu)
                    self._fail(pending, off_gpu, self.stop(), finish)
                    return False
                # the sampler's worker starts while the cross-check runs, instead of before it
                starting = begin_node_telemetry(self.cfg.telemetry, self.handle, self.node, self.ray_options)
                try:
                    # a language model has no reference to compare with: the endpoint's check asked it for tokens
                    self.check = crosscheck_group(self.cfg, self.backend, self.handle, pending, self.ray_options,
                                                  self.model.in_driver) if self.image_model else None
                except BaseException:
                    if starting is not None:
                        starting.cancel()
                    raise
                self.telemetry = starting.ready() if starting is not None else None
                return True
            except Exception as exc:  # noqa: BLE001 - a server that won't serve fails its trials, not the sweep
                log.error("%s did not start or answer (attempt %d of %d): %s", self.group.variant, attempt,
                          attempts, error_reason(exc))
                logs = self.stop()
                if attempt == attempts:
                    self._fail(pending, f"{self.group.variant} server failed to start: {error_reason(exc)}", logs,
                               finish)
        return False

    def _start_neighbours(self) -> str | None:
        """Start the shared card's other servers beside the first; why one breaks the GPU tier's promise, if it does."""
        for neighbour in self.neighbours:
            log.info("starting %s on %s beside it (the card is shared by %d servers)", neighbour.context.server_name,
                     self.node.hostname, len(self.neighbours) + 1)
            handle = neighbour.start()
            self.neighbour_handles.append(handle)
            for name, text in handle.artifacts.items():
                self.save_server_file(f"{neighbour.context.server_name}.{name}", text)
            off_gpu = neighbour.gpu_mismatch(handle)
            if off_gpu:
                return off_gpu
        return None

    def stop_telemetry(self) -> None:
        if self.telemetry is not None:
            self.telemetry.stop()
            self.telemetry = None

    def stop(self) -> dict[str, str]:
        """Stop the server (idempotent); its logs are saved with the group and returned."""
        self.handle = None
        self.stop_telemetry()
        logs: dict[str, str] = {}
        self.neighbour_handles = []
        for backend in (self.backend, *self.neighbours):
            prefix = f"{backend.context.server_name}." if backend.context.tenant else ""
            try:
                logs.update({prefix + name: text for name, text in backend.stop().items()})
            except Exception as exc:  # noqa: BLE001 - a crashed server may not stop cleanly; its owner is gone
                log.warning("stopping %s: %s", backend.context.server_name, error_reason(exc))
        for name, text in logs.items():
            self.save_server_file(name, text)
        return logs
