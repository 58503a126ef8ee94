"""Closing a shared-memory client waits out Triton's "region in use" refusal (the server releases a request's
regions just after sending its response) instead of leaving the region registered on the server."""

from __future__ import annotations

import asyncio
import logging

import pytest

from serving.triton.clients import TritonClientSpec, TritonHttpClient
from serving.triton.shm import SystemRegion


class FakeServer:
    """tritonclient's unregister call, failing with the given errors first."""

    def __init__(self, errors: list[Exception]) -> None:
        self.errors = errors
        self.calls = 0

    async def unregister_system_shared_memory(self, name: str) -> None:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)

    async def close(self) -> None:
        pass


def test_an_in_use_region_is_unregistered_once_the_server_releases_it() -> None:
    in_use = RuntimeError("Cannot unregister shared memory region 'tierbench_1_1', it is currently in use.")
    server = FakeServer([in_use, in_use])
    region = SystemRegion(16)
    try:
        asyncio.run(region.unregister(server))
    finally:
        region.destroy()
    assert server.calls == 3


def test_any_other_failure_is_logged_not_retried(caplog: pytest.LogCaptureFixture) -> None:
    server = FakeServer([ConnectionError("connection refused")])
    client = TritonHttpClient(TritonClientSpec(target="", url="127.0.0.1:1", model_name="m", input_format="tensor",
                                               batch_size=1, input_shape=(3, 8, 8), output_shape=(4,),
                                               shared_memory="system"))
    client._client = server
    client._input_region = region = SystemRegion(16)
    with caplog.at_level(logging.WARNING):
        asyncio.run(client.close())
    assert server.calls == 1
    assert region.name in caplog.text and "connection refused" in caplog.text
    assert not region.path.exists()  # freed on the client side all the same
