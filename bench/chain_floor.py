"""chain_floor: the raw-asyncio floor of ``chain`` for a runtime that gives each step its task.

One event passes round-robin through 3 handlers, ``n`` hops in all, as in ``chain``: each
hop builds the next event (``chain``'s own event classes) and starts the next handler as a
new task in a copy of the run's context, which is what a runtime that runs every step
invocation as its own task (cancellable on its own, with its own context variables)
cannot avoid.  No queue, no central loop, no records: the handler spawns its successor
itself.  ``chain`` shows its median as a multiple of this one at the same ``n``; the gap
is the runtime's own work per hop (routing, the reducer, step state, the step scope).
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import time
from collections.abc import Coroutine
from typing import Any

from bench._harness import Scenario, expect, run_timed
from bench.chain import Hop, ToA, ToB, ToC

# Handler -> the event class its successor receives (a -> b -> c -> a ...).
_FOLLOWING: dict[type[Hop], type[Hop]] = {ToA: ToB, ToB: ToC, ToC: ToA}


def _spawn(coro: Coroutine[Any, Any, None], context: contextvars.Context) -> None:
    """Start ``coro`` as a new task in a copy of ``context`` (as tickwork's pool does)."""
    if sys.version_info >= (3, 11):
        asyncio.get_running_loop().create_task(coro, context=context.copy())
    else:  # Python 3.10: a task copies the context it is created in
        context.run(asyncio.get_running_loop().create_task, coro)


async def _floor(n: int) -> int:
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[int] = loop.create_future()
    context = contextvars.copy_context()

    async def handle(ev: Hop) -> None:
        hop = ev.hop + 1
        if hop >= ev.limit:
            finished.set_result(hop)
            return
        following = _FOLLOWING[type(ev)](hop=hop, limit=ev.limit)
        _spawn(handle(following), context)

    _spawn(handle(ToA(hop=0, limit=n)), context)
    return await finished


async def _timed(n: int) -> float:
    expect("warm-up hops", await _floor(3), 3)
    start = time.perf_counter()
    hops = await _floor(n)
    elapsed = time.perf_counter() - start
    expect("hops made", hops, n)
    return elapsed


def measure(n: int) -> float:
    return run_timed(_timed, n, backend="asyncio")


SCENARIO = Scenario(
    name="chain_floor",
    summary="raw asyncio: chain's hops, each handler a new task building the next event",
    unit="hop",
    sizes=(1_000, 10_000),
    quick_sizes=(100, 1_000),
    measure=measure,
    goal="the floor of chain for a task per step (a task, a context copy, an event)",
)
