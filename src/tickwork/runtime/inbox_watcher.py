"""Reading the inboxes of a process's journaled runs: one watcher per store and event loop.

Each journaled run turns the items other processes leave in its inbox (sends, cancels)
into ticks (``Ownership.open_inbox``).  A store that can read many inboxes in one call
(``read_inboxes``, the SQLite store) gets one ``InboxWatcher`` per event loop: a task
that reads the inboxes of every local run it serves at once, then waits for a send
through the store, a run that joins, or the poll interval, whichever comes first.  A
thousand live runs then cost one read per poll rather than a read, a timer and a
wait each.

A run joins with an ``InboxFeed`` (no task or coroutine of its own): the watcher posts
the run's new items through the feed, and fails the feed (which ends the run with the
error) when the run's inbox cannot be read, as the run's own read would have.  The
watcher's task ends when its last run leaves; the next run to join starts a new one.
"""

from __future__ import annotations

import contextvars
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from tickwork._event_loop import running_asyncio_loop
from tickwork.runtime.types.ticks import Tick
from tickwork.stores import metrics
from tickwork.stores.records import InboxItem

__all__ = ["INBOX_POLL_SECONDS", "InboxFeed", "InboxWatcher", "join_watcher"]

INBOX_POLL_SECONDS = 1.0
"""How often a running session looks for inbox items when the store sends no
notification."""


class InboxFeed:
    """One run's way in from its inbox: the items already turned into ticks, and what
    reads them for it.

    ``owner.tick_for(item, serializer)`` makes the tick of an item (``None``: skip it),
    ``owner.writer.consumes`` marks it as standing for the item, and
    ``run.post_external`` feeds it to the run; ``run.inbox_failed(error)`` ends the run
    when its inbox cannot be read.  ``source`` is what reads the inbox: the event
    loop's ``InboxWatcher`` that serves the feed, or for the run's own polling task, a
    function that cancels it); ``close`` lets go of it.  Slotted, with
    nothing bound per run: a thousand waiting runs each hold one (the garbage collector
    walks them all).
    """

    __slots__ = ("error", "owner", "run", "serializer", "source", "taken")

    def __init__(self, owner: Any, serializer: Any, run: Any) -> None:
        self.owner = owner
        self.serializer = serializer
        self.run = run
        # Items turned into ticks and not yet consumed in the store (they are read again
        # until the commit that journals them).
        self.taken: set[int] = set()
        self.error: BaseException | None = None
        self.source: Any = None

    @property
    def run_id(self) -> str:
        run_id: str = self.owner.run_id
        return run_id

    def deliver(self, items: Sequence[InboxItem]) -> None:
        """Post a tick for each item not posted before."""
        taken = self.taken
        if not items:
            taken.clear()  # consumed items are gone from the inbox
            return
        taken &= {item.item_id for item in items}
        for item in items:
            if item.item_id in taken:
                continue
            taken.add(item.item_id)
            tick = self.owner.tick_for(item, self.serializer)
            if tick is None:
                continue
            self.owner.writer.consumes(tick, item.item_id)
            metrics.record("tickwork.fleet.inbox_lag", max(0.0, time.time() - item.created_at))
            self.run.post_external(tick)

    def fail(self, error: BaseException) -> None:
        """End the run with ``error`` (its inbox cannot be read)."""
        if self.error is not None:
            return
        self.error = error
        self.run.inbox_failed(error)

    def close(self) -> None:
        """Stop reading the run's inbox (its loop ended), and let go of the run: a
        polling task may take a turn to unwind, and must not keep the run meanwhile."""
        self.run = _NO_RUN
        source, self.source = self.source, None
        if isinstance(source, InboxWatcher):
            source.leave(self)
        elif source is not None:
            source()  # cancels the run's own polling task


class _NoRun:
    """The run of a closed feed: what reaches it is dropped (the run's loop ended)."""

    def post_external(self, tick: Tick) -> None:
        pass

    def inbox_failed(self, error: BaseException) -> None:
        pass


_NO_RUN = _NoRun()


