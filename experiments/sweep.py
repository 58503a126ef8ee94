"""One tier's sweep: plan the trials, start each backend's server once on the tier's node, measure every
trial against it, persist each record, then log it to MLflow. The runner calls `run_sweep(cfg)`."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from hydra.utils import get_class
from omegaconf import OmegaConf

from experiments.cluster import ray_cluster
from experiments.measure import measure
from experiments.metrics import window_metrics
from experiments.plan import Trial, TrialGroup, plan_trials, trial_key
from experiments.records import FAILED, OK, SKIPPED, TrialRecord, write_record
from experiments.tiers import placement_options
from experiments.tracking import Tracker, tracking_uri
from experiments.validation import validate
from serving.backend import Backend, BackendContext, ServerHandle
from serving.node import NodeInfo, describe_node

log = logging.getLogger(__name__)
MEASUREMENT_KEYS = ("warmup_requests", "warmup_s", "window_s", "client_actors")


class TierSweep:
    """Runs the trials of one tier and owns everything it starts."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.tier = cfg.gpu.name
        self.sweep_id = str(cfg.sweep_id)
        self.folder = Path(cfg.results_dir) / self.sweep_id / self.tier
        self.groups = plan_trials(cfg)
        self.total = sum(len(g.trials) for g in self.groups)
        self.done = 0
        self.failed = 0
        self.config_yaml = OmegaConf.to_yaml(cfg, resolve=True)
        self.common_tags = {"sweep_id": self.sweep_id, "gpu_tier": self.tier, "emulated": "false"}

    def run(self) -> int:
        import ray

        with ray_cluster(self.cfg.cluster, self.tier):
            self.folder.mkdir(parents=True, exist_ok=True)
            log.info("sweep %s, tier %s: %d trials; raw results in %s", self.sweep_id, self.tier, self.total,
                     self.folder.resolve())
            self.tracker = Tracker(tracking_uri(self.cfg.mlflow.tracking_uri), self.cfg.mlflow.experiment)
            options = placement_options(self.tier)
            node: NodeInfo = ray.get(ray.remote(describe_node).options(num_cpus=0, **options).remote(),
                                     timeout=self.cfg.serving.start_timeout_s)
            self.sweep_run = self.tracker.sweep_run(self.sweep_id, {"emulated": "false"})
            self.tier_run = self.tracker.tier_run(self.sweep_id, self.tier, self.sweep_run,
                                                  self._tier_params(node), self.common_tags)
            actors = self._client_actors(options)
            try:
                for group in self.groups:
                    self._run_group(group, node, options, actors)
            finally:
                for actor in actors:
                    ray.kill(actor)
        status = FAILED if self.failed else OK
        self.tracker.finish(self.tier_run, status)
        self.tracker.finish(self.sweep_run, status)
        self._print_where_results_are()
        return 1 if self.failed else 0

    def _print_where_results_are(self) -> None:
        uri = self.tracker.uri
        log.info("done: %d trials, %d failed. Raw results: %s", self.done, self.failed, self.folder.resolve())
        log.info("MLflow: experiment '%s' in %s, runs tagged sweep_id=%s", self.cfg.mlflow.experiment, uri,
                 self.sweep_id)
        if uri.startswith("sqlite:"):
            log.info("open the UI with: mlflow ui --backend-store-uri %s --host 127.0.0.1 --port 5000  "
                     "(then http://127.0.0.1:5000)", uri)

    def _tier_params(self, node: NodeInfo) -> dict[str, Any]:
        gpu = self.cfg.gpu
        return {"gpu_tier": self.tier, "gpu_display_name": gpu.display_name, "gpu_name": node.gpu_name,
                "price_per_hour_usd": gpu.price_per_hour_usd, "price_source": gpu.price_source,
                "price_seen": gpu.price_seen, "model": self.cfg.model.name, "experiment": self.cfg.experiment.name,
                "node_hostname": node.hostname, "driver_version": node.driver_version or "",
                "cuda_version": node.cuda_version or ""}

    def _client_actors(self, options: dict[str, Any]) -> list[Any]:
        import ray

        from experiments.client_actor import LoadClientActor

        exp = self.cfg.experiment
        cls = ray.remote(LoadClientActor).options(num_cpus=exp.client_num_cpus, **options)
        actors = [cls.remote(i) for i in range(exp.client_actors)]
        ray.get([a.where.remote() for a in actors], timeout=self.cfg.serving.start_timeout_s)
        return actors

    def _backend(self, name: str, node: NodeInfo, options: dict[str, Any]) -> Backend:
        serving = self.cfg.serving
        context = BackendContext(
            name=name, model=self.cfg.model, node=node, ray_options=options, host=serving.host,
            start_timeout_s=serving.start_timeout_s, stop_timeout_s=serving.stop_timeout_s,
            triton_server=serving.triton_server, request_timeout_s=self.cfg.experiment.request_timeout_s,
        )
        settings = OmegaConf.to_container(self.cfg.backends[name], resolve=True)
        return get_class(settings.pop("_target_"))(context, **settings)

    def _run_group(self, group: TrialGroup, node: NodeInfo, options: dict[str, Any], actors: list[Any]) -> None:
        backend = self._backend(group.backend, node, options)
        runnable = []
        for trial in group.trials:
            reason = backend.unsupported_reason(trial.protocol, trial.input_format)
            if reason:
                self._finish(self._record(trial, SKIPPED, reason, node))
            else:
                runnable.append(trial)
        if not runnable:
            return
        handle: ServerHandle | None = None
        try:
            log.info("starting %s on %s for %d trials", group.backend, node.hostname, len(runnable))
            handle = backend.start()
            for artifact, text in handle.artifacts.items():
                self.tracker.log_artifact_text(self.tier_run, text, f"servers/{group.backend}/{artifact}")
            for trial in runnable:
                self._finish(self._measure(trial, backend, handle, node, actors))
            runnable = []
        except Exception as exc:  # noqa: BLE001 - the server group failed: its remaining trials fail with why
            log.error("%s failed: %s", group.backend, exc)
            for trial in runnable:
                self._finish(self._record(trial, FAILED, f"{group.backend} server failed: {exc}", node, handle))
        finally:
            logs = backend.stop()
            for name, text in logs.items():
                (self.folder / "servers" / group.backend).mkdir(parents=True, exist_ok=True)
                (self.folder / "servers" / group.backend / name).write_text(text)
                self.tracker.log_artifact_text(self.tier_run, text, f"servers/{group.backend}/{name}")

    def _record(self, trial: Trial, status: str, reason: str | None, node: NodeInfo,
                handle: ServerHandle | None = None) -> TrialRecord:
        exp = self.cfg.experiment
        measurement = {k: exp[k] for k in MEASUREMENT_KEYS}
        settings = OmegaConf.to_container(self.cfg.backends[trial.backend], resolve=True)
        params = {
            **trial.params(),
            "gpu_name": node.gpu_name,
            "price_per_hour_usd": self.cfg.gpu.price_per_hour_usd,
            "server_mode": handle.server_mode if handle else _server_mode_hint(settings),
            "node_hostname": node.hostname,
            **measurement,
            **(handle.params if handle else {}),
        }
        return TrialRecord(trial=trial, key=trial_key(trial, measurement, settings), status=status, reason=reason,
                           params=params)

    def _measure(self, trial: Trial, backend: Backend, handle: ServerHandle, node: NodeInfo,
                 actors: list[Any]) -> TrialRecord:
        record = self._record(trial, OK, None, node, handle)
        spec = backend.client_spec(handle, trial.protocol, trial.input_format, trial.batch_size)
        try:
            result = measure(actors, spec, trial.concurrency, self.cfg.experiment)
        except Exception as exc:  # noqa: BLE001 - a client error fails this trial only
            record.status, record.reason = FAILED, f"measurement failed: {_first_line(exc)}"
            return record
        record.samples = result.samples
        if result.samples.requests == 0:
            record.status, record.reason = FAILED, "no request completed inside the measurement window"
            return record
        record.metrics = {
            **window_metrics(result.samples, float(self.cfg.gpu.price_per_hour_usd)),
            "payload_bytes": float(result.payload_bytes),
            "payload_bytes_per_image": result.payload_bytes / trial.batch_size,
            "warmup_s": max(w.seconds for w in result.warmup),
            "warmup_requests_done": float(sum(w.requests for w in result.warmup)),
            "first_request_ms": result.warmup[0].first_request_ms,
            "server_startup_s": handle.startup_s,
        }
        record.params["client_actors_used"] = result.actors_used
        return record

    def _finish(self, record: TrialRecord) -> None:
        """Persist first (nothing measured is lost), then log to MLflow, then report progress."""
        record.finished_at = time.time()
        trial_dir = write_record(record, self.folder / "trials" / record.trial.slug)
        self.tracker.log_trial(self.tier_run, record, trial_dir, self.common_tags, self.config_yaml)
        self.done += 1
        self.failed += record.status == FAILED
        m = record.metrics
        summary = (f"p50 {m['latency_p50_ms']:.1f} ms  p99 {m['latency_p99_ms']:.1f} ms  "
                   f"{m['throughput_img_s']:.1f} img/s  ${m['cost_per_1k_images_usd']:.4f}/1k img"
                   if record.status == OK else f"{record.status.upper()}: {record.reason}")
        log.info("[%d/%d] %s  %s", self.done, self.total, record.trial.name, summary)


def _server_mode_hint(settings: dict[str, Any]) -> str:
    return "ray_serve" if "ray_serve" in str(settings.get("_target_", "")) else "triton"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:1000] if "\n" in text and len(text) > 1000 else text[:2000]


def run_sweep(cfg: Any) -> int:
    """Validate, then run the tier's sweep; returns the exit code (1 when a trial failed)."""
    validate(cfg)
    return TierSweep(cfg).run()
