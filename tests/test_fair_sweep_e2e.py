"""One real, lean fair-comparison sweep on this machine: every server (Triton and Ray Serve with and without
server-side batching, the FastAPI service, TorchServe), JPEG and tensor input over HTTP and gRPC (and shared memory
for Triton), base64 JPEGs where a server takes JSON, every group checked against the PyTorch reference first, and the
report's tables of the studies from it. And a deliberately wrong model (other weights) caught by that check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import experiments.run.server_group as server_group
from experiments.config.compose import load_config
from experiments.run.sweep import run_sweep
from serving.workloads.image.corpus import synthetic_corpus
from tests import helpers
from tests.helpers import TRITON_ABORT_RETRIES, store_overrides, store_uri
from tests.processes import orphan_regions, owned_environment

pytestmark = pytest.mark.slow

# Batch 1 and a 1 s window: on a 2-core machine shared with other test runs a PyTorch request of a JPEG takes tens of
# ms, and a window no request was sent in is a failed trial.
LEAN = ["experiment.batch_sizes=[1]", "experiment.concurrency=[2]", "experiment.window_s=1",
        "experiment.stability.windows=1",
        "experiment.warmup_s=0.3", "experiment.warmup_requests=2", "crosscheck.images=4", TRITON_ABORT_RETRIES]
VARIANTS = ("pytorch", "triton_onnx", "triton_onnx_dynbatch")  # Serve's batcher: tests/test_serve_batching.py
BATCHING_PARAMS = {"server_batching", "server_max_batch_size", "server_batch_wait_ms", "server_instances",
                   "server_preferred_batch_sizes"}
SERVERS = {*VARIANTS, "fastapi", "torchserve"}


@pytest.fixture(scope="module")
def fair_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list]:
    """The sweep's store and its runs."""
    tmp = tmp_path_factory.mktemp("fair")
    # The tiny model (ResNet's input and output, ~1 ms a pass): what is checked here is the comparison's mechanics
    # (formats, transports, payloads, the cross-check), and ResNet-18 on every server at once starved a 2-core VM's
    # Triton Python-backend stubs beside the other test worker (its start aborted twice: lock_exception).
    cfg = load_config(["experiment=fair_comparison", "model=tiny", *store_overrides(tmp, "fair-e2e", premigrated=True),
                       *LEAN,
                       f"experiment.backends=[{','.join(VARIANTS)},fastapi,torchserve]",
                       "experiment.protocols=[http,grpc,http_shm,grpc_shm]",
                       "experiment.input_formats=[jpeg,tensor,jpeg_base64]"])
    regions_before = {p.name for p in Path("/dev/shm").glob("tierbench_*")}
    with owned_environment():  # fails if the sweep left a process running
        code = run_sweep(cfg)
    assert not orphan_regions(regions_before), "the sweep left shared-memory regions behind"
    runs = helpers.runs(store_uri(tmp), sweep_id="fair-e2e")
    failed = [(r.info.run_name, r.data.tags.get("reason")) for r in runs if r.data.tags["status"] == "failed"]
    assert code == 0 and not failed, failed
    return store_uri(tmp), runs


@pytest.fixture(scope="module")
def fair_runs(fair_sweep: tuple[str, list]) -> list:
    return fair_sweep[1]


def _ok(runs: list) -> list:
    """The measured trials, some of every server's: a test looping over them must not pass on a sweep that measured
    none (run alone, nothing else here would say so)."""
    ok = [r for r in runs if r.data.tags["status"] == "ok"]
    assert {r.data.params["backend_variant"] for r in ok} == SERVERS, "the sweep measured no trial of some server"
    return ok


def test_every_backend_takes_jpeg_and_tensor_over_http_and_grpc(fair_runs) -> None:
    ok = {(r.data.params["backend_variant"], r.data.params["protocol"], r.data.params["input_format"])
          for r in fair_runs if r.data.tags["status"] == "ok"}
    for variant in (*VARIANTS, "torchserve"):
        assert {(variant, p, f) for p in ("http", "grpc") for f in ("jpeg", "tensor")} <= ok, variant
    assert {("fastapi", "http", f) for f in ("jpeg", "tensor")} <= ok, "FastAPI speaks HTTP only"
    # Base64 JPEGs in JSON: over HTTP, on every server with a JSON API.
    assert {(v, "http", "jpeg_base64") for v in ("pytorch", "fastapi", "torchserve")} <= ok
    # Shared memory: Triton's, on both wire protocols and both inputs; the others' trials say why not.
    assert {(v, p, f) for v in VARIANTS[1:] for p in ("http_shm", "grpc_shm") for f in ("jpeg", "tensor")} <= ok
    skipped = [r for r in fair_runs if r.data.tags["status"] == "skipped"]
    reasons = {(r.data.params["backend"], r.data.params["protocol"], r.data.params["input_format"]):
               r.data.tags["reason"] for r in skipped}
    shm = [why for (_, protocol, fmt), why in reasons.items() if protocol.endswith("shm") and fmt != "jpeg_base64"]
    assert shm and all("shared-memory" in why for why in shm)
    assert "Triton's APIs take tensors" in reasons[("triton_onnx", "http", "jpeg_base64")]
    assert "speaks HTTP only" in reasons[("fastapi", "grpc", "tensor")]
    assert "map<string, bytes>" in reasons[("torchserve", "grpc", "jpeg_base64")]
    assert "over gRPC the deployment takes the JPEG files as bytes" in reasons[("pytorch", "grpc", "jpeg_base64")]


