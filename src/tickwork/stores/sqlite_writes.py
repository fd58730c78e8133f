"""The journal writes of the SQLite store: registering and submitting runs, appends,
snapshots and the one-statement fenced updates of a run.

Plain synchronous functions on a ``sqlite3`` connection;
``SqliteJournal`` encodes the values and runs them on its
worker thread.  ``register`` and ``submit`` are one ``BEGIN IMMEDIATE`` transaction
each.  The writes of a running run (``append``, ``write_snapshot``, ``fenced_update``)
run *inside* a transaction: ``commit_together`` commits the writes of many runs
that queued up meanwhile (``.group_commit``) in one transaction and one fsync, so
that a write that fails (a refused fence, a duplicate record) is undone alone and the
others commit.  An append is the hot path
(one per drain of a durable run): its fence lives in the ``UPDATE runs`` it needs
anyway, so a fenced append costs no extra statement.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Sequence
from typing import Any

from tickwork.stores.group_commit import PendingCall
from tickwork.stores.records import JournalError, Lease, LeaseLost, RunOutcome, RunStatus
from tickwork.stores.sqlite_checks import journal_label, sqlite_failure
from tickwork.stores.sqlite_fleet import (
    InboxRead,
    check_fence,
    fence_refused,
    inbox_items,
    read_inboxes,
)
from tickwork.stores.sqlite_schema import immediate, outcome_columns, placeholders

__all__ = [
    "AppendRows",
    "append",
    "commit_together",
    "run_batch",
    "fenced_update",
    "keeps_records",
    "register",
    "replace_snapshot",
    "submit",
    "write_snapshot",
]


def replace_snapshot(
    conn: sqlite3.Connection | sqlite3.Cursor,
    run_id: str,
    seq: int,
    text: str,
    patches: bool = True,
) -> None:
    """Store the compacting snapshot taken before record ``seq``; drop older history
    (``patches=False``: the run is known to have no state patches to drop)."""
    # The run has its snapshot row (registration wrote it): rewriting it in place costs
    # less than ``INSERT OR REPLACE`` (which deletes it, then inserts it again).
    if not conn.execute(
        "UPDATE snapshots SET seq = ?, data = ? WHERE run_id = ?", (seq, text, run_id)
    ).rowcount:
        conn.execute("INSERT INTO snapshots VALUES (?, ?, ?)", (run_id, seq, text))
    conn.execute("DELETE FROM records WHERE run_id = ? AND seq < ?", (run_id, seq))
    if patches:
        conn.execute("DELETE FROM state_patches WHERE run_id = ? AND after_seq < ?", (run_id, seq))


def register(
    conn: sqlite3.Connection,
    path: str,
    run_id: str,
    workflow_name: str,
    seq: int,
    snapshot_text: str,
    event_text: str | None,
    options_text: str | None,
    owner: str | None,
    lease_seconds: float,
    lease: Lease | None,
    now: float,
    fresh: list[str] | None = None,
) -> Lease | None:
    """``register_run`` (store.py): the run, or its new session, is ``running`` from the
    snapshot at ``seq``; fenced by ``lease``, or taken over by ``owner`` unless another
    worker holds a live lease.  A new run's journal starts right before ``seq``; its id
    is appended to ``fresh`` (once committed, the run is known to have no history)."""
    with immediate(conn):
        if lease is None and _insert_new(
            conn,
            run_id,
            workflow_name,
            seq,
            snapshot_text,
            event_text,
            options_text,
            owner,
            lease_seconds,
            now,
        ):
            if fresh is not None:
                fresh.append(run_id)
            return None if owner is None else Lease(run_id, owner, 1)
        row = conn.execute(
            "SELECT owner, epoch, lease_until FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        held_by, epoch, until = row if row is not None else (None, 0, None)
        granted = lease
        if lease is not None and (held_by, epoch) != (lease.owner, lease.epoch):
            raise LeaseLost(
                f"{journal_label(path, run_id)}: registering a session refused: the run is "
                f"owned by {held_by or 'nobody'} at epoch {epoch}, not by {lease.owner} at "
                f"epoch {lease.epoch}"
            )
        if lease is None and owner is not None:
            if held_by not in (None, owner) and until is not None and until >= now:
                raise LeaseLost(
                    f"{journal_label(path, run_id)}: the run is owned by {held_by} until "
                    f"{until:.3f}; it cannot be started here"
                )
            held_by, epoch, until = owner, epoch + 1, now + lease_seconds
            granted = Lease(run_id, owner, epoch)
        if row is None:
            conn.execute(
                "INSERT INTO runs (run_id, workflow_name, status, last_seq, created_at, "
                "updated_at, start_event, options, owner, epoch, lease_until) "
                "VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    workflow_name,
                    seq - 1,
                    now,
                    now,
                    event_text,
                    options_text,
                    held_by,
                    epoch,
                    until,
                ),
            )
        else:
            conn.execute(
                "UPDATE runs SET workflow_name = ?, status = 'running', updated_at = ?, "
                "wake_at = NULL, start_event = COALESCE(?, start_event), "
                "options = COALESCE(?, options), owner = ?, epoch = ?, lease_until = ? "
                "WHERE run_id = ?",
                (workflow_name, now, event_text, options_text, held_by, epoch, until, run_id),
            )
        if row is None:  # a new run: there is no history to compact (as in ``submit``)
            conn.execute(
                "INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?)", (run_id, seq, snapshot_text)
            )
        else:
            replace_snapshot(conn, run_id, seq, snapshot_text)
    return granted


def _insert_new(
    conn: sqlite3.Connection,
    run_id: str,
    workflow_name: str,
    seq: int,
    snapshot_text: str,
    event_text: str | None,
    options_text: str | None,
    owner: str | None,
    lease_seconds: float,
    now: float,
) -> bool:
    """``register`` of a run not in the file, without a lease: insert it, owned by
    ``owner`` (if any) at epoch 1, and its snapshot; ``False`` (nothing written) when
    the run is in the file already.  One statement fewer than looking first: nearly
    every registration is of a new run."""
    held_by, epoch, until = (None, 0, None) if owner is None else (owner, 1, now + lease_seconds)
    if not conn.execute(
        "INSERT OR IGNORE INTO runs (run_id, workflow_name, status, last_seq, created_at, "
        "updated_at, start_event, options, owner, epoch, lease_until) "
        "VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?)",
        (run_id, workflow_name, seq - 1, now, now, event_text, options_text, held_by, epoch, until),
    ).rowcount:
        return False
    # A new run: there is no history to compact.
    conn.execute("INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?)", (run_id, seq, snapshot_text))
    return True


def submit(
    conn: sqlite3.Connection,
    run_id: str,
    workflow_name: str,
    seq: int,
    snapshot_text: str,
    event_text: str,
    options_text: str,
    queue: str,
    priority: int,
    now: float,
) -> bool:
    """``submit_run``: queue a new run, owned by nobody; whether it was created."""
    with immediate(conn):
        cursor = conn.execute(
            "INSERT OR IGNORE INTO runs (run_id, workflow_name, status, last_seq, created_at, "
            "updated_at, start_event, options, queue, priority) "
            "VALUES (?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?)",
            (run_id, workflow_name, seq - 1, now, now, event_text, options_text, queue, priority),
        )
        if not cursor.rowcount:
            return False
        # A new run: there is no history to compact.
        conn.execute(
            "INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?)", (run_id, seq, snapshot_text)
        )
    return True


@functools.lru_cache(maxsize=64)
def _append_sql(has_records: bool, progress: bool, final: bool, fenced: bool) -> str:
    """The one ``UPDATE runs`` of an append: it moves ``last_seq``, resets the poison
    counter if the records are ``progress`` (``is_progress`` in store.py: not for the
    record a session opens with alone), records the outcome and, with a lease, is the
    fence (no row changed: the write is refused).  Parameters: ``now``, [``last``],
    [``status``, ``result``, ``error``], ``run_id``, [``owner``, ``epoch``,
    [``first - 1``]]."""
    sets = ["updated_at = ?"]
    if has_records:
        sets.append("last_seq = MAX(last_seq, ?)")
        if progress:
            sets.append("claims_without_progress = 0")
    if final:
        sets += ["status = ?", "outcome_result = ?", "outcome_error = ?"]
        sets += ["lease_until = NULL"]  # the owner stays: its final snapshot is still fenced
    where = "run_id = ?"
    if fenced:
        where += " AND owner = ? AND epoch = ?"
        if has_records:
            where += " AND last_seq = ?"
    return f"UPDATE runs SET {', '.join(sets)} WHERE {where}"


class AppendRows(PendingCall):
    """One append, encoded, and its call in the store's queue: ``records`` are
    ``(run_id, seq, json)`` rows in batch order, ``patch`` a state-patch row, ``stream``
    ``(run_id, seq, json)`` rows, ``snapshot`` a compacting snapshot ``(seq, json)``
    written last (``patches=False``: the run is known to have no state patches for it to
    drop); made at ``now`` for the file at ``path``.  ``notifies``: its commit wakes
    the run's ``wait_for_change`` callers.

    It is the call queue's ``PendingCall`` itself, and ``run`` writes it (``append``):
    no body, ``functools.partial`` or keyword dict per append, one object fewer that
    every durable run waiting for its commit holds (slotted, as they all hold one).
    """

    __slots__ = (
        "consumed",
        "final_status",
        "lease",
        "notifies",
        "now",
        "outcome",
        "patch",
        "patches",
        "path",
        "progress",
        "records",
        "snapshot",
        "stream",
    )

    run_id: str  # always named

    def __init__(
        self,
        run_id: str,
        records: Sequence[tuple[str, int, str | None]],
        patch: tuple[str, int, str] | None,
        stream: Sequence[tuple[str, int, str]],
        consumed: Sequence[int],
        final_status: RunStatus | None,
        outcome: RunOutcome | None,
        lease: Lease | None,
        progress: bool,
        snapshot: tuple[int, str] | None,
        path: str,
        now: float,
        patches: bool = True,
        notifies: bool = False,
    ) -> None:
        # ``PendingCall.__init__`` written out (one frame fewer per append).
        self.body = None
        self.run_id = run_id
        self.action = "appending records"
        self.write = True
        self.result = None
        self.error = None
        self.taken = False
        self.settled = False
        self.wake = None
        self.records = records
        self.patch = patch
        self.stream = stream
        self.consumed = consumed
        self.final_status = final_status
        self.outcome = outcome
        self.lease = lease
        self.progress = progress
        self.snapshot = snapshot
        self.path = path
        self.now = now
        self.patches = patches
        self.notifies = notifies

    def run(self, connection: Any) -> None:
        """Write the append; ``connection`` is the batch's cursor (``commit_together``)."""
        append(connection, self.path, self, self.now)


