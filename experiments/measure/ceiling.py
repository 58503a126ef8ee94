"""The GPU's own ceiling on a tier node: every runtime the sweep serves, timed in-process before any server starts
(`serving.inprocess`), so each served figure can be set against what the same runtime does with no server at all.

It runs once per tier job, as one Ray task on the tier's node holding the node's GPU (nothing else runs there yet),
in a worker that exits afterwards (its CUDA context goes with it). Each runtime's timing is cached on the node
(`ceiling.cache_dir`), keyed by the machine, the model, the runtime and the versions that compute it, so a second
sweep on the same node spends no time on it. A runtime that cannot be timed (a provider that does not load) is
recorded with the reason; the trials then carry no efficiency figures for it, and the sweep goes on.

The tier folder keeps the result as `ceiling.json` (`experiments.results.layout`); the tier run gets it as an
artifact and as metrics (`ceiling/<runtime>/...`); every trial gets its efficiency against its runtime's ceiling
(`experiments.measure.efficiency`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import socket
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from serving import inprocess
from serving.inprocess import RESIDENT, ROUND_TRIP, RuntimeTiming, TimingBudget, time_runtime
from serving.node import cpu_model, nvml_gpus
from serving.paths import cache_root
from serving.runtime import Engine, Runtime

if TYPE_CHECKING:
    from experiments.config.schema import CeilingConfig
    from serving.model_config import ModelConfig

log = logging.getLogger(__name__)

# Part of the cache key: a change of how the ceiling is measured invalidates old entries (2: each point notes what
# other processes took from it while it was timed).
METHOD_VERSION = 2
# A timing taken while others kept more than BUSY_NODE of the node's CPU busy just before it, or took more than
# DISTURBED of it while a point was timed (on two cores, one busy neighbour is half), is cached as such: a later sweep
# that finds the node quieter times it again rather than inherit a low ceiling; one that finds it busy too reuses it.
BUSY_NODE = 0.5
DISTURBED = 0.25


@dataclass
class NodeCeiling:
    """What each runtime does in-process on one node: timings by runtime key, and why a runtime has none."""

    hostname: str = ""
    gpu_names: list[str] = field(default_factory=list)
    cpu_model: str = ""
    cpu_count: int = 0
    timings: dict[str, RuntimeTiming] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    cached: list[str] = field(default_factory=list)  # runtime keys read from the node's cache
    measured_at: float = 0.0
    seconds: float = 0.0

    def timing(self, key: str | None) -> RuntimeTiming | None:
        return self.timings.get(key) if key else None

    def to_json(self) -> dict[str, Any]:
        return {**{k: v for k, v in asdict(self).items() if k != "timings"},
                "timings": {k: t.to_json() for k, t in self.timings.items()}}

    @staticmethod
    def from_json(data: dict[str, Any]) -> NodeCeiling:
        timings = {k: RuntimeTiming.from_json(t) for k, t in data.get("timings", {}).items()}
        rest = {k: v for k, v in data.items() if k != "timings"}
        return NodeCeiling(**rest, timings=timings)

    def tier_metrics(self) -> dict[str, float]:
        """The tier run's metrics: per runtime, batch-1 latency and the best throughput in each mode."""
        out: dict[str, float] = {}
        for key, timing in self.timings.items():
            prefix = f"ceiling/{key}"
            one = timing.point(1)
            if one is not None:
                out[f"{prefix}/b1_p50_ms"] = one.p50_ms
            for mode in (ROUND_TRIP, RESIDENT):
                best = timing.best(mode) if timing.of_mode(mode) else None
                if best is not None:
                    out[f"{prefix}/{mode}/best_img_s"] = best.img_s
                    out[f"{prefix}/{mode}/best_batch"] = float(best.batch_size)
            for point in timing.points:
                out[f"{prefix}/{point.mode}/b{point.batch_size}_img_s"] = point.img_s
        return {k.replace("+", "_"): v for k, v in out.items()}  # MLflow metric names: no '+'


def _engine_version(engine: str) -> str:
    """The installed version of the runtime's package (without importing it: the cache key is computed first)."""
    names = ("torch",) if engine == Engine.TORCH else ("onnxruntime-gpu", "onnxruntime")
    for name in names:
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return "missing"


def cache_key(model: ModelConfig, runtime: Runtime, budget: TimingBudget, gpu_names: list[str]) -> str:
    """What a cached timing must match: the machine, its Python and runtime package, the runtime, the budget and the
    model (a model file's path is its staged, content-addressed copy)."""
    identity = {"method": METHOD_VERSION, "host": socket.gethostname(), "cpu": cpu_model(), "gpus": gpu_names,
                "python": platform.python_version(), "engine": _engine_version(runtime.engine),
                "runtime": runtime.to_json(), "budget": asdict(budget),
                "model": {k: getattr(model, k) for k in ("name", "source", "factory", "weights", "path", "seed",
                                                    "num_classes", "output_shape", "input_shape", "max_batch_size")}}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:24]


