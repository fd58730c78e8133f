"""snapshot: ``ctx.to_dict()`` after every finished step of an n-item fan-out.

``snapshot_off`` runs the same fan-out without snapshots; the table's ``x vs`` column
gives the ratio quality.md bounds by 2 (snapshots must cost O(current state), never a
replay of the history).  Each snapshot is checked to be JSON-serializable on the last
step, and the join must see all n items.
"""

from __future__ import annotations

import json

from bench._harness import Scenario, expect, run_timed, stopwatch
from tickwork import Event, StartEvent, StopEvent, Workflow, step
from tickwork.events import StepState, StepStateChanged


class Item(Event):
    number: int


class Result(Event):
    number: int


class FanOut(Workflow):
    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(number=i) for i in range(ev.size)]

    @step(num_workers=8)
    async def work(self, ev: Item) -> Result:
        return Result(number=ev.number)

    @step
    async def join(self, results: list[Result]) -> StopEvent:
        return StopEvent(result=sum(r.number for r in results))


async def _run(n: int, snapshots: bool) -> tuple[int, int]:
    handler = FanOut(timeout=None).run(size=n)
    taken = 0
    last: dict[str, object] | None = None
    async for event in handler.stream_events(expose_internal=snapshots):
        if isinstance(event, StepStateChanged) and event.step_state is StepState.NOT_RUNNING:
            last = handler.ctx.to_dict()
            taken += 1
    result = await handler
    if last is not None:
        json.dumps(last)
    return result, taken


def _timed(snapshots: bool):  # type: ignore[no-untyped-def]
    async def body(n: int) -> float:
        expect("warm-up sum", (await _run(3, snapshots))[0], 3)
        (total, taken), elapsed = await stopwatch(_run(n, snapshots))
        expect("sum of items", total, n * (n - 1) // 2)
        if snapshots:
            expect("snapshots taken", taken, n + 2)
        return elapsed

    return body


def measure_on(n: int) -> float:
    return run_timed(_timed(True), n)


def measure_off(n: int) -> float:
    return run_timed(_timed(False), n)


SCENARIO_OFF = Scenario(
    name="snapshot_off",
    summary="n-item fan-out + join, no snapshots (reference for snapshot)",
    unit="item",
    sizes=(1_000,),
    quick_sizes=(200,),
    measure=measure_off,
    goal="reference",
)

SCENARIO = Scenario(
    name="snapshot",
    summary="the same fan-out with ctx.to_dict() after every finished step",
    unit="item",
    sizes=(1_000,),
    quick_sizes=(200,),
    measure=measure_on,
    vs_scenario="snapshot_off",
    goal="total <= 2x the run without snapshots (aim 1.3x)",
)
