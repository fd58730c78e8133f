"""Group commit across runs in the SQLite store (``tickwork.stores.group_commit``).

The writes of different runs that reach one ``SqliteJournal`` while it is busy share
one transaction and one fsync, and each caller still gets its own outcome.  The tests
count the transactions the store's connection commits (``COMMIT`` statements seen by a
trace callback), never time anything.  To make a batch deterministic, a test holds the
store's worker thread (its connection lock) on a first call until every other call is
queued behind it.
"""

from __future__ import annotations

import os
import queue
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tickwork.stores.group_commit import PendingCall
from tickwork.stores.records import JournalError, Lease, LeaseLost
from tickwork.stores.sqlite import SqliteJournal
from tickwork.stores.sqlite_writes import commit_together
from tickwork.types import JournalRecord

from .helpers import rec, seqs, snap

pytestmark = pytest.mark.anyio

Call = Callable[[], Awaitable[Any]]

SRC = Path(__file__).resolve().parents[2] / "src"
CRASH_CHILD = Path(__file__).with_name("group_commit_crash_child.py")


class _Commits:
    """Counts the transactions the store's connection commits from now on."""

    def __init__(self, store: SqliteJournal) -> None:
        store.check()
        assert store._conn is not None
        self.count = 0
        store._conn.set_trace_callback(self._trace)

    def _trace(self, statement: str) -> None:
        if statement.strip().upper() == "COMMIT":
            self.count += 1


def _register(store: SqliteJournal, run_ids: list[str], owner: str = "w1") -> dict[str, Lease]:
    leases = {}
    for run_id in run_ids:
        lease = store.register_run(run_id, "wf", snap(), start_event={}, owner=owner)
        assert lease is not None
        leases[run_id] = lease
    return leases


async def _in_one_batch(store: SqliteJournal, calls: list[Call]) -> list[Any]:
    """Run ``calls`` concurrently so that they all go in one batch of the store's queue,
    queued in the order given; each one's result, or the exception it raised."""
    outcomes: list[Any] = [None] * len(calls)

    async def run(index: int, call: Call) -> None:
        try:
            outcomes[index] = await call()
        except Exception as error:
            outcomes[index] = error

    store.check()
    batches = store._queue.batches
    store._lock.acquire()  # the worker thread waits on it with the first batch
    held = True
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(store.get_run, "nobody")  # the batch held on the thread
            await _until(lambda: store._queue._busy)
            for index, call in enumerate(calls):
                # One at a time, so that they queue in this order (trio starts tasks
                # in any order).
                group.start_soon(run, index, call)
                await _until(lambda n=index + 1: len(store._queue._queue) == n)
            store._lock.release()
            held = False
    finally:
        if held:
            store._lock.release()
    assert store._queue.batches == batches + 2  # the held read, then every call at once
    return outcomes


async def _until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(10):
        while not condition():
            await anyio.sleep(0.002)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteJournal]:
    made = SqliteJournal(tmp_path / "runs.db")
    yield made
    made.close()


# --------------------------------------------------------------------------- sharing


async def test_appends_of_different_runs_share_one_transaction(
    store: SqliteJournal, tmp_path: Path
) -> None:
    run_ids = [f"r{i}" for i in range(20)]
    leases = _register(store, run_ids)
    commits = _Commits(store)

    def append(run_id: str) -> Call:
        return lambda: store.append(run_id, [rec(0), rec(1)], lease=leases[run_id])

    outcomes = await _in_one_batch(store, [append(run_id) for run_id in run_ids])
    assert outcomes == [None] * 20
    assert commits.count == 1  # 20 appends, one transaction, one fsync
    other = SqliteJournal(tmp_path / "runs.db")  # durable: another connection sees them
    try:
        for run_id in run_ids:
            assert await seqs(other, run_id) == [0, 1]
            entry = await other.get_run(run_id)
            assert entry is not None and entry.last_seq == 1
    finally:
        other.close()


