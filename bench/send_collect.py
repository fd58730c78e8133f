"""send_collect: dynamic fan-out with ``ctx.send_event`` and fan-in with ``ctx.collect_events``.

``fan_out`` sends ``n`` ``Task`` events, ``work`` (``num_workers=8``) turns each into a
``Done``, and ``join`` waits for ``[Done] * n`` (n read from ``ctx.store``). The result is
the sum of the task numbers, so a lost or duplicated event changes it.
"""

from __future__ import annotations

from bench._harness import Scenario, expect, run_timed, stopwatch
from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step


class Task(Event):
    number: int


class Done(Event):
    number: int


class SendCollect(Workflow):
    @step
    async def fan_out(self, ctx: Context, ev: StartEvent) -> Task | None:
        await ctx.store.set("num_tasks", ev.tasks)
        for number in range(ev.tasks):
            ctx.send_event(Task(number=number))
        return None

    @step(num_workers=8)
    async def work(self, ev: Task) -> Done:
        return Done(number=ev.number)

    @step
    async def join(self, ctx: Context, ev: Done) -> StopEvent | None:
        num_tasks = await ctx.store.get("num_tasks")
        done = ctx.collect_events(ev, [Done] * num_tasks)
        if done is None:
            return None
        return StopEvent(result=(len(done), sum(d.number for d in done)))


async def _timed(n: int) -> float:
    workflow = SendCollect(timeout=None)
    expect("warm-up result", await workflow.run(tasks=3), (3, 3))
    result, elapsed = await stopwatch(workflow.run(tasks=n))
    expect("(joined, sum of task numbers)", result, (n, n * (n - 1) // 2))
    return elapsed


def measure(n: int) -> float:
    return run_timed(_timed, n)


SCENARIO = Scenario(
    name="send_collect",
    summary="send_event n tasks, worker step num_workers=8, collect_events join",
    unit="task",
    sizes=(1_000, 10_000),
    quick_sizes=(100, 1_000),
    measure=measure,
    goal="linear: growth exponent <= 1.1",
)
