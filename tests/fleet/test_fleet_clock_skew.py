"""Workers whose clocks are an hour wrong (scale-out.md §3: correctness never depends
on clocks; leases are taken and renewed on the database's clock).

Two ``tickwork worker`` processes serve one Postgres schema, one with its wall clock an
hour ahead, the other an hour behind (``time.time`` shifted in the process).  Each may
hold three runs at once, so both take some of the six
:class:`~tests.fleet.trial_child.Trial` runs, which are parked while they wait for
their answers and claimed again by either.  If a lease were computed from a worker's
clock, the worker ahead would see every other lease as expired and take those runs
over, and the one behind would hand out leases an hour long.  Then:

* every lease in the database ends within the lease time of the database's clock;
* no run was ever taken from a live owner: a run changes owners only after it was
  parked;
* every run completes with the result of an uninterrupted run, its journal and stream
  written once, and each step body ran exactly once per journaled result.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import anyio
import pytest
from tests.fleet.fault_checks import (
    check_executions,
    check_settled,
    check_trial_runs,
    executions,
)
from tests.fleet.fault_support import (
    Fleet,
    Followed,
    drive,
    follow_trial,
    install_audit,
    query,
    running_fleet,
)
from tests.fleet.trial_child import SKEW_VARIABLE, Trial

from postgres_support import PgSchema

pytestmark = pytest.mark.postgres

LEASE = 10.0  # long enough that renewals delayed by a busy machine never let one lapse
SKEWS = {0: 3600.0, 1: -3600.0}


def _leases(dsn: str, schema: str) -> list[tuple[str, float]]:
    """``(run id, seconds until its lease ends on the database's clock)`` of held runs."""
    rows = query(
        dsn,
        "SELECT run_id, extract(epoch FROM lease_until - now())::float8 FROM {s}.runs "
        "WHERE lease_until IS NOT NULL",
        schema=schema,
    )
    return [(run_id, float(left)) for run_id, left in rows]


def _taken_from_a_live_owner(dsn: str, schema: str) -> list[str]:
    """Owner changes of a running run with no release in between."""
    rows = query(
        dsn, "SELECT run_id, status, owner FROM {s}.run_history ORDER BY id", schema=schema
    )
    last: dict[str, tuple[str, str | None]] = {}
    found = []
    for run_id, status, owner in rows:
        before = last.get(run_id)
        if before is not None and before[0] == status == "running" and before[1] != owner:
            found.append(f"{run_id}: {before[1]} -> {owner}")
        last[run_id] = (status, owner)
    return found


def test_workers_with_wrong_clocks_never_take_live_runs(
    pg_schema: PgSchema, tmp_path: Path
) -> None:
    dsn, schema = pg_schema
    install_audit(dsn, schema)
    side_log = tmp_path / "executions.log"
    fleet = Fleet(
        dsn, schema, tmp_path, lease=LEASE, idle_release=0.5, concurrency=3, side_log=side_log
    )
    runs = 6
    seen = {f"skew-{n}": Followed(f"skew-{n}") for n in range(runs)}
    leases_seen: list[tuple[str, float]] = []
    with running_fleet(fleet):
        for index, backend in ((0, "asyncio"), (1, "trio")):
            fleet.start(index, backend=backend, env={SKEW_VARIABLE: str(SKEWS[index])})
        fleet.wait_serving()
        owners = {fleet.workers[i].worker_id(): SKEWS[i] for i in SKEWS}
        pids = {fleet.workers[i].pid: SKEWS[i] for i in SKEWS}

        async def main() -> None:
            from tickwork.stores.postgres import PostgresJournal

            store = PostgresJournal(dsn, schema)
            done = anyio.Event()

            async def sample_leases() -> None:
                while not done.is_set():
                    leases_seen.extend(await anyio.to_thread.run_sync(_leases, dsn, schema))
                    await anyio.sleep(0.2)

            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(sample_leases)
                    async with anyio.create_task_group() as callers:
                        for number in range(runs):
                            run_id = f"skew-{number}"
                            flow = Trial(journal=store, timeout=None)
                            handler = await flow.submit(run_id=run_id, width=3, pause=0.3)
                            callers.start_soon(
                                follow_trial,
                                handler,
                                number + 2,
                                random.Random(number),
                                seen[run_id],
                            )
                    done.set()
            finally:
                store.close()

        drive(main, 120, fleet)
    context = fleet.logs()
    wrong = [(run_id, left) for run_id, left in leases_seen if not -LEASE < left <= LEASE + 0.5]
    assert leases_seen and not wrong, f"leases not on the database's clock: {wrong[:10]}"
    assert not _taken_from_a_live_owner(dsn, schema), context
    holders = {
        owner
        for (owner,) in query(
            dsn, "SELECT DISTINCT owner FROM {s}.run_history WHERE owner IS NOT NULL", schema=schema
        )
    }
    assert holders == set(owners), f"both skewed workers must run some runs: {holders}"
    shapes = {f"skew-{number}": (3, number + 2) for number in range(runs)}
    journals = check_trial_runs(dsn, schema, seen, shapes, context)
    ran = executions(side_log)
    # The side log has the workers' own (wrong) clocks: the skew was in force.
    assert {e.pid for e in ran} == set(pids)
    assert all(abs(e.at - time.time() - pids[e.pid]) < 600 for e in ran), ran[:5]
    repeated = check_executions(journals, ran, set())
    assert not sum(repeated.values()), f"step bodies ran again: {dict(repeated)}"
    check_settled(dsn, schema)
    print(
        f"\nclock skew of +-1 h: {runs}/{runs} runs completed on both workers, "
        f"{len(leases_seen)} lease samples all within the lease time of the database's "
        f"clock, no run taken from a live owner"
    )
