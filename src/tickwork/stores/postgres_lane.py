"""The asyncio lane of the Postgres journal store: appends without a worker thread.

Every call of the store runs psycopg's synchronous API on a worker thread, which works
under asyncio and trio alike.  A durable run waits for each append before it acts
(write-ahead), so the two thread switches of each append (there and back, each a
wake-up of a sleeping thread) are on the critical path of every step: on the
development machine they cost more than the statement itself.

Under asyncio, the store therefore also keeps one ``psycopg.AsyncConnection`` (in
autocommit, kept by the event loop that opened it while that loop runs), and an append
that finds it free runs its statement there, straight from the event loop.  A lone
sequential run always finds it free; when many runs append at once, one of them uses
the lane and the others take the threaded path as before, so concurrency is not lost.
Under trio (which psycopg's async connections do not support) the lane is never used.

The lane never decides what a failure means: an append that did not get an answer
goes on in the threaded path, which knows how to retry a write whose commit is
uncertain.  After a failed connection the lane rests for a while, so a server that is
down costs the threaded path's retries only.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any

import anyio
import psycopg
from psycopg.rows import TupleRow

__all__ = ["AsyncLane"]

AsyncConnection = psycopg.AsyncConnection[TupleRow]

# How long the lane stays unused after its connection failed or could not be opened.
_REST_SECONDS = 5.0


class AsyncLane:
    """One store's asyncio connection for appends (see the module)."""

    def __init__(self, dsn: str, connect_kwargs: Mapping[str, Any]) -> None:
        self._dsn = dsn
        self._connect_kwargs = {**connect_kwargs, "autocommit": True}
        self._conn: AsyncConnection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._busy = False
        self._rest_until = 0.0

    def take(self) -> bool:
        """Reserve the lane for one statement: ``True`` when the caller runs under asyncio
        and the lane is free (the caller must then call ``run`` exactly once)."""
        if self._busy or time.monotonic() < self._rest_until:
            return False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # trio, or no event loop
            return False
        if loop is not self._loop:
            owner = self._loop
            if owner is not None and owner.is_running():
                return False  # another thread's event loop has it: leave it to that one
            self.close()  # a connection belongs to the event loop that opened it
            self._loop = loop
        self._busy = True
        return True

    async def run(self, sql: str, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """Run ``sql`` (one statement, committed by itself) and return its first row.

        Shielded from cancellation: once sent, the statement's outcome is always known
        to the caller.  Errors propagate; when the connection failed (or could not be
        opened) it is dropped and the lane rests.
        """
        try:
            with anyio.CancelScope(shield=True):
                conn = self._conn
                if conn is None or conn.closed:
                    conn = self._conn = await psycopg.AsyncConnection.connect(
                        self._dsn, **self._connect_kwargs
                    )
                cursor = await conn.execute(sql, params)
                row = await cursor.fetchone()
        except BaseException:
            conn = self._conn
            if conn is None or conn.closed or conn.broken:
                self._rest()
            raise
        finally:
            self._busy = False
        return row

    async def notify(self, channel: str, run_id: str) -> bool:
        """``NOTIFY channel, run_id`` on the lane's connection; ``False`` when the lane is
        busy or closed (the caller notifies another way).  A failure is swallowed:
        notifications are hints."""
        conn = self._conn
        if conn is None or self._busy:
            return False
        self._busy = True
        try:
            with anyio.CancelScope(shield=True), contextlib.suppress(psycopg.Error, OSError):
                await conn.execute("SELECT pg_notify(%s, %s)", (channel, run_id))
        finally:
            self._busy = False
        return True

    def _rest(self) -> None:
        self._rest_until = time.monotonic() + _REST_SECONDS
        self.close()

    def close(self) -> None:
        """Close the connection (from any thread; the next ``take`` opens another)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            # The event loop that owns it may be gone: close at the protocol level.
            conn.pgconn.finish()
