"""A real Triton (the bundled server, no Ray): the JPEG ensemble's preprocessing, shared-memory transport seen
on the wire, region clean-up, and the dynamic batcher merging requests (Triton's own statistics)."""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from experiments.config.compose import load_config
from serving.backend import BackendContext, ServerHandle
from serving.clients.base import load_client
from serving.node import NodeInfo
from serving.paths import REPO_ROOT
from serving.triton.backend import TritonBackend
from serving.triton.repository import TritonVariant
from serving.triton.settings import TritonSettings
from serving.workloads.image.preprocessing import decode_and_preprocess, sample_jpegs
from tests.processes import owned_environment

pytestmark = pytest.mark.slow

QUEUE_DELAY_US = 20_000  # long enough that concurrent requests surely meet in the queue


@pytest.fixture(scope="module")
def triton() -> Iterator[tuple[TritonBackend, ServerHandle]]:
    from serving.triton.host import TritonServerHost

    cfg = load_config()
    node = NodeInfo(hostname="localhost", ip="127.0.0.1", ray_node_id="", cpu_model="test", cpu_count=2)
    backend = TritonBackend(BackendContext(name="triton_onnx_dynbatch", model=cfg.model, node=node, ray_options={}),
                            TritonSettings(accelerator="cpu", dynamic_batching=True, max_queue_delay_us=QUEUE_DELAY_US))
    variant = TritonVariant("cpu", dynamic_batching=True, max_queue_delay_us=QUEUE_DELAY_US)
    with owned_environment():  # fails if the server or its stubs outlive the stop
        host = TritonServerHost(cfg.model, variant, "bundled", "127.0.0.1",
                                str(REPO_ROOT / "model_repository"), preprocess_instances=1)
        try:
            info = host.start(180)
            ep = info["endpoints"]
            prefix = host.server.shm_prefix
            yield backend, ServerHandle("triton_python_backend", {"http": f"127.0.0.1:{ep['http_port']}",
                                                                  "grpc": f"127.0.0.1:{ep['grpc_port']}"})
        finally:
            host.stop(20)
    assert not list(Path("/dev/shm").glob(f"{prefix}*")), "the Python backend's regions were left behind"


