"""The Postgres journal store on a real server: migrations, the journal and its fences,
claims under concurrency, poison runs, inbox, stream, notifications, retries after a lost
connection and the wording of its errors (scale-out.md §2-§7).

The contract every store shares is tested in ``test_store_contract.py``; this file covers
what is Postgres's own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import psycopg
import pytest
from psycopg import sql

from postgres_support import PgSchema
from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.cli import main as cli_main
from tickwork.stores import postgres_schema
from tickwork.stores.postgres import PostgresJournal
from tickwork.stores.records import (
    JournalError,
    Lease,
    LeaseLost,
    RunOutcome,
    StatePatch,
    StreamItem,
)
from tickwork.types import JournalRecord

pytestmark = pytest.mark.postgres


@pytest.fixture
def store(pg_schema: PgSchema) -> Iterator[PostgresJournal]:
    journal = PostgresJournal(pg_schema.dsn, pg_schema.schema, pool_size=4)
    yield journal
    journal.close()


@pytest.fixture
def other(pg_schema: PgSchema) -> Iterator[PostgresJournal]:
    """A second store on the same schema: another process, as far as the server knows."""
    journal = PostgresJournal(pg_schema.dsn, pg_schema.schema, pool_size=2)
    yield journal
    journal.close()


def _query(dsn: str, text: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(text, params)
        return cursor.fetchall() if cursor.description else []


def _records(*seqs: int) -> list[JournalRecord]:
    return [JournalRecord(seq, {"type": "step_result", "n": seq}) for seq in seqs]


SNAPSHOT: dict[str, Any] = {"version": 1, "journal_seq": 0}


# -- migrations ----------------------------------------------------------------------------


def test_migrate_creates_the_tables_once(pg_schema: PgSchema) -> None:
    journal = PostgresJournal(pg_schema.dsn, pg_schema.schema)
    try:
        assert journal.migrate() == [1, 2]
        assert journal.migrate() == []
    finally:
        journal.close()
    tables = _query(
        pg_schema.dsn,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
        (pg_schema.schema,),
    )
    assert {name for (name,) in tables} == {
        "schema_migrations",
        "runs",
        "records",
        "snapshots",
        "state_patches",
        "inbox",
        "stream",
        "workers",
    }
    versions = _query(
        pg_schema.dsn,
        sql.SQL("SELECT version FROM {}.schema_migrations")
        .format(sql.Identifier(pg_schema.schema))
        .as_string(None),
    )
    assert sorted(versions) == [(1,), (2,)]


@pytest.mark.anyio
async def test_a_version_1_schema_with_runs_upgrades_to_version_2_and_keeps_working(
    pg_schema: PgSchema, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = sql.Identifier(pg_schema.schema)
    with monkeypatch.context() as patch:  # a tickwork that only knows version 1
        patch.setattr(postgres_schema, "MIGRATIONS", postgres_schema.MIGRATIONS[:1])
        patch.setattr(postgres_schema, "LATEST_VERSION", 1)
        old = PostgresJournal(pg_schema.dsn, pg_schema.schema)
        try:
            assert old.migrate() == [1]
            lease = old.register_run("r1", "Flow", SNAPSHOT, start_event={"n": 1}, owner="w1")
            assert lease is not None
            await old.append("r1", _records(0, 1), lease=lease)
            assert old.register_run("done", "Flow", SNAPSHOT, owner="w1") is not None
            queued = old.register_run("waiting", "Flow", SNAPSHOT)
            assert queued is None
        finally:
            old.close()

    new = PostgresJournal(pg_schema.dsn, pg_schema.schema)
    try:
        assert new.migrate() == [2]
        # The runs, their records and leases came through the table's rewrite.
        assert [r.seq async for r in new.read("r1")] == [0, 1]
        await new.append("r1", _records(2), lease=lease)
        await new.append("r1", _records(3), None, "completed", lease=lease, outcome=RunOutcome(7))
        entry = await new.get_run("r1")
        assert entry is not None and (entry.status, entry.last_seq) == ("completed", 3)
        assert entry.outcome == RunOutcome(7) and entry.start_event == {"n": 1}
        claimed = await new.claim_runs("w2", ["Flow"], limit=5)
        assert [claim.lease.run_id for claim in claimed] == ["waiting"]
    finally:
        new.close()

    # The status is still checked (by the domain now), and appends update the row in place.
    with pytest.raises(psycopg.errors.CheckViolation):
        _query(
            pg_schema.dsn,
            sql.SQL("UPDATE {}.runs SET status = 'lost' WHERE run_id = 'r1'")
            .format(schema)
            .as_string(None),
        )
    (options,) = _query(
        pg_schema.dsn,
        "SELECT reloptions FROM pg_class WHERE oid = to_regclass(%s)",
        (f'"{pg_schema.schema}".runs',),
    )
    assert options == (["fillfactor=70"],)


def test_migrate_creates_a_missing_schema(pg_schema: PgSchema) -> None:
    name = f"{pg_schema.schema}_new"
    journal = PostgresJournal(pg_schema.dsn, name)
    try:
        journal.check()  # migrate=True: the first use migrates
        assert journal.migrate() == []
    finally:
        journal.close()
        _query(pg_schema.dsn, f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def test_concurrent_migrations_apply_each_version_once(pg_schema: PgSchema) -> None:
    journals = [PostgresJournal(pg_schema.dsn, pg_schema.schema) for _ in range(2)]
    barrier = threading.Barrier(2)
    results: list[list[int]] = []
    errors: list[BaseException] = []

    def migrate(journal: PostgresJournal) -> None:
        barrier.wait()
        try:
            results.append(journal.migrate())
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=migrate, args=(j,)) for j in journals]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for journal in journals:
        journal.close()
    assert errors == []
    assert sorted(results) == [[], [1, 2]]


def test_migrate_false_refuses_an_unmigrated_schema_and_says_how_to_fix(
    pg_schema: PgSchema,
) -> None:
    journal = PostgresJournal(pg_schema.dsn, pg_schema.schema, migrate=False)
    try:
        with pytest.raises(JournalError) as caught:
            journal.check()
    finally:
        journal.close()
    message = str(caught.value)
    assert "has no tickwork tables" in message
    assert f"tickwork db migrate --dsn DSN --schema {pg_schema.schema}" in message


def test_a_schema_from_a_newer_tickwork_is_refused(pg_schema: PgSchema) -> None:
    journal = PostgresJournal(pg_schema.dsn, pg_schema.schema)
    try:
        journal.migrate()
        _query(
            pg_schema.dsn,
            f"INSERT INTO \"{pg_schema.schema}\".schema_migrations VALUES (99, 'future')",
        )
        with pytest.raises(JournalError, match="version 99, written by a newer tickwork"):
            journal.migrate()
    finally:
        journal.close()


def test_cli_db_migrate(pg_schema: PgSchema, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["db", "migrate", "--dsn", pg_schema.dsn, "--schema", pg_schema.schema]
    assert cli_main(args) == 0
    assert cli_main(args) == 0
    out = capsys.readouterr()
    assert out.out.count(f"schema {pg_schema.schema!r} is at version 2") == 2
    assert out.err.count("applied migration(s) 1, 2") == 1


def test_cli_db_migrate_reports_an_unreachable_server(capsys: pytest.CaptureFixture[str]) -> None:
    dsn = "postgresql://app:s3cret@/app?host=/nonexistent-tw-dir"
    assert cli_main(["db", "migrate", "--dsn", dsn]) == 2
    err = capsys.readouterr().err
    assert (
        "tickwork: error: Postgres journal 'postgresql://app@/app?host=/nonexistent-tw-dir'" in err
    )
    assert "s3cret" not in err


# -- the journal and its fences ----------------------------------------------------------


@pytest.mark.anyio
async def test_register_append_read_round_trip(store: PostgresJournal) -> None:
    lease = store.register_run(
        "r1", "Flow", SNAPSHOT, start_event={"topic": "x"}, options={"timeout": 5}, owner="w1"
    )
    assert lease == Lease("r1", "w1", 1)
    # Keys keep their order (the json type stores the text as written).
    data = {"type": "add_event", "zeta": 1, "alpha": {"b": 2, "a": 1}}
    await store.append(
        "r1",
        [JournalRecord(0, data), *_records(1)],
        StatePatch(1, [{"op": "add", "path": "/k", "value": 1}]),
        lease=lease,
        stream=[StreamItem(1, {"event": "Progress"})],
    )
    read = [record async for record in store.read("r1")]
    assert read == [JournalRecord(0, data), *_records(1)]
    assert list(read[0].data) == ["type", "zeta", "alpha"]
    assert list(read[0].data["alpha"]) == ["b", "a"]
    assert await store.read_state_patches("r1") == [
        StatePatch(1, [{"op": "add", "path": "/k", "value": 1}])
    ]
    assert await store.read_stream("r1") == [StreamItem(1, {"event": "Progress"})]

    await store.write_snapshot("r1", 2, {"version": 1, "journal_seq": 2}, lease=lease)
    assert await store.read_snapshot("r1") == (2, {"version": 1, "journal_seq": 2})
    assert [record async for record in store.read("r1", 2)] == []
    assert await store.read_state_patches("r1") == []

    await store.append(
        "r1", _records(2), None, "completed", lease=lease, outcome=RunOutcome(result=None)
    )
    entry = await store.get_run("r1")
    assert entry is not None
    # The lease ended; the last owner stays, so its final snapshot is still fenced.
    assert (entry.status, entry.last_seq, entry.owner, entry.epoch) == (
        "completed",
        2,
        lease.owner,
        1,
    )
    assert entry.lease_until is None
    assert entry.outcome == RunOutcome(result=None)
    assert entry.start_event == {"topic": "x"}
    assert entry.options == {"timeout": 5}
    assert await store.list_unfinished() == []


@pytest.mark.anyio
async def test_a_fenced_append_after_a_takeover_is_refused_and_writes_nothing(
    store: PostgresJournal, other: PostgresJournal
) -> None:
    old = store.register_run("r1", "Flow", SNAPSHOT, owner="w1", lease_seconds=0.0)
    assert old is not None
    await store.append("r1", _records(0), lease=old)
    claim = await other.claim_run("r1", "w2")  # the lease expired: w2 takes over
    assert claim is not None and claim.lease.epoch == 2

    with pytest.raises(LeaseLost) as caught:
        await store.append(
            "r1",
            _records(1),
            StatePatch(1, [{"op": "add", "path": "/x", "value": 1}]),
            "completed",
            lease=old,
            stream=[StreamItem(1, {"e": 1})],
        )
    message = str(caught.value)
    assert "run 'r1'" in message and "appending seq 1 refused" in message
    assert "owned by w2 at epoch 2, not by w1 at epoch 1" in message
    assert [r.seq async for r in store.read("r1")] == [0]
    assert await store.read_state_patches("r1") == []
    assert await store.read_stream("r1") == []
    entry = await store.get_run("r1")
    assert entry is not None and entry.status == "running" and entry.owner == "w2"

    for refused in (
        store.write_snapshot("r1", 1, {"journal_seq": 1}, lease=old),
        store.mark_finished("r1", "failed", lease=old),
        store.release_run(old),
        store.record_alive_time("r1", 3.0, lease=old),
    ):
        with pytest.raises(LeaseLost, match="owned by w2 at epoch 2"):
            await refused

    await other.append("r1", _records(1), lease=claim.lease)
    with pytest.raises(LeaseLost, match="appending seq 1 refused: the journal is at seq 1"):
        await other.append("r1", _records(1), lease=claim.lease)


@pytest.mark.anyio
async def test_releasing_a_run_that_finished_under_the_lease_leaves_it_finished(
    store: PostgresJournal,
) -> None:
    lease = store.register_run("r1", "Flow", SNAPSHOT, owner="w1")
    assert lease is not None
    await store.append("r1", _records(0), None, "completed", lease=lease, outcome=RunOutcome(1))
    await store.release_run(lease, status="queued")  # a worker stopping as the run ends
    await store.release_run(lease, status="parked", wake_at=0.0)
    entry = await store.get_run("r1")
    assert entry is not None and entry.status == "completed" and entry.outcome == RunOutcome(1)
    assert await store.claim_runs("w2", ["Flow"], limit=5) == []
    stale = Lease("r1", "w1", 0)
    with pytest.raises(LeaseLost, match="owned by w1 at epoch 1, not by w1 at epoch 0"):
        await store.release_run(stale)


@pytest.mark.anyio
async def test_a_run_that_finished_under_its_lease_is_still_held_by_renewals(
    store: PostgresJournal,
) -> None:
    # Its owner is writing its final snapshot: a renewal must not report it lost.
    ending = store.register_run("ending", "Flow", SNAPSHOT, owner="w1")
    running = store.register_run("running", "Flow", SNAPSHOT, owner="w1")
    assert ending is not None and running is not None
    await store.append("ending", _records(0), None, "completed", lease=ending)
    assert store.renew_leases("w1", [ending, running], 30.0) == {"ending", "running"}
    assert store.renew_leases("w1", [Lease("ending", "w1", 0)], 30.0) == set()
    entry = await store.get_run("ending")
    assert entry is not None and entry.lease_until is None  # finished: no lease renewed


@pytest.mark.anyio
async def test_a_run_that_finishes_while_a_renewal_waits_for_it_is_still_held(
    store: PostgresJournal, pg_schema: PgSchema
) -> None:
    lease = store.register_run("r1", "Flow", SNAPSHOT, owner="w1")
    assert lease is not None
    kept: list[set[str]] = []
    table = sql.Identifier(pg_schema.schema, "runs")
    with psycopg.connect(pg_schema.dsn) as conn:  # the run's last append, not committed
        conn.execute(
            sql.SQL(
                "UPDATE {} SET status = 'completed', lease_until = NULL WHERE run_id = 'r1'"
            ).format(table)
        )
        renewal = threading.Thread(
            target=lambda: kept.append(store.renew_leases("w1", [lease], 30.0))
        )
        renewal.start()
        time.sleep(0.3)  # the renewal waits for the row
        assert not kept
        conn.commit()
        renewal.join(10)
    assert kept == [{"r1"}]


@pytest.mark.anyio
async def test_register_run_takes_over_only_an_expired_or_own_lease(
    store: PostgresJournal,
) -> None:
    first = store.register_run("r1", "Flow", SNAPSHOT, owner="w1")
    assert first == Lease("r1", "w1", 1)
    with pytest.raises(LeaseLost, match="run 'r1': the run is owned by w1 until"):
        store.register_run("r1", "Flow", SNAPSHOT, owner="w2")
    assert store.register_run("r1", "Flow", SNAPSHOT, owner="w1") == Lease("r1", "w1", 2)
    with pytest.raises(LeaseLost, match="registering a session refused"):
        store.register_run("r1", "Flow", SNAPSHOT, lease=first)


@pytest.mark.anyio
async def test_unfenced_duplicate_and_unstorable_records_name_the_seq(
    store: PostgresJournal,
) -> None:
    store.register_run("r1", "Flow", SNAPSHOT)
    await store.append("r1", _records(0, 1))
    with pytest.raises(JournalError, match=r"run 'r1': seqs 1\.\.2 were not appended"):
        await store.append("r1", _records(1, 2))
    bad = JournalRecord(2, {"type": "x", "value": float("nan")})
    with pytest.raises(JournalError, match="run 'r1', seq 2: the record cannot be stored"):
        await store.append("r1", [bad])
    with pytest.raises(JournalError, match=r"run 'ghost'.*no such run"):
        await store.append("ghost", _records(0))
    with pytest.raises(JournalError, match=r"run 'ghost'.*no such run"):
        [r async for r in store.read("ghost")]
    # One record at a time (the statement's single-record form), out of order: each
    # is stored at its own seq, and a seq already stored is refused.
    await store.append("r1", _records(3))
    await store.append("r1", _records(2))
    with pytest.raises(JournalError, match=r"run 'r1': seqs 1\.\.1 were not appended"):
        await store.append("r1", _records(1))
    assert [r async for r in store.read("r1")] == _records(0, 1, 2, 3)
    entry = await store.get_run("r1")
    assert entry is not None and entry.last_seq == 3


# -- claims ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_four_concurrent_claimers_never_claim_a_run_twice(pg_schema: PgSchema) -> None:
    journals = [PostgresJournal(pg_schema.dsn, pg_schema.schema, pool_size=1) for _ in range(4)]
    try:
        for index in range(200):
            await journals[0].submit_run(f"r{index:03}", "Flow", SNAPSHOT, start_event={})
        claimed: dict[str, list[str]] = {}

        async def claim_all(worker: int) -> None:
            while batch := await journals[worker].claim_runs(f"w{worker}", ["Flow"], limit=7):
                for claim in batch:
                    claimed.setdefault(claim.lease.run_id, []).append(claim.lease.owner)
                    assert claim.lease.epoch == 1

        async with anyio.create_task_group() as group:
            for worker in range(4):
                group.start_soon(claim_all, worker)
    finally:
        for journal in journals:
            journal.close()
    assert sorted(claimed) == [f"r{index:03}" for index in range(200)]
    assert all(len(owners) == 1 for owners in claimed.values())
    assert len({owners[0] for owners in claimed.values()}) > 1  # they did run concurrently


@pytest.mark.anyio
async def test_claims_follow_priority_then_age_and_filter_workflows_and_queues(
    store: PostgresJournal,
) -> None:
    await store.submit_run("old", "Flow", SNAPSHOT, start_event={})
    await store.submit_run("urgent", "Flow", SNAPSHOT, start_event={}, priority=9)
    await store.submit_run("new", "Flow", SNAPSHOT, start_event={})
    await store.submit_run("mail", "Flow", SNAPSHOT, start_event={}, queue="mail")
    await store.submit_run("alien", "Other", SNAPSHOT, start_event={})
    assert not await store.submit_run("old", "Flow", SNAPSHOT, start_event={})

    claims = await store.claim_runs("w1", ["Flow"], queues=["default"], limit=10)
    assert [c.lease.run_id for c in claims] == ["urgent", "old", "new"]
    assert [c.lease.run_id for c in await store.claim_runs("w1", ["Flow"], limit=10)] == ["mail"]
    assert await store.claim_runs("w2", ["Flow"], limit=10) == []  # live leases

    kept = store.renew_leases("w1", [c.lease for c in claims] + [Lease("alien", "w1", 1)], 60)
    assert kept == {"urgent", "old", "new"}
    assert await store.expire_owner("w1") == 4
    again = await store.claim_runs("w2", ["Flow"], limit=10)
    assert {c.lease.run_id for c in again} == {"urgent", "old", "new", "mail"}
    assert store.renew_leases("w1", [c.lease for c in claims], 60) == set()


@pytest.mark.anyio
async def test_claims_take_every_kind_of_claimable_run_in_one_order(
    store: PostgresJournal,
) -> None:
    store.register_run("unowned", "Flow", SNAPSHOT)  # Workflow.run() without an owner
    expired = store.register_run("expired", "Flow", SNAPSHOT, owner="w0", lease_seconds=0)
    live = store.register_run("live", "Flow", SNAPSHOT, owner="w0")
    for run_id, wake_in in (("due", -1.0), ("called", 3600.0), ("asleep", 3600.0)):
        lease = store.register_run(run_id, "Flow", SNAPSHOT, owner="w0")
        assert lease is not None
        await store.release_run(lease, status="parked", wake_at=time.time() + wake_in)
    await store.send("called", "send", {})
    await store.submit_run("queued", "Flow", SNAPSHOT, start_event={})
    await store.submit_run("first", "Flow", SNAPSHOT, start_event={}, priority=1)
    assert expired is not None and live is not None

    claims = await store.claim_runs("w1", ["Flow"], limit=10)
    assert [c.lease.run_id for c in claims] == [
        "first",
        "unowned",
        "expired",
        "due",
        "called",
        "queued",
    ]
    assert store.renew_leases("w0", [live], 30) == {"live"}


@pytest.mark.anyio
async def test_a_run_claimed_too_often_without_progress_fails_as_poison(
    store: PostgresJournal,
) -> None:
    await store.submit_run("poison", "Flow", SNAPSHOT, start_event={})
    await store.submit_run("fine", "Flow", SNAPSHOT, start_event={})
    for _ in range(2):
        claims = await store.claim_runs("w", ["Flow"], limit=2, lease_seconds=0, max_claims=2)
        assert {c.lease.run_id for c in claims} == {"poison", "fine"}
        fine = next(c for c in claims if c.lease.run_id == "fine")
        await store.append("fine", _records(fine.entry.last_seq + 1), lease=fine.lease)

    claims = await store.claim_runs("w", ["Flow"], limit=1, lease_seconds=0, max_claims=2)
    assert [c.lease.run_id for c in claims] == ["fine"]  # the poison run used no place
    entry = await store.get_run("poison")
    assert entry is not None and entry.status == "failed" and entry.owner is None
    assert entry.outcome is not None and entry.outcome.error is not None
    assert (
        "run 'poison' was claimed 2 times without progress"
        in (entry.outcome.error["exception_message"])
    )
    assert await store.claim_run("poison", "w") is None
    fine_entry = await store.get_run("fine")
    assert fine_entry is not None and fine_entry.claims_without_progress == 1


@pytest.mark.anyio
async def test_a_sessions_opening_record_alone_is_not_progress(store: PostgresJournal) -> None:
    # Each claim starts a session that journals its opening record before any step runs:
    # a run killing every worker that takes it appends that much each time, and must
    # still be failed as poison.
    await store.submit_run("poison", "Flow", SNAPSHOT, start_event={})
    opening = {"type": "session_start", "stamped_at": 0.0, "run_id": "poison"}
    for claims in (1, 2):
        [claim] = await store.claim_runs("w", ["Flow"], lease_seconds=0, max_claims=2)
        seq = claim.entry.last_seq + 1
        await store.append("poison", [JournalRecord(seq, opening)], lease=claim.lease)
        entry = await store.get_run("poison")
        assert entry is not None and entry.claims_without_progress == claims
    assert await store.claim_runs("w", ["Flow"], lease_seconds=0, max_claims=2) == []
    entry = await store.get_run("poison")
    assert entry is not None and entry.status == "failed"

    # Anything more is progress.
    await store.submit_run("fine", "Flow", SNAPSHOT, start_event={})
    [claim] = await store.claim_runs("w", ["Flow"], lease_seconds=0, max_claims=2)
    seq = claim.entry.last_seq + 1
    records = [JournalRecord(seq, opening), *_records(seq + 1)]
    await store.append("fine", records, lease=claim.lease)
    entry = await store.get_run("fine")
    assert entry is not None and entry.claims_without_progress == 0


# -- inbox, parking and the stream ---------------------------------------------------------


@pytest.mark.anyio
async def test_inbox_is_idempotent_per_key_and_consumed_with_the_records(
    store: PostgresJournal,
) -> None:
    lease = store.register_run("r1", "Flow", SNAPSHOT, owner="w1")
    assert await store.send("r1", "send", {"answer": "yes"}, idempotency_key="k1")
    assert not await store.send("r1", "send", {"answer": "again"}, idempotency_key="k1")
    assert await store.send("r1", "cancel")
    assert await store.send("r1", "cancel")  # no key: a fresh one each time
    items = await store.read_inbox("r1")
    assert [(i.kind, i.payload) for i in items] == [
        ("send", {"answer": "yes"}),
        ("cancel", None),
        ("cancel", None),
    ]
    assert [i.item_id for i in items] == sorted(i.item_id for i in items)

    await store.append("r1", _records(0), lease=lease, consumed=[items[0].item_id])
    assert [i.item_id for i in await store.read_inbox("r1")] == [i.item_id for i in items[1:]]
    await store.append(
        "r1", _records(1), None, "cancelled", lease=lease, consumed=[items[1].item_id]
    )
    with pytest.raises(JournalError, match=r"run 'r1': the run has finished \(cancelled\)"):
        await store.send("r1", "send", {})
    with pytest.raises(JournalError, match=r"run 'ghost'.*no such run"):
        await store.send("ghost", "send", {})
    with pytest.raises(JournalError, match=r"run 'ghost'.*no such run"):
        await store.read_inbox("ghost")


@pytest.mark.anyio
async def test_a_parked_run_wakes_on_an_inbox_item_or_its_wake_time(
    store: PostgresJournal,
) -> None:
    for run_id in ("by-send", "by-time"):
        lease = store.register_run(run_id, "Flow", SNAPSHOT, owner="w1")
        assert lease is not None
        wake_at = time.time() + (3600 if run_id == "by-send" else 0.2)
        await store.release_run(lease, status="parked", wake_at=wake_at)
    assert await store.claim_runs("w2", ["Flow"], limit=5) == []
    await store.send("by-send", "send", {"x": 1})
    assert [c.lease.run_id for c in await store.claim_runs("w2", ["Flow"], limit=5)] == ["by-send"]
    await anyio.sleep(0.3)
    claims = await store.claim_runs("w2", ["Flow"], limit=5)
    assert [c.lease.run_id for c in claims] == ["by-time"]
    assert claims[0].entry.wake_at is None and claims[0].entry.epoch == 2


@pytest.mark.anyio
async def test_stream_cursor(store: PostgresJournal) -> None:
    lease = store.register_run("r1", "Flow", SNAPSHOT, owner="w1")
    await store.append("r1", _records(0, 1), lease=lease, stream=[StreamItem(1, {"n": 1})])
    await store.append(
        "r1",
        _records(2, 3, 4),
        lease=lease,
        stream=[StreamItem(3, {"n": 3}), StreamItem(4, {"n": 4})],
    )
    assert [i.seq for i in await store.read_stream("r1")] == [1, 3, 4]
    assert await store.read_stream("r1", after_seq=1) == [
        StreamItem(3, {"n": 3}),
        StreamItem(4, {"n": 4}),
    ]
    assert await store.read_stream("r1", after_seq=1, limit=1) == [StreamItem(3, {"n": 3})]
    assert await store.read_stream("r1", after_seq=4) == []


@pytest.mark.anyio
async def test_workers_are_listed_with_their_runs(store: PostgresJournal) -> None:
    await store.register_worker("w1", {"host": "a", "pid": 1})
    await store.touch_worker("w1", ["r1", "r2"])
    [worker] = await store.list_workers()
    assert (worker.worker_id, worker.info, worker.runs) == (
        "w1",
        {"host": "a", "pid": 1},
        ("r1", "r2"),
    )
    assert worker.last_seen >= worker.started_at
    await store.unregister_worker("w1")
    assert await store.list_workers() == []


def _kill_store_connections(pg_schema: PgSchema) -> int:
    rows = _query(
        pg_schema.dsn,
        "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
        "WHERE application_name = %s AND pid <> pg_backend_pid()",
        (f"tickwork:{pg_schema.schema}",),
    )
    return len(rows)


# -- notifications ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_wait_for_change_wakes_on_a_send_from_another_connection(
    store: PostgresJournal, other: PostgresJournal
) -> None:
    store.register_run("r1", "Flow", SNAPSHOT)
    store.register_run("r2", "Flow", SNAPSHOT)
    await store.wait_for_change(0.01)  # starts listening

    sent: list[str] = []

    async def send_later(run_id: str) -> None:
        await anyio.sleep(0.2)
        sent.append(run_id)  # before the send: a waiter that sees it woke no earlier
        await other.send(run_id, "send", {})

    # The waits last up to 30 s; woken by the send, they return long before.  The 10 s
    # bound only tells a wake from the timeout (the wake takes a fraction of a second).
    async with anyio.create_task_group() as group:
        group.start_soon(send_later, "r1")
        started = time.monotonic()
        await store.wait_for_change(30.0, run_id="r1")
        elapsed = time.monotonic() - started
        assert sent == ["r1"]  # it returned because of the send, not before it
    assert elapsed < 10

    # A change of another run does not wake a waiter of r1, but wakes one of any run.
    woken: list[str] = []

    async def wait(name: str, run_id: str | None) -> None:
        await store.wait_for_change(30.0, run_id=run_id)
        woken.append(name)

    with anyio.fail_after(10):  # tells a wake from the 30 s timeout
        async with anyio.create_task_group() as group:
            group.start_soon(wait, "r1", "r1")
            group.start_soon(wait, "any", None)
            await send_later("r2")
            while not woken:
                await anyio.sleep(0.01)
            # r2's notification is dispatched to every waiter it concerns at once: a
            # wrong wake of r1 would have come with the wake of "any".
            await anyio.sleep(0.2)
            assert woken == ["any"]
            await send_later("r1")
    assert woken == ["any", "r1"]


@pytest.mark.anyio
async def test_a_killed_listening_connection_degrades_to_polling_then_listens_again(
    pg_schema: PgSchema, store: PostgresJournal, other: PostgresJournal
) -> None:
    store.register_run("r1", "Flow", SNAPSHOT)
    await store.wait_for_change(0.01)  # starts listening
    _kill_store_connections(pg_schema)
    started = time.monotonic()
    await store.wait_for_change(0.3, run_id="r1")  # no error: the timeout is kept
    # The upper bound is 10x the timeout: it only catches a wait that ignores it.
    assert 0.25 < time.monotonic() - started < 3.0
    await anyio.sleep(1.0)  # past the reconnection pause
    await store.wait_for_change(0.01)  # listens again

    sent: list[str] = []

    async def send_later() -> None:
        await anyio.sleep(0.2)
        sent.append("r1")  # before the send: a waiter that sees it woke no earlier
        await other.send("r1", "send", {})

    # Woken by the notification, not by the 30 s timeout (10 s tells them apart).
    async with anyio.create_task_group() as group:
        group.start_soon(send_later)
        started = time.monotonic()
        await store.wait_for_change(30.0, run_id="r1")
        assert sent == ["r1"]
    assert time.monotonic() - started < 10


# -- lost connections and errors ------------------------------------------------------------


@pytest.mark.anyio
async def test_append_and_renewals_survive_a_killed_connection(
    pg_schema: PgSchema, store: PostgresJournal
) -> None:
    lease = store.register_run("r1", "Flow", SNAPSHOT, owner="w1")
    assert lease is not None
    await store.append("r1", _records(0), lease=lease)
    assert store.renew_leases("w1", [lease], 30) == {"r1"}
    assert _kill_store_connections(pg_schema) >= 2  # the pool's and the renewals'

    await store.append("r1", _records(1, 2), lease=lease)
    assert [r.seq async for r in store.read("r1")] == [0, 1, 2]
    assert store.renew_leases("w1", [lease], 30) == {"r1"}


def _fenced_and_unfenced_on_the_threaded_path(
    store: PostgresJournal, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, Any]:
    """Register runs "fenced" (owned by w1: its lease is returned) and "unfenced", and
    keep appends on the threaded path (the asyncio lane's own failures:
    test_postgres_lane.py); also return the store's unpatched ``_execute_append``."""
    lease = store.register_run("fenced", "Flow", SNAPSHOT, owner="w1")
    store.register_run("unfenced", "Flow", SNAPSHOT)
    monkeypatch.setattr(store._lane, "take", lambda: False)
    return lease, store._execute_append


