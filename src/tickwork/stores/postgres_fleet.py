"""The fleet half of the Postgres journal store: claims, leases, inbox, stream, workers.

Claims are one ``UPDATE … FROM (SELECT … FOR UPDATE SKIP LOCKED LIMIT n)`` statement,
so concurrent claimers never wait for each other nor get the same run; each claim
raises the run's epoch and takes its lease from the database clock, and a run claimed
too often without progress is failed (as poison) by the same statement instead.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import psycopg

from tickwork.stores.postgres_core import (
    Connection,
    PostgresStoreBase,
    dumps,
    fence_params,
    fence_sql,
)
from tickwork.stores.postgres_errors import is_connection_failure, pg_failure
from tickwork.stores.postgres_sql import (
    FINISHED_SQL,
    claim_statement,
    entry_from_row,
    inbox_item_from_row,
    stream_item_from_row,
    worker_from_row,
)
from tickwork.stores.records import (
    Claim,
    InboxItem,
    InboxKind,
    JournalError,
    Lease,
    RunEntry,
    StreamItem,
    WorkerEntry,
)
from tickwork.stores.store import DEFAULT_LEASE_SECONDS, DEFAULT_MAX_CLAIMS

__all__ = ["PostgresFleetStore"]


def _claim_order(entry: RunEntry) -> tuple[int, float, str]:
    return (-entry.priority, entry.created_at or 0.0, entry.run_id)


class PostgresFleetStore(PostgresStoreBase):
    """Ownership, inbox, stream and workers of a Postgres journal store (internal: the
    public class is ``PostgresJournal``)."""

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
        if limit < 1 or not workflow_names:
            return []
        sql = claim_statement(self.schema, one_run=False, by_queue=queues is not None)
        params: dict[str, Any] = {
            "owner": owner,
            "names": list(workflow_names),
            "queues": None if queues is None else list(queues),
            "lease_seconds": lease_seconds,
            "max_claims": max_claims,
        }

        def claim(conn: Connection, attempt: int) -> list[Claim]:
            # Poison runs the statement failed use up places of the limit: claim again
            # for those places while the statement still finds runs.
            claims: list[Claim] = []
            while len(claims) < limit:
                wanted = limit - len(claims)
                entries = [
                    entry_from_row(row)
                    for row in conn.execute(sql, params | {"limit": wanted}).fetchall()
                ]
                poisoned = [e.run_id for e in entries if e.status == "failed"]
                claims += [
                    Claim(Lease(e.run_id, owner, e.epoch), e)
                    for e in entries
                    if e.status != "failed"
                ]
                if poisoned:
                    self._notify(conn, *poisoned)
                if not poisoned or len(entries) < wanted:
                    break
            return sorted(claims, key=lambda c: _claim_order(c.entry))

        return await self._call(claim, action=f"claiming runs for {owner}")

    async def claim_run(
        self,
        run_id: str,
        owner: str,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_claims: int = DEFAULT_MAX_CLAIMS,
    ) -> Claim | None:
        sql = claim_statement(self.schema, one_run=True, by_queue=False)
        params = {
            "run_id": run_id,
            "owner": owner,
            "lease_seconds": lease_seconds,
            "max_claims": max_claims,
        }

        def claim(conn: Connection, attempt: int) -> Claim | None:
            row = conn.execute(sql, params).fetchone()
            if row is None:
                return None
            entry = entry_from_row(row)
            if entry.status == "failed":
                self._notify(conn, run_id)
                return None
            return Claim(Lease(run_id, owner, entry.epoch), entry)

        return await self._call(claim, action=f"claiming the run for {owner}", run_id=run_id)

    def renew_leases(self, owner: str, leases: Sequence[Lease], lease_seconds: float) -> set[str]:
        """Extend ``owner``'s leases in one statement on the store's renewal connection
        (not the pool: a busy pool must not starve a heartbeat); the ids of the runs
        still held.  A lost connection is reopened once, at once; a failure raises
        ``JournalError`` and the caller's next renewal tries again."""
        if not leases:
            return set()
        # A run that finished under its lease is kept too (its lease is not extended):
        # its owner is still writing its final snapshot.  One UPDATE matches both, so a
        # renewal that waits for the row lock of the run's last append re-checks the row
        # as that append left it (a read of the statement's snapshot would see it neither
        # running nor finished, and report the run lost).
        sql = (
            "WITH l AS (SELECT * FROM unnest(%(run_ids)s::text[], %(epochs)s::bigint[]) "
            "AS l(run_id, epoch)) "
            f"UPDATE {self._q}.runs AS r SET lease_until = CASE WHEN r.status = 'running' "
            "THEN now() + make_interval(secs => %(lease_seconds)s) ELSE r.lease_until END "
            "FROM l WHERE r.run_id = l.run_id AND r.epoch = l.epoch AND r.owner = %(owner)s "
            f"AND (r.status = 'running' OR r.status IN {FINISHED_SQL}) RETURNING r.run_id"
        )
        params = {
            "owner": owner,
            "lease_seconds": lease_seconds,
            "run_ids": [lease.run_id for lease in leases],
            "epochs": [lease.epoch for lease in leases],
        }
        with self._renew_lock:
            for attempt in (1, 2):
                try:
                    if self._renew_conn is None:
                        self._open()  # the schema is checked (or migrated) first
                        self._renew_conn = self._connect()
                    rows = self._renew_conn.execute(sql, params).fetchall()
                    return {row[0] for row in rows}
                except psycopg.Error as error:
                    conn, self._renew_conn = self._renew_conn, None
                    if conn is not None:
                        conn.close()
                    if attempt == 2 or not is_connection_failure(error):
                        action = f"renewing the leases of {owner}"
                        raise pg_failure(error, self._label(), action, attempt) from error
        raise AssertionError("unreachable")  # pragma: no cover

    async def release_run(
        self,
        lease: Lease,
        *,
        status: Literal["queued", "parked"] = "queued",
        wake_at: float | None = None,
    ) -> None:
        run_id = lease.run_id
        sql = (
            f"UPDATE {self._q}.runs SET status = %(status)s, owner = NULL, "
            "lease_until = NULL, wake_at = to_timestamp(%(wake_at)s), updated_at = now() "
            f"WHERE {fence_sql(lease)} AND status NOT IN {FINISHED_SQL}"
        )
        params = fence_params(run_id, lease) | {
            "status": status,
            "wake_at": wake_at if status == "parked" else None,
        }

        def write(conn: Connection, attempt: int) -> None:
            if attempt and self._already_settled(conn, run_id, lease, status):
                return
            if conn.execute(sql, params).rowcount == 0:
                if self._finished_under(conn, run_id, lease):
                    return  # nothing to give back
                what = f"releasing the run as {status}"
                raise self._refused(conn, run_id, lease, what, None)
            self._notify(conn, run_id)

        await self._call(write, action=f"releasing the run as {status}", run_id=run_id)

    def _finished_under(self, conn: Connection, run_id: str, lease: Lease) -> bool:
        """Whether ``run_id`` finished under ``lease`` (its last owner and epoch stay)."""
        row = conn.execute(
            f"SELECT status IN {FINISHED_SQL}, owner, epoch FROM {self._q}.runs WHERE run_id = %s",
            (run_id,),
        ).fetchone()
        if row is None or not row[0]:
            return False
        return bool(row[1] == lease.owner and row[2] == lease.epoch)

    async def expire_owner(self, owner: str) -> int:
        sql = (
            f"UPDATE {self._q}.runs SET lease_until = to_timestamp(0) "
            "WHERE owner = %s AND status = 'running' RETURNING run_id"
        )

        def write(conn: Connection, attempt: int) -> int:
            ended = [row[0] for row in conn.execute(sql, (owner,)).fetchall()]
            if ended:
                self._notify(conn, *ended)
            return len(ended)

        return await self._call(write, action=f"expiring the leases of {owner}")

    # -- inbox and stream --------------------------------------------------------------

    async def send(
        self,
        run_id: str,
        kind: InboxKind,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> bool:
        fresh = idempotency_key is None
        params = {
            "run_id": run_id,
            "kind": kind,
            "payload": dumps(payload, self._label(run_id), f"the {kind}'s payload"),
            "key": uuid.uuid4().hex if idempotency_key is None else idempotency_key,
        }
        q = self._q
        sql = (
            f"WITH target AS (UPDATE {q}.runs SET updated_at = now() "
            f"WHERE run_id = %(run_id)s AND status NOT IN {FINISHED_SQL} RETURNING run_id), "
            f"item AS (INSERT INTO {q}.inbox (run_id, kind, payload, idempotency_key) "
            "SELECT run_id, %(kind)s, %(payload)s::json, %(key)s FROM target "
            "ON CONFLICT (run_id, idempotency_key) DO NOTHING RETURNING item_id) "
            "SELECT (SELECT count(*) FROM target), (SELECT count(*) FROM item)"
        )

        def write(conn: Connection, attempt: int) -> bool:
            row = conn.execute(sql, params).fetchone()
            assert row is not None
            if not row[0]:
                if not fresh and self._key_used(conn, run_id, params["key"]):
                    return False  # delivered before (perhaps what ended the run): a retry
                raise self._not_deliverable(conn, run_id, kind)
            if row[1]:
                self._notify(conn, run_id)
                return True
            # A key this call made up can only clash with this call's own earlier try,
            # whose commit was not acknowledged.
            return fresh and attempt > 0

        return await self._call(write, action=f"sending a {kind}", run_id=run_id)

    def _key_used(self, conn: Connection, run_id: str, key: str) -> bool:
        """Whether an item with ``key`` was left in the run's inbox before."""
        row = conn.execute(
            f"SELECT 1 FROM {self._q}.inbox WHERE run_id = %s AND idempotency_key = %s",
            (run_id, key),
        ).fetchone()
        return row is not None

    def _not_deliverable(self, conn: Connection, run_id: str, kind: str) -> JournalError:
        row = conn.execute(
            f"SELECT status FROM {self._q}.runs WHERE run_id = %s", (run_id,)
        ).fetchone()
        label = self._label(run_id)
        if row is None:
            return JournalError(f"{label}: the journal has no such run; the {kind} was not sent")
        return JournalError(
            f"{label}: the run has finished ({row[0]}); the {kind} was not delivered"
        )

    async def read_inbox(self, run_id: str) -> list[InboxItem]:
        # The left join yields one row of NULLs for a known run with an empty inbox, and
        # no row for an unknown run.
        sql = (
            "SELECT i.item_id, i.run_id, i.kind, i.payload, i.idempotency_key, "
            f"extract(epoch FROM i.created_at)::float8 FROM {self._q}.runs AS r "
            f"LEFT JOIN {self._q}.inbox AS i ON i.run_id = r.run_id "
            "AND i.consumed_seq IS NULL WHERE r.run_id = %s ORDER BY i.item_id"
        )

        def fetch(conn: Connection, attempt: int) -> list[tuple[Any, ...]]:
            return conn.execute(sql, (run_id,)).fetchall()

        rows = await self._call(fetch, action="reading the inbox", run_id=run_id)
        if not rows:
            raise JournalError(f"{self._label(run_id)}: the journal has no such run")
        return [inbox_item_from_row(row) for row in rows if row[0] is not None]

    async def read_stream(
        self, run_id: str, after_seq: int = -1, limit: int | None = None
    ) -> list[StreamItem]:
        sql = (
            f"SELECT s.seq, s.event FROM {self._q}.runs AS r "
            f"LEFT JOIN {self._q}.stream AS s ON s.run_id = r.run_id AND s.seq > %s "
            "WHERE r.run_id = %s ORDER BY s.seq LIMIT %s"
        )

        def fetch(conn: Connection, attempt: int) -> list[tuple[Any, ...]]:
            return conn.execute(sql, (after_seq, run_id, limit)).fetchall()

        rows = await self._call(
            fetch, action=f"reading the stream after seq {after_seq}", run_id=run_id
        )
        if not rows:
            raise JournalError(f"{self._label(run_id)}: the journal has no such run")
        return [stream_item_from_row(row) for row in rows if row[0] is not None]

    # -- workers ---------------------------------------------------------------------------

    async def register_worker(self, worker_id: str, info: Mapping[str, Any]) -> None:
        sql = (
            f"INSERT INTO {self._q}.workers (worker_id, info) VALUES (%s, %s::json) "
            "ON CONFLICT (worker_id) DO UPDATE SET info = excluded.info, "
            "started_at = now(), last_seen = now(), runs = ARRAY[]::text[]"
        )
        text = dumps(dict(info), self._label(), f"the information of worker {worker_id}")

        def write(conn: Connection, attempt: int) -> None:
            conn.execute(sql, (worker_id, text))

        await self._call(write, action=f"registering worker {worker_id}")

    async def touch_worker(self, worker_id: str, runs: Sequence[str]) -> None:
        sql = f"UPDATE {self._q}.workers SET last_seen = now(), runs = %s WHERE worker_id = %s"

        def write(conn: Connection, attempt: int) -> None:
            conn.execute(sql, (list(runs), worker_id))

        await self._call(write, action=f"recording that worker {worker_id} is alive")

    async def unregister_worker(self, worker_id: str) -> None:
        sql = f"DELETE FROM {self._q}.workers WHERE worker_id = %s"

        def write(conn: Connection, attempt: int) -> None:
            conn.execute(sql, (worker_id,))

        await self._call(write, action=f"unregistering worker {worker_id}")

    async def list_workers(self) -> list[WorkerEntry]:
        sql = (
            "SELECT worker_id, info, extract(epoch FROM started_at)::float8, "
            f"extract(epoch FROM last_seen)::float8, runs FROM {self._q}.workers "
            "ORDER BY worker_id"
        )

        def fetch(conn: Connection, attempt: int) -> list[tuple[Any, ...]]:
            return conn.execute(sql).fetchall()

        return [worker_from_row(row) for row in await self._call(fetch, action="listing workers")]