class CountingProxy:
    """A TCP forwarder that counts the bytes each way: what really crosses the socket."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.up = self.down = 0
        self.writers: list[asyncio.StreamWriter] = []
        self.handlers: list[asyncio.Task] = []

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handlers.append(asyncio.current_task())
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        self.writers += [writer, upstream_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, direction: str) -> None:
            try:
                while data := await src.read(1 << 16):
                    setattr(self, direction, getattr(self, direction) + len(data))
                    dst.write(data)
                    await dst.drain()
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, upstream_writer, "up"), pipe(upstream_reader, writer, "down"),
                             return_exceptions=True)

    async def close(self) -> None:
        self.server.close()
        for writer in self.writers:
            writer.close()
        await asyncio.gather(*self.handlers, return_exceptions=True)


async def _through_proxy(backend, handle, protocol: str, input_format: str, batch: int, requests: int):
    wire = protocol.split("_")[0]
    proxy = CountingProxy(handle.urls[wire])
    proxied = ServerHandle(handle.server_mode, {wire: await proxy.start()})
    client = load_client(backend.client_spec(proxied, protocol, input_format, batch))
    await client.open()
    try:
        first = await client.predict()  # connection set-up and region registration are not per-request costs
        proxy.up = proxy.down = 0
        outputs = [await client.predict() for _ in range(requests)]
    finally:
        await client.close()
        await proxy.close()
    assert all(np.array_equal(first, out) for out in outputs)
    return first, proxy.up / requests, proxy.down / requests, client.payload_bytes


def test_the_served_preprocess_model_gives_the_reference_tensor(triton) -> None:
    import tritonclient.http as http

    _, handle = triton
    spec_images = list(sample_jpegs()[:3])
    data = np.array(spec_images, dtype=np.object_).reshape(-1, 1)
    client = http.InferenceServerClient(handle.urls["http"])
    try:
        infer_input = http.InferInput("jpeg", list(data.shape), "BYTES")
        infer_input.set_data_from_numpy(data, binary_data=True)
        result = client.infer("resnet18_preprocess", [infer_input])
    finally:
        client.close()
    np.testing.assert_array_equal(result.as_numpy("input"), decode_and_preprocess(spec_images))


@pytest.mark.parametrize("wire", ["http", "grpc"])
@pytest.mark.parametrize("input_format,batch", [("tensor", 2), ("jpeg", 4)])
def test_shared_memory_keeps_the_payload_off_the_socket(triton, wire: str, input_format: str, batch: int) -> None:
    backend, handle = triton

    async def both():
        plain = await _through_proxy(backend, handle, wire, input_format, batch, requests=3)
        shm = await _through_proxy(backend, handle, f"{wire}_shm", input_format, batch, requests=3)
        return plain, shm

    (plain_out, plain_up, plain_down, payload), (shm_out, shm_up, shm_down, shm_payload) = asyncio.run(both())
    print(f"{wire}/{input_format} b{batch}: payload {payload} B; per request up/down: socket {plain_up:.0f}/"
          f"{plain_down:.0f} B, shared memory {shm_up:.0f}/{shm_down:.0f} B")
    assert payload == shm_payload
    logits_bytes = batch * 1000 * 4
    # The tensors cross the socket (HTTP responses may come gzip-compressed: random logits shrink a little)...
    assert plain_up >= payload and plain_down >= 0.5 * logits_bytes
    # ...and with shared memory only the requests' metadata does.
    assert shm_up < 2_000 and shm_down < 2_000
    assert shm_up < 0.05 * payload
    np.testing.assert_allclose(shm_out, plain_out, rtol=0, atol=1e-5)


@pytest.mark.parametrize("wire", ["http", "grpc"])
@pytest.mark.parametrize("memory", ["shm", pytest.param("cuda_shm", marks=pytest.mark.gpu)])
def test_the_compiled_engine_drives_shared_memory(triton, wire: str, memory: str, tmp_path, monkeypatch) -> None:
    """The compiled engine's requests name regions the client registered (`open_wire`): an output region per request
    in flight, one more than the pool's inputs (so whole pools twice over); a closed loop of 3 runs for 2 s through a
    counting proxy with only the requests' metadata on the socket, the server writes each request's logits into the
    output region its body names (the socket's logits for the same input), and closing the client unregisters and
    frees every region."""
    import tempfile

    import tritonclient.http as http

    from experiments.config.choices import LoadMode
    from experiments.measure.engine.compiled_load import CompiledLoad
    from experiments.measure.load import LoadPoint
    from serving.triton.clients import MAX_WIRE_OUTPUTS

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the engine's files
    backend, handle = triton
    batch = 2

    async def run():
        plain = load_client(backend.client_spec(handle, wire, "tensor", batch))
        await plain.open()
        try:
            # the inputs of the bodies naming output region 0 (body i: input i % P, region i % outputs)
            outputs = min(len(plain.pool) + 1, MAX_WIRE_OUTPUTS)
            bodies = len(plain.pool) * math.ceil(outputs / len(plain.pool))
            expected = [await plain.predict(i % len(plain.pool)) for i in range(0, bodies, outputs)]
        finally:
            await plain.close()
        proxy = CountingProxy(handle.urls[wire])
        proxied = ServerHandle(handle.server_mode, {wire: await proxy.start()})
        client = load_client(backend.client_spec(proxied, f"{wire}_{memory}", "tensor", batch))
        in_flight = len(client.pool) + 1
        try:
            await client.open_wire(in_flight)
            request = client.wire_request()
            load = CompiledLoad(request, LoadPoint(LoadMode.CLOSED, 3), 30, batch, max_in_flight=in_flight,
                                check_response=client.check_wire_response)
            await load.open()
            load.start()
            try:
                await load.wait_warm(5, 0.2, 60)
                start = load.now()
                up_before, down_before = proxy.up, proxy.down
                window = await load.collect(start, start + 2.0)
                up, down = proxy.up - up_before, proxy.down - down_before
            finally:
                await load.stop()
            written = client.wire_output(0)
            regions = sorted(p.name for p in Path("/dev/shm").glob(f"tierbench_{os.getpid()}_*"))
        finally:
            await client.close()
            await proxy.close()
        return request, window, up, down, expected, written, regions, client.payload_bytes, len(client.pool)

    request, window, up, down, expected, written, regions, payload, pool = asyncio.run(run())
    outputs = min(pool + 1, MAX_WIRE_OUTPUTS)
    assert len(request.payloads) == pool * math.ceil(outputs / pool), "whole pools, an output region per request"
    assert len(set(request.payloads)) == len(request.payloads), "no two bodies name the same input and output"
    if memory == "shm":
        assert len(regions) == 1 + outputs, f"the input region and an output region per request in flight: {regions}"
    assert window.completed >= 2 and not window.errors, window.errors  # two cores shared with other work
    per_request = (up + down) / max(window.completed, 1)
    print(f"{wire}_{memory}, compiled engine: {window.completed} requests in 2 s, {per_request:.0f} B per request on "
          f"the socket (payload {payload} B)")
    assert per_request < 2_000 < payload
    # Region 0 is named by body 0 and others (here body P + 1, input 1): it holds the logits of the one the engine
    # sent last, which depends on how many requests 2 s held.
    assert any(np.allclose(written, logits, rtol=0, atol=1e-5) for logits in expected), "not the named input's logits"
    assert not list(Path("/dev/shm").glob(f"tierbench_{os.getpid()}_*"))
    server = http.InferenceServerClient(handle.urls["http"])
    status = (server.get_system_shared_memory_status() if memory == "shm"
              else server.get_cuda_shared_memory_status())
    assert not [region for region in status if region["name"].startswith("tierbench_")]


def test_shared_memory_regions_are_unregistered_and_removed_on_close(triton) -> None:
    import tritonclient.http as http

    backend, handle = triton

    async def run() -> list[str]:
        client = load_client(backend.client_spec(handle, "http_shm", "tensor", 2))
        await client.open()
        await asyncio.gather(*(client.predict() for _ in range(3)))  # three output regions in flight
        mine = [p.name for p in Path("/dev/shm").glob(f"tierbench_{os.getpid()}_*")]
        await client.close()
        return mine

    mine = asyncio.run(run())
    assert len(mine) >= 2, f"expected an input region and output regions while open, saw {mine}"
    assert not list(Path("/dev/shm").glob(f"tierbench_{os.getpid()}_*"))
    status = http.InferenceServerClient(handle.urls["http"]).get_system_shared_memory_status()
    assert not [region for region in status if region["name"].startswith("tierbench_")]


def test_dynamic_batcher_merges_concurrent_requests(triton) -> None:
    import tritonclient.grpc.aio as grpc_aio

    backend, handle = triton

    async def run() -> tuple[int, int]:
        stats_client = grpc_aio.InferenceServerClient(handle.urls["grpc"])
        # Triton records a request's statistics when it releases the request, which can follow the response: the
        # module's earlier requests may still be counting. Start once the count holds still for 0.3 s.
        before = await stats_client.get_inference_statistics("resnet18", as_json=True)
        deadline, still_since = time.monotonic() + 10, time.monotonic()
        while time.monotonic() - still_since < 0.3 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            now = await stats_client.get_inference_statistics("resnet18", as_json=True)
            if now["model_stats"][0].get("inference_count") != before["model_stats"][0].get("inference_count"):
                before, still_since = now, time.monotonic()
        clients = [load_client(backend.client_spec(handle, "grpc", "tensor", 1)) for _ in range(8)]
        for client in clients:
            await client.open()
        await asyncio.gather(*(client.predict() for client in clients))
        for client in clients:
            await client.close()
        # Likewise for these: read them until the 8 images show (or a deadline passes).
        deadline = time.monotonic() + 10
        while True:
            after = await stats_client.get_inference_statistics("resnet18", as_json=True)
            count = [int(s["model_stats"][0].get("inference_count", 0)) for s in (before, after)]
            if count[1] - count[0] >= 8 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        await stats_client.close()
        executions = [int(s["model_stats"][0].get("execution_count", 0)) for s in (before, after)]
        return count[1] - count[0], executions[1] - executions[0]

    images, executions = asyncio.run(run())
    assert images == 8
    assert executions < images, f"{images} requests ran as {executions} executions: the batcher merged none"


@pytest.mark.gpu
@pytest.mark.parametrize("wire", ["http", "grpc"])
def test_cuda_shared_memory_gives_the_same_logits(triton, wire: str) -> None:
    """CUDA IPC regions (device memory the server maps): same answer as the socket, little on the wire."""
    backend, handle = triton

    async def both():
        plain = await _through_proxy(backend, handle, wire, "tensor", 2, requests=2)
        cuda = await _through_proxy(backend, handle, f"{wire}_cuda_shm", "tensor", 2, requests=2)
        return plain, cuda

    (plain_out, *_), (cuda_out, cuda_up, _, payload) = asyncio.run(both())
    assert cuda_up < 0.05 * payload
    np.testing.assert_allclose(cuda_out, plain_out, rtol=0, atol=1e-5)
