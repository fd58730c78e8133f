"""stream_runs: ``m`` runs at once, each streaming 100 events to a consumer of its own.

Every run's step writes ``EVENTS`` events to its stream; one task per run reads them,
checks their order and count, then awaits the run's result. The note gives the aggregate
events per second over all runs.
"""

from __future__ import annotations

import time

import anyio

from bench._harness import Scenario, expect, run_timed
from bench.stream import Producer, _consume

EVENTS = 100


async def _streams(m: int, events: int = EVENTS) -> None:
    workflow = Producer(timeout=None)
    results: list[object] = [None] * m

    async def consume(i: int) -> None:
        results[i] = await _consume(workflow, events)

    async with anyio.create_task_group() as tg:
        for i in range(m):
            tg.start_soon(consume, i)
    expect("runs with a wrong result", [r for r in results if r != events][:5], [])


async def _timed(m: int) -> float:
    await _streams(3)
    start = time.perf_counter()
    await _streams(m)
    return time.perf_counter() - start


def measure(m: int) -> float:
    return run_timed(_timed, m)


def _throughput(m: int, median: float) -> str:
    return f"{m * EVENTS / median:,.0f} events/s in all"


SCENARIO = Scenario(
    name="stream_runs",
    summary=f"m runs at once, each streaming {EVENTS} events to its own consumer",
    unit="run",
    sizes=(100, 1_000),
    quick_sizes=(10, 100),
    measure=measure,
    vs_baseline=False,
    note=_throughput,
    goal="aggregate events/s reported (quality.md)",
)
