"""The loop counts the workers it dispatched that have not begun, and reduces nothing
while one has not: a worker cancelled before it began must come off that count, or the
run would wait for it forever.

``Take(2, cancel_rest=True)`` over four members with two worker slots: the first two
members finish together, so their two results are reduced in one drain.  The first frees
a slot and dispatches the third member; the second fills the ``Take`` and cuts the
stream, which cancels the third before its worker began.  The run must then go on to its
next step and end.
"""

from __future__ import annotations

import contextvars
from typing import Annotated

import anyio
import pytest

from tickwork import Event, StartEvent, StopEvent, Workflow, step
from tickwork.collect import Collect, Take
from tickwork.runtime.control_loop._task_pool import AsyncioPool, TrioPool

pytestmark = pytest.mark.anyio


class Item(Event):
    n: int


class Done(Event):
    n: int


class Won(Event):
    ns: list[int]


class CutBeforeBegin(Workflow):
    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=k) for k in range(4)]

    @step(num_workers=2)
    async def work(self, ev: Item) -> Done:
        return Done(n=ev.n)

    @step
    async def first_two(
        self, events: Annotated[list[Done], Collect(Take(2, cancel_rest=True))]
    ) -> Won:
        return Won(ns=sorted(e.n for e in events))

    @step
    async def after(self, ev: Won) -> StopEvent:
        await anyio.sleep(0.001)  # the run waits (and its loop with it) before it ends
        return StopEvent(result=ev.ns)


async def test_a_run_goes_on_after_a_worker_is_cancelled_before_it_began() -> None:
    with anyio.fail_after(5):
        assert await CutBeforeBegin(timeout=None).run() == [0, 1]


async def test_the_pool_says_whether_a_cancelled_worker_will_never_begin(
    anyio_backend: str,
) -> None:
    began: list[str] = []

    async def worker(key: str) -> None:
        began.append(key)
        await anyio.sleep(10)

    context = contextvars.copy_context()
    if anyio_backend == "asyncio":
        pool = AsyncioPool()
        pool.spawn("early", worker("early"), context)
        assert pool.cancel("early") is True, "cancelled before its first step"
        pool.spawn("late", worker("late"), context)
        await anyio.sleep(0)
        assert began == ["late"]
        assert pool.cancel("late") is False, "it began"
        assert pool.cancel("late") is False, "gone already"
        await anyio.sleep(0)
        assert began == ["late"]
        return
    trio_pool = TrioPool()
    trio_pool.spawn("deferred", worker("deferred"), context)  # no nursery yet
    assert trio_pool.cancel("deferred") is True
    assert trio_pool.idle()
    import trio
    import trio.testing

    async with trio.open_nursery() as nursery:
        trio_pool.attach(nursery)
        trio_pool.spawn("late", worker("late"), context)
        await trio.testing.wait_all_tasks_blocked()  # trio runs new tasks in any order
        assert began == ["late"]
        assert trio_pool.cancel("late") is False, "it began"
    assert trio_pool.idle()
