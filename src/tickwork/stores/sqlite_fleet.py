"""The fleet half of the SQLite journal: ownership (claims, fencing, renewals,
releases), the inbox, the event stream and the workers table.

Plain synchronous functions on a ``sqlite3`` connection; ``SqliteJournal`` runs
them on its worker thread.  Every read-modify-write is one ``BEGIN IMMEDIATE``
transaction, which holds the file's write lock from its first read, so several
processes sharing one file never hand out the same run twice.  The semantics are those
of ``InMemoryJournal``.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from tickwork.stores.records import (
    FINISHED,
    Claim,
    InboxItem,
    InboxKind,
    JournalError,
    Lease,
    LeaseLost,
    RunEntry,
    RunOutcome,
    StreamItem,
    WorkerEntry,
)
from tickwork.stores.sqlite_checks import journal_label
from tickwork.stores.sqlite_schema import (
    ENTRY_COLUMNS,
    UNFINISHED_SQL,
    decode_entry,
    encode_json,
    immediate,
    outcome_columns,
    placeholders,
)

__all__ = [
    "InboxRead",
    "check_fence",
    "claim_one",
    "claim_query",
    "claim_some",
    "expire_owner",
    "fence_refused",
    "inbox_items",
    "insert_inbox_item",
    "no_run",
    "read_inbox",
    "read_inboxes",
    "read_stream",
    "register_worker",
    "release",
    "renew",
    "require_run",
    "touch_worker",
    "unregister_worker",
    "workers",
]

# Which runs a claim may take (store.py): queued; parked and due or sent to; running
# with an expired lease or no owner.  ``:now`` is the claim's time.  The first term
# repeats the WHERE of the ``runs_claim_order`` index so that SQLite scans it.
_CLAIMABLE = f"""{UNFINISHED_SQL} AND (
    status = 'queued'
    OR (status = 'parked' AND ((wake_at IS NOT NULL AND wake_at <= :now)
        OR EXISTS (SELECT 1 FROM inbox WHERE inbox.run_id = runs.run_id
                   AND inbox.consumed_seq IS NULL)))
    OR (status = 'running' AND (owner IS NULL OR lease_until IS NULL OR lease_until < :now))
)"""


def _named(prefix: str, count: int) -> str:
    """``:p0, :p1, ...``: ``count`` named parameters (an ``IN (...)`` list)."""
    return ", ".join(f":{prefix}{i}" for i in range(count))


def no_run(path: str, run_id: str) -> JournalError:
    """The error for a call about a run the file does not hold."""
    return JournalError(f"journal {path!r} has no run {run_id!r} (it was never registered)")


def require_run(conn: sqlite3.Connection, path: str, run_id: str) -> None:
    """Raise ``no_run`` unless the file holds ``run_id``."""
    if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
        raise no_run(path, run_id)


def fence_refused(
    conn: sqlite3.Connection,
    path: str,
    run_id: str,
    lease: Lease | None,
    what: str,
    first_seq: int | None = None,
) -> JournalError:
    """Why a fenced write of ``run_id`` changed no row: no such run (``JournalError``),
    another owner or epoch, or a journal that moved on past ``first_seq - 1``
    (``LeaseLost``).  Called in the refused write's transaction, so the row read is the
    one the write saw."""
    row = conn.execute(
        "SELECT owner, epoch, last_seq FROM runs WHERE run_id = ?", (run_id,)
    ).fetchone()
    if row is None:
        return no_run(path, run_id)
    owner, epoch, last_seq = row
    label = journal_label(path, run_id)
    if lease is not None and (owner != lease.owner or epoch != lease.epoch):
        return LeaseLost(
            f"{label}: {what} refused: the run is owned by {owner or 'nobody'} at epoch "
            f"{epoch}, not by {lease.owner} at epoch {lease.epoch}"
        )
    if first_seq is not None and last_seq != first_seq - 1:
        return LeaseLost(
            f"{label}: {what} refused at seq {first_seq}: the journal is at seq {last_seq}"
        )
    return JournalError(f"{label}: {what} changed nothing (the run changed meanwhile)")


def check_fence(
    conn: sqlite3.Connection, path: str, run_id: str, lease: Lease | None, what: str
) -> None:
    """Inside a transaction: raise unless ``run_id`` exists and, with ``lease``, is still
    held by it."""
    row = conn.execute("SELECT owner, epoch FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    if row is None or (lease is not None and (row[0], row[1]) != (lease.owner, lease.epoch)):
        raise fence_refused(conn, path, run_id, lease, what)


# -- claims --------------------------------------------------------------------------------


def _fail(conn: sqlite3.Connection, run_id: str, message: str, now: float) -> None:
    """Fail a run that cannot be handed out, with a ``JournalError`` outcome."""
    result, error = outcome_columns(
        RunOutcome(
            error={
                "exception_type": "tickwork.stores.records.JournalError",
                "exception_message": message,
            }
        )
    )
    conn.execute(
        "UPDATE runs SET status = 'failed', owner = NULL, lease_until = NULL, "
        "outcome_result = ?, outcome_error = ?, updated_at = ? WHERE run_id = ?",
        (result, error, now, run_id),
    )


def _poison(conn: sqlite3.Connection, run_id: str, claims: int, now: float) -> None:
    """Fail a run claimed ``claims`` times without progress instead of handing it out."""
    message = (
        f"run {run_id!r} was claimed {claims} times without progress (a poison run: it "
        "kills or stalls every worker that takes it)"
    )
    _fail(conn, run_id, message, now)


def _take(
    conn: sqlite3.Connection,
    path: str,
    run_ids: list[str],
    owner: str,
    lease_seconds: float,
    now: float,
) -> list[Claim]:
    """Give ``run_ids`` to ``owner`` (a new epoch each) and return their claims, in the
    order given; inside the claim's transaction."""
    if not run_ids:
        return []
    marks = placeholders(len(run_ids))
    conn.execute(
        "UPDATE runs SET epoch = epoch + 1, owner = ?, lease_until = ?, status = 'running', "
        "wake_at = NULL, claims_without_progress = claims_without_progress + 1, "
        f"updated_at = ? WHERE run_id IN ({marks})",
        (owner, now + lease_seconds, now, *run_ids),
    )
    rows = conn.execute(
        f"SELECT {ENTRY_COLUMNS} FROM runs WHERE run_id IN ({marks})", run_ids
    ).fetchall()
    entries: dict[str, RunEntry] = {}
    for row in rows:
        try:
            entries[row[0]] = decode_entry(row, path)
        except JournalError as error:
            # One damaged run must not block every claim: it fails, the others go on.
            _fail(conn, row[0], str(error), now)
    return [
        Claim(Lease(run_id, owner, entries[run_id].epoch), entries[run_id])
        for run_id in run_ids
        if run_id in entries
    ]


