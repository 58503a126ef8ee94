"""The model timed in-process, in the runtime a server runs it with (`serving.runtime.Runtime`): no server, no
client, no network. This is the ceiling a served figure is set against (`experiments.measure.ceiling`).

Two ways of calling the runtime, at each batch size:

- `round_trip`: a float32 NumPy batch in, NumPy logits out, as a server pays for every request (the host-to-device
  copy, the compute, the copy back and the synchronisation);
- `resident`: input already on the GPU, output left there, one call after another with a synchronisation each: what
  the GPU itself does (GPU runtimes only; on a CPU the two are the same thing and only `round_trip` is measured).

Each point is the p50 of single calls, one call at a time (one stream: a server runs one forward pass per model
instance at a time too), and its throughput, batch / p50, which a noisy neighbour's hiccups do not move (the
throughput over the whole timed span is kept beside it). A neighbour that stays busy through a point does move it,
so each point also records the share of the machine's CPU other processes took while it was timed (counted while
the machine had no idle CPU left): the node's cache keeps a disturbed timing only until a quieter sweep times it
again (`experiments.measure.ceiling`). It is not timed again at once: on a small node the neighbour is often another
server, which a longer timing would starve in turn.

Batch sizes are measured smallest first; once the throughput stops growing (`PLATEAU_GAIN`, twice in a row), larger
batches are measured only where the caller needs them (the experiment's own batch sizes), so a CPU, which plateaus
early, does not spend seconds per call on batches nobody serves.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from serving.node import cpu_times
from serving.runtime import Runtime

if TYPE_CHECKING:
    from serving.model_config import ModelConfig

ROUND_TRIP = "round_trip"
RESIDENT = "resident"
MODES = (ROUND_TRIP, RESIDENT)
# Two batches in a row whose round-trip throughput is below (1 + PLATEAU_GAIN) x the best smaller batch's mark the
# plateau (two, so that one noisy point does not end the climb).
PLATEAU_GAIN = 0.03
PLATEAU_POINTS = 2


@dataclass(frozen=True)
class TimingBudget:
    """How long each (batch, mode) is timed: at least `min_calls` calls and `min_time_s` seconds, after a warm-up of
    `warmup_calls` and a fifth of `min_time_s` (one call only when it outlasts `min_time_s`: a CPU at a large batch)."""

    min_time_s: float = 0.5
    min_calls: int = 5
    warmup_calls: int = 3
    max_calls: int = 5000


@dataclass(frozen=True)
class InProcessPoint:
    batch_size: int
    mode: str  # ROUND_TRIP | RESIDENT
    p50_ms: float  # one call, median
    mean_ms: float
    img_s: float  # batch / p50: the throughput of a typical call (robust to a noisy neighbour's hiccups)
    calls: int
    span_img_s: float = 0.0  # images over the whole timed span, hiccups included
    others_busy: float | None = None  # share of the machine's CPU others took meanwhile (`OthersCpu`; None: unknown)


@dataclass
class RuntimeTiming:
    """Every point measured for one runtime on one node, with the versions that computed them."""

    runtime: Runtime
    points: list[InProcessPoint] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    setup_s: float = 0.0  # building the model / session (and, for compiled runtimes, compiling)
    timed_s: float = 0.0  # the warm-ups and timed calls
    cpu_busy_before: float | None = None  # share of the node's CPU time others used just before (None: unknown)

    @property
    def cpu_busy_during(self) -> float | None:
        """The most any kept point was disturbed: the share of the machine's CPU others took while it was timed."""
        shares = [p.others_busy for p in self.points if p.others_busy is not None]
        return max(shares) if shares else None

    def point(self, batch_size: int, mode: str = ROUND_TRIP) -> InProcessPoint | None:
        return next((p for p in self.points if p.batch_size == batch_size and p.mode == mode), None)

    def of_mode(self, mode: str) -> list[InProcessPoint]:
        return sorted((p for p in self.points if p.mode == mode), key=lambda p: p.batch_size)

    def best(self, mode: str = ROUND_TRIP) -> InProcessPoint | None:
        """The batch with the highest throughput in `mode` (round trip when the runtime has no resident points)."""
        points = self.of_mode(mode) or self.of_mode(ROUND_TRIP)
        return max(points, key=lambda p: p.img_s, default=None)

    def img_s_at(self, batch: float, mode: str = ROUND_TRIP) -> float | None:
        """Throughput at `batch` images per forward pass: measured, else interpolated between the measured batches
        around it (linearly in the batch), else that of the nearest one measured (beyond the plateau, throughput
        stays flat). None when nothing was measured."""
        points = self.of_mode(mode)
        if not points:
            return None
        sizes = [p.batch_size for p in points]
        rates = [p.img_s for p in points]
        return float(np.interp(batch, sizes, rates))

    def to_json(self) -> dict[str, Any]:
        return {"runtime": self.runtime.to_json(), "points": [asdict(p) for p in self.points],
                "versions": self.versions, "setup_s": self.setup_s, "timed_s": self.timed_s,
                "cpu_busy_before": self.cpu_busy_before}

    @staticmethod
    def from_json(data: dict[str, Any]) -> RuntimeTiming:
        return RuntimeTiming(Runtime.from_json(data["runtime"]), [InProcessPoint(**p) for p in data["points"]],
                             dict(data.get("versions", {})), float(data.get("setup_s", 0.0)),
                             float(data.get("timed_s", 0.0)), data.get("cpu_busy_before"))


