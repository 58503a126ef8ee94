"""One trial: build its record (params that identify it), measure it against a running server, summarise."""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from experiments.measure import measure
from experiments.metrics import window_metrics
from experiments.plan import Trial, trial_key
from experiments.prices import trial_price_params
from experiments.records import FAILED, OK, TrialRecord
from serving.backend import Backend, ServerHandle
from serving.node import NodeInfo

MEASUREMENT_KEYS = ("warmup_requests", "warmup_s", "window_s", "client_actors")


def new_record(cfg: Any, trial: Trial, node: NodeInfo, handle: ServerHandle | None = None, status: str = OK,
               reason: str | None = None) -> TrialRecord:
    """A record with the trial's params (what ran, where, at what price) and its identity key."""
    exp = cfg.experiment
    measurement = {k: exp[k] for k in MEASUREMENT_KEYS}
    settings = OmegaConf.to_container(cfg.backends[trial.variant], resolve=True)
    params = {
        **trial.params(),
        "gpu_name": node.gpu_name,
        "price_per_hour_usd": cfg.gpu.price_per_hour_usd,
        **trial_price_params(cfg.gpu),
        "server_mode": handle.server_mode if handle else _server_mode_hint(settings),
        "node_hostname": node.hostname,
        **measurement,
        **(handle.params if handle else {}),
    }
    return TrialRecord(trial=trial, key=trial_key(trial, measurement, settings), status=status, reason=reason,
                       params=params)


def run_trial(cfg: Any, trial: Trial, backend: Backend, handle: ServerHandle, node: NodeInfo,
              actors: list[Any]) -> TrialRecord:
    """Measure `trial`; a client error fails this trial only (status and reason on the record)."""
    record = new_record(cfg, trial, node, handle)
    spec = backend.client_spec(handle, trial.protocol, trial.input_format, trial.batch_size)
    try:
        result = measure(actors, spec, trial.concurrency, cfg.experiment)
    except Exception as exc:  # noqa: BLE001 - any failure of the measurement fails the trial, with why
        record.status, record.reason = FAILED, f"measurement failed: {first_line(exc)}"
        return record
    record.samples = result.samples
    if result.samples.requests == 0:
        record.status, record.reason = FAILED, "no request completed inside the measurement window"
        return record
    record.metrics = {
        **window_metrics(result.samples, float(cfg.gpu.price_per_hour_usd)),
        "payload_bytes": float(result.payload_bytes),
        "payload_bytes_per_image": result.payload_bytes / trial.batch_size,
        "warmup_s": max(w.seconds for w in result.warmup),
        "warmup_requests_done": float(sum(w.requests for w in result.warmup)),
        "first_request_ms": result.warmup[0].first_request_ms,
        "server_startup_s": handle.startup_s,
    }
    record.params["client_actors_used"] = result.actors_used
    return record


def _server_mode_hint(settings: dict[str, Any]) -> str:
    return "ray_serve" if "ray_serve" in str(settings.get("_target_", "")) else "triton"


def first_line(exc: BaseException) -> str:
    """The gist of an error for a `reason` tag: its message, shortened."""
    text = str(exc).strip() or type(exc).__name__
    return text[:2000]
