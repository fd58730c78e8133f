"""Change notifications of the Postgres journal store: ``NOTIFY`` out, ``LISTEN`` in.

Notifications are hints (scale-out.md §5): everything works by polling when they are
lost, so neither side ever raises because of them.

*Out*: ``Notifier`` sends a run's id on the store's channel after the transaction
that changed the run has committed (never inside it: a notifying commit takes a global
lock in PostgreSQL).  Ids that pile up while one is being sent go out together in one
statement, each once.

*In*: ``ChangeListener`` keeps one dedicated connection listening on the channel.
The tasks waiting for a change take turns *leading*: the leader waits on the
connection in a worker thread and, when something arrives, wakes every waiter it
concerns; the others just wait for that.  So any number of waiters costs one thread and
one connection.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections.abc import Callable, Sequence

import anyio
import anyio.to_thread
import psycopg
from psycopg.rows import TupleRow

from tickwork.stores.postgres_schema import quote_ident

__all__ = ["ChangeListener", "Notifier", "channel_name"]

# The longest a leader waits on the connection at once; a new waiter whose run changes
# is never later than this behind, even if the leader's own timeout is long.
_MAX_POLL_SECONDS = 1.0
# After the listening connection fails, how long waiters just sleep before trying again.
_RECONNECT_AFTER_SECONDS = 1.0
_MAX_CHANNEL_BYTES = 63  # PostgreSQL's identifier limit (NAMEDATALEN - 1)

Connection = psycopg.Connection[TupleRow]


def channel_name(schema: str) -> str:
    """The notification channel of the store in ``schema``: ``tickwork_<schema>``, or a
    hash of the schema's name when that would be too long for an identifier."""
    name = f"tickwork_{schema}"
    if len(name.encode()) <= _MAX_CHANNEL_BYTES:
        return name
    return f"tickwork_{hashlib.sha256(schema.encode()).hexdigest()[:32]}"


class Notifier:
    """Sends ``NOTIFY <channel>, <run id>`` after commits, coalescing concurrent ones."""

    def __init__(self, channel: str) -> None:
        self._channel = channel
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self._sending = False

    def send(self, conn: Connection, run_ids: Sequence[str]) -> None:
        """Notify about ``run_ids`` on ``conn`` (outside any transaction).

        If another thread is already sending, the ids are left to it and this returns at
        once.  A failure is swallowed: the change is committed, and listeners poll.
        """
        with self._lock:
            self._pending.update(run_ids)
            if self._sending:
                return
            self._sending = True
        try:
            while True:
                with self._lock:
                    batch = sorted(self._pending)
                    self._pending.clear()
                    if not batch:
                        self._sending = False
                        return
                conn.execute(
                    "SELECT pg_notify(%s, run_id) FROM unnest(%s::text[]) AS run_id",
                    (self._channel, batch),
                )
        except psycopg.Error:
            with self._lock:
                self._sending = False


class _Waiter:
    """One task in ``ChangeListener.wait``."""

    __slots__ = ("fired", "run_id", "wake")

    def __init__(self, run_id: str | None) -> None:
        self.run_id = run_id
        self.fired = False
        self.wake = anyio.Event()


class ChangeListener:
    """Waits for notifications on a dedicated listening connection (see the module)."""

    def __init__(self, connect: Callable[[], Connection], channel: str) -> None:
        self._connect = connect
        self._listen = f"LISTEN {quote_ident(channel)}"
        self._conn: Connection | None = None
        self._conn_lock = threading.Lock()  # one thread at a time uses the connection
        self._received: list[str] = []  # payloads not dispatched yet (under _conn_lock)
        self._retry_at = 0.0
        self._waiters: list[_Waiter] = []
        self._leader: _Waiter | None = None

    async def wait(self, timeout: float, run_id: str | None = None) -> None:
        """Return when a notification about ``run_id`` (any run when ``None``) arrives,
        or after ``timeout`` seconds."""
        waiter = _Waiter(run_id)
        self._waiters.append(waiter)
        deadline = anyio.current_time() + timeout
        try:
            while not waiter.fired:
                remaining = deadline - anyio.current_time()
                if remaining <= 0:
                    return
                if self._leader is None:
                    await self._lead(waiter, min(remaining, _MAX_POLL_SECONDS))
                else:
                    with anyio.move_on_after(remaining):
                        await waiter.wake.wait()
                    waiter.wake = anyio.Event()
        finally:
            self._waiters.remove(waiter)
            self._hand_over()

    async def _lead(self, waiter: _Waiter, seconds: float) -> None:
        self._leader = waiter
        try:
            await anyio.to_thread.run_sync(self._poll, seconds, abandon_on_cancel=True)
        finally:
            self._leader = None
            self._dispatch()

    def _dispatch(self) -> None:
        """Wake the waiters the received payloads concern.

        Called on the event loop: it must not wait for the lock, which a polling thread
        holds for up to a second (an abandoned one, when its leader was cancelled).  If
        the lock is busy, the thread holding it keeps what it receives for the next
        leader, whose poll returns at once and dispatches it."""
        if not self._conn_lock.acquire(blocking=False):
            return
        try:
            received, self._received = set(self._received), []
        finally:
            self._conn_lock.release()
        if not received:
            return
        for waiter in self._waiters:
            if not waiter.fired and (waiter.run_id is None or waiter.run_id in received):
                waiter.fired = True
                waiter.wake.set()

    def _hand_over(self) -> None:
        """With no leader, wake one waiter so that it leads."""
        if self._leader is not None:
            return
        for waiter in self._waiters:
            if not waiter.fired:
                waiter.wake.set()
                return

    def _poll(self, seconds: float) -> None:
        """Wait up to ``seconds`` for notifications (a worker thread); store their
        payloads.  Without a connection it only sleeps: waiters fall back to polling."""
        with self._conn_lock:
            if self._received:
                return
            conn = self._connection()
            if conn is None:
                time.sleep(seconds)
                return
            try:
                for note in conn.notifies(timeout=seconds, stop_after=1):
                    self._received.append(note.payload)
                if self._received:
                    self._received.extend(n.payload for n in conn.notifies(timeout=0))
            except psycopg.Error:
                self._drop(retry=True)

    def _connection(self) -> Connection | None:
        """The listening connection, opened on first use (hold ``_conn_lock``)."""
        if self._conn is not None:
            return self._conn
        if time.monotonic() < self._retry_at:
            return None
        try:
            conn = self._connect()
            conn.execute(self._listen)
        except psycopg.Error:
            self._retry_at = time.monotonic() + _RECONNECT_AFTER_SECONDS
            return None
        self._conn = conn
        return conn

    def _drop(self, *, retry: bool) -> None:
        conn, self._conn = self._conn, None
        if retry:
            self._retry_at = time.monotonic() + _RECONNECT_AFTER_SECONDS
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def close(self) -> None:
        """Close the listening connection (a later wait opens a new one)."""
        with self._conn_lock:
            self._drop(retry=False)
