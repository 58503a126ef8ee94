"""Triton Python-backend model: serves an ONNX file with ONNX Runtime.

Used with the `tritonserver` bundled in nvidia-pytriton, which has only the Python backend. The ONNX file,
execution providers (with their options) and thread count come from the model config's `parameters`,
written by `serving.triton.repository`. Runs inside Triton's stub process: standard library, numpy and
onnxruntime only (PYTHONPATH is ignored there, so nothing from this project can be imported).

With `batch_buckets` (a JSON list of batch sizes) an instance keeps one session per size and runs a batch padded up
to the next: on the CUDA EP a session whose input shape differs from its previous call's pays 40-240 ms, so one
session fed the dynamic batcher's changing sizes spends more time changing shape than computing.

On a GPU node (onnxruntime-gpu) each instance runs on the device Triton gave it (KIND_GPU), and loading
fails loudly when the first provider asked for is not the one the session got: ONNX Runtime would otherwise
fall back to the CUDA or CPU provider with a warning, and a `triton_trt` trial would measure something else.

Where an execute's time goes (`PassTimes`): gathering the requests' inputs into one batch, the ONNX Runtime run and
building the responses, counted per request as Triton counts its own durations, in a file the server's host reads
(serving/triton/backend_counters.py); what Triton counts as infer time beyond them is the server's exchange with
this stub process.
"""

import ctypes
import glob
import json
import os
import sys
import time

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider")
# The model's counters (serving/triton/backend_counters.py reads them): this process's running totals, written at
# most this often to `<pid>.json` in the folder this environment variable names (a window's totals then lag by up to
# this much, the same for every part and the requests).
COUNTERS_ENV = "TIERBENCH_BACKEND_COUNTERS"
FLUSH_EVERY_S = 0.05


class PassTimes:
    """Per-request time of an execute's parts, summed as Triton sums its own durations (a pass of N requests counts
    N times), and written where the server's host reads them; nothing without the folder."""

    PARTS = ("requests", "input_us", "run_us", "output_us")

    def __init__(self, model: str, folder: str | None) -> None:
        self.model = model
        self.path = os.path.join(folder, f"{os.getpid()}.json") if folder else None
        self.totals = dict.fromkeys(self.PARTS, 0.0)
        self.flushed = time.monotonic()
        if self.path:
            self.write()  # zeros: the file is there from the instance's start

    def add(self, requests: int, input_s: float, run_s: float, output_s: float) -> None:
        """One execute of `requests` requests: each rode the whole pass."""
        if self.path is None:
            return
        for part, seconds in (("input_us", input_s), ("run_us", run_s), ("output_us", output_s)):
            self.totals[part] += seconds * 1e6 * requests
        self.totals["requests"] += requests
        now = time.monotonic()
        if now - self.flushed >= FLUSH_EVERY_S:
            self.flushed = now
            self.write()

    def write(self) -> None:
        """Replace the file whole, so a reader sees one version or the next; counting never fails a request."""
        try:
            tmp = f"{self.path}.tmp"
            with open(tmp, "w") as f:
                json.dump({"model": self.model, **{f"tierbench_backend_{p}": v for p, v in self.totals.items()}}, f)
            os.replace(tmp, self.path)
        except OSError as exc:
            print(f"tierbench: the model's counters stopped ({exc})", file=sys.stderr)
            self.path = None


def _param(model_config: dict, key: str, default: str = "") -> str:
    return model_config.get("parameters", {}).get(key, {}).get("string_value", default)