@pytest.mark.anyio
async def test_a_lost_commit_acknowledgement_is_not_a_lost_or_doubled_record(
    store: PostgresJournal, monkeypatch: pytest.MonkeyPatch
) -> None:
    lease, original = _fenced_and_unfenced_on_the_threaded_path(store, monkeypatch)
    failures: list[str] = []

    def commit_then_lose_the_ack(conn: Any, text: str, params: dict[str, Any], fence: Any) -> None:
        original(conn, text, params, fence)
        if len(failures) < 2:
            failures.append(params["run_id"])
            raise psycopg.OperationalError("simulated: the connection dropped after COMMIT")

    monkeypatch.setattr(store, "_execute_append", commit_then_lose_the_ack)
    await store.append("fenced", _records(0, 1), None, lease=lease)
    await store.append("unfenced", _records(0, 1))
    assert failures == ["fenced", "unfenced"]
    monkeypatch.undo()
    for run_id in ("fenced", "unfenced"):
        assert [r.seq async for r in store.read(run_id)] == [0, 1]
    await store.append("fenced", _records(2), lease=lease)  # the fence saw seq 1 as last

    # A failure before the commit: the retry writes the records.
    lost: list[int] = []

    def fail_before_the_commit(conn: Any, text: str, params: dict[str, Any], fence: Any) -> None:
        if not lost:
            lost.append(1)
            raise psycopg.OperationalError("simulated: the connection dropped before COMMIT")
        original(conn, text, params, fence)

    monkeypatch.setattr(store._lane, "take", lambda: False)
    monkeypatch.setattr(store, "_execute_append", fail_before_the_commit)
    await store.append("fenced", _records(3), None, "completed", lease=lease)
    assert lost == [1]
    assert [r.seq async for r in store.read("fenced")] == [0, 1, 2, 3]
    entry = await store.get_run("fenced")
    assert entry is not None and entry.status == "completed"


