"""The in-process ceiling (serving/inprocess.py, experiments/measure/ceiling.py): which batches are timed, how a
timing is read (interpolation, best, JSON), the node cache, the tier run's metric names, and `runners.ceiling`;
the runtimes really run (the tiny model, PyTorch and ONNX Runtime on the CPU)."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from experiments.config.compose import load_config
from experiments.measure import ceiling as ceiling_module
from experiments.measure.ceiling import NodeCeiling, measure_here
from serving import inprocess
from serving.inprocess import (
    RESIDENT,
    ROUND_TRIP,
    InProcessPoint,
    OthersCpu,
    RuntimeTiming,
    TimingBudget,
    batch_plan,
    time_calls,
    time_runtime,
)
from serving.runtime import Engine, Runtime

QUICK = TimingBudget(min_time_s=0.05, min_calls=3, warmup_calls=1)
TORCH_CPU = Runtime(Engine.TORCH, "cpu")
ORT_CPU = Runtime(Engine.ONNXRUNTIME, "cpu", provider="CPUExecutionProvider")


def test_runtime_keys_name_what_changes_the_speed() -> None:
    assert TORCH_CPU.key == "torch/cpu/fp32"
    assert ORT_CPU.key == "onnxruntime/CPUExecutionProvider/fp32"
    fast = Runtime(Engine.TORCH, "cuda", "fp16", compile=True, compile_mode="max-autotune", channels_last=True)
    assert fast.key == "torch/cuda/fp16+compile-max-autotune+channels_last"
    assert Runtime.from_json(fast.to_json()) == fast


def test_batch_plan_takes_powers_of_two_the_largest_and_the_needed() -> None:
    batches, needed = batch_plan([3, 8, 64], 24)
    assert batches == [1, 2, 3, 4, 8, 16, 24]  # 64 is past the model's largest batch: not timed
    assert needed == {3, 8}


def test_a_timing_interpolates_between_measured_batches_and_picks_its_best() -> None:
    timing = RuntimeTiming(TORCH_CPU, [InProcessPoint(1, ROUND_TRIP, 2.0, 2.0, 500.0, 10),
                                       InProcessPoint(4, ROUND_TRIP, 4.0, 4.0, 1000.0, 10),
                                       InProcessPoint(8, ROUND_TRIP, 10.0, 10.0, 800.0, 10)])
    assert timing.img_s_at(1) == 500.0
    assert timing.img_s_at(2.5) == pytest.approx(750.0)  # halfway between 1 and 4
    assert timing.img_s_at(32) == 800.0  # past the last batch measured: flat
    assert timing.best().batch_size == 4
    assert timing.best(RESIDENT).batch_size == 4  # no resident points (a CPU): the round trip's best
    assert RuntimeTiming.from_json(json.loads(json.dumps(timing.to_json()))) == timing


def test_time_calls_reports_the_median_call_and_its_throughput() -> None:
    point = time_calls(lambda: time.sleep(0.002), 4, ROUND_TRIP, QUICK)
    assert point.calls >= QUICK.min_calls
    assert point.p50_ms >= 2.0  # a call sleeps 2 ms: it cannot take less
    assert point.img_s == pytest.approx(4 / point.p50_ms * 1e3)
    assert 0 < point.span_img_s <= point.calls * 4 / (point.calls * 0.002)


@pytest.mark.parametrize(("busy_after", "share"), [
    (490.0, 290 / 400),  # 390 busy ticks of 400, 100 of them this process's own (1 s at 100 a second): others 72.5 %
    (300.0, 0.0),  # half the machine idle: others took nothing this process wanted
])
def test_others_share_is_the_machines_busy_time_less_this_processs_own_while_nothing_idled(
        monkeypatch: pytest.MonkeyPatch, busy_after: float, share: float) -> None:
    machine = iter([(100.0, 1000.0), (busy_after, 1400.0)])
    own = iter([5.0, 6.0])
    monkeypatch.setattr(inprocess, "cpu_times", lambda: next(machine))
    monkeypatch.setattr(inprocess.time, "process_time", lambda: next(own))
    monkeypatch.setattr(inprocess.os, "sysconf", lambda name: 100)
    assert OthersCpu().share() == pytest.approx(share)


def test_the_climb_stops_after_two_flat_batches_but_times_the_needed_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """Throughput grows to batch 4 and is flat after: 8 and 16 are timed (two flat in a row), 32 is skipped, and
    the experiment's batch 64 still is."""
    rates = {1: 100.0, 2: 180.0, 4: 300.0, 8: 301.0, 16: 299.0, 32: 302.0, 64: 300.0}

    def fake(call, batch_size, mode, budget):  # noqa: ANN001, ANN202 - time_calls' signature
        return InProcessPoint(batch_size, mode, batch_size / rates[batch_size] * 1e3, 1.0, rates[batch_size], 5)

    monkeypatch.setattr(inprocess, "time_calls", fake)
    model = load_config(["model=tiny", "model.max_batch_size=64"]).model
    timing = time_runtime(model, TORCH_CPU, [1, 64], QUICK)
    assert [p.batch_size for p in timing.points] == [1, 2, 4, 8, 16, 64]
    assert all(p.mode == ROUND_TRIP for p in timing.points)  # a CPU: no device-resident mode


