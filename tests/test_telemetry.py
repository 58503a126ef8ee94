"""Node telemetry's arithmetic on known samples (GPU and CPU), the GPU's absence (never zeros) where there is none,
and the CPU sampled on this machine."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from experiments.config.compose import load_config
from experiments.measure.telemetry import (
    StartingTelemetry,
    cpu_summary,
    energy_per_image,
    gpu_params,
    nvml_unavailable_reason,
    start_node_telemetry,
    summarize,
)
from serving.backend import ServerHandle
from tests.conftest import has_gpu
from tests.helpers import CPU_NODE, GPU_NODE


def _samples(start: float, seconds: float, hz: float = 20.0) -> tuple[np.ndarray, ...]:
    times = start + np.arange(0, seconds, 1 / hz)
    util = np.where(times < start + seconds / 2, 50.0, 100.0)
    mem = 1000.0 + 10 * np.arange(times.size)
    power = np.full(times.size, 200.0)
    energy = 5_000.0 + 200.0 * (times - start)  # a counter in J: 200 W
    return times, util, mem, power, energy


def test_window_metrics_from_the_energy_counter() -> None:
    times, util, mem, power, energy = _samples(1000.0, 10.0)
    m = summarize(times, util, mem, power, energy, 1002.0, 1006.0)
    assert m["gpu_energy_j"] == pytest.approx(800.0)  # 4 s x 200 W
    assert m["gpu_power_w"] == pytest.approx(200.0)
    assert 50.0 < m["gpu_util_pct"] < 100.0
    assert m["gpu_mem_used_mb"] == mem[(times >= 1002.0) & (times <= 1006.0)].max()
    assert m["gpu_telemetry_samples"] == pytest.approx(81, abs=1)


def test_without_an_energy_counter_energy_is_mean_power_times_window() -> None:
    times, util, mem, power, _ = _samples(1000.0, 10.0)
    assert summarize(times, util, mem, power, None, 1001.0, 1004.0)["gpu_energy_j"] == pytest.approx(600.0)


def test_a_window_the_samples_do_not_cover_gets_no_metrics() -> None:
    times, util, mem, power, energy = _samples(1000.0, 10.0)
    assert summarize(times, util, mem, power, energy, 1008.0, 1015.0) == {}  # sampling stopped at ~1010
    assert summarize(times, util, mem, power, energy, 990.0, 1003.0) == {}  # started at 1000
    assert summarize(times[:1], util[:1], mem[:1], power[:1], energy[:1], 1000.0, 1000.04) == {}


def test_energy_per_image() -> None:
    assert energy_per_image({"gpu_energy_j": 800.0}, 400) == {"energy_per_image_j": 2.0}
    assert energy_per_image({"gpu_energy_j": 800.0}, 0) == {}
    assert energy_per_image({}, 400) == {}


def test_gpu_params_only_on_gpu_nodes() -> None:
    assert gpu_params(CPU_NODE) == {}
    assert gpu_params(GPU_NODE) == {"driver_version": "580.65", "cuda_version": "13.0"}


def test_no_sampler_on_a_node_without_a_gpu_when_the_cpu_is_not_sampled_either() -> None:
    handle = ServerHandle("triton_python_backend", {}, node_id="n0")
    assert start_node_telemetry(load_config(["telemetry.cpu=false"]).telemetry, handle, CPU_NODE, {}) is None


def test_telemetry_can_be_turned_off() -> None:
    cfg = load_config(["telemetry.gpu=false", "telemetry.cpu=false"]).telemetry
    assert start_node_telemetry(cfg, ServerHandle("ray_serve", {}), GPU_NODE, {}) is None


def test_a_sampler_asked_for_early_is_waited_for_later_and_stopped_if_its_group_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A server group asks for its sampler before its cross-check and waits for it after (its worker starts
    meanwhile): asking does not wait, waiting gives the sampler, and a group that failed meanwhile stops it."""
    import ray

    asked, killed = [], []

    class Actor:
        class describe:  # noqa: N801 - a Ray actor method's handle
            @staticmethod
            def remote() -> str:
                asked.append("describe")
                return "ref"

    answers = {"ref": {"cpu_count": 2, "names": []}}
    monkeypatch.setattr(ray, "get", lambda ref, timeout=None: answers[ref])
    monkeypatch.setattr(ray, "kill", lambda actor: killed.append(actor))
    starting = StartingTelemetry(Actor(), CPU_NODE, False, 20.0)
    assert asked == ["describe"] and not killed, "asking sends the request and waits for nothing"
    telemetry = starting.ready()
    assert telemetry is not None and telemetry.description == {"cpu_count": 2, "names": []} and not killed
    StartingTelemetry(Actor(), CPU_NODE, False, 20.0).cancel()
    assert len(killed) == 1

    def late(ref: str, timeout: float | None = None) -> None:
        raise TimeoutError("not up")

    monkeypatch.setattr(ray, "get", late)
    assert StartingTelemetry(Actor(), CPU_NODE, False, 20.0).ready(1) is None and len(killed) == 2