@pytest.mark.anyio
async def test_a_final_append_with_a_snapshot_whose_ack_is_lost_is_not_redone(
    store: PostgresJournal, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The retry finds the append committed (the snapshot dropped its last record):
    # it neither fails on a taken seq nor writes anything twice.
    lease, original = _fenced_and_unfenced_on_the_threaded_path(store, monkeypatch)
    calls: list[str] = []

    def commit_then_lose_the_ack(
        conn: Any, text: str, params: dict[str, Any], fence: Any, *closing: Any
    ) -> None:
        calls.append(params["run_id"])
        original(conn, text, params, fence, *closing)
        conn.commit()  # the snapshot goes with the append, in one transaction
        raise psycopg.OperationalError("simulated: the connection dropped after COMMIT")

    monkeypatch.setattr(store, "_execute_append", commit_then_lose_the_ack)
    final = {"journal_seq": 2, "final": True}
    await store.append(
        "fenced", _records(0, 1), None, "completed", lease=lease, snapshot=(2, final)
    )
    await store.append("unfenced", _records(0, 1), None, "failed", snapshot=(2, final))
    assert calls == ["fenced", "unfenced"]  # each committed once, never retried
    monkeypatch.undo()
    for run_id, status in (("fenced", "completed"), ("unfenced", "failed")):
        assert await store.read_snapshot(run_id) == (2, final)
        assert [r.seq async for r in store.read(run_id, 2)] == []
        entry = await store.get_run(run_id)
        assert entry is not None and (entry.status, entry.last_seq) == (status, 1)


@pytest.mark.anyio
async def test_errors_name_the_store_without_password_the_run_and_the_seq() -> None:
    journal = PostgresJournal(
        "postgresql://app:s3cret@/app?host=/nonexistent-tw-dir", "jobs", retry_seconds=0.2
    )
    started = time.monotonic()
    with pytest.raises(JournalError) as caught:
        await journal.append("r7", _records(4))
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert message.startswith(
        "Postgres journal 'postgresql://app@/app?host=/nonexistent-tw-dir' (schema 'jobs'), "
        "run 'r7': appending seq 4 failed after"
    )
    assert "s3cret" not in message and "the server is unreachable" in message
    assert isinstance(caught.value.__cause__, psycopg.Error)
    with pytest.raises(JournalError, match="opening the journal failed"):
        journal.check()
    journal.close()


def test_a_key_value_dsn_hides_its_password_too() -> None:
    journal = PostgresJournal("host=/nonexistent-tw-dir user=app password='a b'", "jobs")
    assert "a b" not in repr(journal) and "password=***" in repr(journal)


# -- through the runtime --------------------------------------------------------------------


class Doubled(Event):
    value: int


class Double(Workflow):
    @step
    async def double(self, ctx: Context, ev: StartEvent) -> Doubled:
        await ctx.store.set("seen", {"zeta": 1, "alpha": 2})
        return Doubled(value=ev.n * 2)

    @step
    async def finish(self, ev: Doubled) -> StopEvent:
        return StopEvent(result=ev.value)


@pytest.mark.anyio
async def test_a_workflow_journals_its_run_to_postgres(pg_schema: PgSchema) -> None:
    from tickwork.journal import PostgresJournal as Exported

    journal = Exported(pg_schema.dsn, pg_schema.schema)
    try:
        handler = Double(journal=journal).run(n=21)
        assert await handler == 42
        [entry] = await journal.list_runs()
        assert entry.status == "completed"
        snapshot = await journal.read_snapshot(entry.run_id)
        assert snapshot is not None and snapshot[0] == entry.last_seq + 1
    finally:
        journal.close()