def claim_query(
    workflow_names: Sequence[str], queues: Sequence[str] | None, now: float
) -> tuple[str, dict[str, Any]]:
    """The query of ``claim_some`` (the ids and claim counts of the claimable runs of
    ``workflow_names`` in ``queues``, in claim order, ``:limit`` of them) and its
    parameters but ``limit``; it scans the index ``runs_claim_order``."""
    params: dict[str, Any] = {f"w{i}": name for i, name in enumerate(workflow_names)}
    where = f"workflow_name IN ({_named('w', len(workflow_names))})"
    if queues is not None:
        params.update({f"q{i}": queue for i, queue in enumerate(queues)})
        where += f" AND queue IN ({_named('q', len(queues))})"
    params["now"] = now
    query = (
        f"SELECT run_id, claims_without_progress FROM runs WHERE {where} AND {_CLAIMABLE} "
        "ORDER BY priority DESC, created_at, run_id LIMIT :limit"
    )
    return query, params


def claim_some(
    conn: sqlite3.Connection,
    path: str,
    owner: str,
    workflow_names: Sequence[str],
    queues: Sequence[str] | None,
    limit: int,
    lease_seconds: float,
    max_claims: int,
    now: float,
) -> list[Claim]:
    """Claim up to ``limit`` claimable runs, highest priority first, then oldest; runs
    at ``max_claims`` claims without progress are failed and skipped."""
    if limit <= 0 or not workflow_names or (queues is not None and not queues):
        return []
    query, params = claim_query(workflow_names, queues, now)
    claims: list[Claim] = []
    with immediate(conn):
        while len(claims) < limit:
            params["limit"] = limit - len(claims)
            rows = conn.execute(query, params).fetchall()
            batch: list[str] = []
            for run_id, count in rows:
                if count >= max_claims:
                    _poison(conn, run_id, count, now)
                else:
                    batch.append(run_id)
            # Taken runs now hold a live lease and failed ones are finished: a new
            # query (needed only when poison runs took places) skips both.
            claims += _take(conn, path, batch, owner, lease_seconds, now)
            if len(batch) == len(rows):
                break
    return claims


def claim_one(
    conn: sqlite3.Connection,
    path: str,
    run_id: str,
    owner: str,
    lease_seconds: float,
    max_claims: int,
    now: float,
) -> Claim | None:
    """Claim ``run_id`` if it is claimable, parked (whatever its wake time) or already
    ``owner``'s; ``None`` if it is unknown, finished, held by another live lease or
    poison (then it is failed)."""
    with immediate(conn):
        row = conn.execute(
            f"SELECT status, owner, claims_without_progress, {_CLAIMABLE} FROM runs "
            "WHERE run_id = :run_id",
            {"run_id": run_id, "now": now},
        ).fetchone()
        if row is None:
            return None
        status, current, claims, claimable = row
        if status in FINISHED or not (claimable or status == "parked" or current == owner):
            return None
        if claims >= max_claims:
            _poison(conn, run_id, claims, now)
            return None
        return _take(conn, path, [run_id], owner, lease_seconds, now)[0]


