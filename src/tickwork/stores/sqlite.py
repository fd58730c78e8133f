"""The embedded durable journal store: standard-library ``sqlite3`` in WAL mode.

Every call runs on a worker thread (``anyio.to_thread``) holding one connection behind
a capacity limiter of one, so the event loop never blocks on the disk.  Commits are
durable (``synchronous=FULL``: the WAL is fsync'd on every commit) and one ``append``
is one transaction, so a batch of ticks is either fully there after a crash or not at
all.
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


def _fetch_records(conn: sqlite3.Connection, *, run_id: str, start: int) -> list[tuple[int, str]]:
    rows: list[tuple[int, str]] = conn.execute(
        "SELECT seq, data FROM records WHERE run_id = ? AND seq >= ? ORDER BY seq LIMIT ?",
        (run_id, start, _READ_BATCH),
    ).fetchall()
    return rows


class SqliteJournal:
    """A journal store in one SQLite file, e.g. ``SqliteJournal("runs.db")``."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._limiter: anyio.CapacityLimiter | None = None

    def __repr__(self) -> str:
        return f"SqliteJournal({self.path!r})"

    # -- plumbing -------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.executescript(_SCHEMA)
            _migrate(conn)
            self._conn = conn
        return self._conn

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(1)

        def run() -> T:
            with self._lock:
                return fn(self._connect())

        return await anyio.to_thread.run_sync(run, limiter=self._limiter)

    def close(self) -> None:
        """Close the connection (a new call reopens it)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

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
    ) -> None:
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

        self._call_blocking(write)

    def _call_blocking(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the calling thread (for the synchronous ``register_run``)."""
        with self._lock:
            return fn(self._connect())

    async def record_alive_time(self, run_id: str, elapsed_alive: float) -> None:
        now = time.time()

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE runs SET elapsed_alive = MAX(elapsed_alive, ?), updated_at = ? "
                "WHERE run_id = ?",
                (elapsed_alive, now, run_id),
            )

        await self._call(write)

    async def append(
        self,
        run_id: str,
        records: Sequence[JournalRecord],
        state_patch: StatePatch | None = None,
        final_status: RunStatus | None = None,
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

        await self._call(write)

    @staticmethod
    def _replace_snapshot(conn: sqlite3.Connection, run_id: str, seq: int, text: str) -> None:
        conn.execute("INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?)", (run_id, seq, text))
        conn.execute("DELETE FROM records WHERE run_id = ? AND seq < ?", (run_id, seq))
        conn.execute("DELETE FROM state_patches WHERE run_id = ? AND after_seq < ?", (run_id, seq))

    async def write_snapshot(self, run_id: str, seq: int, snapshot: dict[str, Any]) -> None:
        text = json.dumps(snapshot)

        def write(conn: sqlite3.Connection) -> None:
            def body() -> None:
                self._require_run(conn, run_id)
                self._replace_snapshot(conn, run_id, seq, text)

            self._transaction(conn, body)

        await self._call(write)

    async def mark_finished(self, run_id: str, status: RunStatus) -> None:
        def write(conn: sqlite3.Connection) -> None:
            self._require_run(conn, run_id)
            conn.execute("UPDATE runs SET status = ? WHERE run_id = ?", (status, run_id))

        await self._call(write)

    # -- reads ---------------------------------------------------------------------------

    async def read(self, run_id: str, from_seq: int = 0) -> AsyncIterator[JournalRecord]:
        expected = from_seq
        while True:
            rows = await self._call(
                functools.partial(_fetch_records, run_id=run_id, start=expected)
            )
            if not rows:
                return
            for seq, text in rows:
                if seq != expected:
                    raise JournalError(
                        f"run {run_id!r}: journal gap, expected seq {expected}, found seq {seq}"
                    )
                try:
                    data = json.loads(text)
                except ValueError as error:
                    raise JournalError(
                        f"run {run_id!r}: record seq {seq} is corrupt ({error})"
                    ) from error
                if not isinstance(data, dict) or "type" not in data:
                    raise JournalError(f"run {run_id!r}: record seq {seq} is not a tick record")
                yield JournalRecord(seq=seq, data=data)
                expected += 1

    async def read_state_patches(self, run_id: str, from_seq: int = 0) -> list[StatePatch]:
        def fetch(conn: sqlite3.Connection) -> list[tuple[int, str]]:
            return conn.execute(
                "SELECT after_seq, data FROM state_patches WHERE run_id = ? AND after_seq >= ? "
                "ORDER BY after_seq",
                (run_id, from_seq),
            ).fetchall()

        out: list[StatePatch] = []
        for after_seq, text in await self._call(fetch):
            try:
                out.append(StatePatch(after_seq, json.loads(text)))
            except ValueError as error:
                raise JournalError(
                    f"run {run_id!r}: state patch after seq {after_seq} is corrupt ({error})"
                ) from error
        return out

    async def read_snapshot(self, run_id: str) -> tuple[int, dict[str, Any]] | None:
        def fetch(conn: sqlite3.Connection) -> tuple[int, str] | None:
            row: tuple[int, str] | None = conn.execute(
                "SELECT seq, data FROM snapshots WHERE run_id = ?", (run_id,)
            ).fetchone()
            return row

        row = await self._call(fetch)
        if row is None:
            return None
        try:
            return row[0], json.loads(row[1])
        except ValueError as error:
            raise JournalError(
                f"run {run_id!r}: the snapshot at seq {row[0]} is corrupt ({error})"
            ) from error

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
