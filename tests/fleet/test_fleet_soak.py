"""Soak: many short runs over three workers leave nothing behind (scale-out.md §7.9).

The test submits short :class:`~tests.fleet.trial_child.Blip` runs (a send between two
steps, and one event from the caller through the inbox, sent twice under one
idempotency key to half of them) to three ``tickwork worker`` processes, waits for all
of them, and checks:

* every run completed with its result, its journal written once per seq and in order;
* no leaked lease: no run left unfinished or holding a lease, no worker registered after
  the workers stopped;
* records compacted: each finished run keeps only its final snapshot, no record before it;
* inbox drained: every item consumed;
* connections bounded: halfway and at the end the workers hold no more connections
  than their stores may (``pg_stat_activity``; each pool grows on demand up to its size
  and keeps what it opened, so a count that rises a little after the first half is a
  pool reaching its working size, while a leak of a connection per run, or per 50 runs,
  passes the bound), and none once they stopped.

Marked ``fleet_slow`` (``nox -s fleet``): 1,000 runs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from psycopg.conninfo import make_conninfo
from tests.fleet.fault_checks import (
    check_journal,
    check_settled,
)
from tests.fleet.fault_support import (
    Fleet,
    audited,
    install_audit,
    query,
    running_fleet,
)
from tests.fleet.trial_child import Blip, Nudge

from postgres_support import PgSchema
from tickwork.stores.records import JournalError

pytestmark = [pytest.mark.postgres, pytest.mark.fleet_slow]

WORKER_POOL = 8  # PostgresJournal's default pool_size
# A store's connections at most: its pool, its lease renewals, its listener and, under
# asyncio, its async lane.  The test's own store (submitting, awaiting) counts too: it
# has the same application name.
PER_STORE = WORKER_POOL + 3
CEILING = 3 * PER_STORE + PER_STORE


def _completed(dsn: str, schema: str) -> int:
    rows = query(dsn, "SELECT count(*) FROM {s}.runs WHERE status = 'completed'", schema=schema)
    return int(rows[0][0])


def _worker_connections(dsn: str, schema: str) -> int:
    rows = query(
        dsn,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
        f"tickwork:{schema}",
        schema=schema,
    )
    return int(rows[0][0])


async def _wait_completed(dsn: str, schema: str, count: int, timeout: float) -> None:
    with anyio.fail_after(timeout):
        while await anyio.to_thread.run_sync(_completed, dsn, schema) < count:
            await anyio.sleep(0.2)


def test_a_soak_of_short_runs_leaves_nothing_behind(pg_schema: PgSchema, tmp_path: Path) -> None:
    runs = 1000
    dsn, schema = pg_schema
    install_audit(dsn, schema)
    # The test's own connections are told apart from the workers'.
    driver_dsn = make_conninfo(dsn, application_name="soak-driver")
    fleet = Fleet(dsn, schema, tmp_path, lease=5.0, idle_release=0.5, concurrency=16)
    counts: dict[str, int] = {}
    began = time.monotonic()
    with running_fleet(fleet):
        for index, backend in enumerate(("asyncio", "trio", "asyncio")):
            fleet.start(index, backend=backend)
        fleet.wait_serving()

        async def main() -> None:
            from tickwork.stores.postgres import PostgresJournal

            store = PostgresJournal(driver_dsn, schema)
            limiter = anyio.Semaphore(8)

            async def submit(number: int) -> None:
                async with limiter:
                    flow = Blip(journal=store, timeout=None)
                    handler = await flow.submit(run_id=f"soak-{number}", number=number)
                    key = f"soak-{number}:nudge"
                    assert await handler.send_event(Nudge(value=1), idempotency_key=key)
                    if number % 2:
                        try:
                            again = await handler.send_event(Nudge(value=9), idempotency_key=key)
                        except JournalError as error:  # the run may have finished already
                            assert "finished" in str(error), error
                        else:
                            assert not again, "a second send under one key was delivered"

            try:
                warm = runs // 2  # the pools grow to their working size
                async with anyio.create_task_group() as group:
                    for number in range(warm):
                        group.start_soon(submit, number)
                await _wait_completed(dsn, schema, warm, 60)
                counts["warm"] = _worker_connections(dsn, schema)
                async with anyio.create_task_group() as group:
                    for number in range(warm, runs):
                        group.start_soon(submit, number)
                await _wait_completed(dsn, schema, runs, 60 if runs <= 100 else 300)
                counts["end"] = _worker_connections(dsn, schema)
            finally:
                store.close()

        try:
            anyio.run(main)
        except BaseException as error:
            raise AssertionError(f"{error!r}\n{fleet.logs()}") from error
        elapsed = time.monotonic() - began
    results = dict(
        query(
            dsn,
            "SELECT run_id, outcome_result -> 'value' ->> 'result' FROM {s}.runs",
            schema=schema,
        )
    )
    assert results == {f"soak-{n}": str(n * 2 + 1) for n in range(runs)}
    journals = audited(dsn, schema)
    last_seqs: dict[str, Any] = dict(
        query(dsn, "SELECT run_id, last_seq FROM {s}.runs", schema=schema)
    )
    for run_id, written in journals.items():
        check_journal(run_id, written, last_seqs[run_id])
    check_settled(dsn, schema)
    assert query(dsn, "SELECT worker_id FROM {s}.workers", schema=schema) == []
    # Nothing opened past what the stores may hold.  (No "no growth after the first
    # half" check: a pool grows whenever a busier moment than any before comes, which a
    # loaded machine brings at any time; 3 to 8 more connections were seen, with or
    # without load, on code that leaks none.)
    assert counts["warm"] <= CEILING, counts
    assert counts["end"] <= CEILING, counts
    deadline = time.monotonic() + 10
    while _worker_connections(dsn, schema) and time.monotonic() < deadline:
        time.sleep(0.1)  # the server notices closed sockets a moment later
    assert _worker_connections(dsn, schema) == 0  # the workers closed theirs on exit
    print(
        f"\nsoak: {runs}/{runs} runs completed over 3 workers in {elapsed:.1f} s "
        f"({runs / elapsed:.0f} runs/s); no lease, inbox item or uncompacted record left; "
        f"worker connections {counts}, 0 after they stopped"
    )