@pytest.mark.parametrize("runtime", [TORCH_CPU, ORT_CPU], ids=lambda r: r.key)
def test_both_runtimes_time_the_model_on_the_cpu(runtime: Runtime) -> None:
    model = load_config(["model=tiny"]).model
    timing = time_runtime(model, runtime, [1, 2], QUICK)
    assert {1, 2} <= {p.batch_size for p in timing.points}
    assert all(p.p50_ms > 0 and p.img_s > 0 and p.calls >= QUICK.min_calls for p in timing.points)
    assert timing.versions[str(runtime.engine)]  # the version that computed it
    assert timing.setup_s > 0 and timing.timed_s > 0


def test_a_provider_that_does_not_load_is_refused_not_fallen_back_from() -> None:
    model = load_config(["model=tiny"]).model
    with pytest.raises(RuntimeError, match="could not use CUDAExecutionProvider"):
        time_runtime(model, Runtime(Engine.ONNXRUNTIME, "cuda", provider="CUDAExecutionProvider"), [1], QUICK)


def test_the_node_cache_serves_a_timing_that_covers_the_batches(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inprocess, "cpu_busy_share", lambda seconds=0.5: 0.0)  # a quiet node: timings are cached
    monkeypatch.setattr(inprocess.OthersCpu, "share", lambda self: 0.0)  # ... and nothing disturbed them
    model = load_config(["model=tiny"]).model
    budget = {"min_time_s": 0.05, "min_calls": 3}
    first = NodeCeiling.from_json(measure_here(model, [TORCH_CPU.to_json()], [1, 2], budget, True, str(tmp_path)))
    assert first.cached == [] and TORCH_CPU.key in first.timings
    again = NodeCeiling.from_json(measure_here(model, [TORCH_CPU.to_json()], [2], budget, True, str(tmp_path)))
    assert again.cached == [TORCH_CPU.key]
    assert again.timings[TORCH_CPU.key] == first.timings[TORCH_CPU.key]
    wider = NodeCeiling.from_json(measure_here(model, [TORCH_CPU.to_json()], [3], budget, True, str(tmp_path)))
    assert wider.cached == []  # batch 3 was never timed: timed again
    off = NodeCeiling.from_json(measure_here(model, [TORCH_CPU.to_json()], [1], budget, False, str(tmp_path)))
    assert off.cached == []


def test_a_runtime_that_cannot_run_is_recorded_with_its_reason(tmp_path: Path) -> None:
    model = load_config(["model=tiny"]).model
    broken = Runtime(Engine.ONNXRUNTIME, "cuda", provider="CUDAExecutionProvider")
    result = NodeCeiling.from_json(measure_here(model, [broken.to_json(), ORT_CPU.to_json()], [1],
                                                {"min_time_s": 0.05, "min_calls": 3}, True, str(tmp_path)))
    assert "could not use CUDAExecutionProvider" in result.errors[broken.key]
    assert ORT_CPU.key in result.timings


def test_tier_metrics_are_valid_mlflow_names() -> None:
    timing = RuntimeTiming(Runtime(Engine.TORCH, "cuda", channels_last=True),
                           [InProcessPoint(1, ROUND_TRIP, 2.0, 2.0, 500.0, 10),
                            InProcessPoint(1, RESIDENT, 1.0, 1.0, 1000.0, 10)])
    metrics = NodeCeiling(timings={timing.runtime.key: timing}).tier_metrics()
    assert metrics["ceiling/torch/cuda/fp32_channels_last/b1_p50_ms"] == 2.0
    assert metrics["ceiling/torch/cuda/fp32_channels_last/resident/best_img_s"] == 1000.0
    assert all("+" not in name for name in metrics)


