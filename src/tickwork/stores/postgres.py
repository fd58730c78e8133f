"""The fleet's journal store: PostgreSQL through psycopg 3 (extra ``tickwork[postgres]``).

``PostgresJournal("postgresql://app@db/app")`` keeps the runs of many processes in one
schema (``.postgres_schema``), with the semantics of the in-memory reference store:
claims with ``FOR UPDATE SKIP LOCKED``, leases and epoch fencing checked by the very
statement that writes, an inbox and an event stream (``.postgres_fleet``,
``.postgres_sql``), and ``LISTEN``/``NOTIFY`` hints (``.postgres_notify``).

psycopg's synchronous connections run on worker threads (``anyio.to_thread``), which
works under asyncio and trio alike; calls borrow a connection from a pool opened on
first use (``.postgres_core``).  Under asyncio, an append runs on the store's async
connection when it is free instead (``.postgres_lane``): no thread switch on the
critical path of a step.  ``register_run`` and ``renew_leases`` block their
caller, as the protocol says; renewals use a connection of their own, so that a busy
pool cannot starve a worker's heartbeat.

A lost connection (or a server restarting) is retried with backoff for about ten
seconds before the call fails with a ``JournalError`` naming the store, the run
and the seq.  An ``append`` whose commit may have happened although its acknowledgement
was lost checks, before writing again, whether its records are already there: a record
is never dropped, and never written twice.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

try:
    import psycopg
    import psycopg_pool  # noqa: F401  (checked here, used by postgres_core)
except ImportError as missing:  # pragma: no cover - depends on the installation
    raise ImportError(
        "PostgresJournal needs psycopg 3 and psycopg-pool: pip install 'tickwork[postgres]'"
    ) from missing

from tickwork.stores.postgres_core import (
    Connection,
    autocommit,
    dumps,
    fence_params,
    fence_sql,
    outcome_texts,
)
from tickwork.stores.postgres_fleet import PostgresFleetStore
from tickwork.stores.postgres_sql import (
    append_statement,
    entry_columns,
    entry_from_row,
    snapshot_statement,
)
from tickwork.stores.records import (
    JournalError,
    Lease,
    LeaseLost,
    RunEntry,
    RunOutcome,
    RunStatus,
    StatePatch,
    StreamItem,
)
from tickwork.stores.remote import RemoteHandler, attach
from tickwork.stores.store import DEFAULT_LEASE_SECONDS, is_progress
from tickwork.types import JournalRecord

__all__ = ["PostgresJournal"]

_READ_BATCH = 512


class PostgresJournal(PostgresFleetStore):
    """A journal store in a PostgreSQL schema, shared by any number of processes.

    ``PostgresJournal(dsn, schema="tickwork", *, migrate=True, pool_size=8,
    retry_seconds=10.0)``: ``dsn`` is a libpq connection string or URL, ``schema`` the
    schema that holds the tables.  With ``migrate=True`` the first use applies the
    migrations the schema lacks (creating it if needed); with ``migrate=False`` it only
    checks that the schema is up to date (``tickwork db migrate`` or ``migrate``
    bring it there).  Calls use up to ``pool_size`` pooled connections at once, plus one
    for lease renewals and one for listening to notifications; ``retry_seconds`` bounds
    how long a call retries a lost connection.  Nothing connects before the first call
    (or ``check``); ``close`` closes every connection.
    """

    #: ``append`` takes ``snapshot=`` (see ``JournalStore.appends_snapshots``).
    appends_snapshots = True

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
        label = self._label(run_id)
        version = snapshot.get("version")
        params: dict[str, Any] = {
            "run_id": run_id,
            "workflow_name": workflow_name,
            "seq": int(snapshot.get("journal_seq", 0)),
            "data": dumps(snapshot, label, "the starting snapshot"),
            "start_event": None
            if start_event is None
            else dumps(start_event, label, "the start event"),
            "options": None if options is None else dumps(dict(options), label, "the options"),
            "format": version if isinstance(version, int) else None,
            "owner": owner,
            "lease_seconds": lease_seconds,
        }

        def write(conn: Connection, attempt: int) -> Lease | None:
            with conn.transaction():
                return self._register(conn, params, lease, owner)

        return self._blocking(write, action="registering the run", run_id=run_id)

    def _register(
        self, conn: Connection, params: dict[str, Any], lease: Lease | None, owner: str | None
    ) -> Lease | None:
        """The body of ``register_run``, in its transaction."""
        q, run_id = self._q, params["run_id"]
        conn.execute(
            f"INSERT INTO {q}.runs (run_id, workflow_name, status, last_seq, journal_format, "
            "start_event, options) VALUES (%(run_id)s, %(workflow_name)s, 'running', "
            "%(seq)s - 1, %(format)s, %(start_event)s::json, %(options)s::json) "
            "ON CONFLICT (run_id) DO NOTHING",
            params,
        )
        row = conn.execute(
            "SELECT owner, epoch, lease_until >= now(), "
            f"extract(epoch FROM lease_until)::float8 FROM {q}.runs "
            "WHERE run_id = %s FOR UPDATE",
            (run_id,),
        ).fetchone()
        assert row is not None  # inserted, or there already
        current, epoch, live, lease_until = row
        if lease is not None and (current != lease.owner or epoch != lease.epoch):
            raise LeaseLost(
                f"{self._label(run_id)}: registering a session refused: the run is owned by "
                f"{current or 'nobody'} at epoch {epoch}, not by {lease.owner} at epoch "
                f"{lease.epoch}"
            )
        take = lease is None and owner is not None
        if take and live and current != owner:
            raise LeaseLost(
                f"{self._label(run_id)}: the run is owned by {current} until "
                f"{lease_until:.3f}; it cannot be started here"
            )
        ownership = (
            ", owner = %(owner)s, epoch = epoch + 1, "
            "lease_until = now() + make_interval(secs => %(lease_seconds)s)"
            if take
            else ""
        )
        updated = conn.execute(
            f"UPDATE {q}.runs SET workflow_name = %(workflow_name)s, status = 'running', "
            "updated_at = now(), wake_at = NULL, "
            "start_event = COALESCE(%(start_event)s::json, start_event), "
            "options = COALESCE(%(options)s::json, options), "
            f"journal_format = COALESCE(%(format)s, journal_format){ownership} "
            "WHERE run_id = %(run_id)s RETURNING epoch",
            params,
        ).fetchone()
        conn.execute(snapshot_statement(self.schema, fenced=False), params)
        if not take:
            return lease
        assert updated is not None and owner is not None
        return Lease(run_id, owner, int(updated[0]))

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
        label = self._label(run_id)
        version = snapshot.get("version")
        params = {
            "run_id": run_id,
            "workflow_name": workflow_name,
            "queue": queue,
            "priority": priority,
            "seq": int(snapshot.get("journal_seq", 0)),
            "format": version if isinstance(version, int) else None,
            "start_event": dumps(start_event, label, "the start event"),
            "options": dumps(dict(options or {}), label, "the options"),
            "data": dumps(snapshot, label, "the starting snapshot"),
        }
        q = self._q
        sql = (
            f"WITH created AS (INSERT INTO {q}.runs (run_id, workflow_name, queue, status, "
            "priority, last_seq, journal_format, start_event, options) VALUES (%(run_id)s, "
            "%(workflow_name)s, %(queue)s, 'queued', %(priority)s, %(seq)s - 1, %(format)s, "
            "%(start_event)s::json, %(options)s::json) ON CONFLICT (run_id) DO NOTHING "
            "RETURNING run_id), "
            f"snap AS (INSERT INTO {q}.snapshots (run_id, seq, data) "
            "SELECT run_id, %(seq)s, %(data)s::json FROM created) "
            "SELECT count(*) FROM created"
        )

        def write(conn: Connection, attempt: int) -> bool:
            row = conn.execute(sql, params).fetchone()
            created = bool(row and row[0])
            if created:
                self._notify(conn, run_id)
            return created

        return await self._call(write, action="submitting the run", run_id=run_id)

    # -- the journal -----------------------------------------------------------------

    async def append(
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
    ) -> None:
        first = records[0].seq if records else None
        last = records[-1].seq if records else None
        label = self._label(run_id, first)
        final = outcome_texts(outcome, label) if final_status is not None else (None, None)
        datas = [dumps(r.data, self._label(run_id, r.seq), "the record") for r in records]
        params: dict[str, Any] = {
            **fence_params(run_id, lease),
            "first": first,
            "last": last,
            "seqs": [r.seq for r in records],
            "datas": datas,
            "data": datas[0] if len(datas) == 1 else None,
            "patch_seq": None if state_patch is None else state_patch.after_seq,
            "patch": None
            if state_patch is None
            else dumps(state_patch.patch, label, "the state patch"),
            "at": last,
            "consumed": list(consumed),
            "stream_seqs": [item.seq for item in stream],
            "stream_events": [
                dumps(item.event, self._label(run_id, item.seq), "the published event")
                for item in stream
            ],
            "final": final_status,
            "result": final[0],
            "error": final[1],
        }
        closing: tuple[str, dict[str, Any]] | None = None
        if snapshot is not None:
            snap_seq, snap = snapshot
            closing = (
                snapshot_statement(self.schema, fenced=lease is not None),
                fence_params(run_id, lease)
                | {
                    "seq": snap_seq,
                    "data": dumps(snap, self._label(run_id, snap_seq), "the snapshot"),
                },
            )
        sql = append_statement(
            self.schema,
            fenced=lease is not None,
            records=bool(records),
            one_record=len(records) == 1,
            progress=is_progress(records),
            patch=state_patch is not None,
            consumed=bool(consumed),
            stream=bool(stream),
            final=final_status is not None,
        )

        notify = final_status is not None or bool(stream)

        def write(conn: Connection, attempt: int) -> None:
            if closing is not None:
                # Two statements, one transaction (committed as the pool hands the
                # connection back): a snapshot statement cannot see the records the
                # append statement inserts, so it could not drop them.
                if attempt and self._already_appended(conn, params, lease, final_status, closing):
                    return
                self._execute_append(conn, sql, params, lease, closing)
                if notify:
                    self._notify(conn, run_id)
                return
            with autocommit(conn):  # the append is one statement (each step waits on it)
                if attempt and self._already_appended(conn, params, lease, final_status):
                    return
                self._execute_append(conn, sql, params, lease)
                if notify:
                    self._notify(conn, run_id)

        def diagnose(conn: Connection, attempt: int) -> None:
            self._check_appended(conn, None, params, lease)

        if not records:
            action = "updating the run"
        elif first == last:
            action = f"appending seq {first}"
        else:
            action = f"appending seqs {first}..{last}"
        retried = 0
        # The lane runs single statements: an append with a snapshot takes a thread.
        if closing is None and self._pool is not None and self._lane.take():
            try:
                row = await self._lane.run(sql, params)
            except psycopg.errors.UniqueViolation as error:
                raise self._seq_taken(params) from error
            except Exception:
                retried = 1  # unknown outcome: the threaded path finds out, and retries
            else:
                if row is None or not row[0]:
                    await self._call(diagnose, action=action, run_id=run_id)
                if notify and not await self._lane.notify(self._channel, run_id):
                    await self._call(lambda conn, _: self._notify(conn, run_id), action=action)
                return
        await self._call(write, action=action, run_id=run_id, first_attempt=retried)

    def _execute_append(
        self,
        conn: Connection,
        sql: str,
        params: dict[str, Any],
        lease: Lease | None,
        closing: tuple[str, dict[str, Any]] | None = None,
    ) -> None:
        """Run the append statement, then ``closing`` (the snapshot statement and its
        parameters), when given, in the same transaction; a refused fence raises
        ``LeaseLost``."""
        try:
            row = conn.execute(sql, params).fetchone()
        except psycopg.errors.UniqueViolation as error:
            raise self._seq_taken(params) from error
        self._check_appended(conn, row, params, lease)
        if closing is not None:
            # The append kept the fence (its row is locked until the commit): the
            # snapshot's own fence holds too.
            snapped = conn.execute(*closing).fetchone()
            if snapped is None or not snapped[0]:
                raise self._refused(conn, params["run_id"], lease, "writing a snapshot", None)

    def _seq_taken(self, params: dict[str, Any]) -> JournalError:
        """The error of an append refused because one of its seqs is already stored."""
        return JournalError(
            f"{self._label(params['run_id'])}: seqs {params['first']}..{params['last']} "
            "were not appended: a record in that range was already written"
        )

    def _check_appended(
        self,
        conn: Connection,
        row: tuple[Any, ...] | None,
        params: dict[str, Any],
        lease: Lease | None,
    ) -> None:
        """``row``, the append statement's answer, says whether the fence let it write;
        when it did not, raise why (``LeaseLost`` for a lost lease)."""
        if row is None or not row[0]:
            run_id, first = params["run_id"], params["first"]
            what = "updating the run" if first is None else f"appending seq {first}"
            raise self._refused(conn, run_id, lease, what, first)

    def _already_appended(
        self,
        conn: Connection,
        params: dict[str, Any],
        lease: Lease | None,
        final_status: RunStatus | None,
        closing: tuple[str, dict[str, Any]] | None = None,
    ) -> bool:
        """After a lost acknowledgement: whether this append was committed.

        Fenced, it was when the run is at the same epoch and its journal ends at the
        batch's last seq (nobody else can write at that epoch); unfenced, when the
        batch's last record is stored with the same text (with a compacting snapshot,
        which drops that record: when the snapshot is stored with the same text).  A
        batch without records that finished the run was committed when the run has that
        status.
        """
        run_id, last = params["run_id"], params["last"]
        row = conn.execute(
            f"SELECT status, epoch, last_seq FROM {self._q}.runs WHERE run_id = %s", (run_id,)
        ).fetchone()
        if row is None:
            return False
        status, epoch, last_seq = row
        if lease is not None and epoch != lease.epoch:
            return False
        if last is None:
            return final_status is not None and status == final_status
        if lease is not None:
            return bool(last_seq == last)
        if closing is not None:
            snap = conn.execute(
                f"SELECT data::text FROM {self._q}.snapshots WHERE run_id = %s AND seq = %s",
                (run_id, closing[1]["seq"]),
            ).fetchone()
            return snap is not None and snap[0] == closing[1]["data"]
        stored = conn.execute(
            f"SELECT data::text FROM {self._q}.records WHERE run_id = %s AND seq = %s",
            (run_id, last),
        ).fetchone()
        return stored is not None and stored[0] == params["datas"][-1]

    async def read(self, run_id: str, from_seq: int = 0) -> AsyncIterator[JournalRecord]:
        label = self._label(run_id)
        expected = from_seq
        while True:
            fetch = functools.partial(self._fetch_records, run_id, expected, expected == from_seq)
            rows = await self._call(
                fetch, action=f"reading the records from seq {expected} on", run_id=run_id
            )
            for seq, data in rows:
                if seq != expected:
                    raise JournalError(
                        f"{label}: journal gap, expected seq {expected}, found seq {seq}"
                    )
                if not isinstance(data, dict) or "type" not in data:
                    raise JournalError(
                        f"{label}: record seq {seq} is not a tick record (expected a JSON "
                        f"object with a 'type', found {type(data).__name__})"
                    )
                yield JournalRecord(seq=seq, data=data)
                expected += 1
            if len(rows) < _READ_BATCH:
                return

    def _fetch_records(
        self, run_id: str, start: int, first_batch: bool, conn: Connection, attempt: int
    ) -> list[tuple[Any, ...]]:
        """Up to a batch of records from ``start`` on (an unknown run raises)."""
        rows = conn.execute(
            f"SELECT seq, data FROM {self._q}.records WHERE run_id = %s AND seq >= %s "
            "ORDER BY seq LIMIT %s",
            (run_id, start, _READ_BATCH),
        ).fetchall()
        if not rows and first_batch:
            self._require_run(conn, run_id, "reading its records")
        return rows

    async def read_state_patches(self, run_id: str, from_seq: int = 0) -> list[StatePatch]:
        sql = (
            f"SELECT after_seq, data FROM {self._q}.state_patches "
            "WHERE run_id = %s AND after_seq >= %s ORDER BY after_seq"
        )

        def fetch(conn: Connection, attempt: int) -> list[tuple[Any, ...]]:
            rows = conn.execute(sql, (run_id, from_seq)).fetchall()
            if not rows:
                self._require_run(conn, run_id, "reading its state patches")
            return rows

        rows = await self._call(fetch, action="reading the state patches", run_id=run_id)
        return [StatePatch(int(after), patch) for after, patch in rows]

    async def write_snapshot(
        self, run_id: str, seq: int, snapshot: dict[str, Any], *, lease: Lease | None = None
    ) -> None:
        params = fence_params(run_id, lease) | {
            "seq": seq,
            "data": dumps(snapshot, self._label(run_id, seq), "the snapshot"),
        }
        sql = snapshot_statement(self.schema, fenced=lease is not None)

        def write(conn: Connection, attempt: int) -> None:
            row = conn.execute(sql, params).fetchone()
            if row is None or not row[0]:
                raise self._refused(conn, run_id, lease, "writing a snapshot", None)

        await self._call(write, action=f"writing the snapshot at seq {seq}", run_id=run_id)

    async def read_snapshot(self, run_id: str) -> tuple[int, dict[str, Any]] | None:
        sql = f"SELECT seq, data FROM {self._q}.snapshots WHERE run_id = %s"

        def fetch(conn: Connection, attempt: int) -> tuple[Any, ...] | None:
            row = conn.execute(sql, (run_id,)).fetchone()
            if row is None:
                self._require_run(conn, run_id, "reading its snapshot")
            return row

        row = await self._call(fetch, action="reading the snapshot", run_id=run_id)
        if row is None:
            return None
        seq, data = row
        if not isinstance(data, dict):
            raise JournalError(
                f"{self._label(run_id, seq)}: the snapshot is not a JSON object "
                f"(found {type(data).__name__})"
            )
        return int(seq), data

    async def mark_finished(
        self,
        run_id: str,
        status: RunStatus,
        *,
        lease: Lease | None = None,
        outcome: RunOutcome | None = None,
    ) -> None:
        result, error = outcome_texts(outcome, self._label(run_id))
        # The lease ends; the owner and epoch stay, so the owner's last writes (the final
        # snapshot) are still fenced by its lease (as in the reference store).
        sets = "status = %(status)s, lease_until = NULL, updated_at = now()"
        if outcome is not None:
            sets += ", outcome_result = %(result)s::json, outcome_error = %(error)s::json"
        sql = f"UPDATE {self._q}.runs SET {sets} WHERE {fence_sql(lease)}"
        params = fence_params(run_id, lease) | {
            "status": status,
            "result": result,
            "error": error,
        }

        def write(conn: Connection, attempt: int) -> None:
            if attempt and self._already_settled(conn, run_id, lease, status):
                return
            if conn.execute(sql, params).rowcount == 0:
                raise self._refused(conn, run_id, lease, "recording the outcome", None)
            self._notify(conn, run_id)

        await self._call(write, action=f"recording the outcome ({status})", run_id=run_id)

    async def record_alive_time(
        self, run_id: str, elapsed_alive: float, *, lease: Lease | None = None
    ) -> None:
        sql = (
            f"UPDATE {self._q}.runs SET elapsed_alive = GREATEST(elapsed_alive, %(alive)s), "
            f"updated_at = now() WHERE {fence_sql(lease)}"
        )
        params = fence_params(run_id, lease) | {"alive": elapsed_alive}

        def write(conn: Connection, attempt: int) -> None:
            if conn.execute(sql, params).rowcount == 0:
                raise self._refused(conn, run_id, lease, "recording the alive time", None)

        await self._call(write, action="recording the alive time", run_id=run_id)

    # -- what the store knows about runs -----------------------------------------------

    async def _entries(self, where: str, params: Sequence[Any]) -> list[RunEntry]:
        sql = (
            f"SELECT {entry_columns('r')} FROM {self._q}.runs AS r {where} "
            "ORDER BY r.updated_at DESC, r.run_id"
        )

        def fetch(conn: Connection, attempt: int) -> list[tuple[Any, ...]]:
            return conn.execute(sql, params).fetchall()

        return [entry_from_row(row) for row in await self._call(fetch, action="listing runs")]

    async def get_run(self, run_id: str) -> RunEntry | None:
        found = await self._entries("WHERE r.run_id = %s", (run_id,))
        return found[0] if found else None

    async def list_runs(self) -> list[RunEntry]:
        return await self._entries("", ())

    async def list_unfinished(self, workflow_name: str | None = None) -> list[RunEntry]:
        where = "WHERE r.status IN ('queued', 'running', 'parked')"
        if workflow_name is None:
            return await self._entries(where, ())
        return await self._entries(f"{where} AND r.workflow_name = %s", (workflow_name,))

    async def attach(self, run_id: str, *, serializer: Any = None) -> RemoteHandler:
        """A handler of ``run_id`` that works from any process (see ``.remote``)."""
        return await attach(self, run_id, serializer)