async def test_concurrent_appends_group_themselves_without_help(store: SqliteJournal) -> None:
    run_ids = [f"r{i}" for i in range(50)]
    leases = _register(store, run_ids)
    commits = _Commits(store)

    async def append(run_id: str) -> None:
        await store.append(run_id, [rec(0)], lease=leases[run_id])

    async with anyio.create_task_group() as group:
        for run_id in run_ids:
            group.start_soon(append, run_id)
    # The first append goes alone; the 49 that arrive meanwhile go in the next one.
    assert commits.count <= 2
    for run_id in run_ids:
        assert await seqs(store, run_id) == [0]


async def test_a_lone_write_is_its_own_transaction(store: SqliteJournal) -> None:
    leases = _register(store, ["r"])
    commits = _Commits(store)
    for seq in range(5):
        await store.append("r", [rec(seq)], lease=leases["r"])
    assert commits.count == 5
    assert await seqs(store, "r") == [0, 1, 2, 3, 4]


async def test_snapshots_and_outcomes_join_the_batch(store: SqliteJournal) -> None:
    leases = _register(store, ["a", "b", "c"])
    commits = _Commits(store)
    outcomes = await _in_one_batch(
        store,
        [
            lambda: store.append("a", [rec(0)], lease=leases["a"]),
            lambda: store.write_snapshot("b", 0, snap(0, n=1), lease=leases["b"]),
            lambda: store.mark_finished("c", "completed", lease=leases["c"]),
        ],
    )
    assert outcomes == [None, None, None]
    assert commits.count == 1
    assert await store.read_snapshot("b") == (0, snap(0, n=1))
    entry = await store.get_run("c")
    assert entry is not None and entry.status == "completed"


# --------------------------------------------------------------------------- one run fails alone


async def test_a_refused_fence_fails_only_its_run(store: SqliteJournal, tmp_path: Path) -> None:
    run_ids = [f"r{i}" for i in range(6)]
    leases = _register(store, run_ids)
    await store.append("r4", [rec(0)], lease=leases["r4"])
    stale = Lease("r2", "w1", leases["r2"].epoch + 1)  # not the run's epoch
    commits = _Commits(store)

    def append(run_id: str) -> Call:
        lease = stale if run_id == "r2" else leases[run_id]
        # r4's journal is at seq 0: a batch starting at seq 0 again is refused.
        return lambda: store.append(run_id, [rec(0), rec(1)], lease=lease)

    outcomes = await _in_one_batch(store, [append(run_id) for run_id in run_ids])
    assert isinstance(outcomes[2], LeaseLost) and "'r2'" in str(outcomes[2])
    assert "epoch" in str(outcomes[2])
    assert isinstance(outcomes[4], LeaseLost) and "'r4'" in str(outcomes[4])
    assert "at seq 0" in str(outcomes[4])
    assert [outcomes[i] for i in (0, 1, 3, 5)] == [None] * 4
    assert commits.count == 1  # the refused writes were undone; the others committed once
    other = SqliteJournal(tmp_path / "runs.db")
    try:
        for run_id in ("r0", "r1", "r3", "r5"):
            assert await seqs(other, run_id) == [0, 1]
        assert await seqs(other, "r2") == []
        assert await seqs(other, "r4") == [0]
        entry = await other.get_run("r4")
        assert entry is not None and entry.last_seq == 0
    finally:
        other.close()


async def test_a_bad_payload_fails_only_its_run(store: SqliteJournal) -> None:
    _register(store, ["ok1", "dup", "huge", "ok2", "unjson"], owner="w1")
    # Unleased appends: a duplicate record is caught by the records' primary key.
    await store.append("dup", [rec(0)])
    unserializable = JournalRecord(seq=0, data={"type": "idle_check", "x": object()})
    outcomes = await _in_one_batch(
        store,
        [
            lambda: store.append("ok1", [rec(0)]),
            lambda: store.append("dup", [rec(0)]),
            lambda: store.append("huge", [rec(2**70)]),  # no SQLite integer holds it
            lambda: store.append("ghost", [rec(0)]),  # never registered
            lambda: store.append("ok2", [rec(0), rec(1)]),
        ],
    )
    assert outcomes[0] is None and outcomes[4] is None
    assert isinstance(outcomes[1], JournalError) and "already written" in str(outcomes[1])
    assert isinstance(outcomes[2], OverflowError)
    assert isinstance(outcomes[3], JournalError) and "'ghost'" in str(outcomes[3])
    with pytest.raises(TypeError):  # refused before it is queued: nobody else notices
        await store.append("unjson", [unserializable])
    assert await seqs(store, "ok1") == [0]
    assert await seqs(store, "ok2") == [0, 1]
    assert await seqs(store, "dup") == [0]
    assert await seqs(store, "huge") == []


