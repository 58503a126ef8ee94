"""One tier's sweep: plan the trials, start each backend's server once on the tier's node, measure every
trial against it, persist each record, then log it to MLflow. The runner calls `run_sweep(cfg)`."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from experiments.cluster import ray_cluster
from experiments.placement import TierPlacement, hold_tier_node, start_clients
from experiments.plan import plan_trials
from experiments.records import FAILED, OK, TrialRecord, write_record
from experiments.server_group import run_group
from experiments.tracking import Tracker, tracking_uri
from experiments.validation import validate
from serving.node import NodeInfo, describe_node

log = logging.getLogger(__name__)


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

        with ray_cluster(self.cfg.cluster, self.tier) as view, hold_tier_node(self.cfg, view) as place:
            self.place: TierPlacement = place
            self.common_tags["emulated"] = place.emulated_tag
            self.folder.mkdir(parents=True, exist_ok=True)
            (self.folder / "cluster.json").write_text(json.dumps(view.summary(), indent=2))
            log.info("sweep %s, tier %s: %d trials; raw results in %s", self.sweep_id, self.tier, self.total,
                     self.folder.resolve())
            self.tracker = Tracker(tracking_uri(self.cfg.mlflow.tracking_uri), self.cfg.mlflow.experiment)
            options = place.server_options
            node: NodeInfo = ray.get(ray.remote(describe_node).options(num_cpus=0, **options).remote(),
                                     timeout=self.cfg.cluster.schedule_timeout_s)
            self.sweep_run = self.tracker.sweep_run(self.sweep_id, {"emulated": place.emulated_tag})
            self.tier_run = self.tracker.tier_run(self.sweep_id, self.tier, self.sweep_run,
                                                  {**self._tier_params(node), **place.tier_params()}, self.common_tags)
            self.tracker.log_artifact_text(self.tier_run, json.dumps(view.summary(), indent=2), "cluster.json")
            actors = start_clients(self.cfg, place)
            try:
                for group in self.groups:
                    run_group(self.cfg, group, node, options, actors, self._finish,
                              lambda name, text, variant=group.variant: self._save_server_file(variant, name, text))
            finally:
                for actor in actors:
                    ray.kill(actor)
        status = FAILED if self.failed else OK
        self.tracker.finish(self.tier_run, status)
        self.tracker.finish_shared(self.sweep_run, status)
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

    def _save_server_file(self, variant: str, name: str, text: str) -> None:
        """Server logs and rendered configs: into the run folder, and onto the tier run."""
        folder = self.folder / "servers" / variant
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
        self.tracker.log_artifact_text(self.tier_run, text, f"servers/{variant}/{name}")

    def _finish(self, record: TrialRecord) -> None:
        """Persist first (nothing measured is lost), then log to MLflow, then report progress."""
        record.finished_at = time.time()
        record.params.update(self.place.client_params())
        trial_dir = write_record(record, self.folder / "trials" / record.trial.slug)
        self.tracker.log_trial(self.tier_run, record, trial_dir, self.common_tags, self.config_yaml)
        self.done += 1
        self.failed += record.status == FAILED
        m = record.metrics
        summary = (f"p50 {m['latency_p50_ms']:.1f} ms  p99 {m['latency_p99_ms']:.1f} ms  "
                   f"{m['throughput_img_s']:.1f} img/s  ${m['cost_per_1k_images_usd']:.4f}/1k img"
                   if record.status == OK else f"{record.status.upper()}: {record.reason}")
        log.info("[%d/%d] %s  %s", self.done, self.total, record.trial.name, summary)


def run_sweep(cfg: Any) -> int:
    """Validate, then run the tier's sweep; returns the exit code (1 when a trial failed)."""
    validate(cfg)
    return TierSweep(cfg).run()
