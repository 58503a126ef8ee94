"""The client actor: runs its share of a trial's load, with the compiled engine (a `loadgen` process it starts and
reads) or its own async client and connections (the Python engine).

An async Ray actor: its methods run on one event loop, which the request loops (or the engine's reader) share.
Only samples travel back to the driver; the actor never talks to MLflow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from experiments.config.choices import LoadEngine
from experiments.measure.engine.build import EngineStatus, engine_status
from experiments.measure.load import LoadGenerator, LoadPoint, WarmupStats, take_client_priority
from experiments.measure.samples import WindowSamples
from serving.clients.base import ClientSpec, InferenceClient, PoolStats, load_client
from serving.node import current_location
from serving.protocols import parse_protocol
from serving.workloads.generative.prompts import PromptSource
from serving.workloads.image.corpus import InputSource, prepare_inputs

if TYPE_CHECKING:
    from experiments.config.schema import ExperimentConfig


# Where actor i's requests begin in the pool it shares with the others: i x this share (mod 1) keeps any number of
# actors' starting points apart.
GOLDEN_SHARE = 0.6180339887


class LoadClientActor:
    def __init__(self, index: int) -> None:
        self.index = index
        self._client: InferenceClient | None = None
        self._load: LoadGenerator | None = None

    def where(self) -> dict[str, str]:
        return current_location()

    def prepare_inputs(self, source: InputSource, preprocessing_json: str, tensors: bool) -> dict[str, float]:
        """The corpus (and its tensors) built on this node before any trial is timed
        (serving.workloads.image.corpus)."""
        return prepare_inputs(source, preprocessing_json, tensors)

    def prepare_prompts(self, source: PromptSource) -> dict[str, float]:
        """The conversations (and their token counts, by the model's tokenizer) built on this node before any trial
        is timed: every client of the node takes them from the same cache."""
        import time

        from serving.workloads.generative.prompts import pool_stats, prompt_pool

        start = time.perf_counter()
        stats = pool_stats(prompt_pool(source))
        return {**stats, "prompts_prepare_s": time.perf_counter() - start}

    def engine_status(self) -> EngineStatus:
        """The compiled engine on this node (built here on first use)."""
        return engine_status()

    async def start(self, spec: ClientSpec, load: LoadPoint, max_in_flight: int, engine: str = LoadEngine.PYTHON,
                    horizon_s: float = 600.0) -> tuple[PoolStats, int]:
        """Start this actor's share of the load with `engine`; returns what its requests carry and the niceness the
        client runs at. `horizon_s`: the longest the load may run (the compiled engine's open-loop schedule
        covers it)."""
        from experiments.measure.engine.compiled_load import CompiledLoad

        await self.stop()
        self._client = client = load_client(spec)
        client.start_at((self.index * GOLDEN_SHARE) % 1.0)
        if engine == LoadEngine.COMPILED:
            try:
                # A closed loop has its loops in flight at most; an open loop up to max_in_flight.
                await client.open_wire(max_in_flight if load.mode.open_loop else min(max_in_flight, int(load.load)))
                self._load = CompiledLoad(client.wire_request(), load, spec.timeout_s, spec.batch_size, self.index,
                                          max_in_flight, horizon_s, client.check_wire_response)
                await self._load.open()
            except BaseException:
                await self.stop()
                raise
        else:
            take_client_priority()  # before the client opens: threads its transport starts inherit it
            await client.open()
            self._load = load.generator(client.infer, spec.timeout_s, spec.batch_size, self.index, max_in_flight)
        self._load.start()
        return client.pool_stats, self._load.niceness

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

    def __init__(self, exp: ExperimentConfig, ray_options: dict[str, Any], timeout_s: float) -> None:
        self.exp = exp
        self.ray_options = ray_options
        self.timeout_s = timeout_s
        self._actors: dict[str, list[Any]] = {}
        self._where: dict[str, list[dict[str, str]]] = {}
        self.engine: EngineStatus | None = None  # the compiled engine on the clients' node

    def start(self) -> ClientPool:
        """Start the actors the experiment's protocols need first, and build the compiled engine on their node, so a
        placement problem or an engine that cannot run shows before a server starts."""
        import ray

        from experiments.measure.engine.build import EngineUnavailable

        for wire in sorted({parse_protocol(p)[0] for p in self.exp.protocols}):
            self.ensure(max(1, self.exp.client_actors), wire)
        if self.engine is None and self.exp.load_engine != LoadEngine.PYTHON:
            first = next(iter(self._actors.values()))[0]
            self.engine = ray.get(first.engine_status.remote(), timeout=max(self.timeout_s, 180))
            if self.exp.load_engine == LoadEngine.COMPILED:
                if not self.engine.available:
                    raise EngineUnavailable(f"experiment.load_engine=compiled: {self.engine.problem}")
                if not self.engine.http2 and any(parse_protocol(p)[0] == "grpc" for p in self.exp.protocols):
                    raise EngineUnavailable("experiment.load_engine=compiled: gRPC needs libnghttp2.so.14 on the "
                                            "clients' node, and it is missing (install libnghttp2-14, or use "
                                            "experiment.load_engine=auto)")
        return self

    def prepare_inputs(self, source: InputSource, preprocessing_json: str, tensors: bool,
                       timeout_s: float = 1800.0) -> dict[str, float]:
        """Build the corpus the trials send on the clients' node now, before a server starts: a fresh node spends
        seconds of CPU on it, which must not land inside a trial's start or a measurement window."""
        import ray

        first = next(iter(self._actors.values()))[0]
        return ray.get(first.prepare_inputs.remote(source, preprocessing_json, tensors), timeout=timeout_s)

    def prepare_prompts(self, source: PromptSource, timeout_s: float = 1800.0) -> dict[str, float]:
        """The conversations a generative sweep sends, built on the clients' node before a server is measured."""
        import ray

        first = next(iter(self._actors.values()))[0]
        return ray.get(first.prepare_prompts.remote(source), timeout=timeout_s)

    def engine_for(self, spec: ClientSpec, protocol: str) -> tuple[LoadEngine, str]:
        """The engine that measures a trial with `spec` over `protocol`, and why not the one asked for."""
        from experiments.measure.engine.choice import choose_engine

        return choose_engine(self.exp.load_engine, spec, protocol, self.engine or EngineStatus(None, problem="-"))

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
        engine = self.engine
        self.close()
        self.engine = engine  # the node's engine is as it was
        self.start()

    def close(self) -> None:
        import ray

        for actors in self._actors.values():
            for actor in actors:
                ray.kill(actor)
        self._actors = {}
        self._where = {}
