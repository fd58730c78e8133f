"""chain: one event passes round-robin through 3 steps, ``n`` hops in all.

Steps ``a`` -> ``b`` -> ``c`` -> ``a`` ... each add one to the hop count, so the run's
result must be exactly ``n``. The per-hop time is the runtime's cost of routing one event
to one step and running it; quality.md wants it within 2.8x the raw-asyncio hop.
"""

from __future__ import annotations

from bench._harness import Scenario, expect, run_timed, stopwatch
from tickwork import Event, StartEvent, StopEvent, Workflow, step


class Hop(Event):
    hop: int
    limit: int


class ToA(Hop):
    pass


class ToB(Hop):
    pass


class ToC(Hop):
    pass


def _next(ev: Hop, following: type[Hop]) -> Hop | StopEvent:
    hop = ev.hop + 1
    if hop >= ev.limit:
        return StopEvent(result=hop)
    return following(hop=hop, limit=ev.limit)


class Chain(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> ToA:
        return ToA(hop=0, limit=ev.hops)

    @step
    async def a(self, ev: ToA) -> ToB | StopEvent:
        return _next(ev, ToB)

    @step
    async def b(self, ev: ToB) -> ToC | StopEvent:
        return _next(ev, ToC)

    @step
    async def c(self, ev: ToC) -> ToA | StopEvent:
        return _next(ev, ToA)


async def timed_chain(n: int) -> float:
    workflow = Chain(timeout=None)
    expect("warm-up hops", await workflow.run(hops=3), 3)
    hops, elapsed = await stopwatch(workflow.run(hops=n))
    expect("hops made", hops, n)
    return elapsed


def measure(n: int) -> float:
    return run_timed(timed_chain, n, backend="asyncio")


SCENARIO = Scenario(
    name="chain",
    summary="one event round-robin through 3 steps, n hops",
    unit="hop",
    sizes=(1_000, 10_000),
    quick_sizes=(100, 1_000),
    measure=measure,
    vs_scenario="chain_floor",
    goal="<= 2.8x the raw-asyncio hop (0.1: 3.6-4.0x)",
)
