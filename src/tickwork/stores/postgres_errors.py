"""How the Postgres journal store names itself and words its errors.

Nothing psycopg raises leaves the store as such: every error becomes a
``JournalError`` whose message names the store (its DSN without the password, and
its schema), the run and the seq where they are known, and says what to do; the psycopg
error is kept as ``__cause__``.  This module also decides which errors are *transient*
(a lost connection, a server restarting, a serialization conflict): those are retried
with backoff before anything is reported.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg

from tickwork.stores.records import JournalError, StoreUnavailable

__all__ = ["is_transient", "pg_failure", "redact_dsn", "store_label"]

# SQLSTATEs of a connection that went away or a server that is not ready yet (class 08
# is "connection exception"; 57P01-57P03 are the shutdown and start-up states).
_CONNECTION_STATES = ("57P01", "57P02", "57P03")
# A transaction the server rolled back on its own; running it again is always safe.
_RETRYABLE_STATES = ("40001", "40P01")

_MIGRATE_HINT = (
    "; the schema has no tickwork tables yet: run `tickwork db migrate --dsn DSN --schema "
    "SCHEMA`, or create the store with migrate=True"
)
_HINTS = {
    "42P01": _MIGRATE_HINT,  # undefined_table
    "3F000": _MIGRATE_HINT,  # invalid_schema_name
    "42501": "; the database user lacks a privilege on the schema or its tables",
    "53100": "; the database server's disk is full",
    "22P02": "; a value is not valid JSON for PostgreSQL",
}
_CONNECTION_HINT = (
    "; the server is unreachable or the connection was lost: check that PostgreSQL is "
    "running and that the DSN is right"
)
_PASSWORD_PAIR = re.compile(r"""password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)""", re.IGNORECASE)


def redact_dsn(dsn: str) -> str:
    """``dsn`` without its password (URL or ``key=value`` form), for messages and logs."""
    if "://" not in dsn:
        return _PASSWORD_PAIR.sub("password=***", dsn)
    try:
        parts = urlsplit(dsn)
        netloc = parts.netloc
        if "@" in netloc:
            credentials, _, hosts = netloc.rpartition("@")
            user = credentials.split(":", 1)[0]
            netloc = f"{user}@{hosts}" if user else hosts
        query = urlencode(
            [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "password"],
            safe="/",
        )
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return "<a DSN that cannot be parsed>"


def store_label(dsn: str, schema: str, run_id: str | None = None, seq: int | None = None) -> str:
    """``Postgres journal '<dsn>' (schema '<schema>')``, then ``, run '<id>'`` and
    ``, seq <n>`` when the problem is about one run or one record."""
    text = f"Postgres journal {dsn!r} (schema {schema!r})"
    if run_id is not None:
        text += f", run {run_id!r}"
    if seq is not None:
        text += f", seq {seq}"
    return text


def is_connection_failure(error: BaseException) -> bool:
    """Whether ``error`` says the connection (or the server) went away, rather than that
    the statement was wrong: a pool that had no connection to give, a client-side
    connection error (no SQLSTATE), class 08, or a server shutting down or starting."""
    if isinstance(error, psycopg.InterfaceError):
        return True  # a connection that was closed under us
    if not isinstance(error, psycopg.OperationalError):
        return False
    state = error.sqlstate
    return state is None or state.startswith("08") or state in _CONNECTION_STATES


def is_transient(error: BaseException) -> bool:
    """Whether running the same call again may succeed: a lost connection, or a
    transaction the server rolled back (serialization failure, deadlock)."""
    if is_connection_failure(error):
        return True
    return isinstance(error, psycopg.Error) and error.sqlstate in _RETRYABLE_STATES


def pg_failure(error: psycopg.Error, label: str, action: str, attempts: int = 1) -> JournalError:
    """The ``JournalError`` for ``error`` met while doing ``action`` (raise it
    ``from error``): ``<label>: <action> failed: <error> (SQLSTATE x)<hint>``; a
    ``StoreUnavailable`` when the connection or the server went away."""
    message = " ".join(str(error).split()) or type(error).__name__
    state = f" (SQLSTATE {error.sqlstate})" if error.sqlstate else ""
    unavailable = is_connection_failure(error)
    hint = _CONNECTION_HINT if unavailable else _HINTS.get(error.sqlstate or "", "")
    tried = f" after {attempts} attempts" if attempts > 1 else ""
    text = f"{label}: {action} failed{tried}: {message}{state}{hint}"
    return StoreUnavailable(text) if unavailable else JournalError(text)
