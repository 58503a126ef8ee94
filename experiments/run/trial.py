"""One trial: build its record (params that identify it), measure it against a running server, summarise."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from experiments.config.choices import LoadMode
from experiments.config.inputs import accuracy_settings, inputs_settings
from experiments.config.owned import owned_params
from experiments.config.prices import (
    PRICED_PARAM,
    cost_per_1k_images,
    fleet_usd_per_hour,
    trial_nodes,
    trial_price_params,
)
from experiments.config.schema import ExperimentConfig, TierbenchConfig
from experiments.config.shares import share_params
from experiments.config.trace import trace_settings
from experiments.measure.client_actor import ClientPool
from experiments.measure.metrics import (
    answer_gap_metrics,
    client_metrics,
    counts_disagree,
    good_deadline_ms,
    is_stalled,
    open_loop_metrics,
    outcome_metrics,
    over_error_budget,
    server_count_metrics,
    server_reported_metrics,
    tenancy_metrics,
    window_metrics,
)
from experiments.measure.samples import WindowSamples
from experiments.measure.telemetry import NodeTelemetry, gpu_params
from experiments.measure.windows import Measurement, actors_needed, measure, silence_reason, warmup_slowest_s
from experiments.plan import Trial, trial_key
from experiments.results.records import Status, TrialRecord, error_reason
from serving.backend import Backend, ServerHandle
from serving.clients.base import ClientSpec
from serving.model_files import model_identity
from serving.models import output_dims
from serving.node import NodeInfo
from serving.workloads.registry import workload as workload_named

log = logging.getLogger(__name__)
MEASUREMENT_KEYS = ("warmup_requests", "warmup_s", "window_s", "client_actors", "max_in_flight", "load_engine")


def repeat_settings(exp: ExperimentConfig) -> dict[str, Any]:
    """How often a trial is measured, when more than once (a single measurement keeps the identity it always had)."""
    if exp.repeats == 1:
        return {}
    return {"repeats": exp.repeats, "repeat_fresh_server": exp.repeat_fresh_server}


def arrival_settings(exp: ExperimentConfig) -> dict[str, Any]:
    """The shape of a gamma, bursts or ramp load (params; their identity comes with them) and the goodput's
    deadline and targets, where there are some."""
    arrivals, mode = exp.arrivals, LoadMode(exp.load_mode)
    shape = {LoadMode.GAMMA: {"arrivals_cv": arrivals.cv},
             LoadMode.BURSTS: {"burst_on_s": arrivals.burst_on_s, "burst_off_s": arrivals.burst_off_s},
             LoadMode.RAMP: {"ramp_steps": arrivals.ramp_steps, "ramp_start": arrivals.ramp_start}}.get(mode, {})
    deadline = good_deadline_ms(exp.slo)
    targets = {f"goodput_{key}": getattr(exp.slo, key) for key in ("ttft_p99_ms", "tpot_p99_ms")
               if getattr(exp.slo, key) is not None}
    return {**shape, **({"goodput_deadline_ms": deadline} if deadline is not None else {}), **targets}


def measurement_settings(exp: ExperimentConfig) -> dict[str, Any]:
    """How a trial is measured: part of its identity (a change of method re-runs it on resume)."""
    settings = {k: getattr(exp, k) for k in MEASUREMENT_KEYS}
    stability = dataclasses.asdict(exp.stability)
    if not stability["min_requests"]:  # windows of window_s, as before the setting: their trials keep their keys
        del stability["min_requests"]
    settings["stability"] = stability
    return {**settings, **repeat_settings(exp), **trace_settings(exp), **arrival_settings(exp),
            **request_settings(exp)}


def request_settings(exp: ExperimentConfig) -> dict[str, Any]:
    """What the requests carry, as params and identity: the image corpus, or a generative sweep's prompts (and its
    workload: an image trial's identity predates workloads and says nothing of it)."""
    if workload_named(exp.workload).image_model:
        return inputs_settings(exp.inputs)
    return {"workload": exp.workload, **exp.prompts.settings()}


def priced_usd_per_hour(cfg: TierbenchConfig, params: dict[str, Any]) -> float:
    """The hourly price a trial's cost figures use (its metrics, its repeats pooled, its SLO search): the tier's
    primary price for each node that served its load (`endpoint_nodes` of an endpoint's trial; else one node)."""
    return float(fleet_usd_per_hour(float(cfg.gpu.price_per_hour_usd), trial_nodes(params)))