# --------------------------------------------------------------------------- order


async def test_the_writes_of_a_batch_are_applied_in_arrival_order(store: SqliteJournal) -> None:
    # Fenced appends only succeed right after the run's last record: a's seq 1 goes
    # right after a's seq 0 in the same transaction, b's seq 1 before b's seq 0 is
    # refused (and, failing, sends the others through the careful path again in order).
    leases = _register(store, ["a", "b"])
    commits = _Commits(store)
    outcomes = await _in_one_batch(
        store,
        [
            lambda: store.append("a", [rec(0)], lease=leases["a"]),
            lambda: store.append("b", [rec(1)], lease=leases["b"]),
            lambda: store.append("a", [rec(1)], lease=leases["a"]),
            lambda: store.append("b", [rec(0)], lease=leases["b"]),
        ],
    )
    assert [outcomes[i] for i in (0, 2, 3)] == [None, None, None]
    assert isinstance(outcomes[1], LeaseLost) and "at seq 1" in str(outcomes[1])
    assert commits.count == 1
    assert await seqs(store, "a") == [0, 1]
    assert await seqs(store, "b") == [0]


# --------------------------------------------------------------------------- crashes


def test_a_process_killed_amid_group_commits_keeps_every_acknowledged_append(
    tmp_path: Path,
) -> None:
    # A child appends to 40 runs at once (their appends share transactions) and says
    # which appends returned; it is killed (SIGKILL) at some point of that.  Every
    # acknowledged append must be in the file, and every run's journal must be whole:
    # no gap, and its ``last_seq`` must match its records (a transaction kept half
    # would break one or the other).
    path, runs = tmp_path / "crash.db", 40
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    child = subprocess.Popen(
        [sys.executable, str(CRASH_CHILD), str(path), str(runs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert child.stdout is not None
    threading.Thread(target=lambda: [lines.put(line) for line in child.stdout], daemon=True).start()
    acknowledged: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 60
        while sum(seq + 1 for seq in acknowledged.values()) < 1500:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic())).split()
            if line != ["READY"]:
                acknowledged[line[0]] = int(line[1])
    finally:
        child.kill()
        _out, err = child.communicate(timeout=30)
    assert child.returncode == -9, err
    assert len(acknowledged) == runs  # every run made progress before the kill

    async def check() -> None:
        store = SqliteJournal(path)
        try:
            for n in range(runs):
                written = await seqs(store, f"r{n}")  # a gap would raise
                entry = await store.get_run(f"r{n}")
                assert entry is not None and entry.last_seq == len(written) - 1
                assert entry.last_seq >= acknowledged[f"r{n}"]
        finally:
            store.close()

    anyio.run(check)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()


# --------------------------------------------------------------------------- whole transactions


def _insert(run_id: str) -> PendingCall:
    def body(conn: sqlite3.Connection) -> str:
        conn.execute("INSERT INTO t VALUES (?)", (run_id,))
        return run_id

    return PendingCall(body, run_id, "appending records", write=True)


def _table(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=0.05)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (run_id TEXT)")
    return conn


def test_a_write_whose_error_rolled_back_everything_fails_alone(tmp_path: Path) -> None:
    conn = _table(tmp_path / "t.db")

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES ('c')")
        conn.execute("ROLLBACK")  # what SQLite does itself on an I/O error or a full disk
        raise sqlite3.OperationalError("disk I/O error")

    batch = [_insert("a"), _insert("b"), PendingCall(broken, "c", "appending records", True)]
    batch.append(_insert("d"))
    commit_together(conn, str(tmp_path / "t.db"), batch)
    assert [p.error for p in batch if p.run_id != "c"] == [None, None, None]
    assert [p.result for p in batch] == ["a", "b", None, "d"]
    error = batch[2].error
    assert isinstance(error, JournalError) and "'c'" in str(error) and "disk I/O" in str(error)
    assert isinstance(error.__cause__, sqlite3.OperationalError)
    other = sqlite3.connect(tmp_path / "t.db")
    assert sorted(row[0] for row in other.execute("SELECT run_id FROM t")) == ["a", "b", "d"]
    other.close()
    conn.close()


def test_a_transaction_that_cannot_begin_fails_every_write_with_its_own_error(
    tmp_path: Path,
) -> None:
    conn = _table(tmp_path / "t.db")
    blocker = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        batch = [_insert("a"), _insert("b")]
        commit_together(conn, str(tmp_path / "t.db"), batch)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    errors = [p.error for p in batch]
    assert all(isinstance(error, JournalError) for error in errors)
    assert errors[0] is not errors[1]
    assert "'a'" in str(errors[0]) and "'b'" in str(errors[1])
    assert "locked" in str(errors[0])
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)
    conn.close()


