"""Typed backend settings: every entry of conf/backends/ extends its class's schema, states only what differs,
and gets its family from its class; every bad setting is refused before anything starts, naming the key, the
value and the fix (a wrong key or type when the config is composed, a bad value by `validate()`)."""

from __future__ import annotations

import dataclasses

import pytest

from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.validation import validate
from serving.ray_serve.settings import RayServeTorchSettings
from serving.triton.settings import TritonSettings

ALL = "experiment.backends=[pytorch,pytorch_batched,triton_onnx,triton_onnx_dynbatch,triton_trt]"


def test_every_entry_is_typed_validates_and_has_its_family() -> None:
    names = list(load_config().backends)
    behind_haproxy = [name for name in names if "haproxy" in name]  # HAProxy replaces the proxy: a sweep of its own
    generative = [name for name in names if load_config().backends[name].serves("generative")]  # a sweep of tokens
    assert set(generative) == {"openai", "serve_transformers", "serve_transformers_unbatched",
                               "serve_transformers_when_free", "triton_stream",
                               "triton_stream_unbatched", "vllm", "vllm_prefix_cache", "vllm_no_chunked_prefill",
                               "vllm_fp8", "vllm_seqs64", "serve_llm", "serve_llm_prefix_cache"}
    image = [n for n in names if n not in behind_haproxy and n not in generative]
    cfg = load_config([f"experiment.backends=[{','.join(image)}]",
                       "cluster.serve_direct_ingress=true", "backends.endpoint.url=http://10.0.0.5:8000"])
    validate(cfg)
    validate(load_config(["experiment=generative", "model=tiny_llama", "backends.openai.url=http://10.0.0.5:8000"]))
    launched = load_config(["experiment=generative_launched", "model=tiny_llama",
                            f"experiment.backends=[{','.join(n for n in generative if n != 'openai')}]"])
    validate(launched)
    validate(load_config([f"experiment.backends=[{','.join(behind_haproxy)},pytorch_direct]"]))
    assert behind_haproxy == ["pytorch_haproxy", "pytorch_haproxy_batched"]
    families = {name: cfg.backends[name].family for name in cfg.backends}
    assert families == {"pytorch": "pytorch", "pytorch_fp16": "pytorch", "pytorch_compile": "pytorch",
                        "pytorch_batched": "pytorch", "pytorch_batched_20ms": "pytorch",
                        "pytorch_batched_when_free": "pytorch", "pytorch_direct": "pytorch",
                        "pytorch_direct_batched": "pytorch", "pytorch_bf16": "pytorch",
                        "pytorch_fp16_direct_batched": "pytorch", "pytorch_haproxy": "pytorch",
                        "pytorch_haproxy_batched": "pytorch",
                        "triton_onnx": "triton_onnx", "triton_onnx_dynbatch": "triton_onnx", "triton_trt": "triton_trt",
                        "triton_trt_fp16": "triton_trt", "triton_trt_dynbatch": "triton_trt",
                        "triton_onnx_int8": "triton_onnx", "triton_onnx_fp16": "triton_onnx",
                        "triton_trt_int8": "triton_trt", "fastapi": "fastapi",
                        "torchserve": "torchserve", "torchserve_batched": "torchserve", "endpoint": "endpoint",
                        "openai": "endpoint", "serve_transformers": "serve_transformers",
                        "serve_transformers_unbatched": "serve_transformers",
                        "serve_transformers_when_free": "serve_transformers", "triton_stream": "triton_stream",
                        "triton_stream_unbatched": "triton_stream", "vllm": "vllm", "vllm_prefix_cache": "vllm",
                        "vllm_no_chunked_prefill": "vllm", "vllm_fp8": "vllm", "vllm_seqs64": "vllm",
                        "serve_llm": "serve_llm", "serve_llm_prefix_cache": "serve_llm"}


