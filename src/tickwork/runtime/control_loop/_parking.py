"""Where parked runs wait: one lot per event loop, with one task and one deadline heap.

A run whose only remaining work is waiters and timers gives up its task (see
``runner``): its host keeps the reduced state and the timers, and checks in here.  Each
event loop has one lot, and the lot has at most one task, alive while runs are parked on
that loop.  The task sleeps until the earliest deadline of a parked run and wakes that
run (which gets a task of its own again).  When the event loop shuts down with runs still
parked, the lot's task is cancelled like every other task, and it aborts them, as their
own tasks would have been: a parked run never outlives its event loop.

Nothing here is per run except one heap entry for a run that has a deadline.
"""

from __future__ import annotations

import contextvars
import heapq
import logging
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

import anyio

from tickwork._event_loop import running_asyncio_loop

__all__ = ["ParkedRun", "ParkingLot", "TimerEntry", "current_lot", "lot_or_none"]

_log = logging.getLogger("tickwork.runtime")

TimerEntry = list[Any]
"""``[due_at, seq, run]``; ``run`` is ``None`` once the entry is cancelled or fired."""

_COMPACT_AT = 64
"""Rebuild the heap once this many cancelled entries sit in it (and they are half of it)."""


class ParkedRun(Protocol):
    """A parked run, as the lot sees it."""

    def deadline_due(self) -> None:
        """The run's earliest deadline has come: bring the run back."""

    def loop_ended(self) -> None:
        """The event loop is shutting down with the run parked: abort it."""


class ParkingLot:
    """The parked runs of one event loop: their count, their deadlines, one task.

    ``shutdown`` is called with the lot when the event loop cancels the lot's task
    (it shuts down) while runs are parked; it aborts them.
    """

    __slots__ = ("_dead", "_heap", "_seq", "_serving", "_task", "_wake", "parked", "shutdown")

    def __init__(self, shutdown: Callable[[ParkingLot], None]) -> None:
        self.parked = 0
        """Runs parked here now (a parked run that was dropped unanswered may still
        count until its host is freed)."""
        self.shutdown = shutdown
        self._heap: list[TimerEntry] = []
        self._seq = 0
        self._dead = 0
        self._serving = False
        self._task: Any = None
        self._wake: anyio.Event | None = None

    # -- runs arriving and leaving -------------------------------------------------

    def arrive(self, run: ParkedRun, due_at: float | None) -> TimerEntry | None:
        """Count ``run`` as parked here, woken at ``due_at`` (``None``: only by input).

        Returns the run's timer entry, which ``leave`` takes back.
        """
        self.parked += 1
        entry: TimerEntry | None = None
        if due_at is not None:
            self._seq += 1
            entry = [due_at, self._seq, run]
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:
                self._poke()  # an earlier deadline than the one the task sleeps until
        if not self._serving:
            self._start()
        return entry

    def leave(self, entry: TimerEntry | None) -> None:
        """A parked run came back (or ended): forget it and its timer entry."""
        self.parked -= 1
        if entry is not None and entry[2] is not None:
            entry[2] = None
            self._dead += 1
            if self._dead >= _COMPACT_AT and self._dead * 2 >= len(self._heap):
                self._heap = [e for e in self._heap if e[2] is not None]
                heapq.heapify(self._heap)
                self._dead = 0
        if self.parked <= 0:
            self._poke()  # nothing left to watch: let the task end

    def forget(self) -> None:
        """A parked run was freed without coming back (nobody held it any more).

        Called from a finalizer, which may run in any thread: only the count changes;
        the task notices at its next wake-up.
        """
        self.parked -= 1

    # -- the task ------------------------------------------------------------------

    def _start(self) -> None:
        """Spawn the lot's task, in an empty context: it serves every run of the loop
        and must not keep the contextvars of the one that happened to park first."""
        self._serving = True
        loop = running_asyncio_loop()
        if loop is not None:
            self._task = contextvars.Context().run(loop.create_task, self._serve())
        else:
            import trio

            trio.lowlevel.spawn_system_task(
                self._serve, name="tickwork parked runs", context=contextvars.Context()
            )

    def _poke(self) -> None:
        wake = self._wake
        if wake is not None:
            wake.set()

    def _has_timers(self) -> bool:
        return len(self._heap) > self._dead

    async def _serve(self) -> None:
        """Sleep until the next deadline (or a poke), wake what is due; repeat while runs
        are parked here."""
        try:
            while self.parked > 0 or self._has_timers():
                wake = self._wake = anyio.Event()
                due = self._next_due()
                delay = None if due is None else due - time.time()
                if delay is None:
                    await wake.wait()
                elif delay > 0:
                    with anyio.move_on_after(delay):
                        await wake.wait()
                self._wake = None
                self._fire_due()
        except anyio.get_cancelled_exc_class():
            self._wake = None
            if self.parked > 0:
                self.shutdown(self)
            raise
        finally:
            self._serving = False
            self._task = None  # a finished asyncio task refers to its event loop

    def _next_due(self) -> float | None:
        """The earliest deadline still wanted (cancelled entries on top are dropped)."""
        heap = self._heap
        while heap and heap[0][2] is None:
            heapq.heappop(heap)
            self._dead -= 1
        return heap[0][0] if heap else None

    def _fire_due(self) -> None:
        """Wake every run whose deadline has come (cancelled entries are dropped)."""
        heap = self._heap
        now = time.time()
        while heap and (heap[0][2] is None or heap[0][0] <= now):
            entry = heapq.heappop(heap)
            run = entry[2]
            if run is None:
                self._dead -= 1
                continue
            entry[2] = None
            try:
                run.deadline_due()
            except Exception:  # a runtime bug: never let it stop the other runs' timers
                _log.exception("waking a parked run failed")


# -- one lot per event loop ------------------------------------------------------------

_ASYNCIO_LOTS: weakref.WeakKeyDictionary[Any, ParkingLot] = weakref.WeakKeyDictionary()
_TRIO_LOT: Any = None  # a trio.lowlevel.RunVar, made on first use under trio


def _trio_lot_var() -> Any:
    global _TRIO_LOT
    if _TRIO_LOT is None:
        import trio

        _TRIO_LOT = trio.lowlevel.RunVar("tickwork_parking_lot")
    return _TRIO_LOT


def lot_or_none() -> ParkingLot | None:
    """The lot of the event loop running in this thread; ``None`` without one, or when
    none was made for it yet."""
    loop = running_asyncio_loop()
    if loop is not None:
        return _ASYNCIO_LOTS.get(loop)
    try:
        return _trio_lot_var().get(None)  # type: ignore[no-any-return]
    except RuntimeError:  # not inside trio.run
        return None


def current_lot(shutdown: Callable[[ParkingLot], None]) -> ParkingLot:
    """The lot of the running event loop, made (with ``shutdown``) on first use."""
    loop = running_asyncio_loop()
    if loop is not None:
        lot = _ASYNCIO_LOTS.get(loop)
        if lot is None:
            lot = _ASYNCIO_LOTS[loop] = ParkingLot(shutdown)
        return lot
    var = _trio_lot_var()
    lot = var.get(None)
    if lot is None:
        lot = ParkingLot(shutdown)
        var.set(lot)
    return lot
