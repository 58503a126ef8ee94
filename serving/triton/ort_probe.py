"""Which ONNX Runtime execution providers actually load here: one session per provider on a tiny model.

ONNX Runtime lists its GPU providers as available whenever the wheel carries them, even where CUDA, cuDNN or
TensorRT cannot be loaded; asked for such a provider, a session falls back to the next one with a warning.
Only a session tells. `probe_providers()` runs the probe in a child process (`python -m serving.triton.ort_probe`):
a GPU session creates a CUDA context that would otherwise stay in the caller (often a reused Ray worker), and
a broken provider library can take its process down.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

CPU = "CPUExecutionProvider"
GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider")


def tiny_model() -> bytes:
    """A one-node ONNX model (Relu on a 1x4 float tensor): enough for every provider to claim a node."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tierbench_probe", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def preload_gpu_libraries() -> None:
    """What the Triton Python-backend model does before its session (serving/triton/python_backend/model.py):
    CUDA and cuDNN from NVIDIA's pip wheels, TensorRT from `tensorrt_libs`, none on the loader's path."""
    import ctypes

    import onnxruntime as ort

    from serving.triton.accelerators import tensorrt_library_dirs

    if hasattr(ort, "preload_dlls"):
        ort.preload_dlls()
    for folder in tensorrt_library_dirs():
        for pattern in ("libnvinfer.so.*", "libnvinfer_plugin.so.*", "libnvonnxparser.so.*"):
            for path in sorted(Path(folder).glob(pattern)):
                ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)


def run_probe() -> dict[str, Any]:
    """In this process: ONNX Runtime's version, the providers it lists and those a session really got."""
    import numpy as np
    import onnxruntime as ort

    available = list(ort.get_available_providers())
    result: dict[str, Any] = {"version": ort.__version__, "available": available, "loaded": [], "errors": {}}
    if any(p in GPU_PROVIDERS for p in available):
        try:
            preload_gpu_libraries()
        except OSError as exc:
            result["errors"]["preload"] = str(exc)
    model = tiny_model()
    for provider in available:
        try:
            session = ort.InferenceSession(model, providers=[provider])
            (out,) = session.run(None, {"x": np.array([[-1.0, 0.0, 1.0, 2.0]], dtype=np.float32)})
        except Exception as exc:  # noqa: BLE001 - any failure means the provider does not serve here
            result["errors"][provider] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            continue
        got = session.get_providers()
        if provider in got and out.tolist() == [[0.0, 0.0, 1.0, 2.0]]:
            result["loaded"].append(provider)
        else:
            result["errors"][provider] = f"did not load: the session fell back to {got}"
    return result


def probe_providers(timeout_s: float = 180.0) -> dict[str, Any]:
    """`run_probe()` in a child process; with ONNX Runtime's own log lines about a provider that failed."""
    try:
        done = subprocess.run([sys.executable, "-m", "serving.triton.ort_probe"], capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"version": "", "available": [], "loaded": [], "errors": {"probe": f"timed out after {timeout_s:g} s"}}
    lines = done.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        return {"version": "", "available": [], "loaded": [], "errors": {"probe": tail[0]}}
    hints = [line.strip() for line in done.stderr.splitlines()
             if "cannot open shared object" in line or "Failed to" in line or "requires" in line]
    if hints:
        result["errors"]["log"] = hints[-1][-300:]
    return result


if __name__ == "__main__":
    try:
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        print(json.dumps({"version": "", "available": [], "loaded": [], "errors": {"import": str(exc)}}))
        sys.exit(0)
    print(json.dumps(run_probe()))
