"""One tier's sweep: plan the trials, start each backend's server once on the tier's node, measure every
trial against it, persist each record, then publish it to MLflow. The runner calls `run_sweep(cfg)`.

Resumable: with the `sweep_id` of an earlier run, trials already `ok` (same trial key: a hash of the trial's
resolved config) are skipped, failed and missing ones run.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.cluster.connection import ClusterView, TierMismatchError, ray_cluster
from experiments.cluster.node_loss import NodeLoss, NodeLostError
from experiments.cluster.placement import NodeTime, TierPlacement, hold_tier_node
from experiments.cluster.tiers import tier_gpu_problem
from experiments.cluster.waiting import NodeWaitTimeout, wait_for_tier_node
from experiments.config.inputs import input_source, inputs_settings
from experiments.config.owned import owned_params
from experiments.config.prices import tier_price_params
from experiments.config.schema import GpuTierConfig, TierbenchConfig
from experiments.config.search import space_of
from experiments.config.shares import share_params
from experiments.config.typed import typed
from experiments.config.validation import clients_only, validate
from experiments.config.workloads import request_source
from experiments.measure.client_actor import ClientPool
from experiments.measure.efficiency import client_side_verdict
from experiments.measure.metrics import is_stalled
from experiments.plan import Trial, TrialGroup, plan_trials
from experiments.results.layout import CEILING_FILE, CLUSTER_FILE, INPUTS_FILE, SERVER_LOGS_DIR, TierFolder
from experiments.results.node_time import record_node_time
from experiments.results.publish import Publisher, TierInfo, relog_command
from experiments.results.records import Status, TrialRecord, read_record, write_record
from experiments.results.redaction import redact
from experiments.results.tracking import import_client, tracking_uri
from experiments.run.backend_search import SEARCH_FILE, BackendSearch
from experiments.run.progress import SweepProgress, sweep_progress
from experiments.run.resume import resume_command
from experiments.run.server_group import Finish, ServerGroup, ServerRelay, StagedModel, build_backend
from experiments.run.slo import summary_line
from experiments.run.tier_ceiling import TierCeiling
from experiments.run.token_ceiling import TokenCeilingJob
from experiments.run.trial import new_record
from serving.model_config import ServedModel
from serving.model_files import ShippedFile, ship
from serving.models import preprocessing
from serving.node import NodeInfo, busy_elsewhere
from serving.workloads.registry import workload as workload_named

log = logging.getLogger(__name__)
NOT_RUN = "not run: "  # the reason of a trial whose node was lost before its turn


class TierSweep:
    """Runs the trials of one tier and owns everything it starts."""

    def __init__(self, cfg: TierbenchConfig) -> None:
        self.cfg = cfg
        self.tier = cfg.gpu.name
        self.sweep_id = str(cfg.sweep_id)
        self.folder = TierFolder.of(cfg.results_dir, self.sweep_id, self.tier)
        self.groups = plan_trials(cfg)
        # A backend whose settings are searched is measured through its candidates (`experiment.search`), each a
        # backend entry of its own: its planned trials are not run as such, nor counted.
        self.searched = {g.variant for g in self.groups if space_of(cfg, g.variant)}
        self.total = len(self._planned())
        self.counted: set[str] = set()  # keys of trials finished or found ok, this run (the `[n/N]` count)
        self.failed_keys: set[str] = set()  # failed and not measured ok since (a replacement node may rerun them)
        self.resumed = 0
        self.publisher: Publisher | None = None
        self.node: NodeInfo | None = None
        self.progress: SweepProgress | None = None
        self.shipped: ShippedFile | None = None  # the model's file in Ray's object store, once per tier job
        self.ceiling: TierCeiling | TokenCeilingJob | None = None  # the in-process ceiling on the tier's node
        self.common_tags = {"sweep_id": self.sweep_id, "gpu_tier": self.tier, "emulated": "false"}
        # Every backend an endpoint elsewhere: the node held runs only the clients, and the tier is the servers'.
        self.clients_only = clients_only(cfg)
        self.workload = workload_named(cfg.experiment.workload)

    def run(self) -> int:
        with ray_cluster(self.cfg.cluster, self.tier, self.clients_only) as view:
            while True:
                try:
                    self._run_on_a_node(view)
                    break
                except NodeLostError as lost:
                    log.error("%s", lost)
                    if not self._replacement_joined(lost.loss):
                        self._record_not_run(lost.loss)
                        break
                    view = ClusterView.read(self.cfg.cluster.emulated)
        if self.publisher is None:  # the node went before anything was recorded
            return 1
        self.publisher.finish(Status.FAILED if self.failed_keys else Status.OK)
        self._print_where_results_are()
        return 1 if self.failed_keys else 0

    def _run_on_a_node(self, view: ClusterView) -> None:
        """Hold a node of the tier and run every trial not yet ok on it; NodeLostError when the node goes."""
        import ray

        with hold_tier_node(self.cfg, view, on_release=self._node_released) as place:
            self.place: TierPlacement = place
            try:
                self._run_trials(ray, place.view or view, place)
            except NodeLostError:
                raise
            except Exception as exc:  # a lost node surfaces as whatever call reached it first: name it
                loss = place.lost()
                if loss is None:
                    raise
                raise NodeLostError(loss) from exc

    def _run_trials(self, ray: Any, view: ClusterView, place: TierPlacement) -> None:
        self.common_tags["emulated"] = place.emulated_tag
        self.folder.path.mkdir(parents=True, exist_ok=True)
        self.folder.cluster_file.write_text(json.dumps(view.summary(), indent=2))  # where things could run
        log.info("sweep %s, tier %s: %d trials; raw results in %s", self.sweep_id, self.tier, self.total,
                 self.folder.path.resolve())
        options = place.server_options
        uri = tracking_uri(self.cfg.mlflow.tracking_uri)
        node = place.describe(self.cfg.cluster.schedule_timeout_s, meanwhile=lambda: import_client(uri))
        if not self.clients_only:  # an endpoint's tier is where its server runs, not this node
            refuse_wrong_gpu(self.cfg.gpu, node, place.emulated)  # before any server, client or MLflow run
        self.node = node
        if busy_elsewhere(node.cpu_busy_cores, node.cpu_count):
            log.warning("gpu=%s: %.1f of node %s's %d cores were busy before this job started anything on it: its "
                        "servers and clients share the CPU with that work, and its figures include it (free the node "
                        "for figures of the servers alone)", self.tier, node.cpu_busy_cores, node.hostname,
                        node.cpu_count)
        if self.publisher is None:  # once per tier job, also when a replacement node takes over
            info = TierInfo(self.sweep_id, self.tier, self.cfg.mlflow.experiment,
                            {**self._tier_params(node), **place.tier_params()}, self.common_tags,
                            redact(OmegaConf.to_yaml(self.cfg, resolve=True)))
            info.save(self.folder)
            self.publisher = Publisher(uri, info, self.folder)
            self.publisher.open()
        self.publisher.tier_file(CLUSTER_FILE, self.folder.cluster_file.read_text())
        model = self._stage_model(options)
        # the in-process ceiling: the runtimes of an image model's servers, the engines of launched generative ones
        ceiling_kind = TierCeiling if self.workload.image_model else TokenCeilingJob
        self.ceiling = ceiling_kind(self.cfg, node, lambda name: build_backend(self.cfg, name, node, options,
                                                                               place.emulated, model.on_node))
        if self.ceiling.measure(self.groups, model.on_node, options, self.folder.ceiling_file):
            self.publisher.tier_file(CEILING_FILE, self.folder.ceiling_file.read_text())
        done_keys = self._ok_keys()
        self.clients = ClientPool(self.cfg.experiment, place.client_options,
                                  self.cfg.cluster.schedule_timeout_s).start()
        self._prepare_inputs(model.on_node)

        def server_group(group: TrialGroup, finish: Finish, relay: ServerRelay | None = None) -> ServerGroup:
            return ServerGroup(self.cfg, group, node, options, self.clients, finish,
                               lambda name, text, v=group.variant: self._save_server_file(v, name, text),
                               done_keys, place.emulated, model, relay)
        try:
            with sweep_progress(self._planned(), self.tier, bool(self.cfg.quiet)) as self.progress:
                for group in self.groups:
                    if group.variant in self.searched:
                        self._search(group, server_group, done_keys)
                        continue
                    pending = [t for t in group.trials if not self._already_ok(t, node, done_keys)]
                    if pending:
                        server_group(group, self._finish).run(pending)
        finally:
            self.clients.close()

    def _planned(self) -> list[Trial]:
        """The trials run as planned (those of searched backends are run through their candidates)."""
        return [t for g in self.groups if g.variant not in self.searched for t in g.trials]

    def _search(self, group: TrialGroup, server_group: Callable[..., ServerGroup], done_keys: set[str]) -> None:
        """Search `group.variant`'s settings, one server handed from candidate to candidate where it can take the
        next one's settings in place; the summary and the winner's deploy files go under `deploy/`."""
        point = group.trials[0]
        reason = server_group(group, self._finish).backend.unsupported_reason(point.protocol, point.input_format)
        if reason:  # e.g. TensorRT on a node without a GPU: nothing to search here, said once
            log.info("settings search of %s skipped on %s: %s", group.variant, self.tier, reason)
            for trial in group.trials:
                record = new_record(self.cfg, trial, self.node, status=Status.SKIPPED, reason=reason)
                record.tags["phase"] = "settings_search"
                self._finish(record, {})
            return
        ok_records = {r.key: r for r in map(read_record, self.folder.trials()) if r.status == Status.OK}

        relay = ServerRelay()

        def run_group(candidate: TrialGroup, finish: Finish) -> None:
            pending = [t for t in candidate.trials if new_record(self.cfg, t, self.node).key not in done_keys]
            server_group(candidate, finish, relay).run(pending)

        def done_slo(candidate: TrialGroup) -> TrialRecord | None:
            return ok_records.get(server_group(candidate, self._finish).slo_key(candidate.trials[0]))

        search = BackendSearch(self.cfg, group, run_group, self._finish, done_slo)
        try:
            outcome = search.run()
        finally:
            relay.stop()
        files = {SEARCH_FILE: json.dumps(search.summary(outcome), indent=2)}
        if outcome.best is not None:
            winner = search.entry_of(outcome.best)
            rendered = {p.name: p.read_text(errors="replace") for p in (self.folder.servers / winner).glob("*")}
            files.update(build_backend(self.cfg, winner, self.node, {}, self.place.emulated).deploy_files(rendered))
        for name, text in files.items():
            path = self.folder.deploy / group.variant / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            self.publisher.tier_file(str(path.relative_to(self.folder.path)), text)
        log.info("settings search of %s: summary and the winner's deploy files in %s", group.variant,
                 (self.folder.deploy / group.variant).resolve())

    def _stage_model(self, server_options: dict[str, Any]) -> StagedModel:
        """The model's file, if any, shipped once through Ray's object store and staged on the tier's node (again
        on a replacement node); the servers load that copy, the reference the driver's own."""
        model = self.cfg.model
        if not self.workload.image_model:  # a language model's weights are its server's business
            return StagedModel(model, model)
        if self.shipped is None:
            self.shipped = ship(model)
        if self.shipped is None:
            return StagedModel(model, model)
        on_node = self.shipped.staged_on(server_options, self.cfg.cluster.schedule_timeout_s + 600)
        log.info("model %s: staged on node %s at %s", model.name, self.node.hostname, on_node)
        return StagedModel(model.with_file(on_node), model.with_file(self.shipped.driver_copy))

    def _node_released(self, node_time: NodeTime) -> None:
        """Keep what holding the node cost (`results.node_time`): in the tier folder now, on the tier run at the
        end. Not for endpoints: the node held only ran their clients, and the tier's price is their servers'."""
        if self.clients_only:
            log.info("gpu=%s: released node %s, which ran the clients of endpoints (no tier node was held)",
                     self.tier, node_time.node_id[:12])
            return
        record_node_time(self.folder, {**asdict(node_time), "uptime_s": round(node_time.uptime_s, 3),
                                       "price_per_hour_usd": float(self.cfg.gpu.price_per_hour_usd)})
        log.info("gpu=%s: released node %s after %.0f s up for this sweep (%s)", self.tier, node_time.node_id[:12],
                 node_time.uptime_s, "started for it by the autoscaler" if node_time.scaled_up else "already up")

    def _replacement_joined(self, loss: NodeLoss) -> bool:
        """With `cluster.replace_lost_node`, wait (bounded by `cluster.lease_timeout_s`) for another node of the
        tier to join; whether one did."""
        cluster = self.cfg.cluster
        if not cluster.replace_lost_node:
            return False
        try:
            wait_for_tier_node(self.tier, cluster.lease_timeout_s, "to replace the lost node",
                               "cluster.lease_timeout_s", exclude=[loss.node_id])
        except NodeWaitTimeout as exc:
            log.error("%s", exc)
            return False
        log.info("gpu=%s: resuming sweep %s on the new node; trials already ok are kept", self.tier, self.sweep_id)
        return True

    def _record_not_run(self, loss: NodeLoss) -> None:
        """Every planned trial with no record yet gets one (failed, `not run: <the loss>`): it is in the run folder,
        in MLflow and in the report, and the resume command runs it."""
        if self.publisher is None:  # lost before anything was set up: nothing planned was recorded
            log.error("gpu=%s: nothing was run. Resume with: %s", self.tier, redact(resume_command(self.cfg)))
            return
        reason = f"{NOT_RUN}{loss.describe()}"
        not_run = [t for t in self._planned() if new_record(self.cfg, t, self.node).key not in self.counted]
        for trial in not_run:
            self._finish(new_record(self.cfg, trial, self.node, status=Status.FAILED, reason=reason), {})
        log.error("%s; %d trials not run. Resume on a node of tier %s (re-join one with `python -m runners.node "
                  "--address HEAD:6379 --tier %s`): %s", loss.describe(), len(not_run), self.tier, self.tier,
                  redact(resume_command(self.cfg)))

    def _ok_keys(self) -> set[str]:
        """Trials of this sweep and tier already measured `ok`: in the run folder or in the store."""
        keys = self.publisher.ok_keys()
        for trial_dir in self.folder.trials():
            record = read_record(trial_dir)
            if record.status == Status.OK:
                keys.add(record.key)
        return keys

    def _already_ok(self, trial: Trial, node: NodeInfo, done_keys: set[str]) -> bool:
        key = new_record(self.cfg, trial, node).key
        if key not in done_keys:
            return False
        if key in self.counted:  # measured by this job before its node was replaced
            self.progress.finished(trial, skipped=True)
            return True
        self.counted.add(key)
        self.resumed += 1
        log.info("[%d/%d] %s  already ok in sweep %s", len(self.counted), self.total, trial.name, self.sweep_id)
        self.progress.finished(trial, skipped=True)
        return True

    def _print_where_results_are(self) -> None:
        uri = redact(self.publisher.uri)
        log.info("done: %d trials (%d already ok from an earlier run), %d failed. Raw results: %s",
                 len(self.counted), self.resumed, len(self.failed_keys), self.folder.path.resolve())
        if not self.publisher.online:
            log.warning("MLflow store %s was unreachable: log these results with: %s", uri,
                        relog_command(self.folder))
            return
        log.info("MLflow: experiment '%s' in %s, runs tagged sweep_id=%s", self.cfg.mlflow.experiment, uri,
                 self.sweep_id)
        if self.cfg.report:
            log.info("the report follows; for another latency target: python -m runners.report %s --slo-p99-ms MS",
                     self.sweep_id)
        else:
            log.info("cost-per-image report: python -m runners.report %s [--slo-p99-ms MS]", self.sweep_id)
        if uri.startswith("sqlite:"):
            log.info("open the UI with: mlflow ui --backend-store-uri %s --host 127.0.0.1 --port 5000  (then "
                     "http://127.0.0.1:5000/#/experiments/%s/runs?workflowType=machine_learning)", uri,
                     self.publisher.tracker.experiment_id)

    def _prepare_inputs(self, model: ServedModel) -> None:
        """The corpus (or the conversations) built on the clients' node before any server starts, its figures kept
        with the tier."""
        exp = self.cfg.experiment
        if not self.workload.image_model:
            stats = self.clients.prepare_prompts(request_source(self.cfg))
            log.info("inputs: %d prompts from %s ready on the clients' node (prompt tokens p50 %s, max_tokens p50 "
                     "%s; %.1f s)", stats.get("pool_prompts", 0), exp.prompts.source,
                     f"{stats['pool_input_tokens_p50']:g}" if "pool_input_tokens_p50" in stats else "unknown",
                     f"{stats.get('pool_max_tokens_p50', 0):g}", stats.get("prompts_prepare_s", 0.0))
            self._save_inputs(stats)
            return
        shape = tuple(int(d) for d in model.input_shape)
        stats = self.clients.prepare_inputs(input_source(exp.inputs),
                                            preprocessing(model).to_json() if len(shape) == 3 else "",
                                            "tensor" in exp.input_formats and len(shape) == 3)
        log.info("inputs: corpus %s ready on the clients' node (%d images, median %.1f KB, up to %.1f MP; %.1f s)",
                 inputs_settings(exp.inputs)["inputs"], stats["corpus_images"], stats["corpus_bytes_p50"] / 1e3,
                 stats["corpus_megapixels_max"], stats["corpus_prepare_s"])
        self._save_inputs(stats)

    def _save_inputs(self, stats: dict[str, float]) -> None:
        text = json.dumps(stats, indent=1, sort_keys=True)
        (self.folder.path / INPUTS_FILE).write_text(text)
        self.publisher.tier_file(INPUTS_FILE, text)

    def _tier_params(self, node: NodeInfo) -> dict[str, Any]:
        gpu = self.cfg.gpu
        return {"gpu_tier": self.tier, "gpu_display_name": gpu.display_name, "gpu_name": node.gpu_name,
                "price_per_hour_usd": gpu.price_per_hour_usd, "price_source": gpu.price_source,
                "price_seen": gpu.price_seen, "model": self.cfg.model.name, "experiment": self.cfg.experiment.name,
                "node_hostname": node.hostname, "driver_version": node.driver_version or "",
                "cuda_version": node.cuda_version or "", "node_cpu_count": node.cpu_count,
                **({"node_cpu_busy_before": round(node.cpu_busy_cores, 3)} if node.cpu_busy_cores is not None else {}),
                **tier_price_params(gpu), **share_params(gpu), **owned_params(gpu.owned)}

    def _save_server_file(self, variant: str, name: str, text: str) -> None:
        """Server logs and rendered configs: into the run folder, then onto the tier run."""
        path = self.folder.server_file(variant, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self.publisher.server_file(variant, name, text)

    def _finish(self, record: TrialRecord, server_logs: dict[str, str]) -> None:
        """Persist first (nothing measured is lost), then publish to MLflow, then report progress. A failure
        because the node went is said so, and stops the node's work (NodeLostError)."""
        not_run = (record.reason or "").startswith(NOT_RUN)
        lost = self.place.lost() if record.status == Status.FAILED and not not_run else None
        if lost is not None:
            record.reason = f"{lost.describe()}; {record.reason}"
            record.tags.pop("retried", None)  # the node's work stops here: no attempt follows on it
        record.finished_at = time.time()
        trial_dir = self.folder.trial(record.slug)
        logs_dir = trial_dir / SERVER_LOGS_DIR
        if logs_dir.exists():
            for old in logs_dir.iterdir():
                old.unlink()
        for name, text in server_logs.items():
            logs_dir.mkdir(parents=True, exist_ok=True)
            (logs_dir / name).write_text(text)
        if record.status != Status.SKIPPED and lost is None and not not_run:
            record.params.update(self.place.client_params(self.clients.locations(
                record.params.get("client_actors_used", 1), record.trial.protocol)))
        if self.ceiling is not None:
            self.ceiling.annotate(record)
        if record.status == Status.OK and record.tags.get("run_level", "trial") == "trial" and (
                "bottleneck" not in record.tags):  # no ceiling to judge by: what the client can decide
            judged = client_side_verdict(record.metrics, record.params, float(self.cfg.experiment.client_cpu_limit))
            if judged is not None:
                record.tags.update(judged.tags())
        write_record(record, trial_dir)
        self.publisher.trial(record, trial_dir)
        if record.status == Status.FAILED:
            self.failed_keys.add(record.key)
        else:
            self.failed_keys.discard(record.key)
        if record.tags.get("retried") == "true":
            pass  # an attempt measured again: the next attempt is the trial's record (and a lost node's not-run one)
        elif record.tags.get("run_level", "trial") != "trial" or "phase" in record.tags:
            log.info("[%s] %s  %s", record.tags.get("phase", "slo search").replace("_", " "), record.name,
                     _summary(record))
        else:
            self.counted.add(record.key)
            log.info("[%d/%d] %s  %s", len(self.counted), self.total, record.name, _summary(record))
            if self.progress is not None:
                self.progress.finished(record.trial, skipped=record.status == Status.SKIPPED)
        if lost is not None:
            raise NodeLostError(lost)


def refuse_wrong_gpu(tier_cfg: GpuTierConfig, node: NodeInfo, emulated: bool) -> None:
    """A node that declares a GPU tier without its GPU would file its figures under the tier's name: refuse it
    (an emulated cluster's nodes stand in for tiers on purpose; their results are tagged emulated)."""
    problem = None if emulated else tier_gpu_problem(tier_cfg, node.gpu_names, node.gpu_memory_mib,
                                                         cpu_count=node.cpu_count, mig=node.mig)
    if problem:
        nvml = f" ({node.gpu_problem})" if node.gpu_problem else ""
        raise TierMismatchError(
            f"gpu={tier_cfg.name}: node {node.hostname} ({node.ray_node_id[:12]}) declares tier {tier_cfg.name}, but "
            f"{problem}{nvml}. Nothing was started. Re-join it with the tier its GPU detects (`python -m "
            "runners.node --address HEAD:6379`), or try tiers without their GPUs with cluster=emulated (results "
            "tagged emulated=true)")


def _summary(record: TrialRecord) -> str:
    m = record.metrics
    if record.status != Status.OK:
        return f"{record.status.upper()}: {record.reason}"
    if record.tags.get("run_level") == "slo":
        return summary_line(m, workload_named(str(record.params.get("workload", "image"))))
    flags = "" if m.get("stable", 1) else "  (not stable)"
    if m.get("overloaded"):
        flags += (f"  (OVERLOADED: {m['offered_rate_rps']:.1f} req/s offered, backlog grew by "
                  f"{m['backlog_growth_requests']:.0f})")
    if is_stalled(m):
        flags += f"  (STALLED: nothing answered for {m['answer_gap_max_ms']:.0f} ms while requests waited)"
    if "server_count_ratio" in m:
        flags += f"  server/client count {m['server_count_ratio']:.3f}"
    if "latency_p99_ms_ci_low" in m and "throughput_img_s_ci_low" in m:
        flags += (f"  ({m['repeats']:.0f} repeats, 95 %: p99 {m['latency_p99_ms_ci_low']:.1f}-"
                  f"{m['latency_p99_ms_ci_high']:.1f} ms, {m['throughput_img_s_ci_low']:.1f}-"
                  f"{m['throughput_img_s_ci_high']:.1f} img/s)")
    if "output_tokens_s" in m:  # a generative trial: its tokens
        timing = (f"TTFT p50 {m['ttft_p50_ms']:.1f} ms  p99 {m['ttft_p99_ms']:.1f} ms  TPOT p50 "
                  f"{m.get('tpot_p50_ms', float('nan')):.2f} ms" if "ttft_p50_ms" in m else
                  f"p50 {m['latency_p50_ms']:.1f} ms  p99 {m['latency_p99_ms']:.1f} ms")
        return (f"{timing}  {m['output_tokens_s']:.1f} tok/s  "
                f"${m.get('cost_per_1m_output_tokens_usd', float('nan')):.3f}/1M tok{flags}")
    return (f"p50 {m['latency_p50_ms']:.1f} ms  p99 {m['latency_p99_ms']:.1f} ms  {m['throughput_img_s']:.1f} img/s"
            f"  ${m.get('cost_per_1k_images_usd', float('nan')):.4f}/1k img{flags}")


def run_sweep(cfg: DictConfig | TierbenchConfig) -> int:
    """Type and validate the config, then run the tier's sweep; returns the exit code (1 when a trial failed)."""
    config = typed(cfg)
    validate(config)
    return TierSweep(config).run()
