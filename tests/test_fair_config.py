"""The fair-comparison axes in the config: batching variants in pairs, protocols, settings checked up front."""

from __future__ import annotations

import pytest

from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.validation import validate
from experiments.plan import plan_trials
from serving.protocols import PROTOCOLS, parse_protocol


def test_every_backend_has_a_server_batching_twin_with_matched_settings() -> None:
    cfg = load_config()
    backends = cfg.backends
    pairs = {"pytorch": "pytorch_batched", "triton_onnx": "triton_onnx_dynbatch", "triton_trt": "triton_trt_dynbatch"}
    for plain, batched in pairs.items():
        assert cfg.backends[plain].family == cfg.backends[batched].family == plain
    assert not backends["pytorch"].batching and backends["pytorch_batched"].batching
    assert not backends["triton_onnx"].dynamic_batching and backends["triton_onnx_dynbatch"].dynamic_batching
    # Same wait on both servers (Serve in seconds, Triton in microseconds), same cap (the model's max batch).
    assert backends["pytorch_batched"].batch_wait_timeout_s * 1e6 == backends["triton_onnx_dynbatch"].max_queue_delay_us
    assert backends["pytorch_batched"].max_batch_size is None


def test_fair_comparison_crosses_every_axis() -> None:
    cfg = load_config(["experiment=fair_comparison"])
    validate(cfg)
    exp = cfg.experiment
    assert set(exp.input_formats) == {"jpeg", "tensor"}
    assert {"http", "grpc", "http_shm", "grpc_shm"} <= set(exp.protocols)
    assert {"pytorch", "pytorch_batched", "triton_onnx", "triton_onnx_dynbatch"} <= set(exp.backends)
    trials = [t for g in plan_trials(cfg) for t in g.trials]
    assert {(t.backend, t.protocol, t.input_format) for t in trials} >= {
        (b, p, f) for b in ("pytorch", "triton_onnx") for p in ("http", "grpc") for f in ("jpeg", "tensor")}


def test_protocol_names_parse_into_wire_protocol_and_shared_memory() -> None:
    assert [parse_protocol(p) for p in PROTOCOLS] == [
        ("http", "none"), ("grpc", "none"), ("http", "system"), ("grpc", "system"), ("http", "cuda"),
        ("grpc", "cuda")]
    with pytest.raises(ValueError, match="http_tcp"):
        parse_protocol("http_tcp")


BAD_CROSSCHECK = [
    (["crosscheck.images=0"], "crosscheck.images=0"),
    (["crosscheck.tolerances.fp16.min_top1_agreement=1.5"], "crosscheck.tolerances.fp16.min_top1_agreement=1.5"),
    (["crosscheck.tolerances.fp32.max_abs_diff=-1"], "crosscheck.tolerances.fp32.max_abs_diff=-1"),
]


@pytest.mark.parametrize("overrides,fragment", BAD_CROSSCHECK)
def test_bad_crosscheck_settings_are_refused_before_anything_starts(overrides, fragment) -> None:
    with pytest.raises(ConfigError) as info:
        validate(load_config(overrides))
    assert fragment in str(info.value)


def test_shared_memory_protocols_validate() -> None:
    validate(load_config(["experiment.protocols=[http_shm,grpc_cuda_shm]"]))
