"""baseline_runs: the raw-asyncio floor of ``concurrent_runs``.

``m`` runs at once, each a task that runs 3 steps, every step in a task of its own (as a
runtime runs a step invocation), handing its value to the next through an
``asyncio.Queue``; the caller awaits every run from an anyio task group exactly as
``concurrent_runs`` does. ``concurrent_runs`` shows its median as a multiple of this
one at the same ``m`` (quality.md: at most 2.5x).
"""

from __future__ import annotations

import asyncio
import time

import anyio

from bench._harness import Scenario, expect, run_timed


async def _first(value: int, out: asyncio.Queue[int]) -> None:
    out.put_nowait(value + 1)


async def _second(value: int, out: asyncio.Queue[int]) -> None:
    out.put_nowait(value * 2)


async def _third(value: int, out: asyncio.Queue[int]) -> None:
    out.put_nowait(value)


async def _raw_run(value: int) -> int:
    results: asyncio.Queue[int] = asyncio.Queue()
    for body in (_first, _second, _third):
        step_task = asyncio.create_task(body(value, results))
        value = await results.get()
        await step_task  # done already: it put its value before returning
    return value


def _expected(value: int) -> int:
    return (value + 1) * 2


async def _run_all_raw(m: int) -> None:
    results: list[object] = [None] * m
    runs = [asyncio.ensure_future(_raw_run(i)) for i in range(m)]

    async def wait(i: int) -> None:
        results[i] = await runs[i]

    async with anyio.create_task_group() as tg:
        for i in range(m):
            tg.start_soon(wait, i)
    wrong = [i for i, result in enumerate(results) if result != _expected(i)]
    expect("runs with a wrong result", wrong[:5], [])


async def _timed(m: int) -> float:
    await _run_all_raw(3)
    start = time.perf_counter()
    await _run_all_raw(m)
    return time.perf_counter() - start


def measure(m: int) -> float:
    return run_timed(_timed, m)


SCENARIO = Scenario(
    name="baseline_runs",
    summary="raw asyncio: m runs at once, 3 steps each, every step its own task",
    unit="run",
    sizes=(100, 1_000, 10_000),
    quick_sizes=(10, 100, 1_000),
    measure=measure,
    goal="the reference run of concurrent_runs",
)
