"""Reach Ray for a sweep: start a private Ray (cluster=local), start an emulated multi-node cluster on this
machine (cluster=emulated) or join a running one (cluster=address); check that every requested tier has a live node,
or a node type the cluster's autoscaler can start (`experiments.cluster.autoscaling`), before anything is placed;
stop only what was started.

The owner of the connection is whoever opens it first: the multirun callback (`experiments.run.multirun`, one
cluster shared by every tier job) or a single run's `ray_cluster`. A tier job that finds Ray already connected
(the callback's driver, or a Ray launcher task inside the cluster) uses it and stops nothing.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from experiments.cluster.autoscaling import read_autoscaling
from experiments.cluster.tiers import (
    CLIENT_POOL_RESOURCE,
    EMULATED_RESOURCE,
    RESOURCE_PREFIX,
    cpu_tiers_for,
    known_tiers,
    node_declaration,
    tier_gpu_problem,
    tiers_for_gpu,
    tiers_of_nodes,
    with_shared_tiers,
)
from experiments.config.autoscaling import Autoscaling
from serving.process import unreachable
from serving.registry import backend_packages, ray_node_environment

if TYPE_CHECKING:
    from experiments.config.schema import ClusterConfig

log = logging.getLogger(__name__)
NAMESPACE = "tierbench"
# What the command lines of Ray's own processes contain (the tests' leak checks look for them, beside each backend
# package's `process_names`): its GCS, raylets and workers.
RAY_PROCESS_NAMES = ("raylet", "gcs_server", "ray::", "default_worker.py")
NO_TIER_DOCS = "docs/troubleshooting.md#no-node-of-the-tier"


class TierUnavailableError(RuntimeError):
    """A requested tier has no live node: say which tiers there are and how to add one."""


def missing_tier_message(tier: str, available: list[str], autoscaling: Autoscaling | None = None) -> str:
    have = ", ".join(sorted(available)) or "none"
    if autoscaling is not None:
        return (f"gpu={tier}: no live node of tier '{tier}' and no autoscaler node type offers it (live tiers: {have}; "
                f"{autoscaling.describe()}). Add a node type whose resources declare {{tier_{tier}: 1}}, join a node "
                f"of the tier (`python -m runners.node --address HEAD:6379 --tier {tier}`), or pick one of: "
                f"{', '.join(sorted(set(available) | autoscaling.tiers())) or 'none'} ({NO_TIER_DOCS})")
    return (f"gpu={tier}: no live node of tier '{tier}' in the Ray cluster (tiers it has: {have}). "
            f"Join a node of that tier (`python -m runners.node --address HEAD:6379 --tier {tier}`) "
            f"or pick one of: {have} ({NO_TIER_DOCS})")


def require_tiers(requested: list[str], available: list[str], autoscaling: Autoscaling | None = None) -> None:
    """Raise TierUnavailableError naming every requested tier that no live node has and no autoscaler node type
    offers, and the tiers (and node types) there are."""
    offered = autoscaling.tiers() if autoscaling else set()
    missing = [t for t in dict.fromkeys(requested) if t not in available and t not in offered]
    if missing:
        raise TierUnavailableError("\n".join(missing_tier_message(t, available, autoscaling) for t in missing))


def require_live_or_offered(cluster_cfg: ClusterConfig, requested: list[str], view: ClusterView) -> Autoscaling | None:
    """`require_tiers` on a connected cluster: the autoscaler's node types are read only when a requested tier has
    no live node (then returned: the tier job waits for the node the autoscaler starts)."""
    live = list(view.tiers)
    if all(tier in live for tier in requested):
        return None
    autoscaling = read_autoscaling(cluster_cfg)
    require_tiers(requested, live, autoscaling)
    return autoscaling


class TierMismatchError(TierUnavailableError):
    """A node declares a GPU tier whose GPU it does not have: its figures would be filed under the wrong name."""


def local_node_tiers() -> list[str]:
    """Tiers this machine declares when the sweep starts Ray itself: `local`, plus its GPU's tier if known, and the
    tiers that share one of those cards among servers (`local_shared2`)."""
    from serving.node import nvml_gpus

    gpus = nvml_gpus()
    whole = ["local", *tiers_for_gpu(gpus.names, gpus.memory_mib, mig=gpus.mig),
             *cpu_tiers_for(os.cpu_count() or 1, gpus.names)]
    return with_shared_tiers(whole)


def require_local_tiers(requested: list[str], declared: list[str]) -> None:
    """cluster=local runs on this machine, which is only the tiers its GPU is: refuse another, naming both."""
    from serving.node import nvml_gpus

    missing = [t for t in dict.fromkeys(requested) if t not in declared]
    if not missing:
        return
    tiers = known_tiers()
    gpus = nvml_gpus()
    why = f" ({gpus.problem})" if gpus.problem else ""
    problems = {tier: tier_gpu_problem(tiers[tier], gpus.names, gpus.memory_mib, cpu_count=os.cpu_count(),
                                       mig=gpus.mig)
                for tier in missing}
    lines = [f"gpu={tier} with cluster=local: {problems[tier] or 'not this machine'}"
             f"{why}; cluster=local declares only this machine's tiers {declared}" for tier in missing]
    raise TierMismatchError("\n".join(lines) + ". Run the sweep on a node of the tier, join one to a cluster "
                            "(cluster=address), or try the tier without its GPU with cluster=emulated (every result "
                            "tagged emulated=true) (docs/troubleshooting.md#a-node-that-is-not-its-tier)")


def declared_tiers(cluster_cfg: ClusterConfig, client_tiers: tuple[str, ...] = ()) -> list[str] | None:
    """The tiers a cluster the sweep would start will have (known before starting it); None for `address`.
    `client_tiers`: tiers whose servers run outside the cluster (endpoints): this machine only hosts their clients,
    so cluster=local declares them too."""
    if cluster_cfg.address:
        return None
    if cluster_cfg.emulated:  # each node declares its tier and the tiers sharing its card (`node_declaration`)
        return with_shared_tiers([node.tier for node in cluster_cfg.nodes if node.tier])
    return list(dict.fromkeys([*local_node_tiers(), *client_tiers]))


@dataclass
class ClusterView:
    """The live nodes as Ray's GCS lists them (`ray.nodes()`), read when a tier job starts."""

    nodes: list[dict[str, Any]]
    emulated_config: bool = False

    @staticmethod
    def read(emulated_config: bool = False) -> ClusterView:
        import ray

        return ClusterView([n for n in ray.nodes() if n.get("Alive")], emulated_config)

    @property
    def tiers(self) -> dict[str, list[str]]:
        return tiers_of_nodes(self.nodes)

    def node(self, node_id: str) -> dict[str, Any]:
        return next(n for n in self.nodes if n["NodeID"] == node_id)

    def is_emulated(self, node_id: str) -> bool:
        """Emulated when the cluster config says so or the node declares the emulated marker."""
        return self.emulated_config or EMULATED_RESOURCE in self.node(node_id).get("Resources", {})

    def client_pool(self) -> list[dict[str, Any]]:
        return [n for n in self.nodes if CLIENT_POOL_RESOURCE in n.get("Resources", {})]

    def summary(self) -> list[dict[str, Any]]:
        """One row per live node: what the sweep saw (written next to the results as cluster.json)."""
        rows = []
        for n in self.nodes:
            resources = n.get("Resources", {})
            rows.append({
                "node_id": n["NodeID"], "address": n.get("NodeManagerAddress"),
                "hostname": n.get("NodeManagerHostname"),
                "tiers": sorted(r.removeprefix(RESOURCE_PREFIX) for r in resources if r.startswith(RESOURCE_PREFIX)),
                "client_pool": CLIENT_POOL_RESOURCE in resources, "emulated": EMULATED_RESOURCE in resources,
                "cpus": resources.get("CPU", 0.0), "gpus": resources.get("GPU", 0.0),
                "labels": n.get("Labels", {}),
            })
        return rows


