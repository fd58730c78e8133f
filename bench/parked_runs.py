"""parked_runs: m runs each blocked in ``wait_for_event``, then all answered.

The extra pass measures the memory retained per parked run (tracemalloc, after a
collection) while all m runs are waiting; quality.md bounds it by 4 KiB.
"""

from __future__ import annotations

import gc
import tracemalloc

import anyio

from bench._harness import Scenario, expect, run_timed, stopwatch
from tickwork import Context, StartEvent, StopEvent, Workflow, step
from tickwork.events import HumanResponseEvent, InputRequiredEvent


class Ask(InputRequiredEvent):
    pass


class Answer(HumanResponseEvent):
    value: int


class Parked(Workflow):
    @step
    async def wait(self, ctx: Context, ev: StartEvent) -> StopEvent:
        answer = await ctx.wait_for_event(Answer, waiter_event=Ask(), timeout=None)
        return StopEvent(result=answer.value)


async def _park(workflow: Parked, m: int) -> list:  # type: ignore[type-arg]
    handlers = [workflow.run() for _ in range(m)]
    for handler in handlers:
        async for event in handler.stream_events():
            if isinstance(event, Ask):
                break
    return handlers


async def _answer(handlers: list) -> int:  # type: ignore[type-arg]
    for i, handler in enumerate(handlers):
        handler.ctx.send_event(Answer(value=i))
    total = 0
    for handler in handlers:
        total += await handler
    return total


async def _timed(m: int) -> float:
    workflow = Parked(timeout=None)

    async def everything() -> int:
        return await _answer(await _park(workflow, m))

    total, elapsed = await stopwatch(everything())
    expect("sum of answers", total, m * (m - 1) // 2)
    return elapsed


def measure(m: int) -> float:
    return run_timed(_timed, m)


async def _retained(m: int) -> float:
    workflow = Parked(timeout=None)
    await _answer(await _park(workflow, 2))
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        handlers = await _park(workflow, m)
        await anyio.sleep(0.05)
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
        await _answer(handlers)
    finally:
        tracemalloc.stop()
    return (after - before) / m


def retained_memory(m: int) -> str:
    per_run = anyio.run(_retained, m)
    return f"{per_run / 1024:.1f} KiB retained per parked run"


SCENARIO = Scenario(
    name="parked_runs",
    summary="m runs parked in wait_for_event, then all answered",
    unit="run",
    sizes=(1_000, 10_000),
    quick_sizes=(100, 1_000),
    measure=measure,
    extra_pass=retained_memory,
    goal="<= 4 KiB retained per parked run",
)