def test_variants_differ_from_their_class_defaults_only_where_they_say() -> None:
    cfg = load_config()
    differs = {name: {k: v for k, v in dataclasses.asdict(cfg.backends[name]).items()
                      if v != dataclasses.asdict(type(cfg.backends[name])())[k]} for name in cfg.backends}
    assert differs["pytorch"] == differs["triton_onnx"] == differs["fastapi"] == differs["torchserve"] == {}
    assert differs["torchserve_batched"] == {"batch_size": 8, "max_batch_delay_ms": 2}
    assert differs["pytorch_batched_20ms"] == {"batching": True, "batch_wait_timeout_s": 0.02,
                                               "max_ongoing_requests": 64}
    assert differs["pytorch_batched_when_free"] == {"batching": True, "batcher": "when_free",
                                                    "batch_wait_timeout_s": 0.002, "max_ongoing_requests": 64}
    assert differs["triton_trt_fp16"] == {"accelerator": "tensorrt", "fp16": True, "start_timeout_s": 900.0}
    gpu_serve = {"direct_ingress": True, "batching": True, "batch_wait_timeout_s": 0.002, "max_ongoing_requests": 64,
                 "channels_last": True}
    assert differs["pytorch_direct_batched"] == gpu_serve
    assert differs["pytorch_fp16_direct_batched"] == {**gpu_serve, "half": True}


def test_the_family_and_every_setting_make_the_trial_identity() -> None:
    settings = load_config().backends["triton_trt"]
    identity = settings.identity()
    assert identity["backend"] == "triton_trt" and identity["_target_"] == "serving.triton.backend.TritonBackend"
    assert set(identity) == {"backend", *(f.name for f in dataclasses.fields(TritonSettings))}


def test_accelerator_rocm_is_refused_before_anything_starts() -> None:
    with pytest.raises(ConfigError) as info:
        validate(load_config(["backends.triton_onnx.accelerator=rocm"]))
    assert str(info.value) == ("backends.triton_onnx.accelerator='rocm' is not allowed: choose from "
                               "['cpu', 'cuda', 'tensorrt'] (docs/troubleshooting.md#bad-input)")


BAD_VALUES = [
    ("triton_onnx.accelerator=rocm", "accelerator='rocm'", "choose from ['cpu', 'cuda', 'tensorrt']"),
    ("triton_onnx_int8.fp16=true", "int8=True", "INT8 and FP16 are two precisions: set one of int8 and fp16"),
    ("triton_onnx.instance_count=0", "instance_count=0", "a positive integer"),
    ("triton_onnx.ort_threads=0", "ort_threads=0", "or null"),
    ("triton_onnx.preprocess_instance_count=-1", "preprocess_instance_count=-1", "or null (one per core)"),
    ("triton_trt.trt_opt_batch_size=64", "trt_opt_batch_size=64", "in 1..model.max_batch_size=32"),
    ("triton_onnx.trt_opt_batch_size=8", "trt_opt_batch_size=8", "only applies with accelerator: tensorrt"),
    ("triton_onnx.engine_cache_dir=/tmp/x", "engine_cache_dir='/tmp/x'", "only applies with accelerator: tensorrt"),
    ("triton_onnx.num_gpus=-0.5", "num_gpus=-0.5", ">= 0"),
    ("triton_onnx.start_timeout_s=0", "start_timeout_s=0.0", "seconds > 0"),
    ("triton_onnx_dynbatch.max_queue_delay_us=-5", "max_queue_delay_us=-5", "an integer >= 0"),
    ("triton_onnx_dynbatch.preferred_batch_sizes=[64]", "preferred_batch_sizes=[64]", "1..model.max_batch_size=32"),
    ("triton_onnx.max_queue_delay_us=100", "max_queue_delay_us=100", "only applies with dynamic_batching=true"),
    ("pytorch.num_replicas=0", "num_replicas=0", "a positive integer"),
    ("pytorch.max_ongoing_requests=0", "max_ongoing_requests=0", "a positive integer"),
    ("pytorch.router_max_backoff_s=0", "router_max_backoff_s=0.0", "seconds > 0, or null"),
    ("pytorch.torch_threads=0", "torch_threads=0", "or null"),
    ("pytorch.replica_num_cpus=-1", "replica_num_cpus=-1.0", ">= 0"),
    ("pytorch.replica_num_gpus=-1", "replica_num_gpus=-1.0", ">= 0"),
    ("pytorch_batched.max_batch_size=33", "max_batch_size=33", "in 1..model.max_batch_size=32"),
    ("pytorch_batched.batch_wait_timeout_s=-1", "batch_wait_timeout_s=-1.0", "seconds >= 0"),
    ("pytorch.max_batch_size=8", "max_batch_size=8", "only applies with batching=true"),
    ("pytorch.compile_mode=fastest", "compile_mode='fastest'", "choose from ['default', 'reduce-overhead'"),
    ("pytorch.compile_mode=max-autotune", "compile_mode='max-autotune'", "only applies with compile=true"),
    ("pytorch._target_=serving.nope.Backend", "_target_='serving.nope.Backend' cannot be imported", "name a Backend"),
]