def test_the_nodes_cpu_over_a_window_from_cumulative_times() -> None:
    """Busy time grows 1.5 s per second of 2 s of CPU time per second (2 cores): 75 % busy, 1.5 cores."""
    times = np.arange(1000.0, 1010.01, 0.5)
    busy = (times - 1000.0) * 1.5
    total = (times - 1000.0) * 2.0
    m = cpu_summary(times, busy, total, 2, 1002.25, 1006.0)
    assert m["node_cpu_util_pct"] == pytest.approx(75.0) and m["node_cpu_cores_busy"] == pytest.approx(1.5)
    assert cpu_summary(times, busy, total, 2, 1008.0, 1015.0) == {}  # sampling stopped at ~1010


def test_a_cpu_only_sampler_sees_this_machine_work() -> None:
    """No NVML: the node's CPU only. A thread spinning for 0.6 s shows as busy CPU; no GPU metric appears."""
    import threading
    import time

    from experiments.measure.telemetry import NodeSampler

    sampler = NodeSampler(None, 50.0, gpus=False)
    try:
        assert sampler.describe() == {"cpu_count": sampler.cores}
        time.sleep(0.2)
        start = time.time()

        def busy() -> None:
            while time.time() - start < 0.6:
                pass

        spin = threading.Thread(target=busy)
        spin.start()
        spin.join()
        metrics = sampler.window(start, time.time())
    finally:
        sampler.stop()
    assert set(metrics) == {"node_cpu_util_pct", "node_cpu_cores_busy"}
    assert 0 < metrics["node_cpu_util_pct"] <= 100
    assert metrics["node_cpu_cores_busy"] == pytest.approx(metrics["node_cpu_util_pct"] / 100 * sampler.cores)


def test_telemetry_cpu_off_leaves_the_node_cpu_figures_out() -> None:
    """`telemetry.cpu=false` with GPU telemetry on: the sampler still runs (for the GPUs) but reports no CPU figure."""
    import time

    from experiments.measure.telemetry import NodeSampler

    sampler = NodeSampler(None, 50.0, gpus=False, cpu=False)
    try:
        start = time.time()
        time.sleep(0.3)
        metrics = sampler.window(start, time.time())
    finally:
        sampler.stop()
    assert not any(name.startswith(("node_cpu", "server_")) for name in metrics), metrics


@pytest.mark.skipif(has_gpu(), reason="this machine has a GPU: NVML is expected to work here")
def test_nvml_says_why_it_is_unavailable_without_a_gpu() -> None:
    reason = nvml_unavailable_reason()
    assert reason is not None and ("NVML" in reason or "pynvml" in reason)


class _FakeNvml:
    """Stands in for pynvml with two GPUs drawing 100 W each, so the sampler's threading, device combination
    and window logic run without a GPU. No number from it is presented as measured."""

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        import time

        self.time = time.time
        self.started = time.time()

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        pass

    def nvmlShutdown(self) -> None:  # noqa: N802
        pass

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int):  # noqa: N802
        return type("Util", (), {"gpu": 50 if handle == 0 else 100})()

    def nvmlDeviceGetMemoryInfo(self, handle: int):  # noqa: N802
        return type("Mem", (), {"used": 2**30})()

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:  # noqa: N802
        return 100_000  # mW

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:  # noqa: N802
        return int((self.time() - self.started) * 100_000)  # mJ at 100 W

    def nvmlDeviceGetName(self, handle: int) -> str:  # noqa: N802
        return f"Fake GPU {handle}"

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        return "580.65.06"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:  # noqa: N802
        return 13000


def test_sampler_combines_gpus_and_summarizes_a_window(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import time

    from experiments.measure.telemetry import NodeSampler

    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml())
    sampler = NodeSampler(None, 50.0)
    try:
        assert sampler.describe() == {"indices": [0, 1], "names": ["Fake GPU 0", "Fake GPU 1"],
                                      "driver_version": "580.65.06", "cuda_version": "13.0", "energy_counter": True,
                                      "cpu_count": sampler.cores}
        start = time.time()  # the sampler took its first sample when it started
        end = start + 0.5
        metrics = sampler.window(start, end)  # waits for a sample past `end`
    finally:
        sampler.stop()
    assert metrics["gpu_util_pct"] == pytest.approx(75.0)
    assert metrics["gpu_mem_used_mb"] == pytest.approx(2048.0)
    assert metrics["gpu_power_w"] == pytest.approx(200.0)
    assert metrics["gpu_energy_j"] == pytest.approx(100.0, rel=0.1)  # 2 x 100 W x 0.5 s
    assert metrics["gpu_telemetry_samples"] >= 10


