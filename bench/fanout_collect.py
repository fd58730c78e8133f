"""fanout_collect: a step returns ``list[Item]`` of n, a worker maps each, a ``list[E]`` join.

``split`` returns ``n`` ``Item`` events in one list (one fan-out stream), ``work``
(``num_workers=8``) turns each into a ``Result``, and ``join`` (``events: list[Result]``)
fires once when the stream closes. The result is the member count and the sum of the item
numbers, so a lost or duplicated member changes it.
"""

from __future__ import annotations

from bench._harness import Scenario, expect, run_timed, stopwatch
from tickwork import Event, StartEvent, StopEvent, Workflow, step


class Item(Event):
    number: int


class Result(Event):
    number: int


class FanoutCollect(Workflow):
    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(number=number) for number in range(ev.size)]

    @step(num_workers=8)
    async def work(self, ev: Item) -> Result:
        return Result(number=ev.number)

    @step
    async def join(self, events: list[Result]) -> StopEvent:
        return StopEvent(result=(len(events), sum(ev.number for ev in events)))


async def _timed(n: int) -> float:
    workflow = FanoutCollect(timeout=None)
    expect("warm-up result", await workflow.run(size=3), (3, 3))
    result, elapsed = await stopwatch(workflow.run(size=n))
    expect("(joined, sum of item numbers)", result, (n, n * (n - 1) // 2))
    return elapsed


def measure(n: int) -> float:
    return run_timed(_timed, n)


SCENARIO = Scenario(
    name="fanout_collect",
    summary="return list[Item] of n, worker step num_workers=8, list[Result] join",
    unit="item",
    sizes=(1_000, 10_000, 100_000),
    quick_sizes=(100, 1_000, 10_000),
    measure=measure,
    vs_scenario="fanout_floor",
    goal="10k in <= 0.12 s (0.1: 0.25 s); growth exponent <= 1.05",
)
