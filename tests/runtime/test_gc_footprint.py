"""How many objects the garbage collector tracks per run: a bound, counted, never timed.

Each full collection scans every tracked object, so with thousands of runs live at once
the tracked objects per run set how fast runs go (quality.md, ``concurrent_runs``).
``m`` runs of a 3-step workflow start together; the number of tracked objects is read
(collector disabled) at each checkpoint while they run, and once they have all finished
and their handlers are still held.  Dropping the handlers then leaves no cycle behind.

The bounds are the figures measured when they were set (asyncio: 46 per live run at the
peak, 14 per finished run; trio: 72 and 14), plus a little room.  A change that makes a
run hold more objects fails here; one that makes it hold fewer may lower them.
"""

from __future__ import annotations

import gc

import anyio
import pytest

from tickwork import Event, StartEvent, StopEvent, Workflow, step

RUNS = 200
LIVE_BOUND = {"asyncio": 49, "trio": 76}
FINISHED_BOUND = 16


class Middle(Event):
    value: int


class Last(Event):
    value: int


class ThreeSteps(Workflow):
    @step
    async def first(self, ev: StartEvent) -> Middle:
        return Middle(value=ev.value + 1)

    @step
    async def second(self, ev: Middle) -> Last:
        return Last(value=ev.value * 2)

    @step
    async def third(self, ev: Last) -> StopEvent:
        return StopEvent(result=ev.value)


@pytest.mark.anyio
async def test_tracked_objects_per_run_stay_bounded(anyio_backend: str) -> None:
    workflow = ThreeSteps(timeout=None)
    assert await workflow.run(value=1) == 4  # caches and first-use tables are not per run
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects())
        handlers = [workflow.run(value=i) for i in range(RUNS)]
        peak = 0.0
        for _ in range(8):  # every phase of the runs: started, in each step, ended
            await anyio.sleep(0)
            peak = max(peak, (len(gc.get_objects()) - before) / RUNS)
        results = [await handler for handler in handlers]
        for _ in range(5):  # let every run's task stop
            await anyio.sleep(0)
        finished = (len(gc.get_objects()) - before) / RUNS
        assert results == [(i + 1) * 2 for i in range(RUNS)]
        del results
        assert peak <= LIVE_BOUND[anyio_backend], f"{peak:.1f} tracked objects per live run"
        assert finished <= FINISHED_BOUND, f"{finished:.1f} tracked objects per finished run"
        del handlers
        assert gc.collect() == 0, "finished runs left reference cycles for the collector"
    finally:
        gc.enable()