def new_record(cfg: TierbenchConfig, trial: Trial, node: NodeInfo, handle: ServerHandle | None = None,
               status: str = Status.OK, reason: str | None = None) -> TrialRecord:
    """A record with the trial's params (what ran, where, at what price) and its identity key."""
    exp = cfg.experiment
    measurement = measurement_settings(exp)
    settings = cfg.backends[trial.variant]
    params = {
        **trial.params(),
        "gpu_name": node.gpu_name,
        "price_per_hour_usd": cfg.gpu.price_per_hour_usd,
        **trial_price_params(cfg.gpu),
        **share_params(cfg.gpu),
        **owned_params(cfg.gpu.owned),
        "server_mode": handle.server_mode if handle else settings.server_mode_hint,
        "node_hostname": node.hostname,
        **gpu_params(node),
        **{k: getattr(exp, k) for k in MEASUREMENT_KEYS},
        "stability_percent": exp.stability.percent,
        "stability_latency_percentile": exp.stability.latency_percentile,
        **repeat_settings(exp),
        **trace_settings(exp),
        **arrival_settings(exp),
        **request_settings(exp),
        **accuracy_settings(exp.accuracy),
        **(handle.params if handle else {}),
        "workload": exp.workload,
    }
    if trial_nodes(params) > 1:  # what its cost figures are priced at, for readers of its MLflow run
        params[PRICED_PARAM] = priced_usd_per_hour(cfg, params)
    if workload_named(exp.workload).image_model:
        model = model_identity(cfg.model)
        params.update(model_source=cfg.model.source, model_output_shape=list(output_dims(cfg.model)), **model)
    else:  # a language model tierbench does not load: its name (the trial's) and tokenizer say which
        model = {}
        params["model_tokenizer"] = cfg.model.tokenizer or ""
    key = trial_key(trial, measurement, settings.identity(), model)
    return TrialRecord(trial=trial, key=key, status=status, reason=reason, params=params)


def _client_spec(trial: Trial, backend: Backend, handle: ServerHandle) -> ClientSpec:
    spec = backend.client_spec(handle, trial.protocol, trial.input_format, trial.batch_size)
    if trial.repeated_input:
        spec = dataclasses.replace(spec, inputs=dataclasses.replace(spec.inputs, repeated=True))
    return spec


def _measure_with_enough_clients(cfg: TierbenchConfig, trial: Trial, backend: Backend, handle: ServerHandle,
                                 clients: ClientPool, record: TrialRecord,
                                 neighbours: Sequence[tuple[Backend, ServerHandle]] = ()) -> Measurement:
    """Measure with the trial's engine (recorded: param `load_engine`, and `load_engine_note` when it is not the one
    asked for); in automatic mode, add client actors while the busiest one is near a full core. A shared card's
    other servers (`neighbours`) get as many actors each, under the same load, at the same time."""
    exp = cfg.experiment
    spec = _client_spec(trial, backend, handle)
    beside = tuple(_client_spec(trial, b, h) for b, h in neighbours)
    engine, note = clients.engine_for(spec, trial.protocol)
    record.params.update(load_engine=str(engine), load_engine_requested=str(exp.load_engine))
    if note:
        record.params["load_engine_note"] = note
    if engine == "compiled" and clients.engine is not None:
        record.params["load_engine_version"] = clients.engine.version
    actors = actors_needed(trial, exp)
    while True:
        result = measure(clients.ensure(actors * (1 + len(beside)), trial.protocol), spec, trial, exp,
                         probe=lambda: backend.server_counters(handle), engine=engine, neighbours=beside)
        busiest = max((c.cpu_util for c in result.samples.clients), default=0.0)
        if exp.client_actors or busiest <= exp.client_cpu_limit or actors >= exp.max_client_actors:
            return result
        log.info("%s: a client actor used %.0f%% of a core; measuring again with %d actors", trial.name,
                 busiest * 100, min(exp.max_client_actors, actors * 2))
        actors = min(exp.max_client_actors, actors * 2)


