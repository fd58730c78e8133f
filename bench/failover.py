"""failover: how long a dead worker's runs take to resume on another worker.

Worker A (``--lease 2``) owns n busy ``Ticker`` runs (one step every 100 ms); worker B
is up and idle.  Timed: from SIGKILL of A until every one of the n runs is owned by B and
has a record B appended (its ``last_seq`` grew at a new epoch), which includes up to one
tick for the step that was in flight to run again.  The lease must expire first (up to
``LEASE_SECONDS`` after A's last renewal: nothing notifies an expiry), then B claims at
its next poll (every second), so quality.md wants at most the lease time plus 2 s.
Afterwards every run is cancelled through a ``RemoteHandler`` and must end as
``cancelled``: B really runs them.  The server: :mod:`bench._postgres`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread

from bench import _postgres
from bench._harness import BenchmarkError, Scenario, expect, run_timed
from bench._workers import Workers
from bench.fleet_flows import Ticker

LEASE_SECONDS = 2.0
Row = tuple[Any, ...]  # (owner, epoch, last_seq, status)


class _Runs:
    """Reads who owns which run, in one query on a connection of its own."""

    def __init__(self, schema: str) -> None:
        import psycopg

        self._conn = psycopg.connect(_postgres.dsn(), autocommit=True)
        self._query = f'SELECT run_id, owner, epoch, last_seq, status FROM "{schema}".runs'

    async def read(self) -> dict[str, Row]:
        """run id -> (owner, epoch, last_seq, status)."""
        rows = await anyio.to_thread.run_sync(lambda: self._conn.execute(self._query).fetchall())
        return {row[0]: tuple(row[1:]) for row in rows}

    async def until(
        self, what: str, check: Callable[[dict[str, Row]], bool], workers: Workers, limit: float
    ) -> dict[str, Row]:
        """Poll (every 5 ms) until ``check`` holds; ``BenchmarkError`` after ``limit`` s."""
        deadline = time.monotonic() + limit
        while True:
            rows = await self.read()
            if check(rows):
                return rows
            workers.check_alive()
            if time.monotonic() > deadline:
                raise BenchmarkError(f"{what} did not happen within {limit:.0f} s: {rows}")
            await anyio.sleep(0.005)

    def close(self) -> None:
        self._conn.close()


def _resumed(now: Row, before: Row, owner: str) -> bool:
    """Whether ``owner`` holds the run at a newer epoch and appended to it."""
    return bool(now[0] == owner and now[1] > before[1] and now[2] > before[2])


async def _cancel_all(store: Any, run_ids: list[str]) -> None:
    """Cancel every run through a RemoteHandler; each must end as ``cancelled``."""
    from tickwork.errors import WorkflowCancelledByUser

    for run_id in run_ids:
        await (await store.attach(run_id)).cancel_run()
    for run_id in run_ids:
        handler = await store.attach(run_id)
        with anyio.fail_after(30), contextlib.suppress(WorkflowCancelledByUser):
            await handler
        entry = await store.get_run(run_id)
        expect(f"status of {run_id}", entry.status if entry else None, "cancelled")


async def _failover(store: Any, runs: _Runs, workers: Workers, n: int) -> float:
    (victim,) = workers.start(1)
    a = (await workers.ready(store, 1))[victim.pid]
    workflow = Ticker(journal=store, timeout=None)
    for i in range(n):
        await workflow.submit(run_id=f"t{i}", limit=1_000_000)
    await runs.until(
        "A owning and running every run",
        lambda rows: len(rows) == n and all(r[0] == a and r[2] >= 3 for r in rows.values()),
        workers,
        60,
    )
    (rescuer,) = workers.start(1)
    b = (await workers.ready(store, 2))[rescuer.pid]
    lost = sorted(run for run, row in (await runs.read()).items() if row[0] != a)
    if lost:  # A's renewals must keep its runs until it dies
        raise BenchmarkError(f"worker A lost runs {lost} before it was killed")
    workers.kill(victim)
    start = time.perf_counter()
    before = await runs.read()  # A is dead: its last records are final
    await runs.until(
        "B resuming every run",
        lambda rows: all(_resumed(rows[run], before[run], b) for run in before),
        workers,
        LEASE_SECONDS + 30,
    )
    elapsed = time.perf_counter() - start
    await _cancel_all(store, sorted(before))
    return elapsed


async def _timed(n: int) -> float:
    from tickwork.journal import PostgresJournal

    with _postgres.fresh_schema() as schema:
        store = PostgresJournal(_postgres.dsn(), schema=schema)
        store.check()
        runs = _Runs(schema)
        store_args = ["--dsn", _postgres.dsn(), "--schema", schema]
        options = ("--lease", str(LEASE_SECONDS), "--concurrency", str(n), "--grace", "1")
        try:
            with Workers(store_args, *options) as workers:
                return await _failover(store, runs, workers, n)
        finally:
            runs.close()
            store.close()


def measure(n: int) -> float:
    return run_timed(_timed, n)


def _note(n: int, median: float) -> str:
    return (
        f"{n} runs resumed {median:.2f} s after SIGKILL (lease {LEASE_SECONDS:g} s: "
        f"lease + {median - LEASE_SECONDS:.2f} s)"
    )


SCENARIO = Scenario(
    name="failover",
    summary="SIGKILL a worker owning n busy runs; time until another worker resumed all",
    unit="run",
    sizes=(5, 20),
    quick_sizes=(5,),
    measure=measure,
    vs_baseline=False,
    note=_note,
    requires=_postgres.postgres_missing,
    tiny=2,
    goal=f"<= lease ttl + 2 s (lease {LEASE_SECONDS:g} s here)",
)
