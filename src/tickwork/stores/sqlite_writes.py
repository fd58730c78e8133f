"""The journal writes of the SQLite store: registering and submitting runs, appends,
snapshots and the one-statement fenced updates of a run.

Plain synchronous functions on a ``sqlite3`` connection, each one ``BEGIN IMMEDIATE``
transaction; :class:`~tickwork.stores.sqlite.SqliteJournal` encodes the values and runs
them on its worker thread.  An append is the hot path (one per drain of a durable run):
its fence lives in the ``UPDATE runs`` it needs anyway, so a fenced append costs no
extra statement.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tickwork.stores.records import JournalError, Lease, LeaseLost, RunOutcome, RunStatus
from tickwork.stores.sqlite_checks import journal_label
from tickwork.stores.sqlite_fleet import check_fence, fence_refused
from tickwork.stores.sqlite_schema import immediate, outcome_columns, placeholders

__all__ = [
    "AppendRows",
    "append",
    "fenced_update",
    "register",
    "replace_snapshot",
    "submit",
    "write_snapshot",
]


def replace_snapshot(conn: sqlite3.Connection, run_id: str, seq: int, text: str) -> None:
    """Store the compacting snapshot taken before record ``seq``; drop older history."""
    conn.execute("INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?)", (run_id, seq, text))
    conn.execute("DELETE FROM records WHERE run_id = ? AND seq < ?", (run_id, seq))
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
) -> Lease | None:
    """``register_run`` (store.py): the run, or its new session, is ``running`` from the
    snapshot at ``seq``; fenced by ``lease``, or taken over by ``owner`` unless another
    worker holds a live lease.  A new run's journal starts right before ``seq``."""
    label = journal_label(path, run_id)
    with immediate(conn):
        row = conn.execute(
            "SELECT owner, epoch, lease_until FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        held_by, epoch, until = row if row is not None else (None, 0, None)
        granted = lease
        if lease is not None and (held_by, epoch) != (lease.owner, lease.epoch):
            raise LeaseLost(
                f"{label}: registering a session refused: the run is owned by "
                f"{held_by or 'nobody'} at epoch {epoch}, not by {lease.owner} at epoch "
                f"{lease.epoch}"
            )
        if lease is None and owner is not None:
            if held_by not in (None, owner) and until is not None and until >= now:
                raise LeaseLost(
                    f"{label}: the run is owned by {held_by} until {until:.3f}; it cannot be "
                    "started here"
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
        replace_snapshot(conn, run_id, seq, snapshot_text)
    return granted


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


@functools.lru_cache(maxsize=32)
def _append_sql(has_records: bool, final: bool, fenced: bool) -> str:
    """The one ``UPDATE runs`` of an append: it moves ``last_seq``, resets the poison
    counter, records the outcome and, with a lease, is the fence (no row changed: the
    write is refused).  Parameters: ``now``, [``last``], [``status``, ``result``,
    ``error``], ``run_id``, [``owner``, ``epoch``, [``first - 1``]]."""
    sets = ["updated_at = ?"]
    if has_records:
        sets += ["last_seq = MAX(last_seq, ?)", "claims_without_progress = 0"]
    if final:
        sets += ["status = ?", "outcome_result = ?", "outcome_error = ?"]
        sets += ["lease_until = NULL"]  # the owner stays: its final snapshot is still fenced
    where = "run_id = ?"
    if fenced:
        where += " AND owner = ? AND epoch = ?"
        if has_records:
            where += " AND last_seq = ?"
    return f"UPDATE runs SET {', '.join(sets)} WHERE {where}"


@dataclass(frozen=True)
class AppendRows:
    """One append, encoded: ``records`` are ``(run_id, seq, json)`` rows in batch order,
    ``patch`` a state-patch row, ``stream`` ``(run_id, seq, json)`` rows."""

    run_id: str
    records: list[tuple[str, int, str]]
    patch: tuple[str, int, str] | None
    stream: list[tuple[str, int, str]]
    consumed: Sequence[int]
    final_status: RunStatus | None
    outcome: RunOutcome | None
    lease: Lease | None


def append(conn: sqlite3.Connection, path: str, rows: AppendRows, now: float) -> None:
    """``append`` (store.py) in one transaction: the fenced ``UPDATE runs``, then the
    records, the state patch, the consumed inbox items and the stream items."""
    run_id, records, lease = rows.run_id, rows.records, rows.lease
    first = records[0][1] if records else None
    args: list[Any] = [now]
    if records:
        args.append(max(seq for _run, seq, _data in records))
    if rows.final_status is not None:
        args += [rows.final_status, *outcome_columns(rows.outcome)]
    args.append(run_id)
    if lease is not None:
        args += [lease.owner, lease.epoch]
        if first is not None:
            args.append(first - 1)
    update = _append_sql(bool(records), rows.final_status is not None, lease is not None)
    with immediate(conn):
        if not conn.execute(update, args).rowcount:
            fenced_first = first if lease is not None else None
            raise fence_refused(conn, path, run_id, lease, "appending records", fenced_first)
        try:
            conn.executemany("INSERT INTO records VALUES (?, ?, ?)", records)
        except sqlite3.IntegrityError as error:
            raise JournalError(
                f"{journal_label(path, run_id)}: a record in seq {first}..{records[-1][1]} "
                "was already written"
            ) from error
        if rows.patch is not None:
            conn.execute("INSERT OR REPLACE INTO state_patches VALUES (?, ?, ?)", rows.patch)
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


def write_snapshot(
    conn: sqlite3.Connection,
    path: str,
    run_id: str,
    seq: int,
    snapshot_text: str,
    lease: Lease | None,
) -> None:
    """``write_snapshot``, fenced by ``lease``."""
    with immediate(conn):
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
    then the run id) fenced by ``lease``: no row changed raises ``LeaseLost``, or
    ``JournalError`` for an unknown run."""
    fence: tuple[Any, ...] = ()
    if lease is not None:
        statement += " AND owner = ? AND epoch = ?"
        fence = (lease.owner, lease.epoch)
    with immediate(conn):
        if not conn.execute(statement, (*args, run_id, *fence)).rowcount:
            raise fence_refused(conn, path, run_id, lease, what)