def keeps_records(last: int, snapshot: tuple[int, Any] | None, lease: Lease | None) -> bool:
    """Whether an append writes its records (``last`` the highest seq): not when the
    compacting snapshot it writes after them, fenced by ``lease``, is taken after them
    all (the final append of a finished run), which would delete them in the same
    transaction.  Only when fenced: the fence's ``last_seq`` test then guarantees that
    none of them was written before (which an unfenced append learns from the insert).
    The store then gives their rows without texts (``SqliteJournal.append``)."""
    return snapshot is None or lease is None or last >= snapshot[0]


def append(conn: sqlite3.Cursor, path: str, rows: AppendRows, now: float) -> None:
    """``append`` (store.py), inside the caller's transaction: the fenced ``UPDATE
    runs``, then the records, the state patch, the consumed inbox items, the stream
    items and the compacting snapshot (dropping the history before it).  ``conn`` is
    a cursor of the connection: the statements of a batch's appends share one (each
    ``Connection.execute`` makes a cursor of its own, about 1.4k instructions)."""
    run_id, records, lease, final = rows.run_id, rows.records, rows.lease, rows.final_status
    first = last = None
    args: list[Any] = [now]
    if records:  # one record (a step's result) is most appends': no generator for it
        first = records[0][1]
        last = first if len(records) == 1 else max(seq for _run, seq, _data in records)
        args.append(last)
    if final is not None:
        args += [final, *outcome_columns(rows.outcome)]
    args.append(run_id)
    if lease is not None:
        args += [lease.owner, lease.epoch]
        if first is not None:
            args.append(first - 1)
    update = _append_sql(last is not None, rows.progress, final is not None, lease is not None)
    if not conn.execute(update, args).rowcount:
        fenced_first = first if lease is not None else None
        raise fence_refused(conn.connection, path, run_id, lease, "appending records", fenced_first)
    snapshot = rows.snapshot
    # Records and a patch that the snapshot written below compacts away are not
    # written at all (the transaction leaves the same rows; ``keeps_records``, written
    # out).
    cut = snapshot[0] if snapshot is not None and lease is not None else None
    if last is not None and (cut is None or last >= cut):
        try:
            conn.executemany("INSERT INTO records VALUES (?, ?, ?)", records)
        except sqlite3.IntegrityError as error:
            raise JournalError(
                f"{journal_label(path, run_id)}: a record in seq {first}..{records[-1][1]} "
                "was already written"
            ) from error
    patch = rows.patch
    if patch is not None and (cut is None or patch[1] >= cut):
        conn.execute("INSERT OR REPLACE INTO state_patches VALUES (?, ?, ?)", patch)
    if rows.consumed:
        # Consumed by the batch's last record (without records: the last one written
        # so far), and only once.
        at = "?" if records else "(SELECT last_seq FROM runs WHERE run_id = ?)"
        conn.execute(
            f"UPDATE inbox SET consumed_seq = {at} WHERE run_id = ? AND consumed_seq IS "
            f"NULL AND item_id IN ({placeholders(len(rows.consumed))})",
            (records[-1][1] if records else run_id, run_id, *rows.consumed),
        )
    if rows.stream:
        conn.executemany("INSERT OR REPLACE INTO stream VALUES (?, ?, ?)", rows.stream)
    if snapshot is not None:
        replace_snapshot(conn, run_id, *snapshot, rows.patches)


