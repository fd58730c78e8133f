"""stream_raw: the raw-asyncio floor of ``stream``.

A task creates ``n`` events of the class ``stream`` writes (a pydantic model) and appends
them to a deque without yielding, as a step writing to the stream does; the caller reads
them through an async generator (waiting on an ``asyncio.Event`` while the deque is
empty) and checks that every event arrives once and in order, as ``stream``'s caller
does.  What is left is what a runtime cannot avoid: the events themselves, a buffer, an
async iteration.  ``stream`` shows its median as a multiple of this one at the same ``n``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator

from bench._harness import Scenario, events_per_second, expect, run_timed
from bench.stream import Tick


class _Buffer:
    """An unbounded FIFO of events and its end, read by one consumer."""

    def __init__(self) -> None:
        self.items: deque[Tick] = deque()
        self.closed = False
        self.changed = asyncio.Event()

    def put(self, event: Tick) -> None:
        self.items.append(event)
        self.changed.set()

    def close(self) -> None:
        self.closed = True
        self.changed.set()

    async def read(self) -> AsyncIterator[Tick]:
        items = self.items
        while True:
            if items:
                yield items.popleft()
                continue
            if self.closed:
                return
            self.changed.clear()
            await self.changed.wait()


async def _produce(buffer: _Buffer, n: int) -> int:
    for number in range(n):
        buffer.put(Tick(number=number))
    buffer.close()
    return n


async def _consume_raw(n: int) -> int:
    buffer = _Buffer()
    producer = asyncio.create_task(_produce(buffer, n))
    received = 0
    async for ev in buffer.read():
        if isinstance(ev, Tick):
            expect("stream order", ev.number, received)
            received += 1
    expect("events received", received, n)
    return await producer


async def _timed(n: int) -> float:
    expect("warm-up result", await _consume_raw(3), 3)
    start = time.perf_counter()
    result = await _consume_raw(n)
    elapsed = time.perf_counter() - start
    expect("run result", result, n)
    return elapsed


def measure(n: int) -> float:
    return run_timed(_timed, n)


SCENARIO = Scenario(
    name="stream_raw",
    summary="raw asyncio: a task appends n pydantic events to a deque, the caller reads them",
    unit="event",
    sizes=(10_000, 100_000),
    quick_sizes=(1_000, 10_000),
    measure=measure,
    note=events_per_second,
    goal="the floor of stream (the events, a buffer, an async iteration)",
)
