"""durable_chain: the chain scenario journaled to SQLite (WAL, fsync on every commit).

Each hop is one group commit (the ticks of one drain in one transaction).  quality.md
wants a journaled sequential step in about a millisecond (median per step).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench._harness import Scenario, expect, run_timed, stopwatch
from bench.chain import Chain
from tickwork.journal import SqliteJournal


async def _timed(n: int) -> float:
    with tempfile.TemporaryDirectory() as folder:
        store = SqliteJournal(Path(folder) / "runs.db")
        workflow = Chain(timeout=None, journal=store)
        expect("warm-up hops", await workflow.run(hops=3), 3)
        hops, elapsed = await stopwatch(workflow.run(hops=n))
        expect("hops made", hops, n)
        unfinished = await store.list_unfinished()
        expect("unfinished runs", unfinished, [])
        store.close()
    return elapsed


def measure(n: int) -> float:
    return run_timed(_timed, n)


SCENARIO = Scenario(
    name="durable_chain",
    summary="the chain journaled to SQLite (WAL, fsync per commit)",
    unit="step",
    sizes=(200, 1_000),
    quick_sizes=(50, 200),
    measure=measure,
    vs_baseline=False,
    goal="<= 1 ms per step (median)",
)