@pytest.mark.parametrize("override,setting,fix", BAD_VALUES, ids=[row[0] for row in BAD_VALUES])
def test_every_bad_backend_value_is_refused_by_validate_naming_key_value_and_fix(override, setting, fix) -> None:
    name = override.split(".")[0]
    with pytest.raises(ConfigError) as info:
        validate(load_config([f"experiment.backends=[{name}]", f"backends.{override}"]))
    message = str(info.value)
    assert f"backends.{name}.{setting}" in message and fix in message, message


def test_a_triton_max_batch_size_setting_bounds_the_preferred_batches() -> None:
    with pytest.raises(ConfigError) as info:
        validate(load_config(["experiment.backends=[triton_onnx_dynbatch]", "experiment.batch_sizes=[1]",
                              "+backends.triton_onnx_dynbatch.max_batch_size=8",
                              "backends.triton_onnx_dynbatch.preferred_batch_sizes=[16]"]))
    assert ("backends.triton_onnx_dynbatch.preferred_batch_sizes=[16] is not allowed: each must be in "
            "1..max_batch_size=8") in str(info.value)


def test_direct_ingress_with_several_replicas_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"backends\.pytorch_direct\.num_replicas=2 is not allowed: direct_ingress"):
        validate(load_config(["experiment.backends=[pytorch_direct]", "cluster.serve_direct_ingress=true",
                              "backends.pytorch_direct.num_replicas=2"]))


BAD_KEYS_AND_TYPES = [
    ("backends.triton_onnx.instance_cnt=2", "backends.triton_onnx.instance_cnt=2 is not allowed: not a setting of "
                                            "TritonSettings"),
    ("+backends.triton_onnx.dynamic_batcher=true", "backends.triton_onnx.dynamic_batcher=True is not allowed: not a "
                                                   "setting of TritonSettings"),
    ("backends.pytorch.backend=torchserve", "backends.pytorch.backend='torchserve' is not allowed: not a setting of "
                                            "RayServeTorchSettings"),
    ("backends.pytorch.half=maybe", "backends.pytorch.half='maybe' is not allowed: Value 'maybe' is not a valid bool"),
    ("backends.triton_onnx.instance_count=two", "backends.triton_onnx.instance_count='two' is not allowed: Value"),
    ("backends.triton_onnx.instance_count=1.5", "could not be converted to Integer; give a whole number, e.g. 3"),
    ("+backends.mine={accelerator: cuda}", "backends.mine={'accelerator': 'cuda'} is not allowed: an entry extends "
                                           "its class's settings: add it with +backend@backends.mine=<triton | "
                                           "triton_stream | ray_serve | fastapi | torchserve | "
                                           "endpoint | vllm | serve_llm | serve_transformers>"),
]