def renew(
    conn: sqlite3.Connection, owner: str, leases: Sequence[Lease], lease_until: float
) -> set[str]:
    """Extend the leases ``owner`` still holds to ``lease_until``; the ids of those runs.

    A run that finished under its lease is still held (it was not lost: its owner
    finished it, and is about to stop renewing it), but its lease is not extended."""
    kept: set[str] = set()
    if not leases:
        return kept
    with immediate(conn):
        for lease in leases:
            key = (lease.run_id, owner, lease.epoch)
            cursor = conn.execute(
                "UPDATE runs SET lease_until = ? WHERE run_id = ? AND owner = ? AND epoch = ? "
                "AND status = 'running'",
                (lease_until, *key),
            )
            if cursor.rowcount or conn.execute(_FINISHED_UNDER_LEASE, key).fetchone():
                kept.add(lease.run_id)
    return kept


_FINISHED_LIST = ", ".join(repr(status) for status in sorted(FINISHED))
_FINISHED_UNDER_LEASE = (
    "SELECT 1 FROM runs WHERE run_id = ? AND owner = ? AND epoch = ? "
    f"AND status IN ({_FINISHED_LIST})"
)


def release(
    conn: sqlite3.Connection,
    path: str,
    lease: Lease,
    status: str,
    wake_at: float | None,
    now: float,
) -> None:
    """Hand ``lease``'s run back as ``status`` (fenced by the lease).  A run that
    finished under ``lease`` is left as it is (given back, it would run again); a lease
    that no longer holds the run is refused (``LeaseLost``)."""
    key = (lease.run_id, lease.owner, lease.epoch)
    with immediate(conn):
        cursor = conn.execute(
            "UPDATE runs SET status = ?, owner = NULL, lease_until = NULL, wake_at = ?, "
            "updated_at = ? WHERE run_id = ? AND owner = ? AND epoch = ? "
            f"AND status NOT IN ({_FINISHED_LIST})",
            (status, wake_at if status == "parked" else None, now, *key),
        )
        if not cursor.rowcount and not conn.execute(_FINISHED_UNDER_LEASE, key).fetchone():
            what = f"releasing the run as {status}"
            raise fence_refused(conn, path, lease.run_id, lease, what)


def expire_owner(conn: sqlite3.Connection, owner: str) -> int:
    """End every lease ``owner`` holds on a running run; how many ended."""
    cursor = conn.execute(
        "UPDATE runs SET lease_until = 0 WHERE owner = ? AND status = 'running'", (owner,)
    )
    return cursor.rowcount


# -- inbox and stream ----------------------------------------------------------------------


def insert_inbox_item(
    conn: sqlite3.Connection,
    path: str,
    run_id: str,
    kind: InboxKind,
    payload: Any,
    idempotency_key: str | None,
    now: float,
) -> bool:
    """Leave an item in an unfinished run's inbox unless its key was used; whether it
    was inserted."""
    key = idempotency_key if idempotency_key is not None else uuid.uuid4().hex
    text = encode_json(payload)
    with immediate(conn):
        row = conn.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise no_run(path, run_id)
        if row[0] in FINISHED:
            if _key_used(conn, run_id, key):
                return False  # delivered before (perhaps what ended the run): a retry
            raise JournalError(
                f"{journal_label(path, run_id)}: the run has finished ({row[0]}); the {kind} "
                "was not delivered"
            )
        cursor = conn.execute(
            "INSERT OR IGNORE INTO inbox (run_id, kind, payload, idempotency_key, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (run_id, kind, text, key, now),
        )
        if not cursor.rowcount:
            return False
        conn.execute("UPDATE runs SET updated_at = ? WHERE run_id = ?", (now, run_id))
    return True


def _key_used(conn: sqlite3.Connection, run_id: str, key: str) -> bool:
    """Whether an item with ``key`` was left in the run's inbox before."""
    row = conn.execute(
        "SELECT 1 FROM inbox WHERE run_id = ? AND idempotency_key = ?", (run_id, key)
    ).fetchone()
    return row is not None


