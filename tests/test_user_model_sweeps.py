"""Real sweeps of models the user brings, one per source, generated on the fly: Ray Serve and Triton serve what the
file holds (the cross-check against the in-process reference passes on every path, JPEG included, with the model's
own preprocessing), and on an emulated multi-node cluster the tier node's servers load the copy Ray delivered: the
driver's file is moved away once shipped and the sweep still runs."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import pytest

from serving.paths import cache_root
from tests import user_models
from tests.helpers import runs, store_overrides, store_uri
from tests.processes import TOKEN_VARIABLE as MARK_VAR
from tests.processes import wait_until_gone as wait_for_no_marked_processes
from tests.sweep_process import SweepProcess, run_sweep_command

pytestmark = pytest.mark.slow

SMALL = ["experiment.backends=[pytorch,triton_onnx]", "experiment.protocols=[http]",
         "experiment.input_formats=[tensor,jpeg]", "experiment.batch_sizes=[1]", "experiment.concurrency=[1]",
         "experiment.window_s=0.5", "experiment.stability.windows=1", "experiment.stability.max_windows=1",
         "experiment.warmup_s=0.3", "experiment.warmup_requests=2", "quiet=true"]


def _check_served_the_file(store: str, path: Path, source: str) -> None:
    """Every trial ran (PyTorch skipped, saying why, for an ONNX file), matched the reference, and its server loaded a
    staged copy of the file, not the driver's path."""
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    trials = runs(store)
    assert len(trials) == 4
    for run in trials:
        params, metrics = run.data.params, run.data.metrics
        if source == "onnx" and params["backend"] == "pytorch":
            assert run.data.tags["status"] == "skipped" and "is an ONNX file" in run.data.tags["reason"]
            continue
        assert run.data.tags["status"] == "ok", run.data.tags.get("reason")
        assert metrics["crosscheck_top1_agreement"] == 1.0 and metrics["crosscheck_max_abs_diff"] < 1e-4
        assert params["model_source"] == source and params["model_file_sha256"] == sha
        loaded = Path(params["server_model_file"])
        assert loaded.parent == cache_root() / "models" / sha[:32] and loaded != path


# One sweep per way a file reaches the servers, not per source: every source's load and export are checked fast
# (tests/test_user_models.py), and the staged file is the same path for all of them. torch_export here; TorchScript
# in the dense-head sweep below; an ONNX file on an emulated tier node after it (state_dict and timm weights go the
# same way as torch_export's program).
@pytest.mark.parametrize("name", ["torch_export"])
def test_a_sweep_serves_each_pytorch_source_on_both_stacks(tmp_path: Path, name: str) -> None:
    path, overrides = user_models.FORMATS[name](tmp_path)
    proc, _ = run_sweep_command([*store_overrides(tmp_path, premigrated=True), *overrides, *user_models.PREPROCESS,
                                 *SMALL], timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-4000:]
    _check_served_the_file(store_uri(tmp_path), path, "torch_export" if name == "torch_export" else
                           "factory" if name in ("state_dict", "timm") else name)


def test_a_model_that_is_not_a_classifier_is_served_and_cross_checked_by_max_abs_diff(tmp_path: Path) -> None:
    """A detector-like TorchScript model (per image [5, 16], model.output_shape) on both stacks, tensor and JPEG: every
    trial ran, its cross-check gives a max abs diff and no top-1 agreement, and the report says so."""
    from experiments.report.data import load_sweep
    from experiments.report.method_section import crosscheck_lines

    _, overrides = user_models.dense_head_files(tmp_path)["torchscript"]
    proc, _ = run_sweep_command([*store_overrides(tmp_path, premigrated=True), *overrides, user_models.OUTPUT_SHAPE,
                                 *user_models.PREPROCESS, *SMALL], timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-4000:]
    trials = runs(store_uri(tmp_path))
    assert len(trials) == 4
    for run in trials:
        params, metrics = run.data.params, run.data.metrics
        assert run.data.tags["status"] == "ok", run.data.tags.get("reason")
        assert "crosscheck_top1_agreement" not in metrics and metrics["crosscheck_max_abs_diff"] < 1e-4
        assert params["model_output_shape"] == str(user_models.DENSE_OUTPUT)
    (line,) = crosscheck_lines(load_sweep(store_uri(tmp_path), "tierbench", "latest").ok)
    assert line.startswith("Cross-check of user_dense_head: its output is not a classifier's"), line


def test_an_onnx_file_ships_to_the_tier_node_and_is_served_from_its_copy(tmp_path: Path) -> None:
    """Emulated cluster: the a100 tier is another Ray node. Once the file is shipped the driver's copy is moved away;
    Triton on the tier node serves the staged copy, and the reference runs from the driver's own copy."""
    path, overrides = user_models.onnx_file(tmp_path)
    marker = uuid.uuid4().hex
    sweep = SweepProcess(tmp_path, "cluster=emulated", "gpu=a100", "cluster.nodes=[{tier: a100, num_cpus: 1}]",
                         *overrides, *user_models.PREPROCESS, *SMALL, env={MARK_VAR: marker})
    try:
        sweep.wait_for(r"shipped .*through Ray's object store", timeout_s=180)
        moved = path.rename(path.with_suffix(".moved"))
        code = sweep.wait(timeout_s=400)
    finally:
        sweep.kill()
    assert code == 0, sweep.output[-5000:]
    assert not path.exists()
    assert "staged on node" in sweep.output
    moved.rename(path)  # for the check's own hash
    _check_served_the_file(sweep.store, path, "onnx")
    (cluster_file,) = (tmp_path / "runs").glob("*/a100/cluster.json")
    a100_nodes = {row["node_id"] for row in json.loads(cluster_file.read_text()) if "a100" in row["tiers"]}
    served = {run.data.params["server_node_id"] for run in runs(sweep.store) if "server_node_id" in run.data.params}
    assert served and served <= a100_nodes  # the emulated tier node, not the driver's
    assert wait_for_no_marked_processes(marker) == set()