def write_snapshot(
    conn: sqlite3.Connection,
    path: str,
    run_id: str,
    seq: int,
    snapshot_text: str,
    lease: Lease | None,
) -> None:
    """``write_snapshot``, fenced by ``lease``, inside the caller's transaction."""
    check_fence(conn, path, run_id, lease, "writing a snapshot")
    replace_snapshot(conn, run_id, seq, snapshot_text)


def fenced_update(
    conn: sqlite3.Connection,
    path: str,
    run_id: str,
    statement: str,
    args: tuple[Any, ...],
    lease: Lease | None,
    what: str,
) -> None:
    """``statement`` (an ``UPDATE runs SET ... WHERE run_id = ?`` taking ``args`` and
    then the run id) fenced by ``lease``, inside the caller's transaction: no row
    changed raises ``LeaseLost``, or ``JournalError`` for an unknown run."""
    fence: tuple[Any, ...] = ()
    if lease is not None:
        statement += " AND owner = ? AND epoch = ?"
        fence = (lease.owner, lease.epoch)
    if not conn.execute(statement, (*args, run_id, *fence)).rowcount:
        raise fence_refused(conn, path, run_id, lease, what)


# -- group commit ------------------------------------------------------------------------


def run_batch(conn: sqlite3.Connection, path: str, batch: Sequence[PendingCall]) -> None:
    """Run a batch of the store's call queue (``.group_commit``) and settle each
    call: the plain calls (reads, claims: each its own transaction, if any) one after
    the other, then the writes together (``commit_together``).  An ``sqlite3``
    error of a call becomes a ``JournalError`` naming the file, the run and the call.
    Never raises for a call's failure."""
    writes: list[PendingCall] = []
    inbox_reads: list[PendingCall] = []
    for pending in batch:
        if pending.write:
            writes.append(pending)
        elif type(pending.body) is InboxRead:
            inbox_reads.append(pending)
        else:
            _run_one(conn, path, pending)
    # After the other plain calls: every read sees the items sent before it arrived
    # (its call and theirs were all pending together, so either order is one they
    # could have had).
    if len(inbox_reads) > 1:
        read_together(conn, path, inbox_reads)
    elif inbox_reads:
        _run_one(conn, path, inbox_reads[0])
    if writes:
        commit_together(conn, path, writes)


