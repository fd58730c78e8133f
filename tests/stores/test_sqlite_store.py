"""What only the SQLite store has to prove: several processes (or store objects) sharing
one file, schema migrations of old files, and ``sqlite3`` errors of the fleet calls
reported as ``JournalError``.
"""

from __future__ import annotations

import collections
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest

from tickwork.stores.records import JournalError, Lease, LeaseLost, StreamItem
from tickwork.stores.sqlite import SqliteJournal
from tickwork.stores.sqlite_schema import SCHEMA_VERSION

from .helpers import EXPIRED, SHORT, rec, seqs, snap, submit

pytestmark = pytest.mark.anyio

SRC = Path(__file__).resolve().parents[2] / "src"
CHILD = Path(__file__).with_name("claim_race_child.py")


def _sql(path: Path, *statements: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        rows: list[tuple[object, ...]] = []
        for statement in statements:
            rows = conn.execute(statement).fetchall()
        return rows
    finally:
        conn.close()


# --------------------------------------------------------------------------- one file, many writers


async def test_a_zombie_owner_is_fenced_by_a_takeover_through_another_connection(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shared.db"
    a, b = SqliteJournal(path), SqliteJournal(path)
    await submit(a, "r")
    claim_a = await a.claim_run("r", "A", lease_seconds=SHORT)
    assert claim_a is not None
    await a.append("r", [rec(0)], lease=claim_a.lease)
    assert await b.claim_run("r", "B") is None  # A's lease is live
    await anyio.sleep(EXPIRED)  # A stalls past its lease
    claim_b = await b.claim_run("r", "B")
    assert claim_b is not None and claim_b.lease.epoch == 2
    await b.append("r", [rec(1)], lease=claim_b.lease)
    with pytest.raises(LeaseLost):
        await a.append("r", [rec(1)], lease=claim_a.lease)
    assert a.renew_leases("A", [claim_a.lease], 30.0) == set()
    assert b.renew_leases("B", [claim_b.lease], 30.0) == {"r"}
    assert await seqs(a, "r") == [0, 1]
    a.close()
    b.close()


async def test_a_writer_waits_for_another_connections_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    store = SqliteJournal(path)
    store.register_run("r", "wf", snap())
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    releaser = threading.Timer(0.3, lambda: other.execute("COMMIT"))
    releaser.start()
    started = time.monotonic()
    try:
        await store.append("r", [rec(0)])
    finally:
        releaser.join()
        other.close()
    assert time.monotonic() - started >= 0.25
    assert await seqs(store, "r") == [0]
    store.close()


async def test_changes_by_another_store_object_are_seen_by_polling(tmp_path: Path) -> None:
    path = tmp_path / "poll.db"
    a, b = SqliteJournal(path), SqliteJournal(path)
    await submit(a, "r")
    await b.send("r", "send", {"x": 1}, idempotency_key="k")
    assert not await a.send("r", "send", {"x": 2}, idempotency_key="k")
    assert [i.payload for i in await a.read_inbox("r")] == [{"x": 1}]
    a.close()
    b.close()


@pytest.mark.slow
def test_four_processes_claim_every_run_exactly_once(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    run_ids = [f"run-{i:04d}" for i in range(2000)]

    async def fill() -> None:
        store = SqliteJournal(path)
        for run_id in run_ids:
            assert await submit(store, run_id)
        store.close()

    anyio.run(fill)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    start_at = time.time() + 2.0  # every child has imported tickwork and opened the file by then
    children = [
        subprocess.Popen(
            [sys.executable, str(CHILD), str(path), f"w{n}", "10", str(start_at)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for n in range(4)
    ]
    got: dict[str, list[str]] = {}
    for n, child in enumerate(children):
        out, err = child.communicate(timeout=60)
        lines = out.split()
        assert child.returncode == 0 and lines[-1:] == ["DONE"], err
        got[f"w{n}"] = lines[:-1]
    counts = collections.Counter(run_id for ids in got.values() for run_id in ids)
    assert sorted(counts) == run_ids
    assert set(counts.values()) == {1}, [r for r, c in counts.items() if c > 1][:10]
    rows = _sql(path, "SELECT run_id, owner FROM runs WHERE epoch = 1")
    owners = {str(run_id): str(owner) for run_id, owner in rows}
    assert len(owners) == len(run_ids)
    assert all(owners[run_id] == owner for owner, ids in got.items() for run_id in ids)


# --------------------------------------------------------------------------- migrations

_V01_RUNS = """CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    workflow_name TEXT NOT NULL,
    status TEXT NOT NULL,
    last_seq INTEGER NOT NULL DEFAULT -1,
    updated_at REAL NOT NULL DEFAULT (julianday('now'))
)"""
_V011_RUNS = _V01_RUNS.replace(
    "DEFAULT (julianday('now'))\n)",
    "DEFAULT (julianday('now')),\n    created_at REAL,\n    start_event TEXT,\n"
    "    options TEXT,\n    elapsed_alive REAL NOT NULL DEFAULT 0\n)",
)
_OTHER_TABLES = (
    "CREATE TABLE records (run_id TEXT NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL, "
    "PRIMARY KEY (run_id, seq)) WITHOUT ROWID",
    "CREATE TABLE snapshots (run_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, data TEXT NOT NULL)",
    "CREATE TABLE state_patches (run_id TEXT NOT NULL, after_seq INTEGER NOT NULL, "
    "data TEXT NOT NULL, PRIMARY KEY (run_id, after_seq)) WITHOUT ROWID",
)


def _old_file(path: Path, runs_table: str, updated_at: str) -> None:
    """A journal as an older tickwork left it: one running run with two records."""
    _sql(
        path,
        runs_table,
        *_OTHER_TABLES,
        f"INSERT INTO runs (run_id, workflow_name, status, last_seq, updated_at) "
        f"VALUES ('old', 'wf', 'running', 1, {updated_at})",
        """INSERT INTO records VALUES ('old', 0, '{"type": "idle_check", "stamped_at": 1.0}')""",
        """INSERT INTO records VALUES ('old', 1, '{"type": "idle_check", "stamped_at": 2.0}')""",
        """INSERT INTO snapshots VALUES ('old', 0, '{"journal_seq": 0}')""",
    )


@pytest.mark.parametrize(
    ("runs_table", "updated_at"),
    [(_V01_RUNS, "2460000.5"), (_V011_RUNS, "1700000000.0")],
    ids=["0.1", "0.1.x"],
)
async def test_an_old_file_is_upgraded_in_place(
    tmp_path: Path, runs_table: str, updated_at: str
) -> None:
    path = tmp_path / "old.db"
    _old_file(path, runs_table, updated_at)
    store = SqliteJournal(path)
    entry = await store.get_run("old")
    assert entry is not None
    assert (entry.status, entry.last_seq, entry.queue, entry.epoch, entry.owner) == (
        "running",
        1,
        "default",
        0,
        None,
    )
    assert entry.updated_at is not None and 1.6e9 < entry.updated_at < 1.8e9  # epoch seconds
    assert entry.created_at == entry.updated_at and entry.outcome is None
    assert await seqs(store, "old") == [0, 1]
    assert _sql(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    # The interrupted run of the old file is claimable like any unowned running run.
    claim = await store.claim_run("old", "w1")
    assert claim is not None
    await store.send("old", "send", {"hi": 1})
    [item] = await store.read_inbox("old")
    await store.append("old", [rec(2)], lease=claim.lease, consumed=[item.item_id])
    assert await store.read_inbox("old") == []
    store.close()
    before = _sql(path, "SELECT * FROM runs")
    again = SqliteJournal(path)
    assert [e.run_id for e in await again.list_unfinished()] == ["old"]
    again.close()
    assert _sql(path, "SELECT * FROM runs") == before


def test_a_file_of_a_newer_tickwork_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    _sql(path, f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(JournalError, match="newer") as info:
        SqliteJournal(path).check()
    assert str(path) in str(info.value)


async def test_a_sqlite_error_in_a_fleet_call_is_a_journal_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.db"
    store = SqliteJournal(path)
    await submit(store, "r")
    _sql(path, "DROP TABLE inbox")
    with pytest.raises(JournalError) as info:
        await store.claim_runs("w1", ["wf"])
    assert str(path) in str(info.value) and isinstance(info.value.__cause__, sqlite3.Error)
    with pytest.raises(JournalError) as info:
        await store.send("r", "send", 1)
    assert "'r'" in str(info.value) and isinstance(info.value.__cause__, sqlite3.Error)
    store.close()


async def test_a_run_with_a_damaged_row_fails_instead_of_blocking_claims(tmp_path: Path) -> None:
    path = tmp_path / "damaged.db"
    store = SqliteJournal(path)
    await submit(store, "bad")
    await anyio.sleep(0.002)
    await submit(store, "good")
    _sql(path, "UPDATE runs SET start_event = '{oops' WHERE run_id = 'bad'")
    claims = await store.claim_runs("w1", ["wf"], limit=5)
    assert [c.lease.run_id for c in claims] == ["good"]
    [bad] = _sql(path, "SELECT status, outcome_error FROM runs WHERE run_id = 'bad'")
    assert bad[0] == "failed" and "start event" in str(bad[1]) and "'bad'" in str(bad[1])
    store.close()


async def test_a_change_waiter_wakes_for_a_committed_final_append_not_a_refused_one(
    tmp_path: Path,
) -> None:
    # The batch runner wakes the waiters of the appends it committed (no coroutine of
    # the append's own does it after its write).
    store = SqliteJournal(tmp_path / "final.db")
    lease = store.register_run("r", "wf", snap(), start_event={}, owner="me")
    assert lease is not None
    stale = Lease("r", "me", lease.epoch + 1)
    woken: list[str] = []

    async def wait() -> None:
        await store.wait_for_change(30, "r")
        woken.append("change")

    async with anyio.create_task_group() as group:
        group.start_soon(wait)
        await anyio.sleep(0.05)
        with pytest.raises(LeaseLost):
            await store.append("r", [rec(0)], None, "completed", lease=stale)
        await anyio.sleep(0.05)
        assert woken == []  # nothing was committed
        await store.append("r", [rec(0)], None, "completed", lease=lease)
        with anyio.fail_after(10):
            while woken != ["change"]:
                await anyio.sleep(0.01)
    [row] = _sql(tmp_path / "final.db", "SELECT status FROM runs WHERE run_id = 'r'")
    assert row == ("completed",)
    store.close()


async def test_an_inbox_waiter_wakes_for_a_send_not_for_the_runs_own_appends(
    tmp_path: Path,
) -> None:
    store = SqliteJournal(tmp_path / "inbox.db")
    lease = store.register_run("r", "wf", snap(), start_event={}, owner="me")
    woken: list[str] = []

    async def wait(name: str, waiting: object) -> None:
        await waiting  # type: ignore[misc]
        woken.append(name)

    async with anyio.create_task_group() as group:
        group.start_soon(wait, "inbox", store.wait_for_inbox(30, "r"))
        group.start_soon(wait, "change", store.wait_for_change(30, "r"))
        await anyio.sleep(0.05)
        await store.append("r", [rec(0)], lease=lease, stream=[StreamItem(0, {"e": 1})])
        with anyio.fail_after(10):
            while woken != ["change"]:
                await anyio.sleep(0.01)
        await anyio.sleep(0.05)
        assert woken == ["change"]  # a stream follower wakes; the inbox pump does not
        await store.send("r", "send", {"n": 1}, idempotency_key="k")
        with anyio.fail_after(10):
            while woken != ["change", "inbox"]:
                await anyio.sleep(0.01)
    store.close()
