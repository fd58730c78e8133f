"""Claims, fencing, skew and poison runs across real processes on Postgres (scale-out.md
§7, tests 2, 3 and 8).

* **Claim race**: four processes claim 2,000 queued runs in batches of ten at once:
  each run is claimed exactly once.
* **Zombie fencing**: worker A is SIGSTOPped while a step of its run waits, past its
  lease; worker B takes the run over; A is SIGCONTed: its next write is refused
  (``LeaseLost``), it starts no step and publishes nothing; the journal stays contiguous,
  the stream has no duplicate, and the run has one result.
* **Skew**: a worker that does not serve a workflow never claims its runs.
* **Poison**: a run that kills every worker that takes it fails after ``--max-claims``
  claims with an error naming it, while the other runs of those workers complete.

The workers are ``tickwork worker`` processes and the workflows are in ``fleet_child``.
The test process runs one anyio backend (the workers alternate asyncio and trio, which
is where the backends matter); every test runs under a hard time limit and kills its
children when it ends.
"""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from psycopg import sql

from fleet.fleet_child import (
    Alpha,
    Beta,
    Children,
    Gated,
    Killer,
    Progress,
    read_log,
    wait_until,
)
from postgres_support import PgSchema
from tickwork.events import StopEvent
from tickwork.serde.serializers import JsonSerializer
from tickwork.stores.postgres import PostgresJournal
from tickwork.stores.records import JournalError

pytestmark = [pytest.mark.postgres, pytest.mark.anyio]

SNAPSHOT: dict[str, Any] = {"version": 1, "journal_seq": 0}


@pytest.fixture
def anyio_backend() -> str:
    """One backend for the test process (see the module docs)."""
    return "asyncio"


@pytest.fixture
async def store(pg_schema: PgSchema) -> AsyncIterator[PostgresJournal]:
    journal = PostgresJournal(pg_schema.dsn, pg_schema.schema, pool_size=8)
    await anyio.to_thread.run_sync(journal.check)  # migrated before any child connects
    yield journal
    journal.close()


@pytest.fixture
def children(pg_schema: PgSchema, tmp_path: Path) -> Iterator[Children]:
    procs = Children(tmp_path, pg_schema.dsn, pg_schema.schema)
    yield procs
    procs.close()


