"""The Postgres journal's tables, and the versioned migrations that create them.

All tables live in one schema (``tickwork`` by default), so several applications, or
the tests, can share a database.  ``schema_migrations`` records the versions applied;
``migrate`` applies the missing ones in one transaction, under an advisory lock
taken on the schema's name, so that workers starting together never race on the DDL.

Stored values are ``json``, not ``jsonb``: ``json`` keeps the text it was given, so
dicts come back with their keys in the order they were written (user state and the
steps of a snapshot are rebuilt in that order, as from the SQLite store), a lost commit
acknowledgement can be checked by comparing text, and nothing is re-parsed on the way
in.  The journal is written far more than it is queried, which is what ``jsonb`` is for.

Times are ``timestamptz`` from the database's clock (``now()``); the store hands them
out as epoch seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg.rows import TupleRow

from tickwork.stores.records import JournalError

__all__ = [
    "LATEST_VERSION",
    "MIGRATIONS",
    "Migration",
    "migrate_schema",
    "quote_ident",
    "schema_version",
]

_STATUSES = "('queued', 'running', 'parked', 'completed', 'failed', 'timed_out', 'cancelled')"
_STATUS_CHECK = f"status IN {_STATUSES}"

# The first 4 bytes of "tkwk": the class of tickwork's advisory locks (the second key is
# the hash of the schema's name, so different schemas migrate independently).
_LOCK_CLASS = 0x746B776B & 0x7FFFFFFF


@dataclass(frozen=True)
class Migration:
    """One schema version: the statements that bring the previous version to it
    (``{schema}`` stands for the quoted schema name)."""

    version: int
    name: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "runs, records, snapshots, state patches, inbox, stream, workers",
        (
            f"""CREATE TABLE {{schema}}.runs (
                run_id text PRIMARY KEY,
                workflow_name text NOT NULL,
                queue text NOT NULL DEFAULT 'default',
                status text NOT NULL CHECK ({_STATUS_CHECK}),
                priority integer NOT NULL DEFAULT 0,
                owner text,
                epoch bigint NOT NULL DEFAULT 0,
                lease_until timestamptz,
                wake_at timestamptz,
                last_seq bigint NOT NULL DEFAULT -1,
                claims_without_progress integer NOT NULL DEFAULT 0,
                journal_format integer,
                start_event json,
                options json,
                outcome_result json,
                outcome_error json,
                elapsed_alive double precision NOT NULL DEFAULT 0,
                created_at timestamptz NOT NULL DEFAULT now(),
                updated_at timestamptz NOT NULL DEFAULT now(),
                CHECK (owner IS NOT NULL OR lease_until IS NULL)
            )""",
            # What claims look for: queued runs in claim order, running runs by lease
            # expiry, parked runs by wake-up time; and the unfinished runs of a workflow.
            "CREATE INDEX runs_queued ON {schema}.runs (priority DESC, created_at, run_id) "
            "WHERE status = 'queued'",
            "CREATE INDEX runs_lease ON {schema}.runs (lease_until) WHERE status = 'running'",
            "CREATE INDEX runs_wake ON {schema}.runs (wake_at) WHERE status = 'parked'",
            "CREATE INDEX runs_unfinished ON {schema}.runs (workflow_name) "
            "WHERE status IN ('queued', 'running', 'parked')",
            """CREATE TABLE {schema}.records (
                run_id text NOT NULL,
                seq bigint NOT NULL,
                data json NOT NULL,
                PRIMARY KEY (run_id, seq)
            )""",
            """CREATE TABLE {schema}.snapshots (
                run_id text PRIMARY KEY,
                seq bigint NOT NULL,
                data json NOT NULL,
                written_at timestamptz NOT NULL DEFAULT now()
            )""",
            """CREATE TABLE {schema}.state_patches (
                run_id text NOT NULL,
                after_seq bigint NOT NULL,
                data json NOT NULL,
                PRIMARY KEY (run_id, after_seq)
            )""",
            """CREATE TABLE {schema}.inbox (
                item_id bigserial PRIMARY KEY,
                run_id text NOT NULL,
                kind text NOT NULL CHECK (kind IN ('send', 'cancel')),
                payload json,
                idempotency_key text NOT NULL,
                created_at timestamptz NOT NULL DEFAULT now(),
                consumed_seq bigint,
                UNIQUE (run_id, idempotency_key)
            )""",
            "CREATE INDEX inbox_pending ON {schema}.inbox (run_id, item_id) "
            "WHERE consumed_seq IS NULL",
            """CREATE TABLE {schema}.stream (
                run_id text NOT NULL,
                seq bigint NOT NULL,
                event json,
                PRIMARY KEY (run_id, seq)
            )""",
            """CREATE TABLE {schema}.workers (
                worker_id text PRIMARY KEY,
                info json NOT NULL,
                started_at timestamptz NOT NULL DEFAULT now(),
                last_seen timestamptz NOT NULL DEFAULT now(),
                runs text[] NOT NULL DEFAULT ARRAY[]::text[]
            )""",
        ),
    ),
    Migration(
        2,
        "cheaper appends: run status as a domain, runs filled to 70%",
        (
            # A table CHECK is evaluated, and its stored expression parsed again, by every
            # statement that writes the row, so the status list was re-read by each append
            # (a fifth of the server's work per append, though appends never set the
            # status).  A domain's check runs only where a status is assigned.
            f"CREATE DOMAIN {{schema}}.run_status AS text "
            f"CONSTRAINT run_status_check CHECK (VALUE IN {_STATUSES})",
            # Each append updates its run's row (last_seq, updated_at: no indexed column),
            # which stays a HOT update (no index entries written) only while the row's
            # page has room for the new version: keep 30% of each page free for them.
            # Changing the column's type rewrites the table, which applies the fill factor
            # to the rows already there.
            "ALTER TABLE {schema}.runs SET (fillfactor = 70), "
            "DROP CONSTRAINT runs_status_check, "
            "ALTER COLUMN status TYPE {schema}.run_status",
        ),
    ),
)

LATEST_VERSION = MIGRATIONS[-1].version
"""The schema version this tickwork writes and reads."""


def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier (``"my ""odd"" schema"``)."""
    return '"' + name.replace('"', '""') + '"'


