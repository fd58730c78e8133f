"""The workflows the fleet scenarios submit, and their workers serve.

``tickwork worker bench.fleet_flows:FLOWS`` serves all of them; the scenario that submits
a run creates the same class with ``journal=store``, so the names match.

- :class:`ThreeSteps` (from ``concurrent_runs``): a short 3-step run, result
  ``(value + 1) * 2``;
- :class:`Ticker`: counts to ``limit``, one step every ``TICK_SECONDS`` (a run that is
  busy when its worker dies);
- :class:`Wake`: asks (``Ready``), waits for ``Ping`` and, as soon as the waiting step
  runs again, writes ``Resumed(at=wall-clock time)`` to the stream.
"""

from __future__ import annotations

import time

import anyio

from bench.concurrent_runs import ThreeSteps
from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.events import HumanResponseEvent, InputRequiredEvent

__all__ = ["FLOWS", "Ping", "Ready", "Resumed", "ThreeSteps", "Ticker", "Wake"]

# Slow enough that a worker's CPU does not limit the failover scenario (n runs x 1/TICK
# durable steps a second), fast enough that a resumed run shows progress soon.
TICK_SECONDS = 0.1


class Tick(Event):
    count: int
    limit: int


class Ticker(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> Tick:
        return Tick(count=0, limit=ev.limit)

    @step
    async def tick(self, ev: Tick) -> Tick | StopEvent:
        await anyio.sleep(TICK_SECONDS)
        if ev.count + 1 >= ev.limit:
            return StopEvent(result=ev.count + 1)
        return Tick(count=ev.count + 1, limit=ev.limit)


class Ready(InputRequiredEvent):
    index: int


class Ping(HumanResponseEvent):
    pass


class Resumed(Event):
    at: float


class Wake(Workflow):
    @step
    async def wait(self, ctx: Context, ev: StartEvent) -> StopEvent:
        await ctx.wait_for_event(Ping, waiter_event=Ready(index=ev.index), timeout=None)
        ctx.write_event_to_stream(Resumed(at=time.time()))
        return StopEvent(result=ev.index)


FLOWS = [ThreeSteps, Ticker, Wake]
