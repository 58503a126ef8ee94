"""The vLLM and Ray Serve LLM backends without a GPU: settings refusals, the `vllm serve` line and Serve LLM config
rendered from settings, random weights loaded as dummies, deploy files, the metrics reader, and the skip reasons on
this machine's own node."""

from __future__ import annotations

import shlex
from dataclasses import replace

import pytest
import yaml

from serving.backend import BackendContext
from serving.node import NodeInfo
from serving.serve_llm import config as llm
from serving.serve_llm.backend import ServeLlmBackend
from serving.serve_llm.settings import ServeLlmSettings
from serving.vllm.backend import VllmBackend
from serving.vllm.command import serve_command
from serving.vllm.settings import VllmSettings
from serving.vllm_facts import VllmFacts
from serving.vllm_metrics import breakdown, counters
from serving.workloads.generative.model import LanguageModelConfig

RANDOM = LanguageModelConfig(name="llama3-8b-random", context_tokens=8192, seed=3,
                             architecture={"model_type": "llama", "hidden_size": 64})
REAL = LanguageModelConfig(name="my-llama", weights="/models/llama", context_tokens=8192)
GPU_NODE = NodeInfo("gpu-box", "10.0.0.2", "n1", "Some CPU", 16, gpu_names=("NVIDIA H100 80GB HBM3",),
                    ray_gpus=1.0).with_facts(VllmFacts("0.11.0", "/venv/bin/vllm"))


def problems(settings, model=RANDOM) -> list[str]:
    return settings.check("entry", model, {})


@pytest.mark.parametrize(("changes", "key"), [
    ({"max_num_seqs": 0}, "max_num_seqs"), ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
    ({"dtype": "fp16"}, "dtype"), ({"quantization": "int3"}, "quantization"),
    ({"quantization": "awq"}, "quantization"), ({"tensor_parallel_size": 0}, "tensor_parallel_size"),
    ({"max_model_len": 100_000}, "max_model_len"),
    ({"max_num_seqs": 64, "max_num_batched_tokens": 32}, "max_num_batched_tokens"),
    ({"enable_chunked_prefill": False, "max_num_batched_tokens": 2048}, "max_num_batched_tokens"),
    ({"num_gpus": 0.5}, "gpu_memory_utilization"), ({"num_gpus": 1.0, "tensor_parallel_size": 2}, "num_gpus"),
])
def test_a_bad_vllm_setting_is_refused_naming_key_value_and_fix(changes: dict, key: str) -> None:
    settings = replace(VllmSettings(), **changes)
    found = problems(settings)
    assert len(found) == 1 and found[0].startswith(f"backends.entry.{key}={getattr(settings, key)!r} is not allowed: ")


def test_good_vllm_settings_and_a_checkpoint_quantization_with_real_weights_pass() -> None:
    assert problems(VllmSettings()) == []
    assert problems(replace(VllmSettings(), num_gpus=0.5, gpu_memory_utilization=0.45)) == []
    assert problems(replace(VllmSettings(), quantization="awq"), REAL) == []
    assert "names nothing it can load" in problems(VllmSettings(), LanguageModelConfig(name="x"))[0]


@pytest.mark.parametrize(("changes", "key"), [
    ({"num_replicas": 0}, "num_replicas"), ({"max_replicas": 2}, "max_replicas"),
    ({"autoscaling": True, "min_replicas": 3, "max_replicas": 2}, "min_replicas"),
    ({"autoscaling": True, "num_replicas": 2, "max_replicas": 2}, "num_replicas"),
    ({"num_gpus": 0}, "num_gpus"), ({"num_gpus": 0.5, "tensor_parallel_size": 2}, "num_gpus"),
])
def test_a_bad_serve_llm_setting_is_refused(changes: dict, key: str) -> None:
    found = problems(replace(ServeLlmSettings(), **changes))
    assert len(found) == 1 and found[0].startswith(f"backends.entry.{key}="), found