def _run_one(conn: sqlite3.Connection, path: str, pending: PendingCall) -> None:
    """Run a plain call and settle it."""
    try:
        pending.result = pending.run(conn)
    except Exception as error:
        pending.error = _failure_of(pending, error, path)


def read_together(conn: sqlite3.Connection, path: str, reads: Sequence[PendingCall]) -> None:
    """Settle the inbox reads of a batch (``InboxRead`` calls) with shared statements;
    a read of a run not in the file, or of an item that does not decode, goes alone
    (and fails alone, as it would have)."""
    try:
        found = read_inboxes(conn, [pending.body.run_id for pending in reads])
    except sqlite3.Error:
        found = {}  # each read goes alone and reports its own error
    for pending in reads:
        rows = found.get(pending.body.run_id)
        if rows is None:
            _run_one(conn, path, pending)
            continue
        try:
            pending.result = inbox_items(path, pending.body.run_id, rows)
        except Exception as error:
            pending.error = _failure_of(pending, error, path)


def commit_together(conn: sqlite3.Connection, path: str, batch: Sequence[PendingCall]) -> None:
    """Commit the writes of ``batch`` (each ``body(conn)``), in order, in one ``BEGIN
    IMMEDIATE`` transaction, and settle each with its result or its error.

    A write that raises fails alone: it gets the error (an ``sqlite3`` error becomes a
    ``JournalError`` naming its run) and the others commit.  Failures are rare (a
    refused fence, a duplicate record), so the writes first go without savepoints; at
    the first failure the transaction is rolled back and the writes left go again,
    each in a savepoint of its own, where a failing one is undone alone.  When SQLite
    rolls a whole transaction back (an I/O error, a full disk), the writes that had
    succeeded go again in a new one.  A failed ``BEGIN`` or ``COMMIT`` fails every
    write it held.  Never raises for a write's failure.
    """
    todo, careful = list(batch), False
    while todo:
        todo = _one_transaction(conn, path, todo, careful)
        careful = True