def _rows(pg: PgSchema, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """``query`` with ``{}`` standing for the test's schema."""
    text = sql.SQL(query).format(sql.Identifier(pg.schema))
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        return conn.execute(text, params).fetchall()


def _worker_id(stderr: str) -> str | None:
    found = re.search(r"^\[worker\] (\S+) serving", stderr, re.MULTILINE)
    return found.group(1) if found else None


# -- 2. claim race ---------------------------------------------------------------------------


async def test_four_processes_claim_2000_runs_each_exactly_once(
    store: PostgresJournal, children: Children, pg_schema: PgSchema
) -> None:
    with anyio.fail_after(60):
        claimers = [children.script(f"claimer{i}", "claim", f"owner{i}") for i in range(4)]
        run_ids = [f"race-{index:04}" for index in range(2000)]
        limiter = anyio.CapacityLimiter(8)

        async def submit(run_id: str) -> None:
            async with limiter:
                assert await store.submit_run(run_id, "RaceFlow", SNAPSHOT, start_event={})

        async with anyio.create_task_group() as group:
            for run_id in run_ids:
                group.start_soon(submit, run_id)
        for claimer in claimers:
            await wait_until(lambda c=claimer: "READY" in c.stdout(), 30, "READY", children)
        for claimer in claimers:  # all at once: they race for the same rows
            claimer.tell("go")
        await wait_until(
            lambda: all(c.proc.poll() is not None for c in claimers), 30, "the claimers", children
        )

    claimed: dict[str, list[tuple[str, int]]] = {}
    for index, claimer in enumerate(claimers):
        assert claimer.proc.returncode == 0, children.report()
        lines = claimer.stdout().splitlines()
        assert lines[0] == "READY" and lines[-1] == "DONE", lines[-3:]
        for line in lines[1:-1]:
            _, run_id, epoch = line.split()
            claimed.setdefault(run_id, []).append((f"owner{index}", int(epoch)))
    doubles = {run_id: got for run_id, got in claimed.items() if len(got) > 1}
    assert not doubles, f"runs claimed more than once: {doubles}"
    assert sorted(claimed) == run_ids
    assert {epoch for got in claimed.values() for _, epoch in got} == {1}
    per_owner = Counter(got[0][0] for got in claimed.values())
    assert len(per_owner) >= 2, f"the claimers did not run concurrently: {per_owner}"
    # The store agrees: each run is owned by the process that printed it.
    rows = _rows(pg_schema, "SELECT run_id, owner, epoch, status FROM {}.runs")
    assert {r[0]: (r[1], r[2], r[3]) for r in rows} == {
        run_id: (got[0][0], 1, "running") for run_id, got in claimed.items()
    }


# -- 3. zombie fencing -------------------------------------------------------------------------


async def test_a_stopped_worker_past_its_lease_is_fenced_when_it_continues(
    store: PostgresJournal, children: Children, pg_schema: PgSchema, tmp_path: Path
) -> None:
    log, gate1, gate2 = tmp_path / "steps.log", tmp_path / "gate1", tmp_path / "gate2"
    with anyio.fail_after(60):
        handler = await Gated(journal=store, timeout=60).submit(
            run_id="zombie", log=str(log), gate1=str(gate1), gate2=str(gate2)
        )
        a = children.worker("A", "--lease", "2", backend="asyncio")
        await wait_until(lambda: read_log(log), 20, "A to start the first step", children)
        a.signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        owner_a = _worker_id(a.stderr())
        entry = await store.get_run("zombie")
        assert entry is not None and entry.owner == owner_a and entry.epoch == 1
        b = children.worker("B", "--lease", "2", backend="trio")

        # B takes the run over once A's lease expired, and runs the first step again.
        def b_started() -> bool:
            return [line.pid for line in read_log(log)] == [a.pid, b.pid]

        await wait_until(b_started, 20, "B to take the run over", children)
        assert time.monotonic() - stopped_at >= 2 * 2 / 3  # not before A's lease ran out
        entry = await store.get_run("zombie")
        assert entry is not None and entry.owner == _worker_id(b.stderr())
        assert entry.epoch == 2

        # Both pass the first gate; A continues from where it was stopped.
        gate1.touch()
        a.signal(signal.SIGCONT)
        await wait_until(lambda: "stopped here" in a.stderr(), 10, "A to stop the run", children)
        await wait_until(lambda: len(read_log(log)) == 3, 10, "B's second step", children)
        await anyio.sleep(0.5)  # room for A to misbehave, if it would

        # B waits in the second step: the journal written since its claim is contiguous.
        snapshot = await store.read_snapshot("zombie")
        entry = await store.get_run("zombie")
        assert snapshot is not None and entry is not None
        seqs = [record.seq async for record in store.read("zombie", snapshot[0])]
        assert seqs == list(range(snapshot[0], entry.last_seq + 1)), (snapshot[0], seqs)
        assert seqs, "B journaled the first step's result"
        stored = _rows(pg_schema, "SELECT seq FROM {}.records WHERE run_id = %s", "zombie")
        assert sorted(row[0] for row in stored) == seqs

        gate2.touch()
        assert await handler == b.pid

    steps = [(line.words[0], line.pid) for line in read_log(log)]
    # A ran the first step once, before it was stopped, and started nothing after.
    assert steps == [("first", a.pid), ("first", b.pid), ("second", b.pid)]
    lost = [line for line in a.stderr().splitlines() if "stopped here" in line]
    assert len(lost) == 1 and "zombie" in lost[0], a.stderr()
    # Refused by the store, or (its renewal thread wakes first) fenced by itself.
    assert re.search(r"refused|taken over|fenced itself", lost[0]), lost[0]

    # One result; a stream without duplicates, holding only B's events.
    entry = await store.get_run("zombie")
    assert entry is not None and entry.status == "completed" and entry.outcome is not None
    items = await store.read_stream("zombie")
    positions = [item.seq for item in items]
    assert positions == sorted(set(positions))
    serializer = JsonSerializer()
    events = [serializer.from_record(item.event) for item in items]
    progress = [(ev.step, ev.pid) for ev in events if isinstance(ev, Progress)]
    assert progress == [("first", b.pid), ("second", b.pid)]
    stops = [ev for ev in events if isinstance(ev, StopEvent)]
    assert len(stops) == 1 and stops[0].result == b.pid

    # A, told to stop, reports the run it lost.
    a.signal(signal.SIGTERM)
    with anyio.fail_after(15):
        await wait_until(lambda: a.proc.poll() is not None, 15, "A to exit", children)
    assert a.proc.returncode == 0, a.stderr()
    assert "lost 1" in a.stderr()


# -- 8. skew and poison --------------------------------------------------------------------------


async def test_a_worker_never_claims_the_runs_of_a_workflow_it_does_not_serve(
    store: PostgresJournal, children: Children
) -> None:
    with anyio.fail_after(60):
        betas = [await Beta(journal=store).submit(run_id=f"beta{i}") for i in range(3)]
        alphas = [await Alpha(journal=store).submit(run_id=f"alpha{i}") for i in range(3)]
        only_alpha = children.worker("alpha-only", target="ALPHA_ONLY", backend="trio")
        results = [await handler for handler in alphas]
        assert set(results) == {only_alpha.pid}
        await anyio.sleep(1.5)  # more than one more claim round (polls come every second)
        for handler in betas:
            entry = await store.get_run(handler.run_id)
            assert entry is not None
            assert (entry.status, entry.owner, entry.epoch) == ("queued", None, 0)
            assert entry.claims_without_progress == 0

        # They were claimable all along: a worker serving Beta takes them at once.
        both = children.worker("both", target="ALL", backend="asyncio")
        assert [await handler for handler in betas] == [both.pid] * 3
    assert only_alpha.proc.poll() is None, children.report()


async def test_a_run_that_kills_its_workers_fails_after_max_claims_and_others_complete(
    store: PostgresJournal, children: Children, tmp_path: Path
) -> None:
    max_claims = 3
    log = tmp_path / "steps.log"
    options = ("--lease", "1", "--max-claims", str(max_claims), "--concurrency", "4")
    flow = Killer(journal=store, timeout=60)
    with anyio.fail_after(90):
        others = [
            await flow.submit(
                run_id=f"fine{i}", log=str(log), name=f"fine{i}", kill=False, delay=0.1
            )
            for i in range(6)
        ]
        poison = await flow.submit(
            run_id="poison", log=str(log), name="poison", kill=True, delay=0.3
        )
        backends = ["asyncio", "trio"]
        slots = [children.worker(f"w{i}", *options, backend=backends[i]) for i in range(2)]
        generation = len(slots)
        killed: list[int] = []

        async def done() -> bool:
            entries = [await store.get_run(h.run_id) for h in [*others, poison]]
            return all(entry is not None and entry.finished for entry in entries)

        def replace_the_dead() -> None:
            nonlocal generation
            for index, child in enumerate(slots):
                if child.proc.poll() is None:
                    continue
                assert child.proc.returncode == -signal.SIGKILL, children.report()
                killed.append(child.pid)
                backend = backends[generation % 2]
                slots[index] = children.worker(f"w{generation}", *options, backend=backend)
                generation += 1

        while not await done():
            replace_the_dead()
            await anyio.sleep(0.1)
        await anyio.sleep(1.5)  # nothing claims the failed run again
        replace_the_dead()

    entry = await store.get_run("poison")
    assert entry is not None and entry.status == "failed" and entry.owner is None
    assert entry.outcome is not None and entry.outcome.error is not None
    message = entry.outcome.error["exception_message"]
    assert f"run 'poison' was claimed {max_claims} times without progress" in message
    with pytest.raises(JournalError, match="run 'poison' was claimed"):
        await poison
    # Every claim of the poison run killed its worker, and nothing else did.
    executions = [line.pid for line in read_log(log) if line.words == ["kill", "poison"]]
    assert sorted(executions) == sorted(killed), children.report()
    assert len(killed) == max_claims + 1  # the first claim made progress: it journaled
    # The other runs completed, on workers of the fleet (some after a crash took them).
    live = {child.pid for child in slots if child.proc.poll() is None}
    assert len(live) == 2, children.report()
    results = [await handler for handler in others]
    assert set(results) <= {child.pid for child in children.started}
