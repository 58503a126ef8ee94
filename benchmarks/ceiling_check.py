"""The ceiling against an independent timing of the same model on the same machine: tierbench's in-process ceiling
(`serving.inprocess`, as a sweep times it on a tier node) beside PyTorch's own benchmark utility
(`torch.utils.benchmark.Timer.blocked_autorange`, which synchronises CUDA itself) for the PyTorch runtimes and the
standard library's `timeit` around `InferenceSession.run` for ONNX Runtime, on the same model file (the seeded
torchvision model; the ONNX file the sweep's Triton serves). Goal: every ratio within 15 % of 1.

Both sides are the host round trip a server pays (NumPy / CPU tensor in, CPU logits out); on a GPU the PyTorch rows
also compare the device-resident figure. The ceiling's throughput is batch / its median single call; the independent
tools' is batch / their median of block means (the mean of many calls). `span_ratio` sets the ceiling's own mean
(its span throughput) against theirs too, so the two statistics can be told apart from the two timers.

    python benchmarks/ceiling_check.py [--model resnet18] [--batches 1 8 32] [--name ceiling_check_cpu]
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import report  # noqa: E402
from experiments.config.compose import load_config  # noqa: E402

GOAL = 0.15


def torch_independent(model_cfg: Any, device: str, half: bool, batch: int, resident: bool) -> float:
    """Median seconds per call, by torch.utils.benchmark."""
    import torch
    import torch.utils.benchmark as benchmark

    from serving.models import build_model

    dtype = torch.float16 if half else torch.float32
    model = build_model(model_cfg).to(device, dtype=dtype)
    host = torch.randn(batch, *model_cfg.input_shape)
    if resident:
        x = host.to(device, dtype=dtype)
        stmt = "model(x)"
    else:
        x = host
        stmt = "model(x.to(device, dtype=dtype)).float().cpu()"
    with torch.inference_mode():
        for _ in range(3):
            eval(stmt, {"model": model, "x": x, "device": device, "dtype": dtype})  # noqa: S307 - our own statement
        # Timer runs with one thread unless told: the ceiling uses every core, as a server does.
        timer = benchmark.Timer(stmt=stmt, globals={"model": model, "x": x, "device": device, "dtype": dtype},
                                num_threads=torch.get_num_threads())
        measurement = timer.blocked_autorange(min_run_time=0.5)
    return float(measurement.median)


def ort_independent(onnx_path: str, provider: str, model_cfg: Any, batch: int) -> float:
    """Median seconds per call, by timeit (5 repeats of as many calls as take ~0.2 s)."""
    import onnxruntime as ort

    if provider != "CPUExecutionProvider" and hasattr(ort, "preload_dlls"):
        ort.preload_dlls()
    session = ort.InferenceSession(onnx_path, providers=[provider, "CPUExecutionProvider"])
    feeds = {session.get_inputs()[0].name: np.random.default_rng(1).standard_normal(
        (batch, *model_cfg.input_shape), dtype=np.float32)}
    timer = timeit.Timer(lambda: session.run(None, feeds))
    number, _ = timer.autorange()
    return float(np.median(timer.repeat(repeat=7, number=number))) / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--name", default=None, help="results file name (default: ceiling_check_<gpu|cpu>)")
    args = parser.parse_args()

    from serving.export import ensure_onnx
    from serving.inprocess import RESIDENT, ROUND_TRIP, TimingBudget, time_runtime
    from serving.node import nvml_gpus
    from serving.paths import node_model_repository
    from serving.runtime import Engine, Runtime

    cfg = load_config([f"model={args.model}"])
    gpus = nvml_gpus().names
    device = "cuda" if gpus else "cpu"
    provider = "CUDAExecutionProvider" if gpus else "CPUExecutionProvider"
    runtimes = [Runtime(Engine.TORCH, device), Runtime(Engine.ONNXRUNTIME, device, provider=provider)]
    if gpus:
        runtimes.insert(1, Runtime(Engine.TORCH, device, "fp16"))
    onnx_path = ensure_onnx(cfg.model, node_model_repository()).onnx_path
    rows: list[dict[str, Any]] = []
    for runtime in runtimes:
        timing = time_runtime(cfg.model, runtime, args.batches, TimingBudget(min_time_s=0.5))
        for batch in args.batches:
            modes = (ROUND_TRIP, RESIDENT) if runtime.engine == Engine.TORCH and gpus else (ROUND_TRIP,)
            for mode in modes:
                ours = timing.point(batch, mode)
                if runtime.engine == Engine.TORCH:
                    seconds = torch_independent(cfg.model, device, runtime.precision == "fp16", batch,
                                                mode == RESIDENT)
                else:
                    seconds = ort_independent(onnx_path, provider, cfg.model, batch)
                independent = batch / seconds
                rows.append({"runtime": runtime.key, "batch": batch, "mode": mode, "ceiling_img_s": ours.img_s,
                             "independent_img_s": independent, "ratio": ours.img_s / independent,
                             "within_goal": abs(ours.img_s / independent - 1) <= GOAL,
                             "span_img_s": ours.span_img_s, "span_ratio": ours.span_img_s / independent})
                print(rows[-1], flush=True)
    name = args.name or f"ceiling_check_{'gpu' if gpus else 'cpu'}"
    report(name, ["runtime", "batch", "mode", "ceiling_img_s", "independent_img_s", "ratio", "within_goal",
                  "span_ratio"], rows,
           {"model": args.model, "gpu": list(gpus), "goal": f"ratio within {GOAL:.0%} of 1",
            "independent": "torch.utils.benchmark.Timer.blocked_autorange (median) / timeit (median of 7 repeats)"})


if __name__ == "__main__":
    main()
