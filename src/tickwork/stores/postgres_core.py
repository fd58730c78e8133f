"""The plumbing of the Postgres journal store: connections, retries, fences, hints.

``PostgresStoreBase`` holds what every call of ``PostgresJournal``
goes through: the connection pool (opened on first use, after the schema is migrated
or checked), the retry loop that survives a lost connection, the diagnosis of a refused
fenced write, and the notifications.  The store's calls themselves live in
``.postgres_fleet`` (ownership, inbox, stream, workers) and ``.postgres`` (the
journal), each a subclass of the one before.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from tickwork.stores.postgres_errors import is_transient, pg_failure, redact_dsn, store_label
from tickwork.stores.postgres_lane import AsyncLane
from tickwork.stores.postgres_notify import ChangeListener, Notifier, channel_name
from tickwork.stores.postgres_schema import (
    LATEST_VERSION,
    migrate_schema,
    quote_ident,
    schema_version,
)
from tickwork.stores.records import JournalError, Lease, LeaseLost, RunOutcome

__all__ = ["Connection", "PostgresStoreBase", "dumps", "fence_params", "fence_sql", "outcome_texts"]

T = TypeVar("T")
Connection = psycopg.Connection[TupleRow]

_MAX_SCHEMA_BYTES = 63
# Pauses between the attempts of a call whose connection failed (the last one repeats
# until the call's ``retry_seconds`` are spent).
_RETRY_DELAYS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
# The least a call waits for a pooled connection, even when its retry time is spent.
_MIN_CONNECTION_WAIT = 1.0
# Connection settings the DSN may override.  The TCP ones bound how long a statement
# can hang on a black-holed network (the kernel would otherwise retransmit for many
# minutes); a unix socket ignores them.
_CONNECTION_DEFAULTS: dict[str, Any] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 15_000,
}


def dumps(value: Any, label: str, what: str) -> str:
    """``value`` as JSON text for PostgreSQL's ``json`` type (which has no NaN and no
    Infinity); ``JournalError`` naming ``label`` and ``what`` when it has no such text."""
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise JournalError(f"{label}: {what} cannot be stored as JSON: {error}") from error


def outcome_texts(outcome: RunOutcome | None, label: str) -> tuple[str | None, str | None]:
    """The ``outcome_result`` and ``outcome_error`` texts of ``outcome`` (``None`` and
    ``None`` for no outcome; a result of ``None`` is the JSON text ``null``)."""
    if outcome is None:
        return None, None
    result = dumps(outcome.result, label, "the run's result")
    error = None if outcome.error is None else dumps(dict(outcome.error), label, "its error")
    return result, error


@contextlib.contextmanager
def autocommit(conn: Connection) -> Iterator[None]:
    """Run a write of one statement without ``BEGIN`` and ``COMMIT``: the statement is
    atomic by itself, and it costs one round trip to the server instead of three."""
    conn.autocommit = True
    try:
        yield
    finally:
        # A broken connection is discarded by the pool; nothing to restore then.
        with contextlib.suppress(psycopg.Error):
            conn.autocommit = False


def fence_sql(lease: Lease | None) -> str:
    """The ``WHERE`` condition of a write of ``%(run_id)s``, fenced by ``lease``."""
    fence = "run_id = %(run_id)s"
    return fence if lease is None else f"{fence} AND owner = %(owner)s AND epoch = %(epoch)s"


def fence_params(run_id: str, lease: Lease | None) -> dict[str, Any]:
    """The parameters ``fence_sql`` needs."""
    return {
        "run_id": run_id,
        "owner": None if lease is None else lease.owner,
        "epoch": None if lease is None else lease.epoch,
    }


class PostgresStoreBase:
    """Connections, retries and notifications of a Postgres journal store (internal:
    the public class and its constructor's documentation are ``PostgresJournal``)."""

    def __init__(
        self,
        dsn: str,
        schema: str = "tickwork",
        *,
        migrate: bool = True,
        pool_size: int = 8,
        retry_seconds: float = 10.0,
    ) -> None:
        self.dsn = dsn
        self.schema = schema
        self._shown_dsn = redact_dsn(dsn)
        if not schema or len(schema.encode()) > _MAX_SCHEMA_BYTES or "\x00" in schema:
            raise JournalError(
                f"{self._label()}: the schema name must be 1 to {_MAX_SCHEMA_BYTES} bytes "
                "long, without NUL characters"
            )
        if pool_size < 1:
            raise ValueError(f"pool_size must be at least 1, got {pool_size}")
        self._migrate_on_open = migrate
        self._pool_size = pool_size
        self._retry_seconds = retry_seconds
        self._q = quote_ident(schema)
        self._connect_kwargs = self._connection_settings()
        self._open_lock = threading.Lock()
        self._schema_ready = False
        self._pool: ConnectionPool[Connection] | None = None
        self._limiter: anyio.CapacityLimiter | None = None
        self._renew_lock = threading.Lock()
        self._renew_conn: Connection | None = None
        self._channel = channel_name(schema)
        self._notifier = Notifier(self._channel)
        self._listener = ChangeListener(self._connect, self._channel)
        self._lane = AsyncLane(dsn, self._connect_kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._shown_dsn!r}, schema={self.schema!r})"

    # -- connections -------------------------------------------------------------------

    def _connection_settings(self) -> dict[str, Any]:
        try:
            given = conninfo_to_dict(self.dsn)
        except psycopg.Error as error:
            raise JournalError(f"{self._label()}: the DSN cannot be parsed: {error}") from error
        settings = {k: v for k, v in _CONNECTION_DEFAULTS.items() if k not in given}
        if "application_name" not in given:
            # Operators see whose connections these are (pg_stat_activity).
            settings["application_name"] = f"tickwork:{self.schema}"[:63]
        return {"autocommit": True, **settings}

    def _connect(self) -> Connection:
        """A new connection outside the pool (migrations, renewals, listening)."""
        return psycopg.connect(self.dsn, **self._connect_kwargs)

    def _label(self, run_id: str | None = None, seq: int | None = None) -> str:
        return store_label(self._shown_dsn, self.schema, run_id, seq)

    def _open(self) -> ConnectionPool[Connection]:
        """The pool, opened (after the schema is checked or migrated) on first use."""
        pool = self._pool
        if pool is not None:
            return pool
        with self._open_lock:
            if self._pool is None:
                if not self._schema_ready:
                    self._prepare_schema()
                pool = ConnectionPool(
                    self.dsn,
                    kwargs=self._connect_kwargs,
                    min_size=1,
                    max_size=self._pool_size,
                    open=False,
                    name=f"tickwork:{self.schema}",
                )
                pool.open(wait=False)
                self._pool = pool
            return self._pool

    def _prepare_schema(self) -> None:
        with self._connect() as conn:
            if self._migrate_on_open:
                migrate_schema(conn, self.schema, self._label())
            else:
                version = schema_version(conn, self.schema)
                if version != LATEST_VERSION:
                    found = (
                        "has no tickwork tables"
                        if version is None
                        else f"is at version {version}, not {LATEST_VERSION}"
                    )
                    raise JournalError(
                        f"{self._label()}: the schema {found}: run `tickwork db migrate "
                        f"--dsn DSN --schema {self.schema}`, or create the store with "
                        "migrate=True"
                    )
        self._schema_ready = True

    def migrate(self) -> list[int]:
        """Apply the migrations the schema lacks, now (creating the schema if needed);
        the versions applied, oldest first (empty when it was up to date).  Safe to run
        from several processes at once.  Blocking; raises ``JournalError``."""
        try:
            with self._connect() as conn:
                done = migrate_schema(conn, self.schema, self._label())
        except psycopg.Error as error:
            raise pg_failure(error, self._label(), "migrating the schema") from error
        self._schema_ready = True
        return done

    def check(self) -> None:
        """Connect (and migrate) now, so that a store that cannot be used fails here
        rather than inside a running workflow.  Blocking; free once the store is open."""
        if self._pool is None:
            self._blocking(lambda conn, attempt: None, action="opening the journal")

    def close(self) -> None:
        """Close the pool and the store's own connections (a later call reopens them)."""
        with self._open_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        with self._renew_lock:
            conn, self._renew_conn = self._renew_conn, None
        if conn is not None:
            conn.close()
        self._listener.close()
        self._lane.close()

    # -- running calls -----------------------------------------------------------------

    def _blocking(
        self,
        fn: Callable[[Connection, int], T],
        *,
        action: str,
        run_id: str | None = None,
        seq: int | None = None,
        first_attempt: int = 0,
    ) -> T:
        """``fn(connection, attempt)`` on a pooled connection, on this thread.

        A transient failure (lost connection, server restarting) runs ``fn`` again on a
        fresh connection after a pause, until ``retry_seconds`` have passed (waiting for
        a connection counts); ``attempt`` counts the earlier tries (from
        ``first_attempt``, when the call was already tried elsewhere), so that ``fn`` can
        check whether a commit whose acknowledgement was lost happened.  Any psycopg
        error that remains becomes a ``JournalError`` naming the store, ``run_id``,
        ``seq`` and ``action``.
        """
        deadline = time.monotonic() + self._retry_seconds
        attempt = first_attempt
        while True:
            try:
                pool = self._open()
                wait = max(_MIN_CONNECTION_WAIT, deadline - time.monotonic())
                with pool.connection(timeout=wait) as conn:
                    return fn(conn, attempt)
            except psycopg.Error as error:
                pause = _RETRY_DELAYS[min(attempt, len(_RETRY_DELAYS) - 1)]
                if not is_transient(error) or time.monotonic() + pause > deadline:
                    label = self._label(run_id, seq)
                    raise pg_failure(error, label, action, attempt + 1) from error
            time.sleep(pause)
            attempt += 1
            self._check_idle_connections()

    def _check_idle_connections(self) -> None:
        """After a lost connection the pool's idle ones are likely dead too (a server
        restart): have the pool test them, rather than failing on each in turn."""
        pool = self._pool
        if pool is not None:
            with contextlib.suppress(psycopg.Error):
                pool.check()

    async def _call(
        self,
        fn: Callable[[Connection, int], T],
        *,
        action: str,
        run_id: str | None = None,
        seq: int | None = None,
        first_attempt: int = 0,
    ) -> T:
        """``_blocking`` on a worker thread, at most ``pool_size`` at once."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self._pool_size)
        call = functools.partial(
            self._blocking, fn, action=action, run_id=run_id, seq=seq, first_attempt=first_attempt
        )
        return await anyio.to_thread.run_sync(call, limiter=self._limiter)

    def _notify(self, conn: Connection, *run_ids: str) -> None:
        """Tell listeners that these runs changed (after the change committed)."""
        self._notifier.send(conn, run_ids)

    async def wait_for_change(self, timeout: float, run_id: str | None = None) -> None:
        """Return when a run changed (``run_id``, or any run when ``None``: a submit, a
        send, a release, a finish, a published event), or after ``timeout`` seconds.

        Notifications are hints: a change made while nobody listened yet, or while the
        listening connection was down, is seen by the caller's next poll.
        """
        await self._listener.wait(timeout, run_id)

    async def wait_for_inbox(self, timeout: float, run_id: str) -> None:
        """``wait_for_change``: a notification does not say what changed."""
        await self._listener.wait(timeout, run_id)

    # -- what a refused or uncertain write means ---------------------------------------

    def _refused(
        self, conn: Connection, run_id: str, lease: Lease | None, what: str, first: int | None
    ) -> JournalError:
        """Why a write of ``run_id`` fenced by ``lease`` (and, for an append, by its
        ``first`` seq) changed no row: the error to raise."""
        row = conn.execute(
            f"SELECT owner, epoch, last_seq FROM {self._q}.runs WHERE run_id = %s", (run_id,)
        ).fetchone()
        label = self._label(run_id)
        if row is None:
            return JournalError(f"{label}: the journal has no such run ({what})")
        owner, epoch, last_seq = row
        if lease is not None and (owner != lease.owner or epoch != lease.epoch):
            return LeaseLost(
                f"{label}: {what} refused: the run is owned by {owner or 'nobody'} at epoch "
                f"{epoch}, not by {lease.owner} at epoch {lease.epoch}"
            )
        if first is not None and last_seq != first - 1:
            return LeaseLost(
                f"{label}: appending seq {first} refused: the journal is at seq {last_seq}"
            )
        return LeaseLost(f"{label}: {what} refused: the run changed while it was written")

    def _already_settled(
        self, conn: Connection, run_id: str, lease: Lease | None, status: str
    ) -> bool:
        """After a lost acknowledgement: whether the write that set ``status`` and gave
        the run up (fenced by ``lease``) is the one that happened."""
        row = conn.execute(
            f"SELECT status, owner, epoch FROM {self._q}.runs WHERE run_id = %s", (run_id,)
        ).fetchone()
        if row is None or row[0] != status or row[1] is not None:
            return False
        return lease is None or row[2] == lease.epoch

    def _require_run(self, conn: Connection, run_id: str, what: str) -> None:
        """``JournalError`` unless the store knows ``run_id``."""
        found = conn.execute(
            f"SELECT 1 FROM {self._q}.runs WHERE run_id = %s", (run_id,)
        ).fetchone()
        if found is None:
            raise JournalError(f"{self._label(run_id)}: the journal has no such run ({what})")
