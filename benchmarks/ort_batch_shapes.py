"""Does a change of batch shape cost ONNX Runtime more than the batch's own compute? A dynamic batcher hands the
model a different batch size on almost every pass (8, then 11, then 16, ...); if each new shape paid for something
(cuDNN's algorithm search, a new memory arena chunk, a kernel plan) a served batcher would collapse where one
fixed batch does not. In process, no server: the same ONNX file the sweep's Triton serves, the host round trip a
server pays (NumPy in, NumPy out), every size warmed once first.

Per provider option set (the provider's defaults; on CUDA also `cudnn_conv_algo_search=HEURISTIC` and
`cudnn_conv_use_max_workspace=0`): the median call at each fixed size, then the same sizes in a rotating order (never
the same size twice in a row) and each rotating call's time over the fixed median at its size, once with one session
for every size and once with a session per size (what Triton's `batch_buckets` do). A ratio near 1: shape changes are
free, and a batcher's collapse is the server's, not the runtime's.

    python benchmarks/ort_batch_shapes.py [--model resnet18] [--sizes 8 11 14 16 24 32] [--calls 40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import report  # noqa: E402
from experiments.config.compose import load_config  # noqa: E402

COLUMNS = ["provider", "options", "sessions", "batch", "fixed_ms", "rotating_ms", "rotating_over_fixed",
           "first_call_ms"]


def session_for(onnx_path: str, provider: str, options: dict[str, str]) -> Any:
    import onnxruntime as ort

    if provider != "CPUExecutionProvider" and hasattr(ort, "preload_dlls"):
        ort.preload_dlls()
    providers = [(provider, options) if options else provider]
    if provider != "CPUExecutionProvider":
        providers.append("CPUExecutionProvider")
    session = ort.InferenceSession(onnx_path, providers=providers)
    if session.get_providers()[0] != provider:
        raise SystemExit(f"ONNX Runtime could not use {provider} (the session got {session.get_providers()})")
    return session


def timed(session: Any, feeds: dict[str, np.ndarray]) -> float:
    started = time.perf_counter()
    session.run(None, feeds)
    return (time.perf_counter() - started) * 1000


def measure(sessions: dict[int, Any], input_shape: list[int], sizes: list[int], calls: int) -> list[dict[str, Any]]:
    """`sessions`: the session that runs each size (one for all, or one each)."""
    name = sessions[sizes[0]].get_inputs()[0].name
    rng = np.random.default_rng(1)
    feeds = {n: {name: rng.standard_normal((n, *input_shape), dtype=np.float32)} for n in sizes}
    first = {n: timed(sessions[n], feeds[n]) for n in sizes}  # each shape's first pass: where a search would show
    fixed = {n: statistics.median(timed(sessions[n], feeds[n]) for _ in range(calls)) for n in sizes}
    rotating: dict[int, list[float]] = {n: [] for n in sizes}
    for i in range(calls * len(sizes)):  # stride 1 through the sizes: every call a new shape
        n = sizes[i % len(sizes)]
        rotating[n].append(timed(sessions[n], feeds[n]))
    return [{"batch": n, "fixed_ms": fixed[n], "rotating_ms": statistics.median(rotating[n]),
             "rotating_over_fixed": statistics.median(rotating[n]) / fixed[n], "first_call_ms": first[n]}
            for n in sizes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 11, 14, 16, 24, 32])
    parser.add_argument("--calls", type=int, default=40, help="calls per size, fixed and rotating each")
    parser.add_argument("--name", default=None, help="results file name (default: ort_batch_shapes_<gpu|cpu>)")
    args = parser.parse_args()
    if len(set(args.sizes)) < 2:
        raise SystemExit("--sizes: give at least two different batch sizes (the point is changing between them)")

    from serving.export import ensure_onnx
    from serving.node import nvml_gpus
    from serving.paths import node_model_repository

    cfg = load_config([f"model={args.model}"])
    gpus = nvml_gpus().names
    onnx_path = ensure_onnx(cfg.model, node_model_repository()).onnx_path
    option_sets: list[tuple[str, dict[str, str]]] = [("CPUExecutionProvider", {})]
    if gpus:
        option_sets = [("CUDAExecutionProvider", {}),
                       ("CUDAExecutionProvider", {"cudnn_conv_algo_search": "HEURISTIC"}),
                       ("CUDAExecutionProvider", {"cudnn_conv_use_max_workspace": "0"})]
    rows = []
    for provider, options in option_sets:
        label = ",".join(f"{k}={v}" for k, v in options.items()) or "defaults"
        one = session_for(onnx_path, provider, options)
        for sessions, how in (({n: one for n in args.sizes}, "one"),
                              ({n: session_for(onnx_path, provider, options) for n in args.sizes}, "per size")):
            for row in measure(sessions, list(cfg.model.input_shape), args.sizes, args.calls):
                rows.append({"provider": provider, "options": label, "sessions": how, **row})
                print(rows[-1], flush=True)
            del sessions
    report(args.name or f"ort_batch_shapes_{'gpu' if gpus else 'cpu'}", COLUMNS, rows,
           {"model": args.model, "gpu": list(gpus), "onnx": str(onnx_path), "calls": args.calls})


if __name__ == "__main__":
    main()