def test_the_cache_key_follows_the_runtime_and_the_budget() -> None:
    model = load_config(["model=tiny"]).model
    key = ceiling_module.cache_key(model, TORCH_CPU, QUICK, [])
    assert key == ceiling_module.cache_key(model, TORCH_CPU, QUICK, [])
    assert key != ceiling_module.cache_key(model, ORT_CPU, QUICK, [])
    assert key != ceiling_module.cache_key(model, TORCH_CPU, TimingBudget(min_time_s=1.0), [])
    assert key != ceiling_module.cache_key(dataclasses.replace(model, seed=1), TORCH_CPU, QUICK, [])


def test_runners_ceiling_prints_every_runtime_and_writes_json(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from runners.ceiling import main

    out = tmp_path / "ceiling.json"
    code = main(["--json", str(out), "model=tiny", "experiment.backends=[pytorch,triton_onnx]",
                 "ceiling.min_time_s=0.05", "ceiling.min_calls=3", f"ceiling.cache_dir={tmp_path / 'cache'}"])
    printed = capsys.readouterr().out
    assert code == 0
    assert "torch/cpu/fp32" in printed and "onnxruntime/CPUExecutionProvider/fp32" in printed
    assert "best:" in printed
    saved = NodeCeiling.from_json(json.loads(out.read_text()))
    assert set(saved.timings) == {"torch/cpu/fp32", "onnxruntime/CPUExecutionProvider/fp32"}


def test_runners_ceiling_refuses_a_bad_setting_before_timing(capsys: pytest.CaptureFixture[str]) -> None:
    from runners.ceiling import main

    assert main(["ceiling.min_time_s=0"]) == 2
    assert "ceiling.min_time_s=0" in capsys.readouterr().err


def _tiny_on_the_cpu(cache: Path) -> Callable[[], NodeCeiling]:
    """The node's ceiling of the tiny model in PyTorch on the CPU, at batch 1, quickly, cached in `cache`."""
    model = load_config(["model=tiny"]).model
    budget = {"min_time_s": 0.05, "min_calls": 3}
    return lambda: NodeCeiling.from_json(measure_here(model, [TORCH_CPU.to_json()], [1], budget, True, str(cache)))


def test_a_timing_taken_on_a_busy_node_is_timed_again_once_the_node_is_quiet(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    busy_share = {"now": 0.9}
    monkeypatch.setattr(inprocess, "cpu_busy_share", lambda seconds=0.5: busy_share["now"])
    monkeypatch.setattr(inprocess.OthersCpu, "share", lambda self: 0.0)  # busy before, never during
    measure = _tiny_on_the_cpu(tmp_path)
    busy = measure()
    assert busy.timings[TORCH_CPU.key].cpu_busy_before == 0.9 and busy.cached == []
    assert measure().cached == [TORCH_CPU.key]  # still busy: the busy timing is reused, not taken again
    busy_share["now"] = 0.1
    quiet = measure()
    assert quiet.cached == [] and quiet.timings[TORCH_CPU.key].cpu_busy_before == 0.1  # quiet now: timed again
    assert measure().cached == [TORCH_CPU.key]


def test_a_timing_disturbed_while_it_ran_is_timed_again_once_the_node_is_quiet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Quiet just before, but a neighbour took CPU from the timing while it ran: cached as busy, so the next sweep
    on a quiet node times it again instead of reading a low ceiling from the cache."""
    during = {"share": 0.6}
    monkeypatch.setattr(inprocess, "cpu_busy_share", lambda seconds=0.5: 0.0)
    monkeypatch.setattr(inprocess.OthersCpu, "share", lambda self: during["share"])
    measure = _tiny_on_the_cpu(tmp_path)
    disturbed = measure()
    assert disturbed.timings[TORCH_CPU.key].cpu_busy_during == 0.6 and disturbed.cached == []
    during["share"] = 0.0
    again = measure()
    assert again.cached == [] and again.timings[TORCH_CPU.key].cpu_busy_during == 0.0
    assert measure().cached == [TORCH_CPU.key]