class _StallingNvml(_FakeNvml):
    """The fake NVML whose energy read stalls once, the first time it is read after `stall_at`: what the sampling
    thread sees when a busy node deschedules it between stamping a sample and reading the counter."""

    def __init__(self, stall_at: float, stall_s: float) -> None:
        super().__init__()
        self.stall_at, self.stall_s, self.stalled = stall_at, stall_s, False

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:  # noqa: N802
        import time

        if not self.stalled and self.time() >= self.stall_at:
            self.stalled = True
            time.sleep(self.stall_s)
        return super().nvmlDeviceGetTotalEnergyConsumption(handle)


def test_a_sample_whose_reads_stalled_is_dropped_not_stamped_with_the_wrong_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import time

    from experiments.measure.telemetry import MAX_READ_S, NodeSampler

    fake = _StallingNvml(stall_at=float("inf"), stall_s=4 * MAX_READ_S)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    sampler = NodeSampler(None, 50.0)
    try:
        start = time.time()  # the sampler took its first sample when it started
        end = start + 0.5
        fake.stall_at = end - 0.01
        metrics = sampler.window(start, end)
    finally:
        sampler.stop()
    assert fake.stalled
    # Stamped before the stall, the sample near `end` would carry 0.4 s more of 200 W: about 180 J, not 100.
    assert metrics["gpu_energy_j"] == pytest.approx(100.0, rel=0.1)  # 2 x 100 W x 0.5 s


def _process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process, read from /proc here (not through the sampler's code)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow
def test_the_sampler_sees_a_server_threads_cpu_and_its_childrens() -> None:
    """A stand-in server whose child spins one thread for the whole window: its busiest thread's CPU is what the
    child's own /proc counters say it got over the window (a full core on a quiet machine, less on a busy one), the
    processes' CPU at least that; processes not named stay out."""
    import subprocess
    import sys
    import time

    from experiments.measure.telemetry import NodeSampler
    from serving.node import process_tree

    spin = "import time\nend = time.time() + 4\nwhile time.time() < end: pass"
    parent = subprocess.Popen([sys.executable, "-c",
                               f"import subprocess, sys; subprocess.run([sys.executable, '-c', {spin!r}])"])
    sampler = NodeSampler(None, 50.0, gpus=False, processes=(parent.pid,))
    readings: list[tuple[float, float]] = []  # (time, the child's CPU seconds), read here every 10 ms

    def read_for(seconds: float) -> float:
        until = time.time() + seconds
        while time.time() < until:
            readings.append((time.time(), _process_cpu_s(child)))
            time.sleep(0.01)
        return time.time()

    try:
        assert sampler.describe() == {"cpu_count": sampler.cores, "processes": [parent.pid]}
        time.sleep(0.3)
        (child,) = process_tree({parent.pid}) - {parent.pid}
        read_for(0.6)  # the child is spinning by now
        start = time.time()
        end = read_for(1.2)
        read_for(0.6)  # the sampler's snapshots may reach past the window's ends (COVERAGE_SLACK_S)
        metrics = sampler.window(start, end)
        busiest = sampler.busiest_thread(start, end)  # while the child still runs: /proc names it
        spanned = sampler.thread_use(start, end)  # the thread snapshots the window's figures span
    finally:
        sampler.stop()
        parent.wait(timeout=30)
    assert busiest is not None and f"(pid {child}, tid {child})" in busiest, busiest  # the spinning main thread
    assert "python" in busiest, busiest  # its program
    assert spanned is not None, f"the sampler's thread snapshots do not span the window: {metrics}"
    # The child's own counters over the span the sampler's figure covers: on a machine busy with other work the
    # child's share of a core changes within the window, so a reading over another span would differ by that.
    first, last = (min(readings, key=lambda r, t=t: abs(r[0] - t)) for t in (spanned.first_s, spanned.last_s))
    child_cores = (last[1] - first[1]) / (last[0] - first[0])
    assert child_cores > 0.1, f"the spinning child got {child_cores:.2f} of a core: the machine is too busy to tell"
    # Ticks are 10 ms, readings 10 ms apart: over a second the two may differ by a few ticks at each edge.
    assert metrics["server_thread_cpu_max"] == pytest.approx(child_cores, abs=0.1), metrics
    assert metrics["server_cpu_cores"] >= metrics["server_thread_cpu_max"] * 0.99
