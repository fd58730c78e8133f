"""durable_concurrent: ``m`` 3-step runs at once, all journaled to one SQLite file.

The file is in WAL mode with an fsync on every commit.  ``run()`` registers each run
(one transaction, before it returns its handler: the API makes that synchronous), then
all of them go; the timed region starts once every run is registered and ends with the
last result, so it measures the durable steps.  Each run's result depends on its input,
so mixed-up runs are caught, and no run may be left unfinished in the file.
quality.md wants at least 5,000 durable steps per second at m = 1,000, which takes group
commit *across* runs: the writes of runs that arrive while a commit is in flight share
the next transaction and its fsync.

The untimed extra pass reports the registration time per run and counts the
transactions the store committed while the steps ran (``COMMIT`` statements seen by a
trace callback on its connection; with WAL and ``synchronous=FULL`` one commit is one
fsync).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from bench._harness import Scenario, expect, run_timed
from bench.concurrent_runs import ThreeSteps, _expected
from tickwork.journal import SqliteJournal

STEPS_PER_RUN = 3


async def _await_all(handlers: list[Any]) -> None:
    results: list[object] = [None] * len(handlers)

    async def wait(i: int) -> None:
        results[i] = await handlers[i]

    async with anyio.create_task_group() as tg:
        for i in range(len(handlers)):
            tg.start_soon(wait, i)
    wrong = [i for i, result in enumerate(results) if result != _expected(i)]
    expect("runs with a wrong result", wrong[:5], [])


class _Pass:
    """One pass: how long registering and running took, and the commits counted."""

    def __init__(self) -> None:
        self.register_seconds = 0.0
        self.steps_seconds = 0.0
        self.commits: int | None = None


async def _one_pass(m: int, count_commits: bool) -> _Pass:
    measured = _Pass()
    with tempfile.TemporaryDirectory() as folder:
        store = SqliteJournal(Path(folder) / "runs.db")
        try:
            workflow = ThreeSteps(timeout=None, journal=store)
            await _await_all([workflow.run(value=i) for i in range(3)])  # warm-up
            start = time.perf_counter()
            handlers = [workflow.run(value=i) for i in range(m)]
            registered = time.perf_counter()
            commits = _count_commits(store) if count_commits else None
            await _await_all(handlers)
            measured.steps_seconds = time.perf_counter() - registered
            measured.register_seconds = registered - start
            measured.commits = None if commits is None else commits[0]
            unfinished = await store.list_unfinished()
            expect("unfinished runs", len(unfinished), 0)
        finally:
            store.close()
    return measured


def _count_commits(store: SqliteJournal) -> list[int]:
    """A counter of the transactions the store's connection commits from now on."""
    store.check()
    conn = store._conn  # the bench looks inside: the store keeps no counter
    assert conn is not None
    commits = [0]

    def trace(statement: str) -> None:
        if statement.lstrip().upper().startswith("COMMIT"):
            commits[0] += 1

    conn.set_trace_callback(trace)
    return commits


async def _timed(m: int) -> float:
    return (await _one_pass(m, False)).steps_seconds


def measure(m: int) -> float:
    return run_timed(_timed, m)


def commits_per_step(m: int) -> str:
    measured = anyio.run(_one_pass, m, True)
    assert measured.commits is not None
    return (
        f"{measured.commits / (m * STEPS_PER_RUN):.3f} commits (fsyncs)/step, "
        f"registering {measured.register_seconds / m * 1e3:.2f} ms/run"
    )


def _steps_per_second(m: int, seconds: float) -> str:
    return f"{m * STEPS_PER_RUN / seconds:,.0f} durable steps/s"


SCENARIO = Scenario(
    name="durable_concurrent",
    summary="m concurrent 3-step runs journaled to one SQLite file (WAL, fsync per commit)",
    unit="run",
    sizes=(1_000,),
    quick_sizes=(100,),
    measure=measure,
    vs_baseline=False,
    extra_pass=commits_per_step,
    note=_steps_per_second,
    goal=">= 5,000 durable steps/s at m = 1,000 (group commit across runs)",
)