def _preload_gpu_libraries(providers: list) -> None:
    """Load CUDA/cuDNN from NVIDIA's pip wheels and TensorRT from `tensorrt_libs`: none is on the loader's
    path by default, and ONNX Runtime loads its GPU providers with plain dlopen."""
    if hasattr(ort, "preload_dlls"):
        ort.preload_dlls()
    if "TensorrtExecutionProvider" not in providers:
        return
    folders = {os.path.dirname(lib) for entry in sys.path if entry and os.path.isdir(entry)
               for lib in glob.glob(os.path.join(entry, "tensorrt*libs", "libnvinfer.so.*"))}
    for folder in sorted(folders):
        for pattern in ("libnvinfer.so.*", "libnvinfer_plugin.so.*", "libnvonnxparser.so.*"):
            for path in sorted(glob.glob(os.path.join(folder, pattern))):
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def session_providers(names: list, options: dict, device_id: int) -> list:
    """(name, options) pairs for InferenceSession; GPU providers run on this instance's device."""
    providers = []
    for name in names:
        opts = dict(options.get(name, {}))
        if name in GPU_PROVIDERS:
            opts["device_id"] = device_id
        providers.append((name, opts) if opts else name)
    return providers


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]
        options = ort.SessionOptions()
        threads = int(_param(config, "ort_threads", "0") or 0)
        if threads > 0:
            options.intra_op_num_threads = threads
        names = json.loads(_param(config, "ort_providers", '["CPUExecutionProvider"]'))
        provider_options = json.loads(_param(config, "ort_provider_options", "{}") or "{}")
        device_id = int(args.get("model_instance_device_id", 0) or 0)
        if any(name in GPU_PROVIDERS for name in names):
            _preload_gpu_libraries(names)
        providers = session_providers(names, provider_options, device_id)
        buckets = sorted(json.loads(_param(config, "batch_buckets", "[]") or "[]"))
        if buckets:  # several sessions' idle CPU threads must not spin against each other
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # One session per bucket (None: the one session for every shape), each with its padded input's buffer.
        self.sessions = {size: ort.InferenceSession(_param(config, "onnx_path"), options, providers=providers)
                         for size in (buckets or [None])}
        self.session = self.sessions[buckets[-1] if buckets else None]
        self.buckets = buckets
        self.padded: dict = {}
        self.providers = self.session.get_providers()
        self.times = PassTimes(args["model_name"], os.environ.get(COUNTERS_ENV))
        if self.providers[0] != names[0]:
            raise RuntimeError(
                f"ONNX Runtime {ort.__version__} could not use {names[0]} (session got {self.providers}; "
                f"available here: {ort.get_available_providers()}). On a GPU node install tierbench[gpu-cu12] or "
                "[gpu-cu13] for the driver's CUDA (python -m runners.doctor tells which loads), or serve from NVIDIA's "
                "Triton container.")

    def execute(self, requests: list) -> list:
        # With the dynamic batcher on, several requests arrive at once: one ONNX Runtime run for all of them.
        started = time.perf_counter()
        batches = [pb_utils.get_input_tensor_by_name(r, self.input_name).as_numpy() for r in requests]
        session, feed, size = self.gather(batches)
        gathered = time.perf_counter()
        (logits,) = session.run([self.output_name], {self.input_name: feed})
        ran = time.perf_counter()
        logits = np.ascontiguousarray(logits[:size], dtype=np.float32)
        responses, start = [], 0
        for batch in batches:
            out = pb_utils.Tensor(self.output_name, logits[start:start + len(batch)])
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
            start += len(batch)
        self.times.add(len(requests), gathered - started, ran - gathered, time.perf_counter() - ran)
        return responses

    def gather(self, batches: list) -> tuple:
        """The session for the requests' batches, its input and the rows that are theirs: the session of the smallest
        bucket that holds them all, their inputs copied once into that bucket's buffer (rows past them keep what
        they held: computed and dropped), else the one session."""
        size = sum(len(b) for b in batches)
        bucket = next((b for b in self.buckets if b >= size), None)
        if len(batches) == 1 and bucket in (None, size):
            feed = batches[0]  # one request of a bucket's size (or no buckets): no copy at all
        elif bucket is None:
            feed = np.concatenate(batches)
        else:
            feed = self.padded.get(bucket)
            first = batches[0]
            if feed is None or feed.shape[1:] != first.shape[1:] or feed.dtype != first.dtype:
                feed = self.padded[bucket] = np.zeros((bucket, *first.shape[1:]), dtype=first.dtype)
            offset = 0
            for batch in batches:
                feed[offset:offset + len(batch)] = batch
                offset += len(batch)
        return (self.session if bucket is None else self.sessions[bucket]), feed, size
