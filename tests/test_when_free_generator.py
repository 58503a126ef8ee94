"""Batching generates as Triton batches passes: a generate takes every conversation that queued while the last one
ran, and a generate's error reaches each of its conversations."""

from __future__ import annotations

import asyncio

from serving.serve_transformers.when_free import WhenFreeGenerator


class Engine:
    """A generate of `steps` steps that yields each job's id per step and records the batches it ran; the first one
    waits until released, so that others queue behind it."""

    def __init__(self, steps: int = 3, fail: bool = False) -> None:
        self.steps, self.fail = steps, fail
        self.batches: list[list[int]] = []
        self.release = asyncio.Event()

    async def run_batch(self, jobs: list[int]):
        self.batches.append(list(jobs))
        if len(self.batches) == 1:
            await self.release.wait()
        for step in range(self.steps):
            if self.fail:
                raise RuntimeError("out of memory")
            yield [job * 10 + step if job % 2 or step < self.steps - 1 else StopIteration for job in jobs]


async def _collect(batcher: WhenFreeGenerator, job: int) -> list[int]:
    return [token async for token in batcher.submit(job)]


def test_conversations_that_queue_during_a_generate_ride_the_next_one_together() -> None:
    async def scenario() -> tuple[list[list[int]], list[list[int]]]:
        engine = Engine()
        batcher = WhenFreeGenerator(engine.run_batch, max_batch_size=8, wait_s=0.0)
        first = asyncio.create_task(_collect(batcher, 1))
        while not engine.batches:
            await asyncio.sleep(0)
        queued = [asyncio.create_task(_collect(batcher, job)) for job in (2, 3, 4)]
        await asyncio.sleep(0)
        engine.release.set()
        return engine.batches, [await first, *[await q for q in queued]]

    batches, tokens = asyncio.run(scenario())
    assert batches == [[1], [2, 3, 4]]
    # each job got its own tokens; an even job's last step was its StopIteration: it ended a step early
    assert tokens == [[10, 11, 12], [20, 21], [30, 31, 32], [40, 41]]


def test_a_batch_holds_at_most_max_batch_size() -> None:
    async def scenario() -> list[list[int]]:
        engine = Engine(steps=1)
        batcher = WhenFreeGenerator(engine.run_batch, max_batch_size=2, wait_s=0.0)
        first = asyncio.create_task(_collect(batcher, 1))
        while not engine.batches:
            await asyncio.sleep(0)
        rest = [asyncio.create_task(_collect(batcher, job)) for job in (3, 5, 7)]
        await asyncio.sleep(0)
        engine.release.set()
        await asyncio.gather(first, *rest)
        return engine.batches

    assert asyncio.run(scenario()) == [[1], [3, 5], [7]]


def test_a_generates_error_reaches_each_of_its_conversations() -> None:
    async def scenario() -> None:
        engine = Engine(fail=True)
        engine.release.set()
        batcher = WhenFreeGenerator(engine.run_batch, max_batch_size=4, wait_s=0.01)
        results = await asyncio.gather(_collect(batcher, 1), _collect(batcher, 3), return_exceptions=True)
        assert all(isinstance(r, RuntimeError) and "out of memory" in str(r) for r in results), results
        assert engine.batches == [[1, 3]]  # the wait gathered both

    asyncio.run(scenario())
