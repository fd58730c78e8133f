"""durable_chain_pg: the durable_chain scenario journaled to PostgreSQL.

Each hop is one group commit, here one fenced ``INSERT``-and-``UPDATE`` statement
committed by the server (whose fsync and synchronous_commit settings the note shows:
the figures in docs/performance.md are with both on).  quality.md wants at most 1 ms
per step and at most 1.5x the SQLite figure of the same run (the ``x durable_chain``
note).  The note also gives what a bare one-row commit costs on the same server in the
same run, for scale.  The server: :mod:`bench._postgres`.
"""

from __future__ import annotations

import statistics
import time

from bench import _postgres
from bench._harness import Scenario, expect, run_timed, stopwatch
from bench.chain import Chain

_commits: list[float] = []


def _raw_commits(schema: str, count: int = 50) -> list[float]:
    """Seconds of ``count`` one-row INSERT commits straight through psycopg: what the
    server's durable commit costs right now (the disk is shared and its speed drifts)."""
    import psycopg

    seconds = []
    with psycopg.connect(_postgres.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{schema}".bench_commits (id serial, data text)')
        insert = f'INSERT INTO "{schema}".bench_commits (data) VALUES (%s)'
        for _ in range(count):
            start = time.perf_counter()
            conn.execute(insert, ("x" * 200,))
            seconds.append(time.perf_counter() - start)
    return seconds


async def _timed(n: int) -> float:
    from tickwork.journal import PostgresJournal

    with _postgres.fresh_schema() as schema:
        store = PostgresJournal(_postgres.dsn(), schema=schema)
        try:
            workflow = Chain(timeout=None, journal=store)
            expect("warm-up hops", await workflow.run(hops=3), 3)
            hops, elapsed = await stopwatch(workflow.run(run_id="chain", hops=n))
            expect("hops made", hops, n)
            expect("unfinished runs", await store.list_unfinished(), [])
            entry = await store.get_run("chain")
            expect("the run's status", entry.status if entry else None, "completed")
        finally:
            store.close()
        _commits.extend(_raw_commits(schema))
    return elapsed


def measure(n: int) -> float:
    return run_timed(_timed, n)


def _note(n: int, median: float) -> str:
    try:
        settings = _postgres.durability()
    except Exception as error:  # the server may be gone by the time the table prints
        settings = f"server settings unknown ({type(error).__name__})"
    if not _commits:
        return settings
    commit = statistics.median(_commits)
    return (
        f"{settings}; a bare one-row commit: {commit * 1e3:.2f} ms, a step "
        f"{median / n / commit:.1f}x that"
    )


SCENARIO = Scenario(
    name="durable_chain_pg",
    summary="the chain journaled to PostgreSQL (one commit per hop)",
    unit="step",
    sizes=(200, 1_000),
    quick_sizes=(50, 200),
    measure=measure,
    vs_baseline=False,
    vs_scenario="durable_chain",
    note=_note,
    requires=_postgres.postgres_missing,
    goal="<= 1 ms per step and <= 1.5x durable_chain (fsync on)",
)
