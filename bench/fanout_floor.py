"""fanout_floor: the raw-asyncio floor of ``fanout_collect`` for a task per item.

As in ``fanout_collect``, ``n`` ``Item`` events are built in one list, each becomes a
``Result`` in a handler of its own, at most 8 at once, and the results are joined in one
list whose member count and number sum are the result.  Each handler runs as a new task
in a copy of the run's context, which is what a runtime that runs every step invocation
as its own task (cancellable on its own, with its own context variables) cannot avoid;
when a handler ends it starts the next item itself.  No queue, no central loop, no
records, no stream accounting.  ``fanout_collect`` shows its median as a multiple of this
one at the same ``n``; the gap is the runtime's own work per item.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Coroutine
from typing import Any

from bench._harness import Scenario, expect, run_timed
from bench.fanout_collect import Item, Result

WORKERS = 8


def _spawn(coro: Coroutine[Any, Any, None], context: contextvars.Context) -> None:
    """Start ``coro`` as a new task in a copy of ``context`` (as tickwork's pool does)."""
    asyncio.get_running_loop().create_task(coro, context=context.copy())


async def _floor(n: int) -> tuple[int, int]:
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[list[Result]] = loop.create_future()
    context = contextvars.copy_context()
    items = [Item(number=number) for number in range(n)]
    results: list[Result] = []
    following = WORKERS

    async def work(ev: Item) -> None:
        nonlocal following
        results.append(Result(number=ev.number))
        if len(results) == n:
            finished.set_result(results)
        elif following < n:
            following += 1
            _spawn(work(items[following - 1]), context)

    for item in items[:WORKERS]:
        _spawn(work(item), context)
    joined = await finished
    return len(joined), sum(ev.number for ev in joined)


async def _timed(n: int) -> float:
    expect("warm-up result", await _floor(3), (3, 3))
    start = time.perf_counter()
    result = await _floor(n)
    elapsed = time.perf_counter() - start
    expect("(joined, sum of item numbers)", result, (n, n * (n - 1) // 2))
    return elapsed


def measure(n: int) -> float:
    return run_timed(_timed, n, backend="asyncio")


SCENARIO = Scenario(
    name="fanout_floor",
    summary="raw asyncio: fanout_collect's items, each a new task, 8 at once, one list",
    unit="item",
    sizes=(1_000, 10_000, 100_000),
    quick_sizes=(100, 1_000, 10_000),
    measure=measure,
    goal="the floor of fanout_collect for a task per item (a task, a context copy, events)",
)
