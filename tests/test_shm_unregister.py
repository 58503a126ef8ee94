"""Closing a shared-memory client waits out Triton's "region in use" refusal (the server releases a request's
regions just after sending its response) instead of leaving the region registered on the server."""

from __future__ import annotations

import asyncio
import logging

import pytest

from serving.clients.triton_base import _unregister


class FakeRegion:
    name = "tierbench_1_1"

    def __init__(self, errors: list[Exception]) -> None:
        self.errors = errors
        self.calls = 0

    async def unregister(self, client: object) -> None:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)


def test_an_in_use_region_is_unregistered_once_the_server_releases_it() -> None:
    in_use = RuntimeError("Cannot unregister shared memory region 'tierbench_1_1', it is currently in use.")
    region = FakeRegion([in_use, in_use])
    asyncio.run(_unregister(region, client=None))
    assert region.calls == 3


def test_any_other_failure_is_logged_not_retried(caplog: pytest.LogCaptureFixture) -> None:
    region = FakeRegion([ConnectionError("connection refused")])
    with caplog.at_level(logging.WARNING):
        asyncio.run(_unregister(region, client=None))
    assert region.calls == 1
    assert "tierbench_1_1" in caplog.text and "connection refused" in caplog.text