def run_trial(cfg: TierbenchConfig, trial: Trial, backend: Backend, handle: ServerHandle, node: NodeInfo,
              clients: ClientPool, telemetry: NodeTelemetry | None = None,
              neighbours: Sequence[tuple[Backend, ServerHandle]] = ()) -> TrialRecord:
    """Measure `trial`; a client error fails this trial only (status and reason on the record).

    With `telemetry`, the node's CPU and (GPU nodes) the GPU's utilisation, memory, power and energy over the same
    window join the metrics (the energy per image over every image the card served). With `neighbours`, the other
    servers of a shared card are loaded alike at the same time, and their figures join the trial's."""
    record = new_record(cfg, trial, node, handle)
    exp = cfg.experiment
    workload = workload_named(exp.workload)
    # an image trial's goodput counts images within the deadline; a generative one's is its workload's own figure
    deadline = good_deadline_ms(exp.slo) if workload.image_model else None
    try:
        result = _measure_with_enough_clients(cfg, trial, backend, handle, clients, record, neighbours)
    except Exception as exc:  # noqa: BLE001 - any failure of the measurement fails the trial, with why
        record.status, record.reason = Status.FAILED, f"measurement failed: {error_reason(exc)}"
        return record
    samples = record.samples = result.samples
    if samples.requests == 0:
        failures = samples.failures
        record.metrics = outcome_metrics(samples, deadline) if failures.count else {}
        first = next(iter(samples.error_messages.values()), "")
        record.status, record.reason = Status.FAILED, (
            f"every request inside the measurement window failed ({failures.count}: "
            f"{', '.join(f'{k} {v}' for k, v in sorted(failures.by_class().items()))}; first: {first})"
            if failures.count else silence_reason(samples.duration_s, warmup_slowest_s(result.warmup)))
        return record
    record.metrics = {
        **window_metrics(samples, priced_usd_per_hour(cfg, record.params), workload, exp.slo),
        **result.payloads.metrics(),
        # each distinct request sent this many times in the final windows, on average (above 1: bytes repeated)
        "input_repeats": samples.requests / result.payloads.distinct_requests,
        "warmup_s": max(w.seconds for w in result.warmup),
        "warmup_requests_done": float(sum(w.requests for w in result.warmup)),
        "warmup_failed_requests": float(sum(w.failed for w in result.warmup)),
        "first_request_ms": result.warmup[0].first_request_ms,
        "server_startup_s": handle.startup_s,
        **handle.metrics,
        "windows": float(result.windows),
        "measured_s": samples.duration_s,
        "stable": float(result.stable),
        **client_metrics(samples),
        **server_reported_metrics(samples),
        **outcome_metrics(samples, deadline),
        **answer_gap_metrics(samples),
    }
    record.params.update(workload.params_of(samples))
    if trial.load_mode.open_loop:
        record.metrics.update(open_loop_metrics(samples, trial.request_rate))
        record.tags["overloaded"] = str(record.metrics["overloaded"] == 1).lower()
        if record.metrics.get("client_behind") == 1:  # the client, not the server, missed the schedule
            record.tags["client_behind"] = "true"
    record.metrics.update(tenancy_metrics(samples, result.neighbours or []))
    if telemetry is not None:
        card_images = sum(s.completed for s in (samples, *(result.neighbours or []))) * samples.images_per_request
        record.metrics.update(telemetry.window_metrics(samples.window_start, samples.window_end, card_images))
        if "server_thread_cpu_max" in record.metrics:
            busiest = telemetry.busiest_thread(samples.window_start, samples.window_end)
            if busiest:
                record.params["server_busiest_thread"] = busiest
    if result.counters_before and result.counters_after:
        record.metrics.update(backend.server_breakdown(result.counters_before, result.counters_after))
        _check_server_count(record, backend.served_images(result.counters_before, result.counters_after),
                            result.counters_span_s, result.counters_read_s, samples)
    record.series = result.series or []
    record.params["client_actors_used"] = result.actors_used
    record.params["client_niceness"] = result.client_niceness
    record.tags["stable"] = str(result.stable).lower()
    if is_stalled(record.metrics):  # the server answered nothing for long while requests waited: p99 may hide it
        record.tags["stalled"] = "true"
    if record.metrics.get("client_cpu_util_max", 0.0) > exp.client_cpu_limit:
        record.tags["client_bound"] = "true"  # even the most client actors allowed were busy: a lower bound
    if record.metrics.get("goodput_img_s", 0.0) > 0:  # what an image answered well within the deadline costs
        record.metrics["cost_per_1k_good_images_usd"] = cost_per_1k_images(priced_usd_per_hour(cfg, record.params),
                                                                           record.metrics["goodput_img_s"])
    if samples.failures.count:
        record.params["first_errors"] = "; ".join(f"{k}: {v}" for k, v in samples.error_messages.items())[:500]
    over = over_error_budget(record.metrics, exp.max_error_rate, closed_loop=not trial.load_mode.open_loop)
    if over:  # the server answered: nothing to restart it for
        record.status, record.reason = Status.FAILED, over
        record.tags["over_error_budget"] = "true"
    return record


def _check_server_count(record: TrialRecord, served_images: float | None, span_s: float, read_s: float,
                        samples: WindowSamples) -> None:
    """The server's own count of served images beside the clients' throughput; a trial where they disagree
    by more than a few percent is tagged `server_count_mismatch=true` (and says so in the log)."""
    if served_images is None:
        return
    record.metrics.update(server_count_metrics(served_images, span_s, record.metrics["throughput_img_s"], read_s))
    if counts_disagree(record.metrics, samples):
        record.tags["server_count_mismatch"] = "true"
        log.warning("%s: the server served %.1f img/s, the clients counted %.1f img/s (ratio %.3f)",
                    record.trial.name, record.metrics["server_throughput_img_s"], record.metrics["throughput_img_s"],
                    record.metrics["server_count_ratio"])

