"""The streaming Triton (`triton_stream`): its settings refused with key, value and fix before anything starts; its
model repository (decoupled, the generate extension's names); what a node without its parts is told; the generate
client's reading of server-sent events against raw loopback servers; and, slow, the real bundled `tritonserver` on the
tiny Llama (random weights from its architecture) streaming token by token over HTTP (generate_stream) and gRPC
(ModelStreamInfer), nothing left running after it."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.validation import validate
from serving.backend import BackendContext
from serving.clients.outcomes import Outcome, RequestError
from serving.pytorch.facts import TorchFacts
from serving.triton_stream.backend import TritonStreamBackend, triton_model_name
from serving.triton_stream.client import TritonGenerateClient, TritonGenerateSpec, generate_body
from serving.triton_stream.facts import TransformersFacts
from serving.triton_stream.repository import StreamVariant, model_config
from serving.triton_stream.settings import TritonStreamSettings
from serving.tritonserver.facts import TritonFacts
from serving.workloads.generative.model import LanguageModelConfig
from serving.workloads.generative.prompts import LengthSpec, Prompt, PromptSource
from serving.workloads.generative.tiny_model import ARCHITECTURE
from tests.helpers import CPU_NODE, GPU_NODE
from tests.test_stream_client import SSE_HEAD, _chunk, _serve

GENERATIVE = ["experiment=generative", "model=tiny_llama", "experiment.backends=[triton_stream]"]


# --- settings ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("override", "message"), [
    ("backends.triton_stream.dtype=fp8", "backends.triton_stream.dtype='fp8' is not allowed: one of ['auto'"),
    ("backends.triton_stream.device=tpu", "backends.triton_stream.device='tpu' is not allowed: one of"),
    ("backends.triton_stream.instances=0", "backends.triton_stream.instances=0 is not allowed: an integer >= 1"),
    ("backends.triton_stream.max_batch_size=0", "backends.triton_stream.max_batch_size=0 is not allowed"),
    ("backends.triton_stream.batch_wait_ms=-1", "backends.triton_stream.batch_wait_ms=-1.0 is not allowed: "
                                                "milliseconds >= 0"),
    ("backends.triton_stream.server=docker", "backends.triton_stream.server='docker' is not allowed: one of"),
])
def test_a_bad_setting_is_refused_with_its_key_value_and_fix(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match="backends.triton_stream") as info:
        validate(load_config([*GENERATIVE, override]))
    assert message in str(info.value)


def test_the_variants_validate_and_batch_or_not() -> None:
    cfg = load_config([*GENERATIVE[:2], "experiment.backends=[triton_stream,triton_stream_unbatched]"])
    validate(cfg)
    assert (cfg.backends["triton_stream"].max_batch_size, cfg.backends["triton_stream_unbatched"].max_batch_size) \
        == (8, 1)
    assert cfg.backends["triton_stream"].family == "triton_stream"


def test_a_model_without_weights_or_architecture_is_refused() -> None:
    with pytest.raises(ConfigError, match="model.weights and model.architecture are null"):
        validate(load_config([*GENERATIVE, "model.architecture=null"]))


# --- the model repository --------------------------------------------------------------------------------------------

def test_the_model_is_decoupled_with_the_generate_extensions_names_and_batches_in_a_window() -> None:
    from tritonclient.grpc import model_config_pb2 as mc

    variant = StreamVariant("/models/tiny", True, 3, "auto", False, 2, 8, 10_000)
    config = model_config("tiny-llama", variant)
    assert config.model_transaction_policy.decoupled and config.backend == "python"
    assert {i.name: (i.data_type, i.optional) for i in config.input} == {
        "text_input": (mc.TYPE_STRING, False), "max_tokens": (mc.TYPE_INT32, False),
        "ignore_eos": (mc.TYPE_BOOL, True), "apply_chat_template": (mc.TYPE_BOOL, True)}
    assert [o.name for o in config.output] == ["text_output", "num_input_tokens", "num_output_tokens"]
    assert (config.max_batch_size, config.dynamic_batching.max_queue_delay_microseconds) == (8, 10_000)
    assert (config.instance_group[0].count, config.instance_group[0].kind) == (2, mc.ModelInstanceGroup.KIND_CPU)
    assert {k: v.string_value for k, v in config.parameters.items()} == {
        "model_folder": "/models/tiny", "random_weights": "true", "seed": "3", "dtype": "auto"}
    alone = model_config("m", replace(variant, max_batch_size=1, gpu=True))
    assert not alone.HasField("dynamic_batching") and alone.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    assert triton_model_name("meta-llama/Llama-3.1-8B") == "meta-llama_Llama-3.1-8B"


# --- what a node is told ----------------------------------------------------------------------------------------------

def _backend(node=CPU_NODE, requires_gpu: bool = False, **settings) -> TritonStreamBackend:
    model = LanguageModelConfig(name="tiny-llama", architecture=dict(ARCHITECTURE))
    context = BackendContext(name="triton_stream", model=model, node=node, ray_options={}, requires_gpu=requires_gpu,
                             tier="h100" if requires_gpu else "local")
    return TritonStreamBackend(context, TritonStreamSettings(**settings))


def test_what_cannot_run_is_refused_with_the_reason() -> None:
    ready = CPU_NODE.with_facts(TorchFacts(version="2.14"), TransformersFacts(version="5.25"),
                                TritonFacts(bundled="nvidia-pytriton 0.7.0"))
    assert _backend(ready).unsupported_reason("http", "chat_stream") is None
    assert _backend(ready).unsupported_reason("http", "completions_stream") is None
    assert _backend(ready).unsupported_reason("grpc", "chat_stream") is None
    assert "no 'grpc+shm' client" in _backend(ready).unsupported_reason("grpc+shm", "chat_stream")
    assert "token by token" in _backend(ready).unsupported_reason("http", "chat")
    no_transformers = ready.with_facts(TransformersFacts(problem="transformers is not installed: pip install x"))
    assert "transformers is not installed" in _backend(no_transformers).unsupported_reason("http", "chat_stream")
    no_torch = ready.with_facts(TorchFacts(problem="torch is not installed (No module named 'torch')"))
    assert "torch is not installed" in _backend(no_torch).unsupported_reason("http", "chat_stream")
    no_triton = ready.with_facts(TritonFacts(bundled_problem="nvidia-pytriton is not installed"))
    assert "no Triton on node cpu-box" in _backend(no_triton).unsupported_reason("http", "chat_stream")
    assert "server=native but node cpu-box has no tritonserver" in _backend(ready, server="native") \
        .unsupported_reason("http", "chat_stream")
    assert "device=cuda but torch on node cpu-box sees no GPU" in _backend(ready, device="cuda") \
        .unsupported_reason("http", "chat_stream")
    gpu = GPU_NODE.with_facts(TransformersFacts(version="5.25"), TritonFacts(native=True, backends=("python",)))
    assert _backend(gpu, requires_gpu=True).unsupported_reason("http", "chat_stream") is None
    assert _backend(gpu).device == "cuda" and _backend(gpu).actor_options()["num_gpus"] == 0.5
    assert "a CPU figure is never filed under a GPU tier" in _backend(gpu, requires_gpu=True, device="cpu") \
        .unsupported_reason("http", "chat_stream")
    assert "a CPU figure is never filed" in _backend(ready, requires_gpu=True).unsupported_reason("http", "chat_stream")


# --- the generate client's reading of events --------------------------------------------------------------------------

def _prompt_source() -> PromptSource:
    return PromptSource(input_tokens=LengthSpec(8.0), output_tokens=LengthSpec(4.0), conversations=2)


def _event(message: dict) -> bytes:
    return f"data: {json.dumps(message)}\n\n".encode()


def _tokens(texts: list[str], counts: tuple[int, int] | None = (9, 4)) -> list[bytes]:
    events = [_event({"model_name": "m", "model_version": "1", "text_output": t}) for t in texts]
    if counts is not None:
        events.append(_event({"model_name": "m", "model_version": "1", "num_input_tokens": counts[0],
                              "num_output_tokens": counts[1], "text_output": ""}))
    return events


def _writer(events: list[bytes], status: str = "200 OK", gap_s: float = 0.01, cut_after: int | None = None):
    async def write(writer: asyncio.StreamWriter, body: bytes) -> None:
        writer.write(SSE_HEAD.replace(b"200 OK", status.encode()))
        for index, event in enumerate(events):
            if cut_after is not None and index == cut_after:
                writer.close()
                return
            writer.write(_chunk(event))
            await writer.drain()
            await asyncio.sleep(gap_s)
        writer.write(b"0\r\n\r\n")
    return write


def _answer(write, input_format: str = "completions_stream", tokenizer: str = ""):
    async def scenario():
        server, url, seen = await _serve(write)
        spec = TritonGenerateSpec(target="", url=url, model_name="m", input_format=input_format, batch_size=1,
                                  input_shape=(), output_shape=(), inputs=_prompt_source(), timeout_s=5.0,
                                  pin_output="ignore_eos", tokenizer=tokenizer)
        client = TritonGenerateClient(spec)
        await client.open()
        try:
            return (*await client.answer(0), seen, client.url)
        finally:
            await client.close()
            server.close()
    return asyncio.run(scenario())


def test_each_token_event_is_timed_and_the_last_responses_counts_are_the_servers() -> None:
    answer, report, seen, url = _answer(_writer(_tokens(["a", "b", "", "d"])))
    trace = report.detail
    assert url.endswith("/v2/models/m/generate_stream")
    assert answer.text == "abd"  # a token whose character is not complete yet carries no text, but is a token
    assert (trace.output_tokens, trace.input_tokens, trace.counted_by) == (4, 9, "usage")
    assert trace.output_after_s.size == 4 and np.all(trace.gaps_s >= 0)
    assert report.answered_after_s >= trace.output_after_s[-1]
    body = json.loads(seen[0])
    assert body["max_tokens"] == 4 and body["ignore_eos"] is True and "apply_chat_template" not in body


def test_a_chat_request_sends_the_conversation_for_the_servers_chat_template() -> None:
    _, _, seen, _ = _answer(_writer(_tokens(["x"], (3, 1))), input_format="chat_stream")
    body = json.loads(seen[0])
    assert body["apply_chat_template"] is True
    conversation = json.loads(body["text_input"])
    assert conversation[-1]["role"] == "user" and conversation[-1]["content"]


def test_without_the_servers_counts_tokens_are_counted_by_events_and_it_says_so() -> None:
    _, report, _, _ = _answer(_writer(_tokens(["one", "two", "six"], counts=None), gap_s=0.0))
    assert (report.detail.output_tokens, report.detail.counted_by) == (3, "events")


def test_an_error_event_a_cut_stream_and_an_error_status_fail_with_their_class() -> None:
    with pytest.raises(RequestError) as info:
        _answer(_writer([*_tokens(["a"], None), _event({"error": "out of memory"})]))
    assert info.value.outcome is Outcome.STREAM_ERROR and "out of memory" in str(info.value)
    with pytest.raises(RequestError) as info:
        _answer(_writer(_tokens(["a", "b", "c"]), cut_after=2))
    assert info.value.outcome is Outcome.TRUNCATED
    with pytest.raises(RequestError) as info:
        _answer(_writer([_event({"error": "max_tokens=0: ask for at least one token"})], status="400 Bad Request"))
    assert info.value.outcome is Outcome.HTTP_STATUS and "HTTP 400: max_tokens=0" in str(info.value)


def test_the_body_is_the_models_inputs_by_name() -> None:
    from serving.workloads.generative.api import PinOutput

    prompt = Prompt(messages=(("user", "hi"),), text="user: hi\n", input_tokens=3, max_tokens=5)
    assert json.loads(generate_body(prompt, chat=False, pin=PinOutput.NONE)) == {"text_input": "user: hi\n",
                                                                                  "max_tokens": 5}


# --- the real server ------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_bundled_triton_streams_the_tiny_llama_token_by_token(tmp_path: Path) -> None:
    """The host starts the bundled tritonserver with the tiny Llama's architecture (random weights from its seed);
    concurrent requests, batched by one generate, each stream exactly max_tokens tokens, one event (HTTP) or response
    (gRPC) each, in order; a
    bad request is refused with the model's reason; stopping leaves no process."""
    from serving.triton_stream.host import TritonStreamHost
    from tests.processes import server_processes

    before = server_processes()
    backend = _backend(max_batch_size=4, batch_wait_ms=50)
    host = TritonStreamHost(backend.context.model, backend.served_name, backend.variant_options(), "bundled",
                            "127.0.0.1")
    try:
        info = host.start(timeout_s=300)
        handle = backend.handle(info)
        assert handle.server_mode == "triton_python_backend" and handle.processes
        files = backend.deploy_files(handle.artifacts)
        assert "decoupled: true" in files["tiny-llama/config.pbtxt"]
        assert "TritonPythonModel" in files["tiny-llama/1/model.py"]

        async def stream(protocol: str, input_format: str, count: int):
            from hydra.utils import get_class

            spec = backend.client_spec(handle, protocol, input_format, 1)
            spec = replace(spec, inputs=PromptSource(input_tokens=LengthSpec(12.0), output_tokens=LengthSpec(6.0),
                                                     conversations=count))
            client = get_class(spec.target)(spec)
            await client.open()
            try:
                return [a for a in await asyncio.gather(*(client.answer(i) for i in range(count)))], client.pool
            finally:
                await client.close()

        for protocol, input_format in (("http", "completions_stream"), ("http", "chat_stream"),
                                       ("grpc", "chat_stream"), ("grpc", "completions_stream")):
            answers, pool = asyncio.run(stream(protocol, input_format, 3))
            for (answer, report), prompt in zip(answers, pool, strict=True):
                trace = report.detail
                assert trace.counted_by == "usage" and trace.output_tokens == prompt.max_tokens
                assert trace.output_after_s.size == prompt.max_tokens  # one event per token
                assert np.all(np.diff(trace.output_after_s) >= 0) and trace.output_after_s[0] > 0
                assert isinstance(answer.text, str) and len(answer.text) >= prompt.max_tokens  # one+ char per token
                assert trace.input_tokens > 0

        url = f"{handle.urls['http']}/v2/models/tiny-llama/generate_stream"
        request = urllib.request.Request(url, data=json.dumps({"text_input": "x", "max_tokens": 0}).encode())
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=60)  # noqa: S310 - loopback
        assert "max_tokens=0: ask for at least one token" in refused.value.read().decode()
    finally:
        logs = host.stop(timeout_s=20)
    assert "tritonserver.log" in logs
    from tests.processes import wait_for_no_new_processes

    assert not wait_for_no_new_processes(before), "a tritonserver or stub outlived its host"
