"""Group commit across runs: the writes that reach one store while it is busy share
its next transaction (and its fsync), and its other calls share the next trip to its
worker thread.

A durable run awaits each of its writes before it acts on them (write-ahead), so one
run never has two writes in flight; what a busy store sees is many runs, each waiting
for one write (and, for a store read run by run, beside each an inbox pump waiting for
one read).
``GroupCommit`` queues the calls: one that arrives while the store is idle goes at
once, alone (a lone sequential run waits for nothing more than its own transaction);
those that arrive while a batch is in flight wait for it to end and then go together,
in arrival order, taken by one of their own callers.  The store runs a batch in one
trip to its worker thread: the plain calls one after the other, the writes in one
transaction.  No background task is needed, so the queue works under asyncio and trio
alike and goes away with its store.

Each caller still gets its own outcome: the store settles every ``PendingCall`` of
a batch with its result or its error (a write refused by its fence fails alone; the
others commit), and ``call`` returns or raises only once its call has settled: a write,
once the transaction holding it has committed or failed.  Cancellation works as for a
call on a worker thread: a caller cancelled while its call still waits in the queue
withdraws it (nothing is done); once its batch is in flight, the caller waits for it to
settle (shielded) and then raises the cancellation, so a write is never left half-known.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio
import anyio.lowlevel

from tickwork._event_loop import running_asyncio_loop
from tickwork.stores.records import JournalError

__all__ = ["GroupCommit", "PendingCall"]


class PendingCall:
    """One caller's call in the queue: what to do, and its outcome once settled.

    ``body`` is the store's description of the call (for the SQLite store, a function
    of its connection); ``write`` says whether it is a write that joins the batch's
    shared transaction; ``run_id`` and ``action`` name it in errors.  The store sets
    ``result`` or ``error``.
    """

    __slots__ = (
        "action",
        "body",
        "error",
        "result",
        "run_id",
        "settled",
        "taken",
        "wake",
        "write",
    )

    def __init__(self, body: Any, run_id: str | None, action: str, write: bool) -> None:
        self.body = body
        self.run_id = run_id
        self.action = action
        self.write = write
        self.result: Any = None
        self.error: BaseException | None = None
        self.taken = False  # its batch is in flight: it can no longer be withdrawn
        self.settled = False
        # Set when the call settled, or when its caller must take the next batch: an
        # asyncio future, or an ``anyio.Event`` under trio.
        self.wake: Any = None

    def run(self, connection: Any) -> Any:
        """Do the call: ``body(connection)`` (a store's own kind of call may do its work
        here itself, as the SQLite store's appends do)."""
        return self.body(connection)


class GroupCommit:
    """The call queue of one store.

    ``run_batch(batch)`` runs a batch (the writes in one transaction) and settles each
    call: it does not raise for a call that failed, it sets that call's ``error``.  One
    batch runs at a time.
    """

    def __init__(self, run_batch: Callable[[list[PendingCall]], Awaitable[None]]) -> None:
        self._run_batch = run_batch
        self._queue: list[PendingCall] = []
        # A batch is in flight, or the caller who takes the next one has been woken
        # and has not taken the queue yet.
        self._busy = False
        # The queue may go: the batch before it is over, and none of its callers has
        # taken it yet.
        self._turn = False
        # The event shared by the callers of the queue other than the first one.
        self._followers: anyio.Event | None = None
        self.batches = 0
        """How many batches went to the store (each with at most one transaction of
        writes): tests and benchmarks read it."""

    def call(
        self, body: Any, *, run_id: str | None = None, action: str, write: bool = False
    ) -> Coroutine[Any, Any, Any]:
        """Run ``body`` in the next batch (in its transaction if ``write``): await this
        for its result, or its error."""
        return self.submit(PendingCall(body, run_id, action, write))

    async def submit(self, pending: PendingCall) -> Any:
        """Queue ``pending`` (a call made by the store: a ``PendingCall`` of its own
        kind carries its work without a body of its own) for the next batch; its result,
        or raise its error."""
        if not self._busy or self._turn:
            # It takes a batch at once, shielded: a cancelled caller stops here.  A
            # caller that waits first sees its cancellation in that wait (it withdraws
            # its call, as here it would make none), without this check's cost
            # (about 11k instructions under asyncio, on nearly every call of a busy
            # store).
            await anyio.lowlevel.checkpoint_if_cancelled()
        self._queue.append(pending)
        if self._busy:
            # Wait until the call settled, or until the queue it is in may go (then
            # this caller takes the batch: the first woken caller of the queue does).
            # Inline, not a helper coroutine: nearly every call of a busy store waits
            # here, and each wake-up would resume one more frame.  Under asyncio the
            # caller awaits a future of its own (what an ``anyio.Event`` gives each
            # waiter, without its two coroutine layers).
            loop = running_asyncio_loop()
            while not pending.settled and (pending.taken or not self._turn):
                wake = pending.wake = (
                    loop.create_future() if loop is not None else self._wake_for(pending, None)
                )
                try:
                    await (wake if loop is not None else wake.wait())
                except BaseException:
                    if pending.taken:  # in flight: learn how it ended first
                        with anyio.CancelScope(shield=True):
                            await self._until_settled(pending, loop)
                    else:
                        self._withdraw(pending)
                    raise
        else:
            self._busy = True
        if not pending.settled:  # this caller takes the batch its call is in
            with anyio.CancelScope(shield=True):
                await self._take_batch()
        if pending.error is not None:
            raise pending.error
        return pending.result

    def _wake_for(self, pending: PendingCall, loop: Any) -> Any:
        """What ``pending``'s caller waits on: under asyncio (``loop``), a future of
        its own; under trio, an event: its own if its call is the first in the queue
        (the hand-over wakes that caller alone), else the one the queue's other
        callers share (one event per batch, not per call: they all wake only when
        their batch settled)."""
        if loop is not None:
            return loop.create_future()
        if self._queue and self._queue[0] is pending:
            return anyio.Event()
        followers = self._followers
        if followers is None or followers.is_set():
            followers = self._followers = anyio.Event()
        return followers

    @staticmethod
    async def _until_settled(pending: PendingCall, loop: Any) -> None:
        """Wait until ``pending`` has settled (its caller was cancelled while its batch
        was in flight): a cancelled future cannot be awaited again, an event can."""
        while not pending.settled:
            if loop is None:
                await pending.wake.wait()
            else:
                pending.wake = loop.create_future()
                await pending.wake

    def _withdraw(self, pending: PendingCall) -> None:
        """Take a queued call out (its caller was cancelled); if the queue's turn has
        come, a caller still in it takes the batch instead."""
        self._queue.remove(pending)
        if self._turn:
            self._hand_over()

    def _hand_over(self) -> None:
        """The batch in flight is over: wake the caller of the first queued call (a
        caller woken whose call is still queued takes the next batch)."""
        if self._queue:
            # Every queued call arrived while a batch was in flight: its caller waits
            # (or is about to look at ``_turn`` again).
            self._turn = True
            following = self._queue[0].wake
            assert following is not None
            _wake(following)
        else:
            self._busy = self._turn = False

    async def _take_batch(self) -> None:
        batch, self._queue = self._queue, []
        self._turn = False
        self._followers = None  # the callers queued from now on share a new event
        for pending in batch:
            pending.taken = True
        self.batches += 1
        try:
            await self._run_batch(batch)
        except BaseException as error:
            # The store settles each call itself: this failed around the batch (the
            # journal file cannot be opened, the worker thread could not start).
            # Nothing of the batch is known to be done; every caller raises.
            for pending in batch:
                if pending.error is None:
                    pending.result = None
                    pending.error = error if len(batch) == 1 else _failure(pending, error)
        finally:
            for pending in batch:
                pending.settled = True
                wake = pending.wake
                if wake is None:
                    continue
                # ``_wake`` without its frame (one per call of the batch).
                if isinstance(wake, anyio.Event):
                    if not wake.is_set():  # a shared one: set once
                        wake.set()
                elif not wake.done():  # a cancelled caller's future is done already
                    wake.set_result(None)
            self._hand_over()


def _wake(wake: Any) -> None:
    """Wake the caller(s) waiting on ``wake`` (a future or an event), once."""
    if isinstance(wake, anyio.Event):
        if not wake.is_set():  # a shared one: set once
            wake.set()
    elif not wake.done():  # a cancelled caller's future is done already
        wake.set_result(None)


def _failure(pending: PendingCall, error: BaseException) -> BaseException:
    """The error a call of several gets when their batch failed as a whole: one object
    per call (raising one exception object in many tasks would tangle their
    tracebacks), a ``JournalError`` (of the same class, with the same message, when the
    failure was one already: a journal file that cannot be opened)."""
    if not isinstance(error, Exception):
        return error
    if isinstance(error, JournalError):
        failure: JournalError = type(error)(str(error))
    else:
        where = f"run {pending.run_id!r}: " if pending.run_id is not None else ""
        failure = JournalError(f"{where}{pending.action} failed: {error!r}")
    failure.__cause__ = error
    return failure