def _load(text: str | None, path: str, run_id: str, what: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as error:
        raise JournalError(f"{journal_label(path, run_id)}: {what} is corrupt ({error})") from error


def read_inbox(conn: sqlite3.Connection, path: str, run_id: str) -> list[InboxItem]:
    """The run's unconsumed inbox items, in insertion order."""
    rows = conn.execute(
        "SELECT item_id, kind, payload, idempotency_key, created_at FROM inbox "
        "WHERE run_id = ? AND consumed_seq IS NULL ORDER BY item_id",
        (run_id,),
    ).fetchall()
    if not rows:
        require_run(conn, path, run_id)
    return inbox_items(path, run_id, rows)


class InboxRead:
    """``read_inbox`` of one run as a call of the store's queue: the inbox reads of a
    batch go together (``read_inboxes``)."""

    __slots__ = ("path", "run_id")

    def __init__(self, path: str, run_id: str) -> None:
        self.path = path
        self.run_id = run_id

    def __call__(self, conn: sqlite3.Connection) -> list[InboxItem]:
        return read_inbox(conn, self.path, self.run_id)


# Run ids per statement of ``read_inboxes`` (below SQLite's oldest limit of 999 variables).
_INBOX_CHUNK = 500


def read_inboxes(conn: sqlite3.Connection, run_ids: Sequence[str]) -> dict[str, list[Any]]:
    """The raw unconsumed inbox rows of each of ``run_ids`` that exists, in insertion
    order, by run id (a run id missing from the result is not in the file).

    Two statements per 500 runs instead of up to two per run: each live journaled run
    polls its inbox about once a second, and a thousand of them mostly find it empty.
    """
    found: dict[str, list[Any]] = {}
    unique = list(dict.fromkeys(run_ids))
    for start in range(0, len(unique), _INBOX_CHUNK):
        chunk = unique[start : start + _INBOX_CHUNK]
        marks = placeholders(len(chunk))
        for (run_id,) in conn.execute(
            f"SELECT run_id FROM runs WHERE run_id IN ({marks})", chunk
        ).fetchall():
            found[run_id] = []
        rows = conn.execute(
            "SELECT run_id, item_id, kind, payload, idempotency_key, created_at FROM inbox "
            f"WHERE consumed_seq IS NULL AND run_id IN ({marks}) ORDER BY item_id",
            chunk,
        ).fetchall()
        for row in rows:
            found.setdefault(row[0], []).append(row[1:])
    return found


def inbox_items(path: str, run_id: str, rows: list[Any]) -> list[InboxItem]:
    """The ``InboxItem`` of each raw row of ``read_inboxes``."""
    return [
        InboxItem(
            item_id, run_id, kind, _load(payload, path, run_id, f"inbox item {item_id}"), key, at
        )
        for item_id, kind, payload, key, at in rows
    ]


def read_stream(
    conn: sqlite3.Connection, path: str, run_id: str, after_seq: int, limit: int | None
) -> list[StreamItem]:
    """The events ``run_id`` published after record ``after_seq``, in order."""
    rows = conn.execute(
        "SELECT seq, event FROM stream WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        (run_id, after_seq, -1 if limit is None else limit),
    ).fetchall()
    if not rows:
        require_run(conn, path, run_id)
    return [
        StreamItem(seq, _load(event, path, run_id, f"the stream event at seq {seq}"))
        for seq, event in rows
    ]


# -- workers -------------------------------------------------------------------------------


def register_worker(
    conn: sqlite3.Connection, worker_id: str, info: Mapping[str, Any], now: float
) -> None:
    """Announce ``worker_id`` (a worker registered again starts afresh)."""
    conn.execute(
        "INSERT OR REPLACE INTO workers (worker_id, info, started_at, last_seen, runs) "
        "VALUES (?, ?, ?, ?, '[]')",
        (worker_id, encode_json(dict(info)), now, now),
    )


def touch_worker(conn: sqlite3.Connection, worker_id: str, runs: Sequence[str], now: float) -> None:
    """``worker_id`` is alive and owns ``runs`` (nothing for an unknown worker)."""
    conn.execute(
        "UPDATE workers SET last_seen = ?, runs = ? WHERE worker_id = ?",
        (now, encode_json(list(runs)), worker_id),
    )


def unregister_worker(conn: sqlite3.Connection, worker_id: str) -> None:
    """``worker_id`` stopped."""
    conn.execute("DELETE FROM workers WHERE worker_id = ?", (worker_id,))


def workers(conn: sqlite3.Connection, path: str) -> list[WorkerEntry]:
    """The announced workers, by id."""
    rows = conn.execute(
        "SELECT worker_id, info, started_at, last_seen, runs FROM workers ORDER BY worker_id"
    ).fetchall()
    out: list[WorkerEntry] = []
    for worker_id, info, started, seen, runs in rows:
        try:
            decoded_info, decoded_runs = json.loads(info), json.loads(runs)
        except ValueError as error:
            raise JournalError(
                f"{journal_label(path)}: worker {worker_id!r}: its stored info is corrupt ({error})"
            ) from error
        out.append(WorkerEntry(worker_id, decoded_info, started, seen, tuple(decoded_runs)))
    return out
