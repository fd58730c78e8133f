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
    # Why the scenario cannot run here (``None``: it can), e.g. no Postgres server; the
    # runner then prints a "skipped" row with the reason instead of measuring.
    requires: Callable[[], str | None] | None = None
    # The largest n the scenario runs (worker processes on a 2-core machine): larger sizes
    # asked for with ``--sizes`` are lowered to it.
    max_size: int | None = None
    # The n the smoke tests run it at, when their own tiny size would be slow here (a
    # scenario that starts processes, waits for leases or polls).
    tiny: int | None = None

    def unavailable(self) -> str | None:
        """Why this scenario cannot run here, or ``None``."""
        return self.requires() if self.requires is not None else None

    def fit(self, sizes: tuple[int, ...]) -> tuple[int, ...]:
        """``sizes`` lowered to ``max_size``, without repeats, in order."""
        if self.max_size is None:
            return sizes
        fitted: list[int] = []
        for n in sizes:
            n = min(n, self.max_size)
            if n not in fitted:
                fitted.append(n)
        return tuple(fitted)


def events_per_second(n: int, median: float) -> str:
    """A ``note`` for scenarios whose unit is an event: their throughput."""
    return f"{n / median:,.0f} events/s"


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
