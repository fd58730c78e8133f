"""stream: a step writes ``n`` events to the run's stream and the caller consumes them.

The caller checks that every event arrives once and in order before the run's result.
"""

from __future__ import annotations

import time

from bench._harness import Scenario, events_per_second, expect, run_timed
from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step


class Tick(Event):
    number: int


class Producer(Workflow):
    @step
    async def produce(self, ctx: Context, ev: StartEvent) -> StopEvent:
        for number in range(ev.events):
            ctx.write_event_to_stream(Tick(number=number))
        return StopEvent(result=ev.events)


async def _consume(workflow: Producer, n: int) -> int:
    handler = workflow.run(events=n)
    received = 0
    async for ev in handler.stream_events():
        if isinstance(ev, Tick):
            expect("stream order", ev.number, received)
            received += 1
    expect("events received", received, n)
    return int(await handler)


async def _timed(n: int) -> float:
    workflow = Producer(timeout=None)
    expect("warm-up result", await _consume(workflow, 3), 3)
    start = time.perf_counter()
    result = await _consume(workflow, n)
    elapsed = time.perf_counter() - start
    expect("run result", result, n)
    return elapsed


def measure(n: int) -> float:
    return run_timed(_timed, n)


SCENARIO = Scenario(
    name="stream",
    summary="a step writes n events to the stream, the caller consumes them",
    unit="event",
    sizes=(10_000, 100_000),
    quick_sizes=(1_000, 10_000),
    measure=measure,
    note=events_per_second,
    vs_scenario="stream_raw",
    goal=">= 2x the 0.1 figure (223-240k events/s at 10k); 100k within 10% of 10k",
)
