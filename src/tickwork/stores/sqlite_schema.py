"""The SQLite journal's schema, its versioned migrations and how its rows are read.

The schema version is the file's ``PRAGMA user_version``; ``MIGRATIONS`` are the
ordered steps from an empty file (or a file of an older tickwork) to the current
schema.  ``prepare`` applies the missing ones on open, in one ``BEGIN IMMEDIATE``
transaction, so several processes opening one old file migrate it exactly once and a
crash mid-migration leaves the old schema intact.

Version 4 writes the condition of the partial index ``runs_claim_order`` as
``status = ... OR ...`` (``UNFINISHED_SQL``) instead of ``status IN (...)``: SQLite
3.40 evaluates an ``IN`` list of more than two constants through an ephemeral table,
built for the old and the new row of every insert and status change of a run (about
30k instructions for a run's insert, 60k for its final ``UPDATE``); the ``OR`` of
equalities selects the same rows at a few comparisons.

A file of tickwork 0.1 has ``user_version`` 0 and the ``runs`` table without
``created_at``, ``start_event``, ``options`` and ``elapsed_alive`` (and an
``updated_at`` in Julian days); a file of 0.1.x has those columns but still
``user_version`` 0.  Both are upgraded in place by the same steps.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

from tickwork.stores.encoded import TextOutcome
from tickwork.stores.records import JournalError, RunEntry, RunOutcome
from tickwork.stores.sqlite_checks import journal_label

__all__ = [
    "ENTRY_COLUMNS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "UNFINISHED_SQL",
    "decode_entry",
    "encode_json",
    "immediate",
    "outcome_columns",
    "placeholders",
    "prepare",
]

# The tables of tickwork 0.1 (step 1 creates them in an empty file).
_BASE_TABLES = (
    """CREATE TABLE IF NOT EXISTS runs (
        run_id TEXT PRIMARY KEY,
        workflow_name TEXT NOT NULL,
        status TEXT NOT NULL,
        last_seq INTEGER NOT NULL DEFAULT -1,
        updated_at REAL NOT NULL DEFAULT (julianday('now'))
    )""",
    """CREATE TABLE IF NOT EXISTS records (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS snapshots (
        run_id TEXT PRIMARY KEY,
        seq INTEGER NOT NULL,
        data TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS state_patches (
        run_id TEXT NOT NULL,
        after_seq INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (run_id, after_seq)
    ) WITHOUT ROWID""",
)

# Step 2: what a run needs to be resumed with its original options (0.1.x).
_RUN_DETAILS = (
    ("created_at", "REAL"),
    ("start_event", "TEXT"),
    ("options", "TEXT"),
    ("elapsed_alive", "REAL NOT NULL DEFAULT 0"),
)
# ``updated_at`` used to hold a Julian day; epoch seconds are far larger.
_JULIAN_EPOCH = 2440587.5

# Step 3: ownership, queues and outcomes for the worker fleet (0.2).
_FLEET_COLUMNS = (
    ("queue", "TEXT NOT NULL DEFAULT 'default'"),
    ("priority", "INTEGER NOT NULL DEFAULT 0"),
    ("owner", "TEXT"),
    ("epoch", "INTEGER NOT NULL DEFAULT 0"),
    ("lease_until", "REAL"),
    ("wake_at", "REAL"),
    ("claims_without_progress", "INTEGER NOT NULL DEFAULT 0"),
    ("outcome_result", "TEXT"),
    ("outcome_error", "TEXT"),
)
_FLEET_TABLES = (
    """CREATE TABLE inbox (
        item_id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        payload TEXT,
        idempotency_key TEXT NOT NULL,
        created_at REAL NOT NULL,
        consumed_seq INTEGER,
        UNIQUE (run_id, idempotency_key)
    )""",
    "CREATE INDEX inbox_pending ON inbox (run_id, item_id) WHERE consumed_seq IS NULL",
    """CREATE TABLE stream (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        event TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID""",
    """CREATE TABLE workers (
        worker_id TEXT PRIMARY KEY,
        info TEXT NOT NULL,
        started_at REAL NOT NULL,
        last_seen REAL NOT NULL,
        runs TEXT NOT NULL DEFAULT '[]'
    )""",
    # Claims scan the unfinished runs only, in claim order (finished runs are the bulk
    # of a long-lived journal); the claim query repeats this WHERE so SQLite uses it.
    # (Step 4 writes this WHERE without the ``IN`` list.)
    "CREATE INDEX runs_claim_order ON runs (priority DESC, created_at, run_id) "
    "WHERE status IN ('queued', 'running', 'parked')",
    "CREATE INDEX runs_owner ON runs (owner) WHERE owner IS NOT NULL",
)


# Step 4: the claim index's condition without an ``IN`` list (module docstring).  A
# query uses the index only if its WHERE has this very term (``_CLAIMABLE`` in
# sqlite_fleet.py repeats it).
UNFINISHED_SQL = "(status = 'queued' OR status = 'running' OR status = 'parked')"
"""The unfinished runs (``UNFINISHED`` in records.py), as ``runs_claim_order``'s WHERE."""


def _columns(conn: sqlite3.Connection) -> set[str]:
    return {row[1] for row in conn.execute("PRAGMA table_info(runs)")}


def _base_tables(conn: sqlite3.Connection) -> None:
    for statement in _BASE_TABLES:
        conn.execute(statement)


def _run_details(conn: sqlite3.Connection) -> None:
    present = _columns(conn)
    for name, decl in _RUN_DETAILS:
        if name not in present:
            conn.execute(f"ALTER TABLE runs ADD COLUMN {name} {decl}")
    conn.execute(
        "UPDATE runs SET updated_at = (updated_at - ?) * 86400 WHERE updated_at < 1e7",
        (_JULIAN_EPOCH,),
    )
    conn.execute("UPDATE runs SET created_at = updated_at WHERE created_at IS NULL")


def _fleet(conn: sqlite3.Connection) -> None:
    for name, decl in _FLEET_COLUMNS:
        conn.execute(f"ALTER TABLE runs ADD COLUMN {name} {decl}")
    for statement in _FLEET_TABLES:
        conn.execute(statement)


def _claim_index(conn: sqlite3.Connection) -> None:
    conn.execute("DROP INDEX runs_claim_order")
    conn.execute(
        "CREATE INDEX runs_claim_order ON runs (priority DESC, created_at, run_id) "
        f"WHERE {UNFINISHED_SQL}"
    )


MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (
    _base_tables,
    _run_details,
    _fleet,
    _claim_index,
)
"""Step ``i`` brings a file from schema version ``i`` to ``i + 1``."""

SCHEMA_VERSION = len(MIGRATIONS)


def immediate(conn: sqlite3.Connection) -> _Immediate:
    """One ``BEGIN IMMEDIATE`` transaction (``with immediate(conn): ...``): it takes the
    write lock first (waiting up to the busy timeout for other processes), so what it
    reads stays true until it commits.  Rolled back when the body (or the ``COMMIT``)
    raises."""
    return _Immediate(conn)


class _Immediate:
    """The context manager of ``immediate``: a class rather than a ``contextmanager``
    generator, which costs a few thousand instructions more per use (every
    registration of a run goes through it)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        conn = self._conn
        if kind is None:
            try:
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
        else:
            _rollback(conn)


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        # The error being raised says more than a failed rollback would.
        with suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def prepare(conn: sqlite3.Connection, path: str) -> None:
    """Set the connection up (WAL, fsync per commit) and migrate the file to
    ``SCHEMA_VERSION``; a file of a newer tickwork raises ``JournalError``."""
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    if _version(conn) == SCHEMA_VERSION:
        return
    with immediate(conn):
        version = _version(conn)  # again: another process may have migrated meanwhile
        if version > SCHEMA_VERSION:
            raise JournalError(
                f"{journal_label(path)}: schema version {version} was written by a newer "
                f"tickwork (this one reads up to version {SCHEMA_VERSION}); upgrade tickwork"
            )
        for step in MIGRATIONS[version:]:
            step(conn)
        # PRAGMA takes no parameters; SCHEMA_VERSION is an int we own.
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


# -- rows ------------------------------------------------------------------------------

ENTRY_COLUMNS = (
    "run_id, workflow_name, status, last_seq, created_at, updated_at, options, "
    "start_event, elapsed_alive, queue, priority, owner, epoch, lease_until, wake_at, "
    "claims_without_progress, outcome_result, outcome_error"
)
"""The columns ``decode_entry`` reads, in its order."""


def placeholders(count: int) -> str:
    """``?, ?, ?`` for ``count`` parameters (an ``IN (...)`` list)."""
    return ", ".join("?" * count)


def encode_json(value: Any) -> str:
    """A stored JSON value."""
    return json.dumps(value)


def outcome_columns(outcome: RunOutcome | None) -> tuple[str | None, str | None]:
    """``(outcome_result, outcome_error)`` for ``outcome``: a stored outcome always has a
    JSON ``outcome_result`` (``'null'`` for a run that returned ``None``), so that no
    outcome (both ``NULL``) stays distinct from an outcome of ``None``."""
    if outcome is None:
        return None, None
    if type(outcome) is TextOutcome:
        return outcome.result_text, None
    error = None if outcome.error is None else encode_json(dict(outcome.error))
    return encode_json(outcome.result), error


def _decode(text: str | None, path: str, run_id: str, what: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as error:
        raise JournalError(
            f"{journal_label(path, run_id)}: its stored {what} is corrupt ({error})"
        ) from error


def decode_entry(row: Sequence[Any], path: str) -> RunEntry:
    """The ``RunEntry`` of a row of ``ENTRY_COLUMNS``; a stored JSON value
    that does not decode raises ``JournalError`` naming the file and the run."""
    (
        run_id,
        workflow_name,
        status,
        last_seq,
        created,
        updated,
        options,
        event,
        alive,
        queue,
        priority,
        owner,
        epoch,
        lease_until,
        wake_at,
        claims,
        result,
        error,
    ) = row
    outcome = None
    if result is not None or error is not None:
        outcome = RunOutcome(
            _decode(result, path, run_id, "result"), _decode(error, path, run_id, "error")
        )
    return RunEntry(
        run_id,
        workflow_name,
        status,
        last_seq,
        created,
        updated,
        _decode(options, path, run_id, "options") or {},
        _decode(event, path, run_id, "start event"),
        float(alive or 0.0),
        queue,
        priority,
        owner,
        epoch,
        lease_until,
        wake_at,
        claims,
        outcome,
    )