@pytest.mark.parametrize(("override", "message"), [
    ("+experiment.windw_s=2", "experiment.windw_s=2 is not allowed: not a setting of ExperimentConfig"),
    ("+experiment.stability.min_request=20", "experiment.stability.min_request=20 is not allowed: not a setting of "
                                             "StabilityConfig"),
    ("+gpu.price=1.0", "gpu.price=1.0 is not allowed: not a setting of GpuTierConfig"),
    ("experiment.window_s=fast", "could not be converted to Float; give a number, e.g. 0.5"),
    ("report=maybe", "is not a valid bool (type str); give true or false"),
])
def test_a_key_added_past_the_schema_or_a_value_of_another_type_is_refused_naming_the_fix(override: str,
                                                                                            message: str) -> None:
    """`+key=value` adds a key Hydra does not check against the schema: a typo would be carried along, read by
    nothing."""
    with pytest.raises(ConfigError) as info:
        load_config([override])
    assert message in str(info.value)


@pytest.mark.parametrize("override,message", BAD_KEYS_AND_TYPES, ids=[row[0] for row in BAD_KEYS_AND_TYPES])
def test_a_wrong_key_or_type_is_refused_when_composed(override: str, message: str) -> None:
    name = override.lstrip("+").split(".")[1].split("=")[0]
    with pytest.raises(ConfigError) as info:
        validate(load_config([override, f"experiment.backends=[{name}]"]))
    assert message in str(info.value)


def test_a_variant_added_on_the_command_line_is_typed() -> None:
    cfg = load_config(["+backend@backends.triton_onnx_q500=triton", "backends.triton_onnx_q500.dynamic_batching=true",
                       "backends.triton_onnx_q500.max_queue_delay_us=500", "experiment.backends=[triton_onnx_q500]"])
    validate(cfg)
    settings = cfg.backends["triton_onnx_q500"]
    assert settings == TritonSettings(dynamic_batching=True, max_queue_delay_us=500)
    assert settings.family == "triton_onnx"


def test_settings_classes_check_without_a_config() -> None:
    model = load_config().model
    assert TritonSettings().check("t", model, {}) == []
    assert RayServeTorchSettings().check("p", model, {}) == []
    assert len(RayServeTorchSettings(num_replicas=0, max_batch_size=8).check("p", model, {})) == 2


def test_the_batched_pair_states_its_batching_in_the_same_terms() -> None:
    """What every trial logs as server_batching, server_max_batch_size, server_batch_wait_ms, server_instances: the
    shipped batched entries of Triton and Ray Serve match (model.max_batch_size images, 2 ms)."""
    from experiments.run.server_group import build_backend
    from tests.helpers import CPU_NODE

    cfg = load_config()
    params = {name: build_backend(cfg, name, CPU_NODE, {}).batching_params()
              for name in ("pytorch_batched", "triton_onnx_dynbatch", "pytorch", "triton_onnx", "torchserve_batched")}
    for batched in ("pytorch_batched", "triton_onnx_dynbatch"):
        assert params[batched] == {"server_batching": True, "server_instances": 1, "server_max_batch_size": 32,
                                   "server_batch_wait_ms": 2.0, "server_preferred_batch_sizes": "",
                                   "server_max_queue_size": 0}, batched
    assert not params["pytorch"]["server_batching"] and not params["triton_onnx"]["server_batching"]
    assert params["torchserve_batched"]["server_max_batch_size"] == 8, "TorchServe's batch counts requests"


@pytest.mark.parametrize("entry", ["pytorch", "fastapi", "torchserve"])
def test_every_pytorch_server_refuses_an_onnx_model_saying_why(entry: str) -> None:
    """An ONNX file is Triton's alone: each server that runs the model in PyTorch skips it with the reason, before
    any server starts (not a failed start)."""
    from experiments.run.server_group import build_backend
    from serving.node import NodeInfo

    cfg = load_config()
    onnx = dataclasses.replace(cfg.model, source="onnx", path="model.onnx")
    node = NodeInfo("cpu-box", "127.0.0.1", "n0", "Some CPU", 2)
    backend = build_backend(cfg, entry, node, {}, model=onnx)
    assert "is an ONNX file (model.source=onnx)" in backend.unsupported_reason("http", "tensor")
