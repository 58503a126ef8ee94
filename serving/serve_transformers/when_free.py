"""Batching generates the way Triton's dynamic batcher batches passes: a generate starts as soon as the last one is
over, with every conversation that queued while it ran (up to `max_batch_size`), and waits for more only while it
would hold less than a full batch and its oldest conversation has waited less than `wait_s`.

Ray Serve's `@serve.batch` (Ray 2.60) closes a batch `batch_wait_timeout_s` after its first request even while a
generate still runs, and queues it behind that one: under a closed loop the conversations that finish together come
back together, but the ones that arrive during a generate form small batches of their own (about 2 of 8 on a 2-vCPU
VM). `batcher: when_free` takes this batcher instead."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

_END = object()


class WhenFreeGenerator:
    """`submit(job)` streams the job's tokens from the generate it rode in; `run_batch(jobs)` yields each step's token
    per job (StopIteration for one that has all of its own), as a `@serve.batch` generator does."""

    def __init__(self, run_batch: Callable[[list[Any]], AsyncIterator[list[Any]]], max_batch_size: int,
                 wait_s: float) -> None:
        self.run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.wait_s = wait_s
        self.queue: deque[tuple[Any, asyncio.Queue[Any], float]] = deque()
        self.arrived = asyncio.Event()
        self.worker: asyncio.Task[None] | None = None

    async def submit(self, job: Any) -> AsyncIterator[Any]:
        tokens: asyncio.Queue[Any] = asyncio.Queue()
        self.queue.append((job, tokens, time.perf_counter()))
        self.arrived.set()
        if self.worker is None or self.worker.done():
            self.worker = asyncio.get_running_loop().create_task(self._work())
        while (item := await tokens.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item

    async def _work(self) -> None:
        while True:
            if not self.queue:
                self.arrived.clear()
                await self.arrived.wait()
            oldest = self.queue[0][2]
            while len(self.queue) < self.max_batch_size and (left := self.wait_s - (time.perf_counter() - oldest)) > 0:
                self.arrived.clear()
                try:
                    await asyncio.wait_for(self.arrived.wait(), left)
                except TimeoutError:
                    break
            batch = [self.queue.popleft() for _ in range(min(self.max_batch_size, len(self.queue)))]
            try:
                async for step in self.run_batch([job for job, _, _ in batch]):
                    for (_, tokens, _), token in zip(batch, step, strict=True):
                        if token is not StopIteration:
                            tokens.put_nowait(token)
            except Exception as error:  # noqa: BLE001 - each conversation of the batch gets the generate's error
                for _, tokens, _ in batch:
                    tokens.put_nowait(error)
            finally:
                for _, tokens, _ in batch:
                    tokens.put_nowait(_END)