def test_the_vllm_command_line_carries_every_setting_and_dummy_weights_for_an_architecture() -> None:
    settings = replace(VllmSettings(), max_num_seqs=64, enable_prefix_caching=True, enable_chunked_prefill=False,
                       quantization="fp8", dtype="bfloat16", max_num_batched_tokens=8192)
    line = serve_command("vllm", "/f", RANDOM.name, "127.0.0.1", 8001, settings.engine_args(RANDOM, True))
    text = shlex.join(line)
    assert text.startswith("vllm serve /f --served-model-name llama3-8b-random --host 127.0.0.1 --port 8001 ")
    for flag in ("--max-num-seqs 64", "--enable-prefix-caching", "--no-enable-chunked-prefill", "--quantization fp8",
                 "--dtype bfloat16", "--max-num-batched-tokens 8192", "--gpu-memory-utilization 0.9",
                 "--max-model-len 8192", "--load-format dummy", "--seed 3"):
        assert flag in text
    real = shlex.join(serve_command("vllm", "/f", REAL.name, "h", 1, VllmSettings().engine_args(REAL, False)))
    assert "--load-format" not in real and "--dtype" not in real and "--tensor-parallel-size" not in real


def context(model=RANDOM, node=GPU_NODE) -> BackendContext:
    return BackendContext(name="entry", model=model, node=node, tier="h100_sxm",
                          ray_options={"resources": {"tier:h100_sxm": 0.001}})


def test_the_vllm_deploy_script_is_the_measured_line_and_says_the_weights_were_random() -> None:
    backend = VllmBackend(context(), replace(VllmSettings(), enable_prefix_caching=True))
    script = backend.deploy_files({})["vllm-serve.sh"]
    assert 'exec vllm serve "$MODEL" --served-model-name llama3-8b-random' in script
    assert "--load-format dummy" in script and "random weights" in script and "--enable-prefix-caching" in script
    assert "random" not in VllmBackend(context(REAL), VllmSettings()).deploy_files({})["vllm-serve.sh"]
    assert backend.actor_options() == {"num_cpus": 1, "resources": {"tier:h100_sxm": 0.001}, "num_gpus": 1.0}


def test_the_serve_llm_config_is_built_from_the_settings_and_validated_by_ray() -> None:
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig  # (ray.serve.llm itself needs vLLM)

    settings = replace(ServeLlmSettings(), autoscaling=True, min_replicas=1, max_replicas=2,
                       target_ongoing_requests=16, max_num_seqs=32, tensor_parallel_size=2)
    backend = ServeLlmBackend(context(), settings)
    config = backend.llm_config("/f")
    assert config["engine_kwargs"] == {"max_num_seqs": 32, "gpu_memory_utilization": 0.9, "tensor_parallel_size": 2,
                                       "max_model_len": 8192, "load_format": "dummy", "seed": 3}
    assert config["deployment_config"]["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 2,
                                                                 "initial_replicas": 1, "target_ongoing_requests": 16}
    assert config["deployment_config"]["ray_actor_options"] == {"resources": {"tier:h100_sxm": 0.001}}
    assert config["placement_group_config"]["bundles"] == [{"GPU": 1.0}, {"GPU": 1.0}]
    parsed = LLMConfig.model_validate(config)
    assert parsed.model_id == "llama3-8b-random" and parsed.engine_kwargs["load_format"] == "dummy"
    assert settings.gpu_ask() == ("num_gpus", 4.0)
    document = yaml.safe_load(backend.deploy_files({})[llm.DEPLOY_FILE])
    app = document["applications"][0]
    assert app["import_path"] == "ray.serve.llm:build_openai_app" and app["route_prefix"] == backend.route
    deployed = app["args"]["llm_configs"][0]
    assert "ray_actor_options" not in deployed["deployment_config"]  # no tier resources outside tierbench
    assert "graceful_shutdown_timeout_s" not in deployed["deployment_config"]
    LLMConfig.model_validate(deployed)


METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 32.0
vllm:num_requests_waiting{engine="0",model_name="m"} 5.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.97
vllm:num_preemptions_total{engine="0",model_name="m"} 7.0
vllm:prompt_tokens_total{engine="0",model_name="m"} 4096.0
vllm:generation_tokens_total{engine="0",model_name="m"} 2048.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 4096.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 1024.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 20.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 4.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 32.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 40.96
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 2016.0
vllm:request_queue_time_seconds_sum{engine="0",model_name="m"} 1.6
vllm:request_queue_time_seconds_count{engine="0",model_name="m"} 32.0
vllm:num_requests_running{engine="0",model_name="other"} 99.0
"""


def test_the_metrics_reader_tells_a_kv_cache_bound_and_queue_bound_window() -> None:
    after = counters(METRICS, "m")
    assert after["requests_running"] == 32 and after["kv_cache_usage"] == 0.97 and after["tpot_count"] == 2016
    idle = counters(METRICS.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), "m")
    assert idle["kv_cache_usage"] == 0.97  # the older name
    before = {"preemptions": 2.0, "prompt_tokens": 0.0, "generation_tokens": 0.0, "ttft_sum": 0.0, "ttft_count": 0.0,
              "tpot_sum": 0.0, "tpot_count": 0.0, "queue_sum": 0.0, "queue_count": 0.0}
    figures = breakdown(before, after)
    assert figures["server_preemptions"] == 5 and figures["server_generation_tokens"] == 2048
    assert figures["server_ttft_mean_ms"] == pytest.approx(125.0)
    assert figures["server_tpot_mean_ms"] == pytest.approx(20.317, rel=1e-3)
    assert figures["server_queue_mean_ms"] == pytest.approx(50.0)
    assert figures["server_kv_cache_usage_pct"] == pytest.approx(97.0)
    assert figures["server_prefix_cache_hit_pct"] == pytest.approx(25.0)
    assert figures["server_kv_cache_bound"] == 1.0 and figures["server_queue_bound"] == 1.0
    calm = breakdown(after, {**after, "kv_cache_usage": 0.2, "requests_waiting": 0.0})
    assert calm["server_kv_cache_bound"] == 0.0 and calm["server_queue_bound"] == 0.0


def test_both_are_skipped_with_the_reason_on_this_machine() -> None:
    """This machine's own node, as a sweep probes it: no vLLM installed (and no GPU), so both skip, saying why."""
    from serving.probe import describe_node

    node = describe_node()
    facts = node.facts(VllmFacts)
    if facts.problem is None and node.has_gpu:
        pytest.skip("vLLM and a GPU are here: nothing to skip")
    for backend in (VllmBackend(context(node=node), VllmSettings()),
                    ServeLlmBackend(context(node=node), ServeLlmSettings())):
        reason = backend.unsupported_reason("http", "chat_stream")
        assert reason and node.hostname in reason and ("not installed" in reason or "NVIDIA GPU" in reason)
    assert VllmBackend(context(), VllmSettings()).unsupported_reason("http", "chat_stream") is None
    two = VllmBackend(context(), replace(VllmSettings(), tensor_parallel_size=2))
    assert "tensor_parallel_size=2" in two.unsupported_reason("http", "chat_stream")
    assert "HTTP" in VllmBackend(context(), VllmSettings()).unsupported_reason("grpc", "chat_stream")


@pytest.mark.gpu
def test_vllm_facts_on_a_gpu_node() -> None:
    from serving.node import nvml_gpus

    if not nvml_gpus().names:
        pytest.skip("no NVIDIA GPU")
    facts = VllmFacts.probe()
    if facts.problem:
        pytest.skip(facts.problem)
    assert facts.version and facts.command


def test_the_token_ceiling_times_the_engine_both_vllm_backends_run_with_their_settings() -> None:
    engine = replace(VllmSettings(), max_num_seqs=64, enable_prefix_caching=True).token_engine(RANDOM)
    assert (engine.kind, engine.device, engine.max_batch) == ("vllm", "cuda", 64)
    assert dict(engine.settings) == {"max_num_seqs": 64, "enable_prefix_caching": True,
                                     "gpu_memory_utilization": 0.9, "max_model_len": 8192}
    assert "load_format" not in engine.key, "the timing loads random weights itself"
    assert ServeLlmSettings().token_engine(RANDOM).max_batch == 256  # vLLM's own default