class InboxWatcher:
    """The task that reads the inboxes of this event loop's runs journaled to ``store``."""

    def __init__(self, store: Any, leave: Callable[[InboxWatcher], None]) -> None:
        self.store = store
        self._leave = leave
        self.feeds: dict[InboxFeed, None] = {}  # in joining order
        self._fresh = False  # a run joined since the last read began
        self._wait_scope: anyio.CancelScope | None = None
        self.reads = 0
        """How many times it read the inboxes (tests read it)."""
        # An asyncio loop holds its tasks weakly: the watcher holds its own.
        self._task: Any = None

    def join(self, feed: InboxFeed) -> None:
        """Serve ``feed``'s run from now on; its inbox is read at the next turn."""
        self.feeds[feed] = None
        self._fresh = True
        scope = self._wait_scope
        if scope is not None:
            scope.cancel()  # read now, not at the end of the poll interval

    def leave(self, feed: InboxFeed) -> None:
        """Stop serving ``feed``'s run; the task ends with the last run's leaving."""
        self.feeds.pop(feed, None)
        scope = self._wait_scope
        if not self.feeds and scope is not None:
            scope.cancel()

    def start(self) -> None:
        """Start the watcher's task on the running event loop, outside any run's
        context (it serves them all)."""
        loop = running_asyncio_loop()
        context = contextvars.Context()
        if loop is not None:
            self._task = context.run(loop.create_task, self._watch())
        else:
            import trio

            trio.lowlevel.spawn_system_task(self._watch, context=context)

    async def _watch(self) -> None:
        try:
            while self.feeds:
                self._fresh = False
                await self._read_once()
                if self._fresh or not self.feeds:
                    continue
                with anyio.CancelScope() as scope:
                    self._wait_scope = scope
                    await self.store.wait_for_inbox(INBOX_POLL_SECONDS, None)
                self._wait_scope = None
        except anyio.get_cancelled_exc_class():
            raise  # the event loop shuts down: its runs go with it
        except BaseException as error:  # never into the event loop; the runs learn it
            for feed in list(self.feeds):
                feed.fail(error)
            if not isinstance(error, Exception):
                raise
        finally:
            self._wait_scope = self._task = None
            self._leave(self)

    async def _read_once(self) -> None:
        """Read every served run's inbox and deliver what is new; a run whose inbox
        cannot be read this way is read alone, and fails alone."""
        feeds = list(self.feeds)
        self.reads += 1
        try:
            found: dict[str, list[InboxItem]] = await self.store.read_inboxes(
                [feed.run_id for feed in feeds]
            )
        except Exception:
            found = {}  # each run reads alone, and fails with its own error
        for feed in feeds:
            if feed not in self.feeds:
                continue  # it left meanwhile
            items = found.get(feed.run_id)
            try:
                if items is None:
                    items = await self.store.read_inbox(feed.run_id)
                    if feed not in self.feeds:
                        continue
                feed.deliver(items)
            except Exception as error:
                feed.fail(error)


# -- one watcher per store and event loop -----------------------------------------------

_ASYNCIO_WATCHERS: weakref.WeakKeyDictionary[Any, dict[int, InboxWatcher]] = (
    weakref.WeakKeyDictionary()
)
_TRIO_WATCHERS: Any = None  # a trio.lowlevel.RunVar, made on first use under trio


def _loop_watchers() -> dict[int, InboxWatcher]:
    """The watchers of the running event loop, by the ``id`` of their store (a watcher
    holds its store: the id is not reused while it is there)."""
    loop = running_asyncio_loop()
    if loop is not None:
        watchers = _ASYNCIO_WATCHERS.get(loop)
        if watchers is None:
            watchers = _ASYNCIO_WATCHERS[loop] = {}
        return watchers
    global _TRIO_WATCHERS
    if _TRIO_WATCHERS is None:
        import trio

        _TRIO_WATCHERS = trio.lowlevel.RunVar("tickwork_inbox_watchers")
    found: dict[int, InboxWatcher] | None = _TRIO_WATCHERS.get(None)
    if found is None:
        found = {}
        _TRIO_WATCHERS.set(found)
    return found


def join_watcher(store: Any, feed: InboxFeed) -> None:
    """Have this event loop's watcher of ``store`` serve ``feed`` until ``feed.close()``
    (it starts one if there is none)."""
    watchers = _loop_watchers()
    watcher = watchers.get(id(store))
    if watcher is None:

        def gone(ended: InboxWatcher) -> None:
            if watchers.get(id(store)) is ended:
                del watchers[id(store)]

        watcher = watchers[id(store)] = InboxWatcher(store, gone)
        watcher.join(feed)
        watcher.start()
    else:
        watcher.join(feed)
    feed.source = watcher
