"""The embedding queue: concurrent requests share model calls, each caller gets its
own rows, failures reach the callers of that batch only."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest
from numpy.typing import NDArray

from memory.embed import EmbedQueue
from memory.errors import EmbeddingUnavailable


class CountingEmbedder:
    """Row i is [len(text), first letter code]; every call is recorded; calls can be held."""

    dim = 2
    model_name = "counting"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.release = threading.Event()
        self.release.set()
        self.fail_on: str | None = None

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.release.wait(5)
        self.calls.append(list(texts))
        if self.fail_on is not None and self.fail_on in texts:
            raise EmbeddingUnavailable("the model fell over")
        return np.array([[len(t), ord(t[0])] for t in texts], dtype=np.float32)


async def test_requests_waiting_behind_a_batch_share_the_next_call() -> None:
    model = CountingEmbedder()
    queue = EmbedQueue(model, max_batch=64)
    model.release.clear()
    first = asyncio.create_task(queue.embed(["hold"]))
    await asyncio.sleep(0.05)  # the first batch is running, held
    others = [asyncio.create_task(queue.embed([f"text {n}", "x" * n])) for n in range(1, 11)]
    await asyncio.sleep(0.05)
    model.release.set()
    assert (await first).tolist() == [[4.0, ord("h")]]
    for n, task in enumerate(others, start=1):
        rows = (await task).tolist()
        assert rows == [[len(f"text {n}"), ord("t")], [n, ord("x")]]
    # One call for the held request, one for the ten that queued behind it.
    assert len(model.calls) == 2
    assert len(model.calls[1]) == 20
    await queue.aclose()


async def test_a_batch_never_exceeds_max_batch_but_a_big_request_goes_whole() -> None:
    model = CountingEmbedder()
    queue = EmbedQueue(model, max_batch=4)
    model.release.clear()
    held = asyncio.create_task(queue.embed(["a"]))
    await asyncio.sleep(0.05)
    small = [asyncio.create_task(queue.embed(["b", "c"])) for _ in range(3)]
    big = asyncio.create_task(queue.embed(["d"] * 9))
    await asyncio.sleep(0.05)
    model.release.set()
    await asyncio.gather(held, *small, big)
    assert [len(call) for call in model.calls] == [1, 4, 2, 9]
    await queue.aclose()


async def test_a_failed_batch_fails_its_callers_and_the_queue_goes_on() -> None:
    model = CountingEmbedder()
    model.fail_on = "boom"
    queue = EmbedQueue(model)
    with pytest.raises(EmbeddingUnavailable):
        await queue.embed(["boom"])
    assert (await queue.embed(["fine"])).shape == (1, 2)
    await queue.aclose()
    assert await queue.embed([]) is not None  # empty requests never reach the model
    assert len(model.calls) == 2


async def test_a_text_embedded_lately_is_not_run_through_the_model_again() -> None:
    model = CountingEmbedder()
    queue = EmbedQueue(model, recent=2)
    first = await queue.embed(["Ada: fine", "Sam: hello"])
    again = await queue.embed(["Ada: fine"])
    assert again.tolist() == first[:1].tolist()
    assert len(model.calls) == 1
    assert queue.reused == 1
    # A request with one text not known goes to the model whole.
    await queue.embed(["Ada: fine", "new"])
    assert model.calls[-1] == ["Ada: fine", "new"]
    # Only the last ``recent`` texts are kept: "Sam: hello" was the oldest.
    await queue.embed(["Sam: hello"])
    assert model.calls[-1] == ["Sam: hello"]
    assert len(model.calls) == 3
    await queue.aclose()


async def test_a_busy_gathering_queue_waits_for_a_fuller_batch_a_quiet_one_never() -> None:
    model = CountingEmbedder()
    queue = EmbedQueue(model, gather_s=0.2)
    # Quiet: a lone request goes at once, alone.
    await asyncio.wait_for(queue.embed(["lone"]), 0.15)
    # Busy (more than BUSY_TEXTS_PER_S texts in the last second): requests a moment
    # apart share one call instead of one call each.
    await queue.embed([f"warm {n}" for n in range(20)])
    calls = len(model.calls)
    spread = []
    for n in range(4):
        spread.append(asyncio.create_task(queue.embed([f"late {n}"])))
        await asyncio.sleep(0.02)
    await asyncio.gather(*spread)
    assert [len(call) for call in model.calls[calls:]] == [4]
    await queue.aclose()


async def held_batch() -> tuple[CountingEmbedder, EmbedQueue, asyncio.Task[NDArray[np.float32]]]:
    """A queue whose first batch is running, held until ``model.release`` is set: what
    is asked for next shares the following call."""
    model = CountingEmbedder()
    queue = EmbedQueue(model, max_batch=64)
    model.release.clear()
    held = asyncio.create_task(queue.embed(["hold"]))
    await asyncio.sleep(0.05)
    return model, queue, held


async def test_embed_then_runs_in_the_embedding_thread_for_its_own_rows() -> None:
    model, queue, held = await held_batch()
    threads: list[int] = []

    def first_column(vectors: NDArray[np.float32]) -> list[float]:
        threads.append(threading.get_ident())
        return [float(v) for v in vectors[:, 0]]

    # Queued behind the held batch: it shares the next call with a plain request.
    followed = asyncio.create_task(queue.embed_then(["abc", "de"], first_column))
    plain = asyncio.create_task(queue.embed(["fghi"]))
    await asyncio.sleep(0.05)
    model.release.set()
    await held
    vectors, result = await followed
    assert vectors.tolist() == [[3.0, ord("a")], [2.0, ord("d")]]
    assert result == [3.0, 2.0]  # its own rows, not the batch's
    assert (await plain).tolist() == [[4.0, ord("f")]]
    assert len(model.calls) == 2
    # In the worker thread that embedded them, never on the event loop's.
    assert len(threads) == 1
    assert threads[0] != threading.get_ident()
    await queue.aclose()


async def test_a_failing_then_fails_its_caller_only() -> None:
    model, queue, held = await held_batch()

    def broken(vectors: NDArray[np.float32]) -> None:
        raise RuntimeError("the index fell over")

    failing = asyncio.create_task(queue.embed_then(["abc"], broken))
    plain = asyncio.create_task(queue.embed(["xyz"]))
    await asyncio.sleep(0.05)
    model.release.set()
    await held
    with pytest.raises(RuntimeError, match="index fell over"):
        await asyncio.wait_for(failing, 5)
    # The queue's worker is not taken down with it: the batch's other caller is answered.
    assert (await asyncio.wait_for(plain, 5)).tolist() == [[3.0, ord("x")]]
    assert len(model.calls) == 2
    await queue.aclose()


async def test_a_slow_then_does_not_hold_up_the_batch_s_other_callers() -> None:
    model, queue, held = await held_batch()
    searching = threading.Event()

    def slow(vectors: NDArray[np.float32]) -> int:
        searching.wait(5)
        return 1

    followed = asyncio.create_task(queue.embed_then(["abc"], slow))
    plain = asyncio.create_task(queue.embed(["xyz"]))
    await asyncio.sleep(0.05)
    model.release.set()
    await held
    # Answered while the other caller's follow still runs in the worker thread.
    assert (await asyncio.wait_for(plain, 2)).tolist() == [[3.0, ord("x")]]
    assert not followed.done()
    searching.set()
    assert (await asyncio.wait_for(followed, 5))[1] == 1
    await queue.aclose()
