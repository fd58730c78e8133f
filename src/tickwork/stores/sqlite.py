"""The embedded durable journal store: standard-library ``sqlite3`` in WAL mode.

Every call runs on a worker thread (``anyio.to_thread``) holding one connection, so
the event loop never blocks on the disk.  Commits are durable (``synchronous=FULL``: the
WAL is fsync'd on every commit) and one ``append`` is in one transaction, so a batch of
ticks is either fully there after a crash or not at all.  Calls go through a queue
(``.group_commit``): those that arrive while the thread is busy go together in its
next trip, and the writes of running runs among them (appends, snapshots, outcomes,
alive times) are committed in one transaction, with one fsync (group commit across
runs), each in a savepoint of its own so that one run's refused or failed write fails
that run only.

Several processes may share one file (the fleet contract of ``.store`` on one
machine): every read-modify-write is a ``BEGIN IMMEDIATE`` transaction and a busy
connection waits up to ``BUSY_TIMEOUT_S`` for the write lock instead of failing.
Writes carrying a lease are fenced in the statement that changes the run
(``WHERE owner = ? AND epoch = ? AND last_seq = ?``).  The schema is versioned and
migrated on open (``.sqlite_schema``); the fleet statements are in
``.sqlite_fleet``.  ``wait_for_change`` sleeps up to its timeout and wakes early only
for changes of its run made through this store object (other processes are seen by
polling).

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
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
import anyio.to_thread

from tickwork.serde.snapshot_text import json_text, snapshot_text
from tickwork.stores import sqlite_fleet as fleet
from tickwork.stores import sqlite_writes as writes
from tickwork.stores.encoded import TextRecord, TextStreamItem, record_text, value_text
from tickwork.stores.group_commit import GroupCommit, PendingCall
from tickwork.stores.records import (
    UNFINISHED,
    Claim,
    InboxItem,
    InboxKind,
    JournalError,
    Lease,
    RunEntry,
    RunOutcome,
    RunStatus,
    StatePatch,
    StreamItem,
    WorkerEntry,
)
from tickwork.stores.remote import RemoteHandler, attach
from tickwork.stores.sqlite_checks import (
    check_journal_path,
    decode_stored_json,
    journal_label,
    json_kind,
    sqlite_failure,
)
from tickwork.stores.sqlite_schema import (
    ENTRY_COLUMNS,
    decode_entry,
    outcome_columns,
    placeholders,
    prepare,
)
from tickwork.stores.store import DEFAULT_LEASE_SECONDS, DEFAULT_MAX_CLAIMS, is_progress
from tickwork.types import JournalRecord

__all__ = ["BUSY_TIMEOUT_S", "SqliteJournal"]

T = TypeVar("T")

BUSY_TIMEOUT_S = 5.0
"""How long a call waits for another connection's write lock before it fails."""

_READ_BATCH = 512


# The read paths fetch ``data`` as bytes and decode it themselves, so that text which is
# not UTF-8 is reported with the seq of its row (sqlite3 would fail the whole fetch).


def _fetch_records(
    conn: sqlite3.Connection, *, path: str, run_id: str, start: int, limit: int, first: bool
) -> list[tuple[int, bytes]]:
    rows: list[tuple[int, bytes]] = conn.execute(
        "SELECT seq, CAST(data AS BLOB) FROM records WHERE run_id = ? AND seq >= ? "
        "ORDER BY seq LIMIT ?",
        (run_id, start, limit),
    ).fetchall()
    if first and not rows:
        fleet.require_run(conn, path, run_id)
    return rows


def _record_rows(
    run_id: str,
    records: Sequence[JournalRecord],
    snapshot: tuple[int, Any] | None,
    lease: Lease | None,
) -> tuple[tuple[str, int, str | None], ...]:
    """The rows of an append's ``records``: without their texts when the append's own
    snapshot compacts them all away (``writes.keeps_records``: none is written; the
    last records of a finished run, whose texts are then never written at all).

    A tuple, not a list: every durable run waiting for its commit holds its rows, and
    the garbage collector stops tracking a tuple of strings and numbers."""
    if (
        snapshot is not None
        and records
        and not writes.keeps_records(max(r.seq for r in records), snapshot, lease)
    ):
        return tuple([(run_id, r.seq, None) for r in records])
    return tuple([(run_id, r.seq, record_text(r)) for r in records])