def cpu_busy_share(seconds: float = 0.5) -> float | None:
    """The share of the machine's CPU time spent busy over the next `seconds` (Linux); None elsewhere. Taken before a
    timing, it says whether something else was running."""
    before = cpu_times()
    time.sleep(seconds)
    after = cpu_times()
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


class OthersCpu:
    """The share of the machine's CPU time that other processes took from this one since it was made (Linux; None
    elsewhere): the machine's busy time less this process's own, over the machine's time on all its cores, counted
    only when the machine had less than `IDLE_LEFT` of it idle (while cores sat idle, others took nothing this
    process wanted: a GPU runtime on a node of many cores)."""

    IDLE_LEFT = 0.1

    def __init__(self) -> None:
        self.machine = cpu_times()
        self.own = time.process_time()

    def share(self) -> float | None:
        now = cpu_times()
        if self.machine is None or now is None or now[1] <= self.machine[1]:
            return None
        total = now[1] - self.machine[1]
        busy = now[0] - self.machine[0]
        if 1 - busy / total >= self.IDLE_LEFT:
            return 0.0
        own_ticks = (time.process_time() - self.own) * os.sysconf("SC_CLK_TCK")
        return min(1.0, max(0.0, (busy - own_ticks) / total))


def time_calls(call: Callable[[], Any], batch_size: int, mode: str, budget: TimingBudget) -> InProcessPoint:
    """Warm `call` up (its calls and a fifth of the minimum time), then time single calls until both minimums of the
    budget are met, noting how busy other processes kept the machine meanwhile."""
    started = time.perf_counter()
    call()
    if time.perf_counter() - started < budget.min_time_s:
        warmed = 1
        while warmed < budget.warmup_calls or time.perf_counter() - started < budget.min_time_s / 5:
            call()
            warmed += 1
    times: list[float] = []
    others = OthersCpu()
    span_start = time.perf_counter()
    while len(times) < budget.max_calls and (len(times) < budget.min_calls
                                             or time.perf_counter() - span_start < budget.min_time_s):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    span = time.perf_counter() - span_start
    ms = np.asarray(times) * 1e3
    p50 = float(np.percentile(ms, 50))
    return InProcessPoint(batch_size, mode, p50, float(ms.mean()), batch_size / p50 * 1e3, len(times),
                          batch_size * len(times) / span, others.share())



def batch_plan(needed: Iterable[int], max_batch_size: int) -> tuple[list[int], set[int]]:
    """The batches to try, ascending (powers of two up to the model's largest, its largest and `needed`), and
    those that must be measured whatever the plateau says (`needed`)."""
    needed = {int(b) for b in needed if 1 <= int(b) <= max_batch_size}
    powers = {2 ** i for i in range(max_batch_size.bit_length()) if 2 ** i <= max_batch_size}
    return sorted(powers | needed | {max_batch_size}), needed


class RuntimeCaller:
    """One runtime ready to be called at any batch size, in either mode. Each backend package names the class that
    times the runtimes its servers run (`BackendPackage.runtime_callers`), made with (model, runtime, engine cache
    folder or None)."""

    def setup(self) -> None:
        """Build the model (or session) in this process: the timing's setup time."""

    def call(self, batch: np.ndarray, mode: str) -> Callable[[], Any]:
        """One call of the runtime on `batch` in `mode` (ROUND_TRIP: NumPy in and out; RESIDENT: on the device)."""
        raise NotImplementedError

    def versions(self) -> dict[str, str]:
        """The versions that computed the timing (cached with it)."""
        return {}


def time_runtime(model_cfg: ModelConfig, runtime: Runtime, needed_batches: Iterable[int], budget: TimingBudget,
                 engine_cache_dir: str | None = None) -> RuntimeTiming:
    """Time `runtime` on this machine at the batch sizes of `batch_plan`, in both modes on a GPU."""
    from serving.registry import runtime_caller

    caller = runtime_caller(runtime.engine)(model_cfg, runtime, engine_cache_dir)
    busy = cpu_busy_share()
    started = time.perf_counter()
    caller.setup()
    timing = RuntimeTiming(runtime, cpu_busy_before=busy)
    timing.setup_s = time.perf_counter() - started
    modes = MODES if runtime.on_gpu else (ROUND_TRIP,)
    batches, needed = batch_plan(needed_batches, int(model_cfg.max_batch_size))
    rng = np.random.default_rng(0)
    best = 0.0
    flat = 0  # batches in a row that did not beat the best smaller one
    started = time.perf_counter()
    for size in batches:
        if flat >= PLATEAU_POINTS and size not in needed:
            continue
        batch = rng.standard_normal((size, *model_cfg.input_shape), dtype=np.float32)
        for mode in modes:
            timing.points.append(time_calls(caller.call(batch, mode), size, mode, budget))
        rate = timing.point(size, ROUND_TRIP).img_s
        if flat < PLATEAU_POINTS:
            flat = flat + 1 if best > 0 and rate < best * (1 + PLATEAU_GAIN) else 0
        best = max(best, rate)
    timing.timed_s = time.perf_counter() - started
    timing.versions = caller.versions()
    return timing
