"""concurrent_runs: ``m`` runs of a 3-step workflow, all live at once.

One workflow instance starts ``m`` runs, then awaits them all from a task group; each
run's result depends on its input, so mixed-up runs are caught. A separate, untimed pass
under ``tracemalloc`` reports the peak memory per live run.
"""

from __future__ import annotations

import gc
import time
import tracemalloc

import anyio

from bench._harness import Scenario, expect, run_timed
from tickwork import Event, StartEvent, StopEvent, Workflow, step


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


def _expected(value: int) -> int:
    return (value + 1) * 2


async def _run_all(workflow: ThreeSteps, m: int) -> None:
    results: list[object] = [None] * m
    handlers = [workflow.run(value=i) for i in range(m)]

    async def wait(i: int) -> None:
        results[i] = await handlers[i]

    async with anyio.create_task_group() as tg:
        for i in range(m):
            tg.start_soon(wait, i)
    wrong = [i for i, result in enumerate(results) if result != _expected(i)]
    expect("runs with a wrong result", wrong[:5], [])


async def _timed(m: int) -> float:
    workflow = ThreeSteps(timeout=None)
    await _run_all(workflow, 3)
    start = time.perf_counter()
    await _run_all(workflow, m)
    return time.perf_counter() - start


def measure(m: int) -> float:
    return run_timed(_timed, m)


async def _peak_bytes_per_run(m: int) -> float:
    workflow = ThreeSteps(timeout=None)
    await _run_all(workflow, 3)  # imports, caches and validation are not per-run memory
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        await _run_all(workflow, m)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return (peak - before) / m


def peak_memory(m: int) -> str:
    per_run = anyio.run(_peak_bytes_per_run, m)
    return f"peak {per_run / 1024:.1f} KiB/run"


SCENARIO = Scenario(
    name="concurrent_runs",
    summary="m runs of a 3-step workflow at once",
    unit="run",
    sizes=(100, 1_000, 10_000),
    quick_sizes=(10, 100, 1_000),
    measure=measure,
    extra_pass=peak_memory,
    vs_scenario="baseline_runs",
    goal="exponent <= 1.10 from 1k to 10k; <= 2.5x baseline_runs per run; peak memory reported",
)
