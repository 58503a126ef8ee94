"""Settings of `serving.ray_serve.backend.RayServeTorchBackend` (entries `pytorch*` of conf/backends/)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from serving.pytorch.settings import TorchSettings
from serving.settings import is_positive_int

if TYPE_CHECKING:
    from serving.model_config import ModelConfig
    from serving.settings import ClusterSwitches


BATCHERS = ("serve", "when_free")


@dataclass
class RayServeTorchSettings(TorchSettings):
    """PyTorch behind Ray Serve: replicas and server-side batching (`@serve.batch` or `when_free`; how the model runs:
    the base)."""

    _target_: str = "serving.ray_serve.backend.RayServeTorchBackend"
    num_replicas: int = 1
    replica_num_cpus: float = 0.1  # Ray scheduling only; the replica uses what torch threads take
    replica_num_gpus: float = 0.5  # asked of Ray on nodes where it schedules GPUs (pins the replica to one GPU)
    max_ongoing_requests: int = 32  # with batching: must cover the requests a batch can hold
    # Load shedding: requests waiting for a replica beyond this many are answered 503 (gRPC RESOURCE_EXHAUSTED) at
    # once by Serve's proxy; -1: no limit
    max_queued_requests: int = -1
    # The longest Serve's router waits before trying again to place a request when every replica already has
    # max_ongoing_requests (its backoff doubles from 25 ms up to this); nothing wakes it sooner when a replica frees
    # up, so past capacity a replica idles while requests wait (docs/traffic.md). null: Serve's default, 0.5 s
    router_max_backoff_s: float | None = None
    batching: bool = False  # @serve.batch: merge concurrent requests into one forward pass
    max_batch_size: int | None = None  # images per forward pass; null: model.max_batch_size
    batch_wait_timeout_s: float = 0.0  # how long a batch waits for more requests after its first
    # serve: Ray Serve's @serve.batch, which closes a batch when its wait ends even while a pass runs; when_free: a
    # pass takes every request that queued while the model was busy, as Triton's batcher (serving/pytorch/when_free.py)
    batcher: str = "serve"
    # Clients reach the replica's own HTTP/gRPC ports (Serve's direct ingress) instead of Serve's proxies; turns
    # cluster.serve_direct_ingress on when that is null (the Serve instance the sweep starts is switched as a whole).
    direct_ingress: bool = False
    # Clients send to Serve's HAProxy ingress (on the proxy's ports; HAProxy forwards to a replica's own port, across
    # replicas); turns cluster.serve_haproxy on when that is null (HAProxy then replaces Serve's proxies for the
    # whole Serve instance the sweep starts).
    haproxy: bool = False

    server_mode_hint: ClassVar[str] = "ray_serve"
    searchable: ClassVar[tuple[str, ...]] = ("num_replicas", "batching", "max_batch_size", "batch_wait_timeout_s",
                                             "batcher", "max_ongoing_requests", "max_queued_requests",
                                             "router_max_backoff_s", "torch_threads")
    switched_by: ClassVar[dict[str, str]] = {"max_batch_size": "batching", "batch_wait_timeout_s": "batching",
                                             "batcher": "batching"}

    @property
    def family(self) -> str:
        return "pytorch"

    def cluster_needs(self) -> dict[str, bool]:
        if self.haproxy:
            return {"serve_haproxy": True}
        return {"serve_direct_ingress": True} if self.direct_ingress else {}

    @property
    def ingress(self) -> str:
        """Where clients send: Serve's Python proxy, HAProxy in its place, or the replica's own port (the trial tag
        `server_ingress`)."""
        return "haproxy" if self.haproxy else "direct" if self.direct_ingress else "proxy"

    def gpu_ask(self) -> tuple[str, float] | None:
        return "replica_num_gpus", float(self.replica_num_gpus) * int(self.num_replicas)

    def check(self, name: str, model: ModelConfig, cluster: ClusterSwitches) -> list[str]:
        problems = super().check(name, model, cluster)
        for key in ("num_replicas", "max_ongoing_requests"):
            if not is_positive_int(getattr(self, key)):
                problems.append(self.refuse(name, key, "a positive integer"))
        if not (isinstance(self.max_queued_requests, int) and (self.max_queued_requests == -1
                                                               or self.max_queued_requests > 0)):
            problems.append(self.refuse(name, "max_queued_requests", "a positive number of requests, or -1 (no "
                                                                     "limit)"))
        backoff = self.router_max_backoff_s
        if backoff is not None and not (isinstance(backoff, int | float) and not isinstance(backoff, bool)
                                        and backoff > 0):
            problems.append(self.refuse(name, "router_max_backoff_s", "seconds > 0, or null (Serve's default, 0.5)"))
        for key in ("replica_num_cpus", "replica_num_gpus"):
            if getattr(self, key) < 0:
                problems.append(self.refuse(name, key, "a share >= 0"))
        problems += self.refuse_max_batch_size(name, model, "(images per server batch), or null for the model's")
        if self.batch_wait_timeout_s < 0:
            problems.append(self.refuse(name, "batch_wait_timeout_s", "a number of seconds >= 0"))
        if self.batcher not in BATCHERS:
            problems.append(self.refuse(name, "batcher", f"one of {list(BATCHERS)}"))
        problems += self.refuse_switched_off(name)
        if self.direct_ingress and self.num_replicas != 1:
            problems.append(self.refuse(name, "num_replicas", "direct_ingress sends every request to one replica's "
                                                              "own port; use num_replicas=1 (or the proxy)"))
        if self.direct_ingress and self.haproxy:
            problems.append(self.refuse(name, "haproxy", "one ingress per backend: direct_ingress sends to the "
                                                         "replica's own port, haproxy through HAProxy; set one"))
        elif self.direct_ingress and not (cluster.get("serve_direct_ingress") or cluster.get("serve_haproxy")):
            problems.append(self.refuse(name, "direct_ingress", "it needs Serve started with direct ingress: set "
                                                                "cluster.serve_direct_ingress=true (or null: on when "
                                                                "a backend needs it)"))
        if self.haproxy and not cluster.get("serve_haproxy"):
            problems.append(self.refuse(name, "haproxy", "it needs Serve started with HAProxy: set "
                                                         "cluster.serve_haproxy=true (or null: on when a backend "
                                                         "needs it)"))
        if self.ingress == "proxy" and cluster.get("serve_haproxy"):
            problems.append(self.refuse(name, "haproxy", "this sweep's Serve runs HAProxy in place of its proxy "
                                                         "(cluster.serve_haproxy, on for a backend with haproxy: "
                                                         "true): set haproxy: true (e.g. pytorch_haproxy), or "
                                                         "measure Serve's proxy in a sweep of its own"))
        return problems