def _one_transaction(
    conn: sqlite3.Connection, path: str, batch: list[PendingCall], careful: bool
) -> list[PendingCall]:
    """One try of ``commit_together``, each write in a savepoint if ``careful``;
    the writes to try again (those a rollback of the whole transaction undid)."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as error:
        _fail(batch, error, path)
        return []
    written: list[PendingCall] = []
    cursor = conn.cursor()  # the appends' statements share it (``append``)
    try:
        for index, pending in enumerate(batch):
            try:
                if careful:
                    conn.execute("SAVEPOINT one_write")
                if type(pending) is AppendRows:
                    pending.run(cursor)  # its result is None
                else:
                    pending.result = pending.run(conn)
                if careful:
                    conn.execute("RELEASE one_write")
            except Exception as error:
                pending.result = None
                pending.error = _failure_of(pending, error, path)
                if not careful or not _undo_one(conn):
                    _rollback(conn)
                    return written + batch[index + 1 :]
            else:
                written.append(pending)
        conn.execute("COMMIT")
    except sqlite3.Error as error:  # the COMMIT (a write's own errors are caught above)
        _rollback(conn)
        _fail(written, error, path)
    except BaseException:
        _rollback(conn)
        raise
    return []


def _undo_one(conn: sqlite3.Connection) -> bool:
    """Roll a failed write's savepoint back; ``False`` when the transaction is gone
    (SQLite rolled it back on an I/O error) or cannot be kept."""
    if not conn.in_transaction:
        return False
    try:
        conn.execute("ROLLBACK TO one_write")
        conn.execute("RELEASE one_write")
    except sqlite3.Error:
        return False
    return True


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        # The error that brought us here says more than a failed rollback would.
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _failure_of(pending: PendingCall, error: Exception, path: str) -> Exception:
    """What the caller of a failed write raises: an ``sqlite3`` error becomes a
    ``JournalError`` naming the file, the run and the write; others stay as they are
    (``LeaseLost``, a duplicate record)."""
    if not isinstance(error, sqlite3.Error):
        return error
    failure = sqlite_failure(error, path, pending.action, pending.run_id)
    failure.__cause__ = error
    return failure


def _fail(batch: Sequence[PendingCall], error: sqlite3.Error, path: str) -> None:
    for pending in batch:
        pending.result = None
        pending.error = _failure_of(pending, error, path)