# --------------------------------------------------------------------------- cancellation


async def test_a_write_cancelled_while_queued_is_withdrawn(store: SqliteJournal) -> None:
    leases = _register(store, ["a", "b"])
    scope = anyio.CancelScope()

    async def append_a() -> None:
        with scope:
            await store.append("a", [rec(0)], lease=leases["a"])

    async def append_b() -> None:
        await store.append("b", [rec(0)], lease=leases["b"])

    store.check()
    store._lock.acquire()  # hold the worker thread with a read
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(store.get_run, "nobody")
            await _until(lambda: store._queue._busy)
            group.start_soon(append_a)
            await _until(lambda: len(store._queue._queue) == 1)
            group.start_soon(append_b)
            await _until(lambda: len(store._queue._queue) == 2)
            scope.cancel()  # a is still queued, first: it goes away, b takes its turn
            await _until(lambda: len(store._queue._queue) == 1)
            store._lock.release()
    finally:
        if store._lock.locked():
            store._lock.release()
    assert scope.cancelled_caught
    assert await seqs(store, "a") == []
    assert await seqs(store, "b") == [0]


async def test_a_write_cancelled_in_flight_is_carried_out(store: SqliteJournal) -> None:
    leases = _register(store, ["a"])
    scope = anyio.CancelScope()
    steps: list[str] = []

    async def append_a() -> None:
        with scope:
            await store.append("a", [rec(0)], lease=leases["a"])
            steps.append("written")
            await anyio.sleep(0)  # the cancellation arrives at the next checkpoint
            steps.append("went on")

    store.check()
    store._lock.acquire()  # a's own batch waits on the thread
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(append_a)
            await _until(lambda: store._queue._busy)
            scope.cancel()
            await anyio.sleep(0.01)
            store._lock.release()
    finally:
        if store._lock.locked():
            store._lock.release()
    assert scope.cancelled_caught
    assert steps == ["written"]
    assert await seqs(store, "a") == [0]


async def test_the_inbox_reads_of_a_batch_share_their_statements(store: SqliteJournal) -> None:
    run_ids = [f"r{i}" for i in range(5)]
    _register(store, run_ids)
    assert await store.send("r1", "send", {"n": 1}, idempotency_key="a")
    assert await store.send("r3", "send", {"n": 2}, idempotency_key="b")
    assert await store.send("r3", "cancel", idempotency_key="c")
    statements: list[str] = []
    store.check()
    assert store._conn is not None
    store._conn.set_trace_callback(statements.append)

    def read(run_id: str) -> Call:
        return lambda: store.read_inbox(run_id)

    outcomes = await _in_one_batch(store, [read(r) for r in [*run_ids, "ghost", "r3"]])
    store._conn.set_trace_callback(None)
    kinds = [[(item.kind, item.payload) for item in found] for found in outcomes[:5]]
    assert kinds == [[], [("send", {"n": 1})], [], [("send", {"n": 2}), ("cancel", None)], []]
    assert isinstance(outcomes[5], JournalError) and "ghost" in str(outcomes[5])
    assert [item.idempotency_key for item in outcomes[6]] == ["b", "c"]
    inbox_reads = [s for s in statements if "inbox" in s]
    # One shared read for the seven calls; the missing run alone reads again to fail.
    assert len(inbox_reads) == 2, statements
