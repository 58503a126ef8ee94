"""serving/pytorch/when_free.py: requests that queue during a forward pass ride in the next one (unlike
`@serve.batch`, tests/test_serve_batching.py), within max_batch_size images, each getting its own rows back; a full
queue does not wait; an error reaches every request of its pass and the batcher goes on."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from serving.pytorch.service import Pass
from serving.pytorch.when_free import WhenFreeBatcher


def _model(passes: list[int], seconds: float = 0.05, fail_first: bool = False):  # noqa: ANN202 - a fake forward
    async def forward(batch: np.ndarray) -> Pass:
        passes.append(len(batch))
        started = time.perf_counter()
        await asyncio.sleep(seconds)
        if fail_first and len(passes) == 1:
            raise RuntimeError("CUDA out of memory")
        return Pass(batch * 2.0, len(batch), started)
    return forward


def _request(i: int, images: int = 1) -> np.ndarray:
    return np.full((images, 3), float(i), dtype=np.float32)


def test_the_requests_that_queued_during_a_pass_ride_in_the_next() -> None:
    """The first request runs alone; the seven that arrive while its pass runs ride together in the next (Serve's
    batcher runs them as passes of one). The pass lasts until all seven have queued, so no timer decides it."""
    passes: list[int] = []

    async def main() -> list[Pass]:
        first_running, seven_queued = asyncio.Event(), asyncio.Event()

        async def forward(batch: np.ndarray) -> Pass:
            passes.append(len(batch))
            started = time.perf_counter()
            if len(passes) == 1:
                first_running.set()
                await seven_queued.wait()
            return Pass(batch * 2.0, len(batch), started)

        batcher = WhenFreeBatcher(forward, max_batch_size=16, wait_s=0.002)

        async def arrive(i: int) -> Pass:
            if i:
                await first_running.wait()
            return await batcher(_request(i))

        async def watch() -> None:
            await first_running.wait()
            while batcher.queued_images() < 7:
                await asyncio.sleep(0.001)
            seven_queued.set()

        *answers, _ = await asyncio.wait_for(asyncio.gather(*(arrive(i) for i in range(8)), watch()), 10.0)
        return answers

    answers = asyncio.run(main())
    assert passes == [1, 7], passes
    for i, ran in enumerate(answers):
        assert np.array_equal(ran.logits, _request(i) * 2.0), "each request gets its own rows"
    assert answers[0].images == 1 and all(ran.images == 7 for ran in answers[1:])


def test_a_pass_holds_at_most_max_batch_size_images_and_never_splits_a_request() -> None:
    passes: list[int] = []
    batcher = WhenFreeBatcher(_model(passes, seconds=0.01), max_batch_size=8, wait_s=0.0)

    async def main() -> list[Pass]:
        return list(await asyncio.gather(*(batcher(_request(i, images=3)) for i in range(10))))

    answers = asyncio.run(main())
    assert sum(passes) == 30 and max(passes) <= 8 and all(p % 3 == 0 for p in passes), passes
    assert all(ran.logits.shape == (3, 3) for ran in answers)


def test_a_full_queue_does_not_wait_for_more() -> None:
    passes: list[int] = []
    batcher = WhenFreeBatcher(_model(passes, seconds=0.0), max_batch_size=4, wait_s=30.0)

    async def main() -> list[Pass]:
        return list(await asyncio.wait_for(asyncio.gather(*(batcher(_request(i)) for i in range(4))), 10.0))

    asyncio.run(main())
    assert passes == [4]


def test_an_error_reaches_every_request_of_its_pass_and_the_next_pass_runs() -> None:
    passes: list[int] = []
    batcher = WhenFreeBatcher(_model(passes, fail_first=True), max_batch_size=16, wait_s=0.0)

    async def main() -> tuple[list[object], Pass]:
        first = await asyncio.gather(batcher(_request(0)), batcher(_request(1)), return_exceptions=True)
        return list(first), await batcher(_request(2))

    failed, after = asyncio.run(main())
    assert all(isinstance(e, RuntimeError) and "out of memory" in str(e) for e in failed)
    assert np.array_equal(after.logits, _request(2) * 2.0) and passes == [2, 1]


def test_a_request_whose_caller_gave_up_is_left_out_of_the_next_pass() -> None:
    passes: list[int] = []
    batcher = WhenFreeBatcher(_model(passes), max_batch_size=16, wait_s=0.0)

    async def main() -> Pass:
        first = asyncio.create_task(batcher(_request(0)))
        await asyncio.sleep(0.01)  # the first pass runs
        gone = asyncio.create_task(batcher(_request(1)))
        kept = asyncio.create_task(batcher(_request(2)))
        await asyncio.sleep(0)
        gone.cancel()
        await first
        return await kept

    ran = asyncio.run(main())
    assert passes == [1, 1] and np.array_equal(ran.logits, _request(2) * 2.0)


@pytest.mark.parametrize("wait_s", [0.0, 0.03])
def test_a_lone_request_waits_at_most_wait_s_for_company(wait_s: float) -> None:
    passes: list[int] = []
    batcher = WhenFreeBatcher(_model(passes, seconds=0.0), max_batch_size=16, wait_s=wait_s)
    started = time.perf_counter()
    asyncio.run(batcher(_request(0)))
    assert passes == [1] and time.perf_counter() - started >= wait_s


def test_a_pass_that_answers_the_wrong_number_of_rows_fails_its_requests_instead_of_hanging_them() -> None:
    async def short(batch: np.ndarray) -> Pass:
        return Pass(batch[:-1], len(batch), time.perf_counter())

    batcher = WhenFreeBatcher(short, max_batch_size=16, wait_s=0.01)

    async def main() -> list[object]:
        return list(await asyncio.wait_for(asyncio.gather(batcher(_request(0)), batcher(_request(1)),
                                                          return_exceptions=True), 10.0))

    assert all(isinstance(e, RuntimeError) and "answered 1 rows for 2 requests' 2 images" in str(e)
               for e in asyncio.run(main()))
