"""Telemetry of a measurement window: the server node's CPU and, on a GPU node, NVML, sampled while the trial runs.

A small Ray actor, placed on the node the server runs on, samples the node's CPU time (Linux /proc/stat) and the
utilisation, memory, power and energy counter of the server's GPUs (every GPU of the node when Ray pinned none) at
`telemetry.sample_hz` in a background thread for as long as the server group lives. After each trial the driver asks
it for the trial's window (epoch seconds, the clients' window) and gets back only the summary:

- `node_cpu_util_pct`: the share of the node's CPU time spent busy (every process: servers, clients placed there,
  Ray), `node_cpu_cores_busy` the same in cores (both with `telemetry.cpu`, as the two below);
- `server_cpu_cores`: the CPU the server's own processes (and those they started) used, in cores, and
  `server_thread_cpu_max`: its busiest single thread's, in cores (1.0: a thread that never rested, e.g. a Python
  event loop holding its GIL), sampled every `THREAD_EVERY` samples where the backend names its processes;

- `gpu_util_pct`: mean NVML utilisation (share of time a kernel ran), averaged over the sampled GPUs;
- `gpu_mem_used_mb`: peak memory used (MiB, summed over the sampled GPUs);
- `gpu_power_w`: mean board power (W, summed);
- `gpu_energy_j`: energy in the window, from NVML's energy counter when the GPU has one (Volta and later),
  else mean power x window length; `energy_per_image_j` divides it by the images completed in the window.

A node without a GPU (or without NVML) gets no GPU telemetry: those metrics are absent, never zero.
Ray's GPU ids are taken as NVML indices (Ray detects GPUs through NVML); on nodes mixing GPU models set
CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA numbers them the same way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from serving.backend import ServerHandle
from serving.node import NodeInfo, cpu_times, process_tree, thread_cpu_ticks, thread_name

if TYPE_CHECKING:
    from experiments.config.schema import TelemetryConfig

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_SAMPLES = 200_000  # ~2.8 h at 20 Hz: a server group's lifetime, memory bounded
COVERAGE_SLACK_S = 0.5  # a window counts as covered when samples reach this close to both of its ends
THREAD_EVERY = 5  # the server's threads are read every this many samples (a /proc walk each time)
MAX_THREAD_SNAPSHOTS = 20_000  # ~1.4 h at 20 Hz / 5
# A sample is stamped with the middle of its reads; one whose reads took longer than this (the sampling thread
# descheduled on a busy node) is dropped, since its counters were read at an unknown moment within that span: a
# 1 s stall between the stamp and the energy read added 1 s of the card's power to the window.
MAX_READ_S = 0.1


def nvml_unavailable_reason() -> str | None:
    """Why NVML cannot be used here (no library, no driver, no GPU); None when it can."""
    try:
        import pynvml
    except ImportError:
        return "nvidia-ml-py (module pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"NVML unavailable: {exc}"
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            return "NVML finds no GPU"
    finally:
        pynvml.nvmlShutdown()
    return None


def gpu_params(node: NodeInfo) -> dict[str, str]:
    """Trial params that identify the GPU stack; absent on a node without a GPU."""
    if not node.has_gpu:
        return {}
    return {"driver_version": node.driver_version or "unknown", "cuda_version": node.cuda_version or "unknown"}


def stamped(read: Callable[[], T]) -> tuple[float, T] | None:
    """What `read` returns, stamped with the middle of the read; None when it took over MAX_READ_S."""
    before = time.time()
    value = read()
    after = time.time()
    return None if after - before > MAX_READ_S else ((before + after) / 2, value)


def covers(times: np.ndarray, start: float, end: float) -> bool:
    """Samples reach both ends of [start, end] (within COVERAGE_SLACK_S): a partial window would understate it."""
    return (end > start and times.size >= 2 and times[0] <= start + COVERAGE_SLACK_S
            and times[-1] >= end - COVERAGE_SLACK_S)


def summarize(times: np.ndarray, util: np.ndarray, mem_mb: np.ndarray, power_w: np.ndarray,
              energy_j: np.ndarray | None, start: float, end: float) -> dict[str, float]:
    """Window metrics from samples (rows in time order; columns already combined across GPUs).

    Empty when the samples do not cover [start, end]: a partial window would understate energy.
    """
    if not covers(times, start, end):
        return {}
    inside = (times >= start) & (times <= end)
    if not inside.any():
        return {}
    mean_power = float(power_w[inside].mean())
    if energy_j is not None:
        energy = float(np.interp(end, times, energy_j) - np.interp(start, times, energy_j))
    else:
        energy = mean_power * (end - start)
    return {"gpu_util_pct": float(util[inside].mean()), "gpu_mem_used_mb": float(mem_mb[inside].max()),
            "gpu_power_w": mean_power, "gpu_energy_j": energy, "gpu_telemetry_samples": float(inside.sum())}


def energy_per_image(metrics: dict[str, float], images: int) -> dict[str, float]:
    if "gpu_energy_j" not in metrics or images <= 0:
        return {}
    return {"energy_per_image_j": metrics["gpu_energy_j"] / images}


def cpu_summary(times: np.ndarray, busy: np.ndarray, total: np.ndarray, cores: int, start: float,
                end: float) -> dict[str, float]:
    """The node's CPU over [start, end] from cumulative busy and total CPU time (interpolated at both ends); empty
    when the samples do not cover the window."""
    if not covers(times, start, end):
        return {}
    spent = float(np.interp(end, times, total) - np.interp(start, times, total))
    if spent <= 0:
        return {}
    # Busy time is never more than the time spent; interpolating both at the edges can cross by a rounding.
    share = min(1.0, float(np.interp(end, times, busy) - np.interp(start, times, busy)) / spent)
    return {"node_cpu_util_pct": share * 100, "node_cpu_cores_busy": share * cores}


@dataclass(frozen=True)
class ThreadUse:
    """What the server's threads used between two thread snapshots: ticks per (pid, tid), and the span's ends."""

    ticks: dict[tuple[int, int], int]
    first_s: float  # the snapshots' times (epoch seconds)
    last_s: float
    ticks_per_s: int

    def cores(self, ticks: int) -> float:
        """`ticks` over the span, in cores."""
        return ticks / ((self.last_s - self.first_s) * self.ticks_per_s)


class NodeSampler:
    """Samples the node's CPU time when `cpu`, and NVML when `gpus`, in a thread from construction until `stop`; runs
    on the server's node (as a Ray actor)."""

    def __init__(self, gpu_ids: list[int] | None, sample_hz: float, gpus: bool = True,
                 processes: tuple[int, ...] = (), cpu: bool = True) -> None:
        import os

        self._nvml: Any = None
        self._handles: list[Any] = []
        self.indices: list[int] = []
        self._energy_supported = False
        if gpus:
            import pynvml

            self._nvml = pynvml
            pynvml.nvmlInit()
            self.indices = gpu_ids or list(range(pynvml.nvmlDeviceGetCount()))
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices]
            self._energy_supported = all(self._energy_mj(h) is not None for h in self._handles)
        self.cores = os.cpu_count() or 1
        self.cpu = cpu
        self._interval = 1.0 / sample_hz
        # time, GPU util, memory MiB, power W, energy J, CPU busy, CPU total (NaN where not sampled)
        self._rows: deque[tuple[float, ...]] = deque(maxlen=MAX_SAMPLES)
        self.processes = set(processes)
        self._threads: deque[tuple[float, dict[tuple[int, int], int]]] = deque(maxlen=MAX_THREAD_SNAPSHOTS)
        self._ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="node-sampler", daemon=True)
        self._thread.start()

    def _energy_mj(self, handle: Any) -> float | None:
        try:
            return float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        except self._nvml.NVMLError:
            return None

    def _sample_gpus(self) -> tuple[float, float, float, float]:
        nvml, nan = self._nvml, float("nan")
        if nvml is None:
            return nan, nan, nan, nan
        util = [nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self._handles]
        mem = [nvml.nvmlDeviceGetMemoryInfo(h).used for h in self._handles]
        power = [nvml.nvmlDeviceGetPowerUsage(h) for h in self._handles]  # mW
        energy = sum(self._energy_mj(h) or 0.0 for h in self._handles) if self._energy_supported else nan
        return float(np.mean(util)), sum(mem) / 2**20, sum(power) / 1e3, energy / 1e3

    def _sample(self) -> tuple[float, ...] | None:
        """One row: the time, the GPUs' figures and the node's CPU times; None when its reads were too slow."""
        nan = (float("nan"), float("nan"))
        read = stamped(lambda: (*self._sample_gpus(), *((cpu_times() or nan) if self.cpu else nan)))
        return None if read is None else (read[0], *read[1])

    def _run(self) -> None:
        errors = (self._nvml.NVMLError,) if self._nvml is not None else ()
        count = dropped = 0
        while not self._stop.is_set():
            try:
                row = self._sample()
            except errors as exc:  # e.g. the GPU fell off the bus: stop, windows come back empty
                log.warning("NVML sampling stopped: %s", exc)
                return
            threads = stamped(lambda: thread_cpu_ticks(process_tree(self.processes))) if (
                self.processes and count % THREAD_EVERY == 0) else None
            if row is None:
                dropped += 1
                if dropped in (1, 100, 10_000):  # a node too busy to sample on time is worth knowing, not flooding
                    log.warning("telemetry: %d sample(s) dropped so far, their reads took over %.0f ms (a busy "
                                "node); windows they leave uncovered come back without these metrics", dropped,
                                MAX_READ_S * 1e3)
            with self._lock:
                if row is not None:
                    self._rows.append(row)
                if threads is not None:
                    self._threads.append(threads)
            count += 1
            self._stop.wait(self._interval)

    def thread_use(self, start: float, end: float) -> ThreadUse | None:
        """CPU ticks each thread of the server's processes used between the first and last thread snapshots within
        COVERAGE_SLACK_S of [start, end]; None when they do not span half of it."""
        with self._lock:
            inside = [snap for snap in self._threads if start - COVERAGE_SLACK_S <= snap[0] <= end + COVERAGE_SLACK_S]
        if len(inside) < 2 or inside[-1][0] - inside[0][0] < (end - start) / 2:
            return None
        (t0, first), (t1, last) = inside[0], inside[-1]
        used = {key: ticks - first[key] for key, ticks in last.items() if key in first}
        return ThreadUse(used, t0, t1, self._ticks) if t1 > t0 and used else None

    def _server_cpu(self, start: float, end: float) -> dict[str, float]:
        """The server's processes' CPU and their busiest thread's over [start, end]."""
        use = self.thread_use(start, end)
        if use is None:
            return {}
        return {"server_cpu_cores": use.cores(sum(use.ticks.values())), "server_thread_cpu_max": use.cores(
            max(use.ticks.values()))}

    def busiest_thread(self, start: float, end: float) -> str | None:
        """Which thread of the server's processes used the most CPU over [start, end] (`serving.node.thread_name`):
        what a `cpu` verdict's single saturated thread is."""
        use = self.thread_use(start, end)
        if use is None:
            return None
        pid, tid = max(use.ticks, key=use.ticks.get)
        return thread_name(pid, tid)

    def describe(self) -> dict[str, Any]:
        """What is sampled: the node's cores; GPU indices and names, driver and CUDA versions as NVML reports them."""
        nvml = self._nvml
        if nvml is None:
            return {"cpu_count": self.cores, **({"processes": sorted(self.processes)} if self.processes else {})}
        cuda = nvml.nvmlSystemGetCudaDriverVersion_v2()
        return {"indices": self.indices, "names": [nvml.nvmlDeviceGetName(h) for h in self._handles],
                "driver_version": nvml.nvmlSystemGetDriverVersion(),
                "cuda_version": f"{cuda // 1000}.{cuda % 1000 // 10}", "energy_counter": self._energy_supported,
                "cpu_count": self.cores, **({"processes": sorted(self.processes)} if self.processes else {})}

    def window(self, start: float, end: float, timeout_s: float = 5.0) -> dict[str, float]:
        """Summary of [start, end]; waits (up to `timeout_s`) for the first sample after `end`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._thread.is_alive():
            with self._lock:
                if self._rows and self._rows[-1][0] >= end:
                    break
            time.sleep(self._interval)
        with self._lock:
            rows = np.array([r for r in self._rows if start - 2 <= r[0] <= end + 2], dtype=float)
        if rows.size == 0:
            return {}
        out: dict[str, float] = {}
        if self._nvml is not None:
            energy = rows[:, 4] if self._energy_supported else None
            out.update(summarize(rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3], energy, start, end))
        cpu = ~np.isnan(rows[:, 5])
        if cpu.any():
            out.update(cpu_summary(rows[cpu, 0], rows[cpu, 5], rows[cpu, 6], self.cores, start, end))
        return {**out, **self._server_cpu(start, end)}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._nvml is not None:
            self._nvml.nvmlShutdown()


class NodeTelemetry:
    """Driver-side handle of one server group's sampler actor."""

    def __init__(self, actor: Any, description: dict[str, Any]) -> None:
        self.actor = actor
        self.description = description

    def busiest_thread(self, start: float, end: float, timeout_s: float = 30.0) -> str | None:
        """The server's busiest thread over [start, end], named (None where it was not sampled)."""
        import ray

        try:
            return ray.get(self.actor.busiest_thread.remote(start, end), timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - telemetry must not fail a trial that was measured
            log.warning("node telemetry could not name the busiest thread: %s", exc)
            return None

    def window_metrics(self, start: float, end: float, images: int, timeout_s: float = 30.0) -> dict[str, float]:
        """The window's node metrics (CPU; GPU where sampled); empty (logged why) when the sampler could not cover
        it."""
        import ray

        try:
            metrics = ray.get(self.actor.window.remote(start, end), timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - telemetry must not fail a trial that was measured
            log.warning("node telemetry failed for the window %.3f-%.3f: %s", start, end, exc)
            return {}
        if not metrics:
            log.warning("node telemetry did not cover the window %.3f-%.3f: no CPU or GPU metrics for this trial",
                        start, end)
            return {}
        return {**metrics, **energy_per_image(metrics, images)}

    def stop(self) -> None:
        import ray

        try:
            ray.get(self.actor.stop.remote(), timeout=10)
        except Exception as exc:  # noqa: BLE001 - the actor goes away either way
            log.debug("stopping the GPU sampler: %s", exc)
        finally:
            ray.kill(self.actor)


def start_node_telemetry(telemetry_cfg: TelemetryConfig, handle: ServerHandle, node: NodeInfo,
                         ray_options: dict[str, Any], timeout_s: float = 60.0) -> NodeTelemetry | None:
    """A sampler on the server's node for a server group: its CPU (`telemetry.cpu`) and, on a GPU node, its GPUs
    (`telemetry.gpu`); None (logged why) where there is nothing to sample."""
    starting = begin_node_telemetry(telemetry_cfg, handle, node, ray_options)
    return starting.ready(timeout_s) if starting is not None else None


class StartingTelemetry:
    """A sampler actor asked for and not yet waited for: its new Ray worker starts (about a second) while the driver
    does other work, e.g. the group's cross-check."""

    def __init__(self, actor: Any, node: NodeInfo, gpus: bool, sample_hz: float) -> None:
        self.actor = actor
        self.described = actor.describe.remote()
        self.node, self.gpus, self.sample_hz = node, gpus, sample_hz

    def ready(self, timeout_s: float = 60.0) -> NodeTelemetry | None:
        """The running sampler; None (logged why) when it did not start within `timeout_s`."""
        import ray

        try:
            description = ray.get(self.described, timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - telemetry is an extra: the trials still run, without its metrics
            log.warning("no telemetry on node %s: %s", self.node.hostname, exc)
            self.cancel()
            return None
        log.info("node telemetry: sampling the CPU (%d cores)%s at %.0f Hz", description["cpu_count"],
                 f" and {description['names']}" if self.gpus else "", self.sample_hz)
        return NodeTelemetry(self.actor, description)

    def cancel(self) -> None:
        """Stop the sampler before it was waited for (its group failed to start)."""
        import ray

        ray.kill(self.actor)


def begin_node_telemetry(telemetry_cfg: TelemetryConfig, handle: ServerHandle, node: NodeInfo,
                         ray_options: dict[str, Any]) -> StartingTelemetry | None:
    """Ask for the sampler `start_node_telemetry` waits for, without waiting; None (logged why) where there is
    nothing to sample."""
    import ray

    if not ray.is_initialized():  # a server hosted outside a cluster (tests): no node to place a sampler on
        return None
    if handle.remote:
        log.info("no node telemetry: the server is an endpoint outside the cluster (the clients' own CPU is still "
                 "measured)")
        return None
    gpus = bool(telemetry_cfg.gpu) and node.has_gpu
    if telemetry_cfg.gpu and not node.has_gpu:
        log.info("no GPU telemetry: node %s has no NVIDIA GPU (NVML finds none)", node.hostname)
    if gpus and ((node.mig.devices and node.mig.pinned) or any(isinstance(i, str) for i in handle.gpu_ids)):
        # NVML reports no utilisation for a MIG device, and power and energy only for the whole card
        log.info("no GPU telemetry: the server runs on a MIG slice of node %s (NVML reports no utilisation for a "
                 "slice, and power only for the whole card); its CPU is still sampled", node.hostname)
        gpus = False
    if not gpus and not telemetry_cfg.cpu:
        return None
    if handle.node_id:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        placement: dict[str, Any] = {"scheduling_strategy": NodeAffinitySchedulingStrategy(handle.node_id, soft=False)}
    else:
        placement = dict(ray_options)
    actor = ray.remote(NodeSampler).options(num_cpus=0.01, max_concurrency=4, **placement).remote(
        [i for i in handle.gpu_ids if isinstance(i, int)] or None, float(telemetry_cfg.sample_hz), gpus,
        tuple(handle.processes) if telemetry_cfg.cpu else (), bool(telemetry_cfg.cpu))
    return StartingTelemetry(actor, node, gpus, float(telemetry_cfg.sample_hz))
