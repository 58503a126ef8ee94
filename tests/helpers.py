"""What several tests share: a results folder and MLflow store of their own, the runs a sweep logged there, each
tier's prices as the report loaded them, nodes described without a GPU and with one, and a stand-in for Triton's
Python-backend utilities."""

from __future__ import annotations

import shutil
import tempfile
import types
from pathlib import Path

import numpy as np
from mlflow.tracking import MlflowClient

from serving.node import NodeInfo
from serving.pytorch.facts import TorchFacts
from serving.triton.facts import OnnxRuntimeFacts

# How long a test's sweep waits for its node to describe itself (the product's `cluster.schedule_timeout_s`, 60 s, took
# over a minute beside a busy core): here a guard against a hang only; the product's refusal is tested on its own
# (tests/test_tier_placement.py).
HANG_GUARD = "cluster.schedule_timeout_s=300"
# Triton's Python backend aborts the whole server now and then on a starved 2-core machine (uncaught
# boost::interprocess::lock_exception, an open upstream defect: docs/troubleshooting.md); the sweep then measures the
# trial again on a fresh server, once by default. Beside a busy core it aborted twice in a row for one trial of the
# shared sweeps: those sweeps allow three attempts more, so one abort-prone trial does not fail a dozen tests.
TRITON_ABORT_RETRIES = "experiment.trial_retries=3"
CPU_NODE = NodeInfo("cpu-box", "127.0.0.1", "n0", "Some CPU", 2)
GPU_NODE = NodeInfo("gpu-box", "10.0.0.2", "n1", "Some CPU", 16, gpu_names=("NVIDIA GeForce RTX 4090",),
                    driver_version="580.65", cuda_version="13.0", ray_gpus=1.0).with_facts(
    TorchFacts(cuda=True),
    OnnxRuntimeFacts(providers=("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")))


# The leanest sweep that measures something real on the local CPU tier: the tiny model on FastAPI, one trial, short
# windows (a sweep test adds what it tests).
TINY_SWEEP = ["model=tiny", "experiment.backends=[fastapi]", "experiment.protocols=[http]",
              "experiment.input_formats=[tensor]", "experiment.batch_sizes=[1]", "experiment.concurrency=[1]",
              "experiment.window_s=1", "experiment.warmup_s=0.3", "experiment.stability.windows=1",
              "experiment.warmup_requests=2"]


def store_path(tmp: Path) -> Path:
    return tmp / "mlflow.db"


def store_uri(tmp: Path) -> str:
    return f"sqlite:///{store_path(tmp)}"


_TEMPLATE_DIR = tempfile.TemporaryDirectory(prefix="tierbench-store-")  # removed when the test session ends


def premigrated_store(tmp: Path) -> str:
    """Put an empty MLflow SQLite store with its schema already migrated at `store_uri(tmp)` and return that URI:
    MLflow's migrations take seconds per new store, paid once per test session instead of once per sweep, for tests
    that measure something else. tests/test_sweep_e2e.py's sweep creates its store from nothing."""
    template = Path(_TEMPLATE_DIR.name) / "mlflow.db"
    if not template.exists():
        MlflowClient(f"sqlite:///{template}").search_experiments()  # creates and migrates it
    target = store_path(tmp)
    if not target.exists():
        tmp.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(template, target)
    return store_uri(tmp)


def store_overrides(tmp: Path, sweep_id: str | None = None, premigrated: bool = False) -> list[str]:
    """A sweep writing its run folder and MLflow store under `tmp` (and named `sweep_id`); with `premigrated`, the
    store is there before the sweep (`premigrated_store`)."""
    if premigrated:
        premigrated_store(tmp)
    # report=false: the report at a sweep's end is tested on its own (tests/test_sweep_answer.py), not in every sweep
    overrides = [f"results_dir={tmp / 'runs'}", f"mlflow.tracking_uri={store_uri(tmp)}", "report=false", HANG_GUARD]
    return overrides + ([f"sweep_id={sweep_id}"] if sweep_id else [])


def runs(store: str, level: str = "trial", sweep_id: str | None = None, retried: bool = False) -> list:
    """The runs of one level (sweep | tier | trial | slo) in `store`, of one sweep when `sweep_id` is given.
    Attempts that failed and were measured again (tag `retried`, experiment.trial_retries) only with `retried`."""
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("tierbench")
    query = f"tags.run_level = '{level}'" + (f" and tags.sweep_id = '{sweep_id}'" if sweep_id else "")
    found = client.search_runs([exp.experiment_id], query, max_results=1000)
    return found if retried else [run for run in found if run.data.tags.get("retried") != "true"]


def tier_prices(data) -> dict:
    """Each tier's prices in a sweep the report loaded (`experiments.report.data.load_sweep`), by tier name."""
    return {name: info.prices for name, info in data.tiers.items()}


def fake_triton_utils() -> types.ModuleType:
    """Just what the Python-backend models use of `triton_python_backend_utils`, with Triton's semantics (inputs
    by name, tensors, responses with an optional error)."""
    pb = types.ModuleType("triton_python_backend_utils")

    class Tensor:
        def __init__(self, name: str, array: np.ndarray) -> None:
            self.name, self.array = name, array

        def as_numpy(self) -> np.ndarray:
            return self.array

    class InferenceResponse:
        def __init__(self, output_tensors: list, error: object = None) -> None:
            self.output_tensors, self.error = output_tensors, error

    pb.Tensor = Tensor
    pb.InferenceResponse = InferenceResponse
    pb.TritonError = RuntimeError
    pb.get_input_tensor_by_name = lambda request, name: Tensor(name, request[name])
    return pb
