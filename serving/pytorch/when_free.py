"""Server-side batching the way Triton's dynamic batcher does it: a forward pass starts as soon as the inference thread
is free, with every request that queued while it was busy (up to `max_batch_size` images), and waits for more only
while the queue holds less than a full batch and its oldest request has waited less than `wait_s`.

Ray Serve's `@serve.batch` (Ray 2.60) closes a batch `batch_wait_timeout_s` after its first request, even while a pass
still runs, and queues it behind that pass: requests that arrive during a pass do not merge with each other
(docs/benchmarks.md, "Server-side batching on vs off"). A Serve replica takes this batcher instead with
`batcher: when_free`.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from serving.pytorch.service import Pass


@dataclass
class _Queued:
    batch: np.ndarray
    future: asyncio.Future[Pass]
    arrived: float = field(default_factory=time.perf_counter)


class WhenFreeBatcher:
    """A `serving.pytorch.service.Batcher`: `await batcher(batch)` is the request's part of the pass it rode in."""

    def __init__(self, forward: Callable[[np.ndarray], Awaitable[Pass]], max_batch_size: int, wait_s: float) -> None:
        self.forward = forward
        self.max_batch_size = max_batch_size
        self.wait_s = wait_s
        self.queue: deque[_Queued] = deque()
        self.full = asyncio.Event()  # the queue holds a full batch: stop waiting for more
        self.worker: asyncio.Task[None] | None = None

    async def __call__(self, batch: np.ndarray) -> Pass:
        queued = _Queued(batch, asyncio.get_running_loop().create_future())
        self.queue.append(queued)
        if self.queued_images() >= self.max_batch_size:
            self.full.set()
        if self.worker is None or self.worker.done():
            self.worker = asyncio.create_task(self._passes())
        return await queued.future

    def queued_images(self) -> int:
        return sum(len(q.batch) for q in self.queue if not q.future.done())

    async def _passes(self) -> None:
        """Run passes while requests are queued; each takes what queued during the last one."""
        while self.queue:
            left = self.queue[0].arrived + self.wait_s - time.perf_counter()
            if left > 0 and self.queued_images() < self.max_batch_size:
                try:
                    await asyncio.wait_for(self.full.wait(), left)
                except TimeoutError:
                    pass
            taken = self._take()
            if taken:
                await self._run(taken)

    def _take(self) -> list[_Queued]:
        """The oldest requests that fit in one batch (at least one); requests whose caller gave up are dropped."""
        taken: list[_Queued] = []
        images = 0
        while self.queue:
            head = self.queue[0]
            if head.future.done():  # cancelled: its client went away
                self.queue.popleft()
                continue
            if taken and images + len(head.batch) > self.max_batch_size:
                break
            taken.append(self.queue.popleft())
            images += len(head.batch)
        if self.queued_images() < self.max_batch_size:
            self.full.clear()
        return taken

    async def _run(self, taken: list[_Queued]) -> None:
        batches = [q.batch for q in taken]
        try:
            ran = await self.forward(batches[0] if len(batches) == 1 else np.concatenate(batches))
            parts = np.split(ran.logits, np.cumsum([len(b) for b in batches])[:-1])
            if len(ran.logits) != sum(len(b) for b in batches):
                raise RuntimeError(f"the model answered {len(ran.logits)} rows for {len(parts)} requests' "
                                   f"{sum(len(b) for b in batches)} images")
        except Exception as exc:  # noqa: BLE001 - every request of the pass gets the error, the batcher goes on
            for q in taken:
                if not q.future.done():
                    q.future.set_exception(exc)
            return
        for q, part in zip(taken, parts, strict=True):
            if not q.future.done():
                q.future.set_result(ran._replace(logits=part))
