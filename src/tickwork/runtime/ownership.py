"""What owning a journaled run takes: a lease kept alive, and an inbox emptied.

A journaled run is owned by one process at a time (scale-out.md §3).  ``Ownership``
holds the run's ``Lease`` (taken when the run is
registered, or handed over by a claim), keeps it renewed through the process's
``LeaseKeeper``, and reports its loss to the session on the
session's own event loop.  ``Ownership.open_inbox`` turns the items other processes
leave in the run's inbox (sends, cancels) into ticks, which the durable writer marks
consumed in the transaction that journals them: each one enters the journal once.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import anyio

from tickwork._event_loop import running_asyncio_loop
from tickwork.runtime.durable import DurableWriter
from tickwork.runtime.inbox_watcher import INBOX_POLL_SECONDS, InboxFeed, join_watcher
from tickwork.runtime.types.ticks import AddEvent, CancelRun, Tick
from tickwork.stores.leases import keeper_for, process_owner
from tickwork.stores.records import InboxItem, Lease, LeaseLost
from tickwork.stores.store import DEFAULT_LEASE_SECONDS

__all__ = ["INBOX_POLL_SECONDS", "Ownership", "thread_safe_caller"]

_log = logging.getLogger("tickwork.runtime")


def thread_safe_caller() -> Callable[[Callable[[], None]], object]:
    """A function that runs a callback soon on the current event loop, from any thread
    (the loop's or the trio token's own method: nothing made per call)."""
    if "asyncio" in sys.modules:
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            return loop.call_soon_threadsafe
    import trio

    return trio.lowlevel.current_trio_token().run_sync_soon


class _LossReport:
    """What the lease keeper calls, on its thread, when a run's lease is lost: it raises
    nothing there, and has ``on_lost(LeaseLost)`` called on the run's event loop.

    One slotted object per journaled run, in place of two closures (each with its
    cells and dictionaries) that every live run held."""

    __slots__ = ("call_soon", "on_lost", "run_id")

    def __init__(
        self,
        run_id: str,
        on_lost: Callable[[LeaseLost], None],
        call_soon: Callable[[Callable[[], None]], object],
    ) -> None:
        self.run_id = run_id
        self.on_lost = on_lost
        self.call_soon = call_soon

    def __call__(self, reason: str) -> None:
        error = LeaseLost(f"run {self.run_id!r}: {reason}")
        self.call_soon(functools.partial(self.on_lost, error))


class Ownership:
    """The lease of one journaled run in this process, and its inbox pump."""

    def __init__(self, writer: DurableWriter, *, lease_seconds: float = DEFAULT_LEASE_SECONDS):
        self.writer = writer
        self.lease_seconds = lease_seconds
        self.lease: Lease | None = None
        self._keeper: Any = None

    @property
    def run_id(self) -> str:
        return self.writer.run_id

    def hold(self, lease: Lease | None, on_lost: Callable[[LeaseLost], None]) -> None:
        """Keep ``lease`` renewed; ``on_lost`` runs on this event loop if it is lost."""
        self.lease = lease
        if lease is None:
            return
        report = _LossReport(self.run_id, on_lost, thread_safe_caller())
        self._keeper = keeper_for(self.writer.store, lease.owner, self.lease_seconds)
        self._keeper.hold(lease, report)

    def release(self) -> None:
        """Stop renewing the lease (the run ended, was parked or handed back)."""
        if self._keeper is not None and self.lease is not None:
            self._keeper.drop(self.lease.run_id)
            self._keeper = None

    @staticmethod
    def local_owner() -> str:
        """The owner id of runs this process starts itself (``Workflow.run()``)."""
        return process_owner()

    def open_inbox(self, run: Any, serializer: Any, context: contextvars.Context) -> InboxFeed:
        """Turn the run's inbox items into ticks from now on, until the feed returned is
        closed (``InboxFeed.close``, when the run's loop ends).

        ``run.post_external(tick)`` gets each tick; ``run.inbox_failed(error)`` is told
        when the inbox cannot be read.  A store that reads many inboxes at once
        (``read_inboxes``) serves every run of this event loop from one watcher
        (``.inbox_watcher``): the run holds no task for it.  Another is polled by a task
        of the run's own, run in a copy of ``context``.
        """
        store = self.writer.store
        feed = InboxFeed(self, serializer, run)
        if getattr(store, "read_inboxes", None) is not None:
            join_watcher(store, feed)
            return feed
        loop = running_asyncio_loop()
        if loop is not None:
            # Cancelled through an anyio scope, not ``task.cancel()``: the store's calls
            # shield themselves in anyio scopes (a read on a worker thread holds its
            # connection and its capacity token until it returns), which a bare task
            # cancellation would cut through.
            scope: Any = anyio.CancelScope()
            context.copy().run(loop.create_task, self._poll_in_scope(store, feed, scope))
            feed.source = scope.cancel
        else:
            import trio

            scope = trio.CancelScope()
            # Cancelled from a callback of its own: a trio cancellation keeps the stack
            # that asked for it (the run's, and its session) until the task takes it.
            token = trio.lowlevel.current_trio_token()
            feed.source = functools.partial(token.run_sync_soon, scope.cancel)
            trio.lowlevel.spawn_system_task(
                self._poll_in_scope, store, feed, scope, context=context.copy()
            )
        return feed

    async def _poll_in_scope(self, store: Any, feed: InboxFeed, scope: Any) -> None:
        with scope:
            await self._poll_inbox(store, feed)

    async def _poll_inbox(self, store: Any, feed: InboxFeed) -> None:
        """Read the run's inbox until cancelled; fail the feed on an error (never raise
        it into the event loop)."""
        try:
            while True:
                feed.deliver(await store.read_inbox(self.run_id))
                await store.wait_for_inbox(INBOX_POLL_SECONDS, self.run_id)
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException as error:
            feed.fail(error)
            if not isinstance(error, Exception):
                raise

    def tick_for(self, item: InboxItem, serializer: Any) -> Tick | None:
        """The tick an inbox item stands for; ``None`` (logged) when its event cannot
        be decoded."""
        if item.kind == "cancel":
            return CancelRun(time.time())
        payload = item.payload if isinstance(item.payload, dict) else {}
        try:
            with serializer.validation_context():
                event = serializer.from_record(payload["event"])
        except Exception as error:
            _log.error(
                "run %s: inbox item %d (key %s) holds an event that cannot be decoded: %s",
                self.run_id,
                item.item_id,
                item.idempotency_key,
                error,
            )
            return None
        return AddEvent(time.time(), event, payload.get("step"))
