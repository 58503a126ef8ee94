"""The client actor: runs its share of a trial's load with its own async client and connections.

An async Ray actor: its methods run on one event loop, which the request loops share. Only samples travel
back to the driver; the actor never talks to MLflow.
"""

from __future__ import annotations

from typing import Any

from experiments.measure.load import LoadGenerator, LoadPoint, WarmupStats
from experiments.measure.samples import WindowSamples
from serving.clients.base import ClientSpec, InferenceClient, load_client
from serving.node import current_location
from serving.protocols import parse_protocol


class LoadClientActor:
    def __init__(self, index: int) -> None:
        self.index = index
        self._client: InferenceClient | None = None
        self._load: LoadGenerator | None = None

    def where(self) -> dict[str, str]:
        return current_location()

    async def start(self, spec: ClientSpec, load: LoadPoint, max_in_flight: int) -> int:
        """Open a client and start this actor's share of the load; returns the request payload in bytes."""
        await self.stop()
        self._client = load_client(spec)
        await self._client.open()
        self._load = load.generator(self._client.infer, spec.timeout_s, spec.batch_size, self.index, max_in_flight)
        self._load.start()
        return self._client.payload_bytes

    async def wait_warm(self, min_requests: int, min_seconds: float, timeout_s: float) -> WarmupStats:
        return await self._load.wait_warm(min_requests, min_seconds, timeout_s)

    async def collect(self, window_start: float, window_end: float) -> WindowSamples:
        return await self._load.collect(window_start, window_end)

    async def stop(self) -> None:
        if self._load is not None:
            await self._load.stop()
            self._load = None
        if self._client is not None:
            await self._client.close()
            self._client = None


class ClientPool:
    """The tier's client actors, one set per wire protocol; recreated after a failed trial so a stuck client can't
    poison the next one.

    HTTP and gRPC never share a process: once grpc has run in a process its threads keep taking the GIL from the
    event loop after the channel closed, and an HTTP trial measured there sends late (docs/benchmarks.md, the
    client's ceiling)."""

    def __init__(self, exp: Any, ray_options: dict[str, Any], timeout_s: float) -> None:
        self.exp = exp
        self.ray_options = ray_options
        self.timeout_s = timeout_s
        self._actors: dict[str, list[Any]] = {}
        self._where: dict[str, list[dict[str, str]]] = {}

    def start(self) -> ClientPool:
        """Start the actors the experiment's protocols need first, so a placement problem shows before a server."""
        for wire in sorted({parse_protocol(p)[0] for p in self.exp.protocols}):
            self.ensure(max(1, self.exp.client_actors), wire)
        return self

    def ensure(self, count: int, protocol: str) -> list[Any]:
        """The first `count` actors for `protocol`, starting the missing ones; fails (not hangs) when they stay
        pending."""
        import ray
        from ray.exceptions import GetTimeoutError

        from experiments.cluster.placement import PlacementError

        wire = parse_protocol(protocol)[0]
        actors = self._actors.setdefault(wire, [])
        cls = ray.remote(LoadClientActor).options(num_cpus=self.exp.client_num_cpus, **self.ray_options)
        new = [cls.remote(i) for i in range(len(actors), count)]
        if new:
            try:
                self._where.setdefault(wire, []).extend(ray.get([a.where.remote() for a in new],
                                                                timeout=self.timeout_s))
            except GetTimeoutError as exc:
                for actor in new:
                    ray.kill(actor)
                raise PlacementError(
                    f"client actors still pending after {self.timeout_s:g} s (cluster.schedule_timeout_s): each "
                    f"asks for {self.exp.client_num_cpus} CPU and {self.ray_options}; the node's resources are "
                    "taken (by another sweep?)") from exc
            actors.extend(new)
        return actors[:count]

    def locations(self, count: int, protocol: str) -> list[dict[str, str]]:
        """Where the first `count` actors for `protocol` run (node id, hostname)."""
        return self._where.get(parse_protocol(protocol)[0], [])[:count]

    def restart(self) -> None:
        self.close()
        self.start()

    def close(self) -> None:
        import ray

        for actors in self._actors.values():
            for actor in actors:
                ray.kill(actor)
        self._actors = {}
        self._where = {}