class SqliteJournal:
    """A journal store in one SQLite file, e.g. ``SqliteJournal("runs.db")``.

    The constructor checks the path cheaply (its directory exists and is writable; the
    path, when it exists, is a readable and writable regular file) and raises
    ``JournalError`` naming it; the file itself is opened (and created, or migrated from
    an older tickwork) by ``check`` or the first call.  Several processes may use
    one file at once.
    """

    #: ``append`` takes ``snapshot=`` (see ``JournalStore.appends_snapshots``).
    appends_snapshots = True
    #: ``append`` takes records, stream items and outcomes given as JSON text
    #: (``tickwork.stores.encoded``).
    takes_record_text = True

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        check_journal_path(self.path)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        # Lease renewals have their own connection: the renewal thread never queues
        # behind the event loop's calls.
        self._renew_conn: sqlite3.Connection | None = None
        self._renew_lock = threading.Lock()
        # The events of ``wait_for_change`` callers, by the run they wait for (``None``:
        # any run), and of ``wait_for_inbox`` callers (woken by sends only).
        self._changed: dict[str | None, list[anyio.Event]] = {}
        self._sent: dict[str | None, list[anyio.Event]] = {}
        self._queue = GroupCommit(self._run_batch)
        # The runs that have no state patches in the file: registered here as new runs
        # with a lease, none written since.  Only the lease's holder writes a run's
        # patches (through ``append``, which drops the run from here when it writes
        # one), and a new session of the run bumps its epoch (its earlier lease is
        # refused from then on) and is registered again (which drops it too): so the
        # final snapshot of such a run, fenced, needs not delete any.  A run leaves it
        # with that snapshot, its outcome or its release (a session that just stops
        # leaves its id behind, which a new registration drops).
        self._unpatched: set[str] = set()

    def __repr__(self) -> str:
        return f"SqliteJournal({self.path!r})"

    # -- plumbing -------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        """A new connection to the file, its schema created or migrated."""
        # Again: the directory may have gone since the constructor looked.
        check_journal_path(self.path)
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=BUSY_TIMEOUT_S,
                check_same_thread=False,
                isolation_level=None,
            )
        except sqlite3.Error as error:
            raise sqlite_failure(error, self.path, "opening the file") from error
        try:
            prepare(conn, self.path)
        except BaseException as error:
            conn.close()
            if isinstance(error, sqlite3.Error):
                raise sqlite_failure(error, self.path, "opening the journal") from error
            raise
        return conn

    def _connect(self) -> sqlite3.Connection:
        """The connection, opened on first use; hold the lock."""
        if self._conn is None:
            self._conn = self._open()
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

    def _call(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        run_id: str | None = None,
        action: str = "a journal call",
    ) -> Coroutine[Any, Any, T]:
        """Run ``fn(connection)`` on the worker thread, in the next batch of the call
        queue; an ``sqlite3`` error becomes a ``JournalError`` naming the path,
        ``run_id`` (if given) and ``action``.

        Returns the queue's own coroutine (await it) rather than wrapping it in one
        more: every journal call, and every wake-up of one, goes through here."""
        return self._queue.call(fn, run_id=run_id, action=action)

    def _write(
        self, body: Callable[[sqlite3.Connection], T], *, run_id: str, action: str
    ) -> Coroutine[Any, Any, T]:
        """Commit ``body(connection)``, a write made inside a transaction, in the next
        batch's transaction (group commit); await it for its result, or its error."""
        return self._queue.call(body, run_id=run_id, action=action, write=True)

    async def _run_batch(self, batch: list[PendingCall]) -> None:
        """Run a batch of the call queue on a worker thread (see ``writes.run_batch``),
        then wake the ``wait_for_change`` callers of the runs whose committed appends
        ended them or published events."""

        def run() -> None:
            with self._lock:
                writes.run_batch(self._connect(), self.path, batch)

        await anyio.to_thread.run_sync(run)
        if self._changed:  # wake the waiters of the appends that asked for it
            for pending in batch:
                notifies = type(pending) is writes.AppendRows and pending.notifies
                if notifies and pending.error is None:
                    self._notify(pending.run_id)

    def _call_blocking(
        self, fn: Callable[[sqlite3.Connection], T], *, run_id: str | None, action: str
    ) -> T:
        """``fn(connection)`` on the calling thread (the synchronous ``register_run``);
        an ``sqlite3`` error becomes a ``JournalError`` as in ``_call``."""
        with self._lock:
            conn = self._connect()
            try:
                return fn(conn)
            except sqlite3.Error as error:
                raise sqlite_failure(error, self.path, action, run_id) from error

    def close(self) -> None:
        """Close the connections (a new call reopens them)."""
        for lock, name in ((self._lock, "_conn"), (self._renew_lock, "_renew_conn")):
            with lock:
                conn: sqlite3.Connection | None = getattr(self, name)
                setattr(self, name, None)
                if conn is not None:
                    try:
                        conn.close()
                    except sqlite3.Error as error:
                        raise sqlite_failure(error, self.path, "closing the file") from error

    def _notify(
        self, run_id: str | None, waiters: dict[str | None, list[anyio.Event]] | None = None
    ) -> None:
        """Wake this process's ``wait_for_change`` callers (or ``waiters``) waiting for
        ``run_id`` or for any run (``None``: every caller); other processes poll.

        Only the run's own waiters: with a thousand runs live, waking every run's inbox
        pump for each run's change would cost a million inbox reads."""
        changed = self._changed if waiters is None else waiters
        if not changed:
            return
        if run_id is None:
            woken = list(changed.values())
            changed.clear()
        else:
            woken = [changed.pop(run_id, []), changed.pop(None, [])]
        for events in woken:
            for event in events:
                event.set()

    # -- registering and submitting runs ------------------------------------------

    def register_run(
        self,
        run_id: str,
        workflow_name: str,
        snapshot: dict[str, Any],
        *,
        start_event: Any = None,
        options: Mapping[str, Any] | None = None,
        owner: str | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        lease: Lease | None = None,
    ) -> Lease | None:
        self._unpatched.discard(run_id)
        fresh: list[str] = []
        write = functools.partial(
            writes.register,
            path=self.path,
            run_id=run_id,
            workflow_name=workflow_name,
            seq=int(snapshot.get("journal_seq", 0)),
            snapshot_text=snapshot_text(snapshot),
            event_text=None if start_event is None else value_text(start_event),
            options_text=None if options is None else json_text(dict(options)),
            owner=owner,
            lease_seconds=lease_seconds,
            lease=lease,
            now=time.time(),
            fresh=fresh,
        )
        granted = self._call_blocking(write, run_id=run_id, action="registering the run")
        if fresh and granted is not None:
            self._unpatched.add(run_id)
        return granted

    async def submit_run(
        self,
        run_id: str,
        workflow_name: str,
        snapshot: dict[str, Any],
        *,
        start_event: Any,
        options: Mapping[str, Any] | None = None,
        queue: str = "default",
        priority: int = 0,
    ) -> bool:
        write = functools.partial(
            writes.submit,
            run_id=run_id,
            workflow_name=workflow_name,
            seq=int(snapshot.get("journal_seq", 0)),
            snapshot_text=snapshot_text(snapshot),
            event_text=json.dumps(start_event),
            options_text=json.dumps(dict(options or {})),
            queue=queue,
            priority=priority,
            now=time.time(),
        )
        created = await self._call(write, run_id=run_id, action="submitting the run")
        if created:
            self._notify(run_id)
        return created

    # -- the journal -----------------------------------------------------------------

    def append(
        self,
        run_id: str,
        records: Sequence[JournalRecord],
        state_patch: StatePatch | None = None,
        final_status: RunStatus | None = None,
        *,
        lease: Lease | None = None,
        consumed: Sequence[int] = (),
        stream: Sequence[StreamItem] = (),
        outcome: RunOutcome | None = None,
        snapshot: tuple[int, dict[str, Any]] | None = None,
    ) -> Coroutine[Any, Any, None]:
        """``append`` (store.py).  Encodes now and returns the write's coroutine (await
        it): nothing the caller passed (records, events and snapshot as dictionaries)
        stays referenced while the write waits for its batch, as a thousand durable runs
        waiting for one commit would keep them all for the garbage collector to walk."""
        unpatched = self._unpatched
        if state_patch is not None or snapshot is not None:
            # Known without state patches: the final snapshot deletes none (a fenced
            # one only: the fence proves that no other session wrote since).
            patches = run_id not in unpatched or lease is None or state_patch is not None
            unpatched.discard(run_id)
        else:
            patches = True
        record = records[0] if len(records) == 1 else None
        if snapshot is None and type(record) is TextRecord:  # most appends: no frames
            record_rows: tuple[tuple[str, int, str | None], ...] = (
                (run_id, record.seq, record.text),
            )
            progress = not record.opens  # ``is_progress``
        else:
            record_rows = _record_rows(run_id, records, snapshot, lease)
            progress = is_progress(records)
        rows = writes.AppendRows(
            run_id,
            record_rows,
            None
            if state_patch is None
            else (run_id, state_patch.after_seq, json.dumps(state_patch.patch)),
            tuple(
                [
                    (
                        run_id,
                        item.seq,
                        item.text if type(item) is TextStreamItem else json.dumps(item.event),
                    )
                    for item in stream
                ]
            )
            if stream
            else (),
            tuple(consumed),
            final_status,
            outcome,
            lease,
            progress,
            None if snapshot is None else (snapshot[0], snapshot_text(snapshot[1])),
            self.path,
            time.time(),
            patches,
            # A run's end and its published events wake this process's
            # ``wait_for_change`` callers once committed (``_run_batch``), without a
            # coroutine of ours around the write.
            final_status is not None or bool(stream),
        )
        return self._queue.submit(rows)

    async def write_snapshot(
        self, run_id: str, seq: int, snapshot: dict[str, Any], *, lease: Lease | None = None
    ) -> None:
        write = functools.partial(
            writes.write_snapshot,
            path=self.path,
            run_id=run_id,
            seq=seq,
            snapshot_text=snapshot_text(snapshot),
            lease=lease,
        )
        await self._write(write, run_id=run_id, action="writing a snapshot")

    async def _fenced_update(
        self, run_id: str, statement: str, args: tuple[Any, ...], lease: Lease | None, what: str
    ) -> None:
        write = functools.partial(
            writes.fenced_update,
            path=self.path,
            run_id=run_id,
            statement=statement,
            args=args,
            lease=lease,
            what=what,
        )
        await self._write(write, run_id=run_id, action=what)

    async def mark_finished(
        self,
        run_id: str,
        status: RunStatus,
        *,
        lease: Lease | None = None,
        outcome: RunOutcome | None = None,
    ) -> None:
        # The lease ends; the owner and epoch stay, so the owner's last writes (the final
        # snapshot) are still fenced by its lease (as in the reference store).
        sets = "status = ?, lease_until = NULL, updated_at = ?"
        args: tuple[Any, ...] = (status, time.time())
        if outcome is not None:  # without one, an outcome already stored is kept
            sets += ", outcome_result = ?, outcome_error = ?"
            args += outcome_columns(outcome)
        statement = f"UPDATE runs SET {sets} WHERE run_id = ?"
        self._unpatched.discard(run_id)
        await self._fenced_update(run_id, statement, args, lease, "recording the run's outcome")
        self._notify(run_id)

    async def record_alive_time(
        self, run_id: str, elapsed_alive: float, *, lease: Lease | None = None
    ) -> None:
        await self._fenced_update(
            run_id,
            "UPDATE runs SET elapsed_alive = MAX(elapsed_alive, ?), updated_at = ? "
            "WHERE run_id = ?",
            (elapsed_alive, time.time()),
            lease,
            "recording the alive time",
        )

    # -- reads ---------------------------------------------------------------------------

    async def read(self, run_id: str, from_seq: int = 0) -> AsyncIterator[JournalRecord]:
        label = journal_label(self.path, run_id)
        expected = from_seq
        limit = _READ_BATCH
        while True:
            try:
                rows = await self._call(
                    functools.partial(
                        _fetch_records,
                        path=self.path,
                        run_id=run_id,
                        start=expected,
                        limit=limit,
                        first=expected == from_seq,
                    ),
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
            rows: list[tuple[int, bytes]] = conn.execute(
                "SELECT after_seq, CAST(data AS BLOB) FROM state_patches "
                "WHERE run_id = ? AND after_seq >= ? ORDER BY after_seq",
                (run_id, from_seq),
            ).fetchall()
            if not rows:
                fleet.require_run(conn, self.path, run_id)
            return rows

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
            if row is None:
                fleet.require_run(conn, self.path, run_id)
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
                f"SELECT {ENTRY_COLUMNS} FROM runs {where} ORDER BY updated_at DESC, run_id",
                args,
            ).fetchall()

        return [decode_entry(row, self.path) for row in await self._call(fetch)]

    async def get_run(self, run_id: str) -> RunEntry | None:
        entries = await self._entries("WHERE run_id = ?", (run_id,))
        return entries[0] if entries else None

    async def list_runs(self) -> list[RunEntry]:
        return await self._entries("", ())

    async def list_unfinished(self, workflow_name: str | None = None) -> list[RunEntry]:
        where = f"WHERE status IN ({placeholders(len(UNFINISHED))})"
        if workflow_name is None:
            return await self._entries(where, UNFINISHED)
        return await self._entries(f"{where} AND workflow_name = ?", (*UNFINISHED, workflow_name))

    # -- ownership ---------------------------------------------------------------------

    async def claim_runs(
        self,
        owner: str,
        workflow_names: Sequence[str],
        *,
        queues: Sequence[str] | None = None,
        limit: int = 1,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_claims: int = DEFAULT_MAX_CLAIMS,
    ) -> list[Claim]:
        names, wanted = tuple(workflow_names), None if queues is None else tuple(queues)
        claim = functools.partial(
            fleet.claim_some,
            path=self.path,
            owner=owner,
            workflow_names=names,
            queues=wanted,
            limit=limit,
            lease_seconds=lease_seconds,
            max_claims=max_claims,
            now=time.time(),
        )
        return await self._call(claim, action=f"claiming runs for {owner}")

    async def claim_run(
        self,
        run_id: str,
        owner: str,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_claims: int = DEFAULT_MAX_CLAIMS,
    ) -> Claim | None:
        claim = functools.partial(
            fleet.claim_one,
            path=self.path,
            run_id=run_id,
            owner=owner,
            lease_seconds=lease_seconds,
            max_claims=max_claims,
            now=time.time(),
        )
        return await self._call(claim, run_id=run_id, action=f"claiming the run for {owner}")

    def renew_leases(self, owner: str, leases: Sequence[Lease], lease_seconds: float) -> set[str]:
        until = time.time() + lease_seconds
        self.check()  # the main connection migrates the file; this one only uses it
        with self._renew_lock:
            try:
                if self._renew_conn is None:
                    self._renew_conn = self._open()
                return fleet.renew(self._renew_conn, owner, leases, until)
            except sqlite3.Error as error:
                raise sqlite_failure(
                    error, self.path, f"renewing {len(leases)} leases of {owner}"
                ) from error

    async def release_run(
        self,
        lease: Lease,
        *,
        status: Literal["queued", "parked"] = "queued",
        wake_at: float | None = None,
    ) -> None:
        self._unpatched.discard(lease.run_id)
        release = functools.partial(
            fleet.release,
            path=self.path,
            lease=lease,
            status=status,
            wake_at=wake_at,
            now=time.time(),
        )
        await self._call(release, run_id=lease.run_id, action=f"releasing the run as {status}")
        self._notify(lease.run_id)

    async def expire_owner(self, owner: str) -> int:
        ended = await self._call(
            functools.partial(fleet.expire_owner, owner=owner),
            action=f"ending the leases of {owner}",
        )
        if ended:
            self._notify(None)
        return ended

    # -- inbox and stream --------------------------------------------------------------

    async def send(
        self,
        run_id: str,
        kind: InboxKind,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> bool:
        insert = functools.partial(
            fleet.insert_inbox_item,
            path=self.path,
            run_id=run_id,
            kind=kind,
            payload=payload,
            idempotency_key=idempotency_key,
            now=time.time(),
        )
        inserted = await self._call(insert, run_id=run_id, action=f"sending a {kind}")
        if inserted:
            self._notify(run_id)
            self._notify(run_id, self._sent)
        return inserted

    async def read_inbox(self, run_id: str) -> list[InboxItem]:
        read = fleet.InboxRead(self.path, run_id)  # the reads of a batch go together
        return await self._call(read, run_id=run_id, action="reading the inbox")

    async def read_inboxes(self, run_ids: Sequence[str]) -> dict[str, list[InboxItem]]:
        """The unconsumed inbox items of each of ``run_ids``, in insertion order, by run
        id, in one call (the inbox watcher of a process's runs: ``tickwork.runtime.
        inbox_watcher``).  A run whose inbox cannot be read so (a run not in the file,
        an item that does not decode) is left out: ``read_inbox`` of it says why."""
        wanted = list(run_ids)

        def read(conn: sqlite3.Connection) -> dict[str, list[InboxItem]]:
            found: dict[str, list[InboxItem]] = {}
            for run_id, rows in fleet.read_inboxes(conn, wanted).items():
                try:
                    found[run_id] = fleet.inbox_items(self.path, run_id, rows)
                except JournalError:
                    continue
            return found

        return await self._call(read, action=f"reading the inboxes of {len(wanted)} runs")

    async def read_stream(
        self, run_id: str, after_seq: int = -1, limit: int | None = None
    ) -> list[StreamItem]:
        read = functools.partial(
            fleet.read_stream, path=self.path, run_id=run_id, after_seq=after_seq, limit=limit
        )
        return await self._call(
            read, run_id=run_id, action=f"reading the stream after seq {after_seq}"
        )

    # -- workers and notifications ---------------------------------------------------

    async def register_worker(self, worker_id: str, info: Mapping[str, Any]) -> None:
        write = functools.partial(
            fleet.register_worker, worker_id=worker_id, info=info, now=time.time()
        )
        await self._call(write, action=f"registering worker {worker_id}")

    async def touch_worker(self, worker_id: str, runs: Sequence[str]) -> None:
        write = functools.partial(
            fleet.touch_worker, worker_id=worker_id, runs=tuple(runs), now=time.time()
        )
        await self._call(write, action=f"recording that worker {worker_id} is alive")

    async def unregister_worker(self, worker_id: str) -> None:
        write = functools.partial(fleet.unregister_worker, worker_id=worker_id)
        await self._call(write, action=f"unregistering worker {worker_id}")

    async def list_workers(self) -> list[WorkerEntry]:
        read = functools.partial(fleet.workers, path=self.path)
        return await self._call(read, action="listing the workers")

    async def wait_for_change(self, timeout: float, run_id: str | None = None) -> None:
        """Sleep up to ``timeout``; wake early when this store object wrote a change of
        ``run_id`` (``None``: of any run); changes by other processes are only seen by
        the caller's next poll."""
        await _wait(self._changed, timeout, run_id)

    async def wait_for_inbox(self, timeout: float, run_id: str | None) -> None:
        """Sleep up to ``timeout``; wake early when this store object sent an item to
        the inbox of ``run_id`` (``None``: of any run).  Not on the run's own appends:
        a run's inbox pump would otherwise read its inbox again after each of its
        commits that publishes."""
        await _wait(self._sent, timeout, run_id)

    async def attach(self, run_id: str, *, serializer: Any = None) -> RemoteHandler:
        """A handler of ``run_id`` that works from any process (see ``.remote``)."""
        return await attach(self, run_id, serializer)


async def _wait(
    waiters: dict[str | None, list[anyio.Event]], timeout: float, key: str | None
) -> None:
    """Wait up to ``timeout`` for an event registered in ``waiters`` under ``key``."""
    event = anyio.Event()
    waiters.setdefault(key, []).append(event)
    try:
        with anyio.move_on_after(timeout):
            await event.wait()
    finally:
        if not event.is_set():  # timed out or cancelled: leave nothing behind
            events = waiters.get(key, [])
            if event in events:
                events.remove(event)
                if not events:
                    del waiters[key]
