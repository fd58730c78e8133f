"""baseline: the physical floor of an in-process runtime, in raw asyncio.

One value hops round-robin through 3 tasks connected by ``asyncio.Queue`` ``n`` times.
Each hop is what a runtime cannot avoid: a queue put, a task wake-up and a coroutine call.
Every other scenario's per-item time is shown as a multiple of this hop.
"""

from __future__ import annotations

import asyncio
import time

from bench._harness import Scenario, expect

STATIONS = 3


async def _handle(hop: int) -> int:
    return hop + 1


async def _hops(n: int) -> float:
    queues: list[asyncio.Queue[int]] = [asyncio.Queue() for _ in range(STATIONS)]
    finished: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def station(position: int) -> None:
        inbox, outbox = queues[position], queues[(position + 1) % STATIONS]
        while True:
            hop = await inbox.get()
            if hop == n:
                finished.set_result(hop)
                return
            outbox.put_nowait(await _handle(hop))

    tasks = [asyncio.create_task(station(i)) for i in range(STATIONS)]
    await asyncio.sleep(0)  # let every station reach its first get()
    start = time.perf_counter()
    queues[0].put_nowait(0)
    hops = await finished
    elapsed = time.perf_counter() - start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    expect("hops made", hops, n)
    return elapsed


def measure(n: int) -> float:
    return asyncio.run(_hops(n))


SCENARIO = Scenario(
    name="baseline",
    summary="raw asyncio: a value hops through 3 tasks over asyncio.Queue",
    unit="hop",
    sizes=(1_000, 10_000, 100_000),
    quick_sizes=(1_000, 10_000),
    measure=measure,
    goal="the reference hop (a queue put, a task wake-up, a coroutine call)",
)
