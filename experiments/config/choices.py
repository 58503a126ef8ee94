"""The closed sets of choices the experiment config makes, each with everything that differs between its
members: code elsewhere asks these, it never compares names."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import numpy as np

    from experiments.config.schema import ExperimentConfig


class SloRange(NamedTuple):
    """The loads an SLO search may probe: it starts at `start`, doubles up to `limit`, and steps down to `floor` when
    `start` already misses."""

    start: float
    floor: float
    limit: float
    integer: bool


class LoadMode(StrEnum):
    """How a trial loads the server. `closed`: a fixed number of request loops, each sending its next request
    when the last returns (perf_analyzer's concurrency mode); `constant` / `poisson`: open loop, arrivals at a
    rate whatever the server does (MLPerf's server scenario); `gamma`: open loop, gaps of a gamma distribution whose
    coefficient of variation is experiment.arrivals.cv (burstier than Poisson above 1); `bursts`: open loop, Poisson
    arrivals on for experiment.arrivals.burst_on_s, off for burst_off_s, the trial's rate their mean; `ramp`: open
    loop, a rate rising in experiment.arrivals.ramp_steps steps, one measurement window each, to the trial's rate;
    `trace`: open loop, Poisson arrivals whose rate follows a trace file (experiment.trace), the trial's rate its peak
    (experiments.measure.arrivals, .replay). A trial's load is its concurrency (closed) or its request rate in req/s
    (open)."""

    CLOSED = "closed"
    CONSTANT = "constant"
    POISSON = "poisson"
    GAMMA = "gamma"
    BURSTS = "bursts"
    RAMP = "ramp"
    TRACE = "trace"

    @property
    def open_loop(self) -> bool:
        return self is not LoadMode.CLOSED

    @property
    def shaped(self) -> bool:
        """Its arrivals come from a shape built from the experiment (experiments.measure.arrivals.shape_of)."""
        return self in (LoadMode.GAMMA, LoadMode.BURSTS, LoadMode.RAMP, LoadMode.TRACE)

    @property
    def loads_key(self) -> str:
        """The experiment key listing this mode's loads."""
        return "request_rates" if self.open_loop else "concurrency"

    def loads(self, exp: ExperimentConfig) -> list[float]:
        return list(getattr(exp, self.loads_key))

    def trial_fields(self, load: float) -> dict[str, Any]:
        """A trial's `concurrency` and `request_rate` at `load` (the other one is 0)."""
        if self.open_loop:
            return {"concurrency": 0, "request_rate": float(load)}
        return {"concurrency": int(load), "request_rate": 0.0}

    def load_of(self, concurrency: int, request_rate: float) -> float:
        return request_rate if self.open_loop else concurrency

    def label(self, concurrency: int, request_rate: float) -> str:
        """How run names and the report show a load: `c16` (closed loop), `poisson-r200` (open loop, req/s)."""
        return f"{self}-r{request_rate:g}" if self.open_loop else f"c{int(concurrency)}"

    def split(self, load: float, actors: int) -> list[float]:
        """Each client actor's share: request loops as evenly as possible (an actor may get none), or the rate
        divided evenly."""
        if self.open_loop:
            return [load / actors] * actors
        base, extra = divmod(int(load), actors)
        return [base + (1 if i < extra else 0) for i in range(actors)]

    def actors_for(self, load: float, loops_per_actor: int, most: int) -> int:
        """Client actors a trial starts with in automatic mode: one per `loops_per_actor` loops; one schedule."""
        return 1 if self.open_loop else min(most, math.ceil(load / loops_per_actor))

    def slo_search_range(self, exp: ExperimentConfig) -> SloRange:
        """Where the SLO search starts (the grid's lowest load: at GPU speed probes below it are seconds spent far
        from the knee), how low it may go when that load misses, its highest load, and whether loads are whole."""
        if self.open_loop:
            lowest = min(exp.request_rates)
            return SloRange(lowest, lowest, exp.slo.max_rate, False)
        limit = exp.slo.max_concurrency
        return SloRange(min(min(exp.concurrency), limit), 1, limit, True)

    def next_gap(self, rate: float, rng: np.random.Generator) -> float:
        """Seconds from one open-loop arrival to the next."""
        if self is LoadMode.POISSON:
            return float(rng.exponential(1.0 / rate))
        if self is LoadMode.CONSTANT:
            return 1.0 / rate
        raise ValueError(f"{self} load has no arrival schedule")

    def gaps(self, rate: float, rng: np.random.Generator, count: int) -> np.ndarray:
        """`count` gaps at once (the compiled engine's schedule), drawn as `next_gap` draws them one by one."""
        import numpy as np

        if self is LoadMode.POISSON:
            return rng.exponential(1.0 / rate, size=count)
        if self is LoadMode.CONSTANT:
            return np.full(count, 1.0 / rate)
        raise ValueError(f"{self} load has no arrival schedule")


class TrialMatrix(StrEnum):
    """Which (batch size, load) points each stack is measured at. `full`: every batch size at every load; `axes`: one
    factor at a time from the smallest batch and the lowest load: every batch size at the lowest load, every load at
    the smallest batch (the studies' tables: serial latency by batch size, concurrent throughput at batch 1)."""

    FULL = "full"
    AXES = "axes"

    def points(self, batch_sizes: list[int], loads: list[float]) -> list[tuple[int, float]]:
        if self is TrialMatrix.FULL:
            return [(batch, load) for batch in batch_sizes for load in loads]
        base_batch, base_load = min(batch_sizes), min(loads)
        return [*((batch, base_load) for batch in batch_sizes),
                *((base_batch, load) for load in loads if load != base_load)]


class LoadEngine(StrEnum):
    """What sends a trial's requests. `compiled`: the C engine (experiments/measure/engine/loadgen.c), one process per
    client actor, HTTP/1.1 and gRPC over sockets, Triton's shared-memory protocols too (the client registers the
    regions its requests name); `python`: the actor's own asyncio client; `auto`: compiled wherever it builds and
    speaks the trial's protocol, else python (the trial records which, and why)."""

    AUTO = "auto"
    COMPILED = "compiled"
    PYTHON = "python"


class ClientPlacement(StrEnum):
    """Where client actors run: on the tier's node (no network hop), or on client-pool nodes (load generation
    takes no CPU from the server)."""

    COLOCATED = "colocated"
    SEPARATE = "separate"


class SearchStrategy(StrEnum):
    """How `experiment.search` explores each backend's server settings (experiments/run/settings_search.py):
    `none` measures the settings as configured; `grid` every point of the space; `quick` climbs from the
    backend's own settings to the best neighbour until none is better (a fraction of the grid's probes)."""

    NONE = "none"
    GRID = "grid"
    QUICK = "quick"
