"""What a scenario is, and the small helpers every scenario uses.

A scenario is a named measurement over a list of sizes. ``measure(n)`` performs **one**
repetition at size ``n`` on a fresh event loop, checks the result (raising
``BenchmarkError`` if it is wrong, so a broken scenario can never report a fast time) and
returns the elapsed seconds of the timed region only: setup and a warm-up run stay outside.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio

T = TypeVar("T")


class BenchmarkError(Exception):
    """A scenario produced a wrong result: its timings are meaningless."""


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    unit: str  # what one of the n items is: "hop", "task", "run", "event"
    sizes: tuple[int, ...]
    quick_sizes: tuple[int, ...]
    measure: Callable[[int], float]
    # Compare the per-item time with the raw-asyncio hop of the ``baseline`` scenario.
    vs_baseline: bool = True
    # Compare the median with another scenario's at the same size (trio vs asyncio chain).
    vs_scenario: str | None = None
    # An extra, untimed pass at size n whose result is printed in the notes (memory).
    extra_pass: Callable[[int], str] | None = None
    # Scenario-specific note from (n, median seconds), e.g. a throughput.
    note: Callable[[int, float], str] | None = None
    goal: str = ""


def expect(what: str, actual: object, expected: object) -> None:
    """Raise ``BenchmarkError`` unless ``actual == expected``."""
    if actual != expected:
        raise BenchmarkError(f"{what}: expected {expected!r}, got {actual!r}")


def run_timed(
    body: Callable[[int], Awaitable[float]], n: int, *, backend: str = "asyncio"
) -> float:
    """Run ``body(n)`` (which times itself and checks its result) on a fresh event loop."""
    return anyio.run(body, n, backend=backend)


async def stopwatch(awaitable: Awaitable[T]) -> tuple[T, float]:
    """Await ``awaitable`` and return its value with the elapsed seconds."""
    start = time.perf_counter()
    value = await awaitable
    return value, time.perf_counter() - start