def _statement(template: str, schema: str) -> str:
    return template.replace("{schema}", quote_ident(schema))


def schema_version(conn: psycopg.Connection[TupleRow], schema: str) -> int | None:
    """The version the schema is at, or ``None`` when it has no tickwork tables."""
    table = f"{quote_ident(schema)}.schema_migrations"
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
    if row is None or not row[0]:
        return None
    found = conn.execute(f"SELECT max(version) FROM {table}").fetchone()
    return None if found is None or found[0] is None else int(found[0])


def migrate_schema(conn: psycopg.Connection[TupleRow], schema: str, label: str) -> list[int]:
    """Bring ``schema`` to ``LATEST_VERSION`` in one transaction (creating the schema
    if needed); the versions applied, oldest first (empty when it was up to date).

    Concurrent callers serialize on an advisory lock, so each version is applied once.
    A schema written by a newer tickwork raises ``JournalError`` (``label`` names the
    store): its tables may not mean what this version thinks.
    """
    quoted = quote_ident(schema)
    with conn.transaction():
        conn.execute(
            "SELECT pg_advisory_xact_lock(%s::integer, hashtext(%s))", (_LOCK_CLASS, schema)
        )
        exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
        if exists is None:
            conn.execute(f"CREATE SCHEMA {quoted}")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {quoted}.schema_migrations ("
            "version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        applied = {
            int(row[0]) for row in conn.execute(f"SELECT version FROM {quoted}.schema_migrations")
        }
        newest = max(applied, default=0)
        if newest > LATEST_VERSION:
            raise JournalError(
                f"{label}: the schema is at version {newest}, written by a newer tickwork "
                f"(this one knows up to version {LATEST_VERSION}); upgrade tickwork"
            )
        done: list[int] = []
        for migration in MIGRATIONS:
            if migration.version in applied:
                continue
            for template in migration.statements:
                conn.execute(_statement(template, schema))
            conn.execute(
                f"INSERT INTO {quoted}.schema_migrations (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
            done.append(migration.version)
    return done
