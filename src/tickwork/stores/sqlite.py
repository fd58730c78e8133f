"""The embedded durable journal store: standard-library ``sqlite3`` in WAL mode.

Every call runs on a worker thread (``anyio.to_thread``) holding one connection behind
a capacity limiter of one, so the event loop never blocks on the disk.  Commits are
durable (``synchronous=FULL``: the WAL is fsync'd on every commit) and one ``append``
is one transaction, so a batch of ticks is either fully there after a crash or not at
all.

Nothing ``sqlite3`` raises leaves the store as such: a path that cannot hold a journal,
a file that cannot be opened, a damaged page or a stored value that does not decode is a
``JournalError`` naming the file, the run and the seq where known (``sqlite_checks``).
"""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from tickwork.stores.sqlite_checks import (
    check_journal_path,
    decode_stored_json,
    journal_label,
    json_kind,
    sqlite_failure,
)
from tickwork.stores.store import JournalError, RunEntry, RunStatus, StatePatch
from tickwork.types import JournalRecord

__all__ = ["SqliteJournal"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    workflow_name TEXT NOT NULL,
    status TEXT NOT NULL,
    last_seq INTEGER NOT NULL DEFAULT -1,
    updated_at REAL NOT NULL DEFAULT (julianday('now')),
    created_at REAL,
    start_event TEXT,
    options TEXT,
    elapsed_alive REAL NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS records (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS snapshots (
    run_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS state_patches (
    run_id TEXT NOT NULL,
    after_seq INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, after_seq)
) WITHOUT ROWID;
"""

_READ_BATCH = 512

# Columns added to ``runs`` after the first release, with their definitions: a file
# written by an older version gets them when it is opened.
_ADDED_RUN_COLUMNS = (
    ("created_at", "REAL"),
    ("start_event", "TEXT"),
    ("options", "TEXT"),
    ("elapsed_alive", "REAL NOT NULL DEFAULT 0"),
)
# ``updated_at`` used to hold a Julian day; epoch seconds are far larger.
_JULIAN_EPOCH = 2440587.5


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring a journal written by an older version to the current schema."""
    present = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
    missing = [(name, decl) for name, decl in _ADDED_RUN_COLUMNS if name not in present]
    if not missing:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for name, decl in missing:
            conn.execute(f"ALTER TABLE runs ADD COLUMN {name} {decl}")
        conn.execute(
            "UPDATE runs SET updated_at = (updated_at - ?) * 86400 WHERE updated_at < 1e7",
            (_JULIAN_EPOCH,),
        )
        conn.execute("UPDATE runs SET created_at = updated_at WHERE created_at IS NULL")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


# The read paths fetch ``data`` as bytes and decode it themselves, so that text which is
# not UTF-8 is reported with the seq of its row (sqlite3 would fail the whole fetch).


def _fetch_records(
    conn: sqlite3.Connection, *, run_id: str, start: int, limit: int
) -> list[tuple[int, bytes]]:
    rows: list[tuple[int, bytes]] = conn.execute(
        "SELECT seq, CAST(data AS BLOB) FROM records WHERE run_id = ? AND seq >= ? "
        "ORDER BY seq LIMIT ?",
        (run_id, start, limit),
    ).fetchall()
    return rows


class SqliteJournal:
    """A journal store in one SQLite file, e.g. ``SqliteJournal("runs.db")``.

    The constructor checks the path cheaply (its directory exists and is writable; the
    path, when it exists, is a readable and writable regular file) and raises
    ``JournalError`` naming it; the file itself is opened (and created) by
    :meth:`check` or the first call.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        check_journal_path(self.path)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._limiter: anyio.CapacityLimiter | None = None

    def __repr__(self) -> str:
        return f"SqliteJournal({self.path!r})"

    # -- plumbing -------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        """The connection, opened (with the schema created) on first use; hold the lock."""
        if self._conn is None:
            # Again: the directory may have gone since the constructor looked.
            check_journal_path(self.path)
            try:
                conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            except sqlite3.Error as error:
                raise sqlite_failure(error, self.path, "opening the file") from error
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
                conn.executescript(_SCHEMA)
                _migrate(conn)
            except sqlite3.Error as error:
                conn.close()
                raise sqlite_failure(error, self.path, "opening the journal") from error
            self._conn = conn
        return self._conn

    def check(self) -> None:
        """Open the journal now, creating the file and its tables if needed.

        Synchronous and cheap once the journal is open (``Workflow(journal=store)`` and
        ``run()`` call it, so a bad path fails there, not inside a running workflow).
        Raises ``JournalError`` naming the path, with the ``sqlite3`` error as its cause.
        """
        if self._conn is not None:  # unlocked: a call on a worker thread may hold the lock
            return
        with self._lock:
            self._connect()

    async def _call(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        run_id: str | None = None,
        action: str = "a journal call",
    ) -> T:
        """Run ``fn(connection)`` on a worker thread; an ``sqlite3`` error becomes a
        ``JournalError`` naming the path, ``run_id`` (if given) and ``action``."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(1)

        def run() -> T:
            with self._lock:
                conn = self._connect()
                try:
                    return fn(conn)
                except sqlite3.Error as error:
                    raise sqlite_failure(error, self.path, action, run_id) from error

        return await anyio.to_thread.run_sync(run, limiter=self._limiter)

    def close(self) -> None:
        """Close the connection (a new call reopens it)."""
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                try:
                    conn.close()
                except sqlite3.Error as error:
                    raise sqlite_failure(error, self.path, "closing the file") from error

    @staticmethod
    def _require_run(conn: sqlite3.Connection, run_id: str) -> None:
        if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
            raise JournalError(f"the journal has no run {run_id!r} (register_run was never called)")

    @staticmethod
    def _transaction(conn: sqlite3.Connection, body: Callable[[], None]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            body()
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    # -- writes ------------------------------------------------------------------------

    def register_run(
        self,
        run_id: str,
        workflow_name: str,
        snapshot: dict[str, Any],
        *,
        start_event: Any = None,
        options: Mapping[str, Any] | None = None,
        owner: str | None = None,
        lease_seconds: float = 30.0,
        lease: Any = None,
    ) -> Any:
        seq = int(snapshot.get("journal_seq", 0))
        text = json.dumps(snapshot)
        event_text = None if start_event is None else json.dumps(start_event)
        options_text = None if options is None else json.dumps(dict(options))
        now = time.time()

        def write(conn: sqlite3.Connection) -> None:
            def body() -> None:
                conn.execute(
                    "INSERT INTO runs (run_id, workflow_name, status, last_seq, created_at, "
                    "updated_at, start_event, options) VALUES (?, ?, 'running', ?, ?, ?, ?, ?) "
                    "ON CONFLICT(run_id) DO UPDATE SET status='running', "
                    "workflow_name=excluded.workflow_name, updated_at=excluded.updated_at, "
                    "start_event=COALESCE(excluded.start_event, runs.start_event), "
                    "options=COALESCE(excluded.options, runs.options)",
                    (run_id, workflow_name, seq - 1, now, now, event_text, options_text),
                )
                self._replace_snapshot(conn, run_id, seq, text)

            self._transaction(conn, body)

        self._call_blocking(write, run_id=run_id, action="registering the run")

    def _call_blocking(
        self, fn: Callable[[sqlite3.Connection], T], *, run_id: str, action: str
    ) -> T:
        """Like :meth:`_call`, on the calling thread (the synchronous ``register_run``)."""
        with self._lock:
            conn = self._connect()
            try:
                return fn(conn)
            except sqlite3.Error as error:
                raise sqlite_failure(error, self.path, action, run_id) from error

    async def record_alive_time(
        self, run_id: str, elapsed_alive: float, *, lease: Any = None
    ) -> None:
        now = time.time()

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE runs SET elapsed_alive = MAX(elapsed_alive, ?), updated_at = ? "
                "WHERE run_id = ?",
                (elapsed_alive, now, run_id),
            )

        await self._call(write, run_id=run_id, action="recording the alive time")

    async def append(
        self,
        run_id: str,
        records: Sequence[JournalRecord],
        state_patch: StatePatch | None = None,
        final_status: RunStatus | None = None,
        *,
        lease: Any = None,
        consumed: Sequence[int] = (),
        stream: Sequence[Any] = (),
        outcome: Any = None,
    ) -> None:
        rows = [(run_id, r.seq, json.dumps(r.data)) for r in records]
        patch_row = (
            (run_id, state_patch.after_seq, json.dumps(state_patch.patch))
            if state_patch is not None
            else None
        )
        last = max((r.seq for r in records), default=None)
        now = time.time()

        def write(conn: sqlite3.Connection) -> None:
            def body() -> None:
                self._require_run(conn, run_id)
                try:
                    conn.executemany("INSERT INTO records VALUES (?, ?, ?)", rows)
                except sqlite3.IntegrityError as error:
                    raise JournalError(
                        f"run {run_id!r}: a record in seq {rows[0][1]}..{last} was already written"
                    ) from error
                if patch_row is not None:
                    conn.execute("INSERT OR REPLACE INTO state_patches VALUES (?, ?, ?)", patch_row)
                if last is not None:
                    conn.execute(
                        "UPDATE runs SET last_seq = MAX(last_seq, ?), updated_at = ? "
                        "WHERE run_id = ?",
                        (last, now, run_id),
                    )
                if final_status is not None:
                    conn.execute(
                        "UPDATE runs SET status = ? WHERE run_id = ?", (final_status, run_id)
                    )

            self._transaction(conn, body)

        await self._call(write, run_id=run_id, action="appending records")

    @staticmethod
    def _replace_snapshot(conn: sqlite3.Connection, run_id: str, seq: int, text: str) -> None:
        conn.execute("INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?)", (run_id, seq, text))
        conn.execute("DELETE FROM records WHERE run_id = ? AND seq < ?", (run_id, seq))
        conn.execute("DELETE FROM state_patches WHERE run_id = ? AND after_seq < ?", (run_id, seq))

    async def write_snapshot(
        self, run_id: str, seq: int, snapshot: dict[str, Any], *, lease: Any = None
    ) -> None:
        text = json.dumps(snapshot)

        def write(conn: sqlite3.Connection) -> None:
            def body() -> None:
                self._require_run(conn, run_id)
                self._replace_snapshot(conn, run_id, seq, text)

            self._transaction(conn, body)

        await self._call(write, run_id=run_id, action="writing a snapshot")

    async def mark_finished(
        self, run_id: str, status: RunStatus, *, lease: Any = None, outcome: Any = None
    ) -> None:
        def write(conn: sqlite3.Connection) -> None:
            self._require_run(conn, run_id)
            conn.execute("UPDATE runs SET status = ? WHERE run_id = ?", (status, run_id))

        await self._call(write, run_id=run_id, action="recording the run's outcome")

    # -- reads ---------------------------------------------------------------------------

    async def read(self, run_id: str, from_seq: int = 0) -> AsyncIterator[JournalRecord]:
        label = journal_label(self.path, run_id)
        expected = from_seq
        limit = _READ_BATCH
        while True:
            try:
                rows = await self._call(
                    functools.partial(_fetch_records, run_id=run_id, start=expected, limit=limit),
                    run_id=run_id,
                    action=f"reading record seq {expected}"
                    if limit == 1
                    else f"reading the records from seq {expected} on",
                )
            except JournalError as error:
                if limit == 1 or not isinstance(error.__cause__, sqlite3.Error):
                    raise
                # A damaged page fails the whole batch: read on one record at a time, so
                # the records before the damage are still delivered and the error names
                # the first seq that cannot be read.
                limit = 1
                continue
            if not rows:
                return
            for seq, stored in rows:
                if seq != expected:
                    raise JournalError(
                        f"{label}: journal gap, expected seq {expected}, found seq {seq}"
                    )
                data = decode_stored_json(stored, self.path, run_id, f"record seq {seq}")
                if not isinstance(data, dict) or "type" not in data:
                    raise JournalError(
                        f"{label}: record seq {seq} is not a tick record "
                        f"(expected a JSON object with a 'type', found {json_kind(data)})"
                    )
                yield JournalRecord(seq=seq, data=data)
                expected += 1

    async def read_state_patches(self, run_id: str, from_seq: int = 0) -> list[StatePatch]:
        def fetch(conn: sqlite3.Connection) -> list[tuple[int, bytes]]:
            return conn.execute(
                "SELECT after_seq, CAST(data AS BLOB) FROM state_patches "
                "WHERE run_id = ? AND after_seq >= ? ORDER BY after_seq",
                (run_id, from_seq),
            ).fetchall()

        rows = await self._call(
            fetch, run_id=run_id, action=f"reading the state patches from seq {from_seq} on"
        )
        out: list[StatePatch] = []
        for after_seq, stored in rows:
            what = f"the state patch after seq {after_seq}"
            patch = decode_stored_json(stored, self.path, run_id, what)
            if not isinstance(patch, list) or not all(isinstance(op, dict) for op in patch):
                raise JournalError(
                    f"{journal_label(self.path, run_id)}: {what} is not a JSON patch (expected "
                    f"an array of operation objects, found {json_kind(patch)})"
                )
            out.append(StatePatch(after_seq, patch))
        return out

    async def read_snapshot(self, run_id: str) -> tuple[int, dict[str, Any]] | None:
        def fetch(conn: sqlite3.Connection) -> tuple[int, bytes] | None:
            row: tuple[int, bytes] | None = conn.execute(
                "SELECT seq, CAST(data AS BLOB) FROM snapshots WHERE run_id = ?", (run_id,)
            ).fetchone()
            return row

        row = await self._call(fetch, run_id=run_id, action="reading the snapshot")
        if row is None:
            return None
        seq, stored = row
        what = f"the snapshot at seq {seq}"
        snapshot = decode_stored_json(stored, self.path, run_id, what)
        if not isinstance(snapshot, dict):
            raise JournalError(
                f"{journal_label(self.path, run_id)}: {what} is not a snapshot (expected a "
                f"JSON object, found {json_kind(snapshot)})"
            )
        return seq, snapshot

    async def _entries(self, where: str, args: tuple[Any, ...]) -> list[RunEntry]:
        def fetch(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return conn.execute(
                "SELECT run_id, workflow_name, status, last_seq, created_at, updated_at, "
                f"options, start_event, elapsed_alive FROM runs {where} "
                "ORDER BY updated_at DESC, run_id",
                args,
            ).fetchall()

        return [self._entry(row) for row in await self._call(fetch)]

    def _entry(self, row: tuple[Any, ...]) -> RunEntry:
        run_id, workflow_name, status, last_seq, created, updated, options, event, alive = row
        try:
            decoded_options = json.loads(options) if options else {}
            decoded_event = json.loads(event) if event else None
        except ValueError as error:
            raise JournalError(
                f"{self.path}: run {run_id!r}: its stored start event or options are "
                f"corrupt ({error})"
            ) from error
        return RunEntry(
            run_id,
            workflow_name,
            status,
            last_seq,
            created,
            updated,
            decoded_options,
            decoded_event,
            float(alive or 0.0),
        )

    async def list_unfinished(self, workflow_name: str | None = None) -> list[RunEntry]:
        if workflow_name is None:
            return await self._entries("WHERE status = 'running'", ())
        return await self._entries(
            "WHERE status = 'running' AND workflow_name = ?", (workflow_name,)
        )

    async def get_run(self, run_id: str) -> RunEntry | None:
        entries = await self._entries("WHERE run_id = ?", (run_id,))
        return entries[0] if entries else None

    async def list_runs(self) -> list[RunEntry]:
        return await self._entries("", ())

    # -- single-process stand-ins until the fleet contract lands in this store ---------

    def renew_leases(self, owner: str, leases: Sequence[Any], lease_seconds: float) -> set[str]:
        return {lease.run_id for lease in leases}

    async def claim_run(self, run_id: str, owner: str, **_: Any) -> Any:
        from tickwork.stores.records import Claim, Lease

        entry = await self.get_run(run_id)
        if entry is None or entry.status not in ("running", "queued", "parked"):
            return None
        return Claim(Lease(run_id, owner, 0), entry)

    async def expire_owner(self, owner: str) -> int:
        return 0

    async def read_inbox(self, run_id: str) -> list[Any]:
        return []

    async def read_stream(
        self, run_id: str, after_seq: int = -1, limit: int | None = None
    ) -> list[Any]:
        return []

    async def wait_for_change(self, timeout: float, run_id: str | None = None) -> None:
        await anyio.sleep(timeout)

    async def submit_run(self, *args: Any, **kwargs: Any) -> bool:
        raise NotImplementedError

    async def claim_runs(self, *args: Any, **kwargs: Any) -> list[Any]:
        raise NotImplementedError

    async def release_run(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError

    async def send(self, *args: Any, **kwargs: Any) -> bool:
        raise NotImplementedError

    async def register_worker(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError

    async def touch_worker(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError

    async def unregister_worker(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError

    async def list_workers(self) -> list[Any]:
        raise NotImplementedError