def measure_here(model: ModelConfig, runtimes: list[dict[str, Any]], needed: list[int],
                 budget: dict[str, Any], cache: bool, cache_dir: str | None) -> dict[str, Any]:
    """On the node (a Ray task, or `runners.ceiling` in-process): time every runtime, from the cache where it has
    it; returns `NodeCeiling.to_json()`."""
    import os

    started = time.time()
    gpus = list(nvml_gpus().device_names)  # a MIG slice is timed, and cached, as itself
    result = NodeCeiling(hostname=socket.gethostname(), gpu_names=gpus, cpu_model=cpu_model(),
                         cpu_count=os.cpu_count() or 1, measured_at=started)
    timing_budget = TimingBudget(**budget)
    folder = Path(cache_dir) if cache_dir else cache_root() / "ceiling"
    for data in runtimes:
        runtime = Runtime.from_json(data)
        path = folder / f"{cache_key(model, runtime, timing_budget, gpus)}.json"
        cached = _cached(path, needed) if cache else None  # not read when off, but written: a later sweep uses it
        if cached is not None and not (_busy(cached) and _quiet_now()):
            result.timings[runtime.key] = cached
            result.cached.append(runtime.key)
            continue
        try:
            timing = time_runtime(model, runtime, needed, timing_budget)
        except Exception as exc:  # noqa: BLE001 - a runtime that cannot run here has no ceiling, said why
            result.errors[runtime.key] = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
            continue
        result.timings[runtime.key] = timing
        if _busy(timing):
            log.warning("ceiling of %s timed while other work kept the node's CPU busy (%.0f %% just before, up to "
                        "%.0f %% during a point): a sweep on a quieter node times it again", runtime.key,
                        (timing.cpu_busy_before or 0) * 100, (timing.cpu_busy_during or 0) * 100)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(timing.to_json(), indent=1))
            tmp.replace(path)
        except OSError as exc:
            log.warning("ceiling of %s not cached (%s): the next sweep on this node times it again", runtime.key, exc)
    result.seconds = time.time() - started
    return result.to_json()


def _cached(path: Path, needed: list[int]) -> RuntimeTiming | None:
    """The timing cached at `path` when it covers every batch size `needed`; None otherwise."""
    if not path.is_file():
        return None
    try:
        timing = RuntimeTiming.from_json(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("ceiling cache %s unreadable (%s): timing it again", path, exc)
        return None
    return timing if all(timing.point(b, ROUND_TRIP) is not None for b in needed) else None


def _busy(timing: RuntimeTiming) -> bool:
    before, during = timing.cpu_busy_before, timing.cpu_busy_during
    return (before is not None and before > BUSY_NODE) or (during is not None and during > DISTURBED)


def _quiet_now() -> bool:
    busy = inprocess.cpu_busy_share()
    return busy is not None and busy <= BUSY_NODE


def measure_on_node(model: ModelConfig, runtimes: list[Runtime], needed: list[int], ceiling_cfg: CeilingConfig,
                    ray_options: dict[str, Any], gpus_on_node: float) -> NodeCeiling:
    """`measure_here` as one Ray task placed by `ray_options` (the tier's node), holding a GPU where Ray schedules
    them; the worker exits afterwards, taking its CUDA context and memory with it."""
    import ray

    options: dict[str, Any] = {"num_cpus": 0.01, "max_retries": 0, **ray_options}
    if gpus_on_node > 0 and any(r.on_gpu for r in runtimes):
        options["num_gpus"] = min(1.0, gpus_on_node)
    task = ray.remote(max_calls=1)(measure_here).options(**options)
    budget = {"min_time_s": float(ceiling_cfg.min_time_s), "min_calls": int(ceiling_cfg.min_calls)}
    ref = task.remote(model, [r.to_json() for r in runtimes], needed, budget, bool(ceiling_cfg.cache),
                      ceiling_cfg.cache_dir)
    try:
        return NodeCeiling.from_json(ray.get(ref, timeout=float(ceiling_cfg.timeout_s)))
    except ray.exceptions.GetTimeoutError:
        ray.cancel(ref, force=True)
        raise TimeoutError(f"the in-process ceiling took longer than ceiling.timeout_s={ceiling_cfg.timeout_s:g} s "
                           "(raise it, or ceiling.min_time_s lower)") from None


def describe(ceiling: NodeCeiling) -> list[str]:
    """One log line per runtime: batch-1 latency and the best throughput, round trip and resident."""
    lines = []
    for key, timing in ceiling.timings.items():
        one, best, resident = timing.point(1), timing.best(ROUND_TRIP), timing.of_mode(RESIDENT)
        text = f"{key}: "
        if one is not None:
            text += f"b1 p50 {one.p50_ms:.2f} ms, "
        text += f"best {best.img_s:,.0f} img/s at b{best.batch_size} (round trip)"
        if resident:
            top = timing.best(RESIDENT)
            text += f", {top.img_s:,.0f} img/s at b{top.batch_size} (device-resident)"
        text += " [cached]" if key in ceiling.cached else f" [{timing.setup_s + timing.timed_s:.1f} s]"
        lines.append(text)
    lines += [f"{key}: not timed: {why}" for key, why in ceiling.errors.items()]
    return lines


def read_ceiling(path: Path) -> NodeCeiling | None:
    """A `ceiling.json` as written by a tier job; None when there is none (or it cannot be read)."""
    try:
        return NodeCeiling.from_json(json.loads(path.read_text())) if path.is_file() else None
    except (ValueError, KeyError, TypeError):
        return None