def test_every_measurement_is_the_compiled_engines_shared_memory_too(fair_runs) -> None:
    runs = _ok(fair_runs)
    assert any(run.data.params["protocol"].endswith("shm") for run in runs)
    for run in runs:
        assert run.data.params["load_engine"] == "compiled", run.info.run_name


def test_the_report_has_the_studies_tables(fair_sweep, tmp_path: Path) -> None:
    from experiments.report.build import ReportOptions, build_report
    from experiments.report.data import load_sweep

    data = load_sweep(fair_sweep[0], "tierbench", "fair-e2e")
    text = build_report(data, tmp_path, ReportOptions()).document.to_markdown()
    studies = text.split("## The studies, reproduced")[1].split("\n## ")[0]
    assert "| PyTorch FastAPI HTTP (base64 JPEG) |" in studies and "| ONNX gRPC/HTTP |" in studies
    assert "Triton TRT HTTP: not in this sweep" in studies
    assert "| REST |" in studies and "| gRPC | skipped | skipped |" in studies
    assert "| FastAPI | 1 |" in studies and "| TorchServe REST | 1 |" in studies


def test_same_images_same_payload_on_every_backend_and_protocol(fair_runs) -> None:
    """Every trial sent the synthetic corpus's images in turn: its payload statistics are the corpus's own (all 512
    files fit the pool at one image a request; the tensors, 602,112 bytes each, stop at the pool's 64 MiB)."""
    corpus = synthetic_corpus()
    files = np.array([len(image) for image in corpus.images], dtype=np.float64)
    expected = {"jpeg": (files.mean(), np.median(files), len(corpus)),
                "jpeg_base64": ((4 * np.ceil(files / 3)).mean(), np.median(4 * np.ceil(files / 3)), len(corpus)),
                "tensor": (602_112.0, 602_112.0, 64 * 2**20 // 602_112)}
    ok = _ok(fair_runs)
    assert {run.data.params["input_format"] for run in ok} == expected.keys()
    for run in ok:
        m, (mean, median, images) = run.data.metrics, expected[run.data.params["input_format"]]
        assert m["payload_bytes"] == pytest.approx(mean) and m["payload_image_bytes_p50"] == pytest.approx(median)
        assert m["distinct_images"] == m["distinct_requests"] == images, run.info.run_name


def test_every_measured_trial_was_crosschecked_against_the_reference(fair_runs) -> None:
    for run in _ok(fair_runs):
        m = run.data.metrics
        assert m["crosscheck_top1_agreement"] == 1.0, run.info.run_name
        assert m["crosscheck_max_abs_diff"] < 1e-3, run.info.run_name  # CPU fp32: ONNX Runtime ~1e-5 off


def test_server_batching_settings_are_params_comparable_across_servers(fair_runs) -> None:
    by_variant = {r.data.params["backend_variant"]: r.data.params for r in _ok(fair_runs)}
    for variant, params in by_variant.items():
        assert BATCHING_PARAMS <= params.keys(), variant
    unbatched = {by_variant[v]["server_batching"] for v in ("pytorch", "triton_onnx", "fastapi", "torchserve")}
    assert unbatched == {"False"}
    params = by_variant["triton_onnx_dynbatch"]
    assert params["server_batching"] == "True"
    assert (params["server_max_batch_size"], params["server_batch_wait_ms"]) == ("32", "2.0")
    assert params["server_instances"] == "1"


def test_a_server_with_other_weights_fails_the_crosscheck_unmeasured(tmp_path: Path, monkeypatch) -> None:
    """The server gets model.seed=1, the reference keeps seed 0: the group must fail with the figures."""
    cfg = load_config([*store_overrides(tmp_path, "wrong-model", premigrated=True), *LEAN,
                       "experiment.backends=[fastapi]", "experiment.protocols=[http]",
                       "experiment.input_formats=[tensor,jpeg]"])
    wrong = load_config(["model.seed=1", "experiment.backends=[fastapi]"])
    real_build = server_group.build_backend
    monkeypatch.setattr(server_group, "build_backend",
                        lambda cfg_, name, node, options, emulated=False, model=None:
                        real_build(wrong, name, node, options, emulated))  # the server reads `wrong.model`
    with owned_environment():
        assert run_sweep(cfg) == 1
    runs = helpers.runs(store_uri(tmp_path), sweep_id="wrong-model")
    assert len(runs) == 2
    for run in runs:
        assert run.data.tags["status"] == "failed"
        reason = run.data.tags["reason"]
        assert reason.startswith("cross-check failed") and "top-1 agreement 0.000" in reason, reason
        assert run.data.metrics["crosscheck_top1_agreement"] == 0.0
        assert run.data.metrics["crosscheck_max_abs_diff"] > 1.0
        assert "throughput_img_s" not in run.data.metrics, "a group that failed the cross-check is not measured"