def _check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """Fail at once when nothing listens at HOST:PORT (`ray.init` would retry for ever)."""
    if address in ("auto", "local") or address.startswith("ray://"):
        return
    host, _, port = address.rpartition(":")
    problem: Exception | None
    try:
        problem = unreachable(host, int(port), timeout_s)
    except ValueError as exc:
        problem = exc
    if problem is not None:
        raise TierUnavailableError(
            f"cluster.address={address}: no Ray head answers there ({problem}). Start one on the head "
            "(`python -m runners.node --head`), open its port to this machine, or use cluster=local / "
            "cluster=emulated (docs/troubleshooting.md#no-ray-head-at-the-address)") from problem


def _quiet_ray_env() -> None:
    # Defaults for the Ray this program starts (a user's own setting wins): no token warning, no usage stats, and
    # what the backend packages ask of its environment (`BackendPackage.ray_node_environment`).
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    for key, value in ray_node_environment().items():
        os.environ.setdefault(key, value)


@contextmanager
def _keep_sigterm_handler() -> Iterator[None]:
    """`ray.init` replaces the driver's SIGTERM handler (Python's `sys.exit` and a C-level abort): put back
    the ones the runner set, so SIGTERM and SIGINT unwind like Ctrl-C and every server is stopped."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)} if in_main_thread else {}
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            if handler is not None:
                signal.signal(sig, handler)


def job_runtime_env(cluster_cfg: ClusterConfig) -> dict[str, Any] | None:
    """The sweep job's runtime env: the environment variables every backend package asks of the cluster for this
    config (`BackendPackage.cluster_environment`, e.g. Ray Serve's direct-ingress switch); actors the job creates
    inherit them. None when none asks for any."""
    env_vars = {key: value for package in backend_packages().values()
                for key, value in package.cluster_environment(cluster_cfg.switches()).items()}
    return {"env_vars": env_vars} if env_vars else None


class RayConnection:
    """Starts or joins the Ray of `cluster_cfg` and, on close, stops exactly what it started."""

    def __init__(self, cluster_cfg: ClusterConfig, log_to_driver: bool = False,
                 client_tiers: tuple[str, ...] = ()) -> None:
        self.cfg = cluster_cfg
        self.log_to_driver = log_to_driver
        self.client_tiers = client_tiers  # tiers whose servers are endpoints elsewhere (`declared_tiers`)
        self._emulated: Any = None  # ray.cluster_utils.Cluster when this connection started one
        self._started_local = False
        # What the backend packages do on a cluster this connection joined, left when it lets go of it.
        self._joined = ExitStack()
        self.autoscaling: Autoscaling | None = None  # node types the autoscaler can start, when a tier needs one

    def open(self, tiers: list[str]) -> ClusterView:
        """Connected Ray in which every tier of `tiers` has a live node or an autoscaler node type that offers it
        (TierUnavailableError otherwise)."""
        declared = declared_tiers(self.cfg, self.client_tiers)
        if declared is not None:  # fail before anything starts: nothing to clean up
            (require_tiers if self.cfg.emulated else require_local_tiers)(tiers, declared)
        with _keep_sigterm_handler():
            self._init(declared)
        try:
            if self.cfg.address:
                for package in backend_packages().values():
                    self._joined.enter_context(package.joined_cluster())
            view = ClusterView.read(self.cfg.emulated)
            self.autoscaling = require_live_or_offered(self.cfg, tiers, view)
        except BaseException:
            self.close()
            raise
        return view

    def _init(self, declared: list[str] | None) -> None:
        import ray

        job = {"namespace": NAMESPACE, "log_to_driver": self.log_to_driver, "runtime_env": job_runtime_env(self.cfg)}
        if self.cfg.address:
            _check_reachable(self.cfg.address)
            ray.init(address=self.cfg.address, **job)
        elif self.cfg.emulated:
            from experiments.cluster.emulated import start_emulated_cluster

            _quiet_ray_env()
            self._emulated = start_emulated_cluster(self.cfg)
            ray.init(address=self._emulated.address, **job)
        else:
            _quiet_ray_env()
            start_local_ray(num_cpus=self.cfg.num_cpus, object_store_memory=self.cfg.object_store_memory,
                            resources=node_declaration(declared or []), include_dashboard=False, **job)
            self._started_local = True

    def close(self) -> None:
        """Let go of Ray; stop the cluster only when this connection started it, and on a joined cluster what the
        backend packages started there (`BackendPackage.joined_cluster`: Ray Serve's detached instance)."""
        import ray

        if ray.is_initialized():
            self._joined.close()
            ray.shutdown()
        if self._emulated is not None:
            cluster, self._emulated = self._emulated, None
            started = time.monotonic()
            cluster.shutdown()  # only this cluster's processes; never `ray stop`
            log.info("stopped the emulated Ray cluster (%.1f s)", time.monotonic() - started)
        elif self._started_local:
            self._started_local = False
            log.info("stopped the local Ray this sweep started")


RAY_START_TIMEOUT = "timed out during startup"  # Ray's message when its raylet misses its fixed 30 s wait
# Ray's message when its new control store (GCS) did not answer within its ~20 one-second tries: seen once on a
# starved 2-core machine, where the same start succeeded a moment later.
GCS_START_FAILED = "Failed to start GCS"
RETRIED_STARTS = (RAY_START_TIMEOUT, GCS_START_FAILED)


def start_local_ray(**init_kwargs: Any) -> None:
    """`ray.init(address="local")`, tried a second time if the first start times out.

    Ray waits a fixed 30 s for its new raylet to register, and about 20 s for its control store (GCS) to answer. A
    first start on a busy 2-core machine, in an environment installed without bytecode, can miss either: Ray's agents
    compile their modules as they import them. The bytecode they wrote makes the second start quick. The processes
    the failed start left are this process's children; they are stopped before the retry, so nothing of the first
    attempt keeps running.
    """
    import psutil
    import ray

    before = {child.pid for child in psutil.Process().children(recursive=True)}
    try:
        ray.init(address="local", **init_kwargs)
        return
    except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for this
        if not any(said in str(exc) for said in RETRIED_STARTS):
            raise
        log.warning("Ray's node did not come up within Ray's fixed waits (%s: a busy machine, or Ray's first start "
                    "compiling its modules); stopping what it started and starting it once more",
                    str(exc).splitlines()[0][:120])
    stop_children_since(before)
    ray.init(address="local", **init_kwargs)


def stop_children_since(before: set[int], timeout_s: float = 10.0) -> None:
    """Terminate (then kill) every descendant of this process that is not in `before`."""
    import psutil

    started = [c for c in psutil.Process().children(recursive=True) if c.pid not in before]
    for child in started:
        with suppress(psutil.NoSuchProcess):
            child.terminate()
    _, alive = psutil.wait_procs(started, timeout=timeout_s)
    for child in alive:
        with suppress(psutil.NoSuchProcess):
            child.kill()
    psutil.wait_procs(alive, timeout=timeout_s)


@contextmanager
def ray_cluster(cluster_cfg: ClusterConfig, tier: str, clients_only: bool = False) -> Iterator[ClusterView]:
    """Connected Ray with a live node of `tier`, or an autoscaler node type that offers it; yields the live nodes.
    Reuses a connection someone else owns.
    `clients_only`: the tier's servers are endpoints elsewhere, so this machine may stand for the tier."""
    import ray

    if ray.is_initialized():  # owned by the multirun callback, or we run inside the cluster (Ray launcher job)
        view = ClusterView.read(cluster_cfg.emulated)
        require_live_or_offered(cluster_cfg, [tier], view)
        yield view
        return
    connection = RayConnection(cluster_cfg, client_tiers=(tier,) if clients_only else ())
    view = connection.open([tier])
    try:
        yield view
    finally:
        connection.close()
