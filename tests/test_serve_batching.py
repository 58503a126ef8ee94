"""Ray Serve's `@serve.batch` variant really merges concurrent requests into one forward pass (the replica
reports the images of the pass each request rode in), and the plain variant never does."""

from __future__ import annotations

import asyncio
import re

import pytest

from experiments.cluster.connection import ray_cluster
from experiments.cluster.tiers import placement_options
from experiments.config.compose import load_config
from experiments.run.server_group import build_backend
from serving.clients.base import ClientSpec
from serving.probe import describe_node
from serving.ray_serve.clients import TIMING_HEADER, encode_request

pytestmark = pytest.mark.slow


async def _executed_batches(url: str, spec: ClientSpec, requests: int) -> list[int]:
    import aiohttp

    body, headers = encode_request(spec)
    async with aiohttp.ClientSession() as session:
        async def one() -> int:
            async with session.post(url, data=body, headers=headers) as response:
                assert response.status == 200
                return int(re.search(r"batch;desc=(\d+)", response.headers[TIMING_HEADER]).group(1))

        return list(await asyncio.gather(*(one() for _ in range(requests))))


def test_serve_batch_merges_concurrent_requests_and_the_plain_replica_does_not() -> None:
    import ray

    cfg = load_config(["model=tiny", "experiment.backends=[pytorch,pytorch_batched]", "experiment.batch_sizes=[1]",
                          "backends.pytorch_batched.batch_wait_timeout_s=0.05"])
    with ray_cluster(cfg.cluster, "local"):
        options = placement_options("local")
        node = ray.get(ray.remote(describe_node).options(num_cpus=0, **options).remote())
        executed = {}
        for variant in ("pytorch_batched", "pytorch"):
            backend = build_backend(cfg, variant, node, options)
            handle = backend.start()
            try:
                spec = backend.client_spec(handle, "http", "tensor", 1)
                executed[variant] = asyncio.run(_executed_batches(handle.urls["http"], spec, 8))
            finally:
                backend.stop()
    assert max(executed["pytorch_batched"]) > 1, executed  # 8 requests at once, 50 ms to gather: merged
    assert set(executed["pytorch"]) == {1}, executed
