"""The ports of the control loop: what the loop needs from the runtime hosting a run
(``LoopAdapter``), how workers and steps reach the loop (``WorkerLane``, ``TickFeed``,
``StreamLane``, ``EventSink``), and how a run's loop ends (``RunExit``).

Interfaces and the loop's exit record only; ``runner`` holds the loop that uses them.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from tickwork.runtime.types.commands import (
    Command,
    ScheduleTimeout,
    ScheduleWaiterTimeout,
    ScheduleWakeup,
)
from tickwork.runtime.types.state import Invocation, RunState
from tickwork.runtime.types.ticks import Tick

__all__ = [
    "PARKED",
    "EventSink",
    "LoopAdapter",
    "ResumedLoop",
    "RunExit",
    "RunStep",
    "ScheduleCommand",
    "StreamLane",
    "TickFeed",
    "TimerHeap",
    "WorkerLane",
]


class EventSink(Protocol):
    """Where a run's published items go (its event stream)."""

    def push(self, item: Any) -> None:
        """Append an event (or a step-state command) to the run's stream."""


class TickFeed(Protocol):
    """Where a run's external ticks go (the loop itself, while it runs)."""

    def post(self, tick: Tick) -> None:
        """Feed ``tick`` into the run (the caller's sends, cancel requests)."""


class WorkerLane(Protocol):
    """How a worker reaches the loop that dispatched it (the loop itself: one object
    that every worker of the run shares, rather than bound methods the run would hold)."""

    unstarted: int
    """How many dispatched workers have not begun: a worker takes itself off first
    thing, before its step body (``lane.unstarted -= 1``: a write, not a call, per step)."""

    worker_tasks: dict[str, Any] | None
    """Invocation id -> its worker task, which a worker leaves as it posts its outcome
    (``None`` where workers leave on their own)."""

    def post(self, tick: Tick) -> None:
        """Feed a tick into the run (a step's send, a stream write handed over, a
        worker's outcome as a ``StepResult``; a cancelled worker posts none)."""


RunStep = Callable[[Any, Invocation, WorkerLane], Coroutine[Any, Any, None]]


class RunExit:
    """How a run ended: ``kind`` is ``complete``, ``fail``, ``cancel`` or ``timeout``."""

    __slots__ = ("exception", "kind", "step_name", "stop_event")

    def __init__(
        self,
        kind: str,
        stop_event: Any = None,
        exception: BaseException | None = None,
        step_name: str | None = None,
    ) -> None:
        self.kind = kind
        self.stop_event = stop_event
        self.exception = exception
        self.step_name = step_name


class StreamLane(Protocol):
    """How a run's steps write to its stream (the running loop)."""

    def write(self, event: Any, invocation_id: str | None) -> None:
        """Publish ``event``, written by invocation ``invocation_id``."""

    def settle_writes(self) -> None:
        """Account the writes not yet accounted, so that the state last given to the
        adapter's ``processed`` is up to date."""

    def cancel_steps(self) -> None:
        """Cancel the running step bodies now: the run is being stopped, and its loop
        may be waiting for its journal store, which no cancellation interrupts."""


PARKED = RunExit("parked")
"""The ``exit`` of a loop whose run parked (the run goes on without it)."""

ScheduleCommand = ScheduleWakeup | ScheduleTimeout | ScheduleWaiterTimeout
TimerHeap = list[tuple[float, int, ScheduleCommand]]
"""A run's pending timers: a heap of ``(due_at, seq, the command that scheduled it)``."""


class LoopAdapter(Protocol):
    """What the loop needs from the runtime hosting a run."""

    spawn_context: contextvars.Context

    def bind(self, feed: TickFeed) -> None:
        """Receive the loop, whose ``post`` feeds external ticks (sends, cancel) into the
        run: the loop itself rather than its bound ``post``, one object less per run."""

    @property
    def run_step(self) -> RunStep:
        """``run_step(adapter, invocation, lane)``: a coroutine executing one invocation,
        ending with posting its outcome to ``lane`` as a ``StepResult`` tick, once out of
        ``lane.worker_tasks``.

        A plain function of the adapter (read from it once per run), not a method: the loop
        calls it per invocation without a bound method's frame.  It takes one off
        ``lane.unstarted`` first thing, before the step body.  Only
        cancellation may raise: a failing step, or a failure of the adapter itself, is
        reported as a ``Failed`` outcome.  A cancelled invocation reports nothing.
        """
        ...

    sink: EventSink
    """The run's stream (its ``push`` appends an event or a step-state command): an
    object with a method rather than a bound method, one object less per live run."""

    state: RunState
    """The latest reduced state: what ``processed`` keeps, and all it keeps unless
    ``observes_ticks`` (the loop then writes it itself rather than call ``processed``
    per tick)."""

    def processed(self, tick: Tick, state: RunState, commands: list[Command]) -> None:
        """Called after each reduced tick with the new state and the commands it
        produced (snapshots, journal, the stream of durable runs); unless
        ``observes_ticks``, it must do no more than keep ``state`` (see ``state``).

        Unless ``observes_ticks``, stream writes made while work is in flight are
        accounted in batches: ``processed`` then gets the last write of a batch, the
        state after all of them, and no commands (their events are already published).
        """

    observes_ticks: bool
    """Whether ``processed`` must see every tick (a journal, verbose output)."""

    stream_lane: StreamLane | None
    """The loop, while it runs the adapter's run (``None`` otherwise): where steps write
    to the stream from the loop's thread, and what accounts a batch of writes on demand.
    A write when it is ``None`` is dropped, as the loop drops ticks after the run ended."""

    def finish(self, run_exit: RunExit) -> None:
        """Deliver the run's outcome to whoever awaits it."""

    durable: bool
    """Whether ``commit`` must be awaited after every drain."""

    heartbeat_every: float | None
    """While waiting, call ``heartbeat`` when nothing was committed for this long
    (``None``: never)."""

    def commit(self) -> Awaitable[None]:
        """Make the ticks reduced in the last drain durable (group commit): what to
        await."""
        ...

    async def heartbeat(self) -> None:
        """Record that the run is still alive (its alive time, in journaled runs)."""

    def park(self, timers: TimerHeap | None) -> bool:
        """The run has nothing to do but wait for input or for ``timers``: take them
        and let the loop go (``True``), or refuse (``False``: the loop keeps waiting).

        Called by the loop's task, with no worker running.  From then on ticks for the
        run go to ``post_external``; the adapter brings the run back with
        ``resume_loop`` when one comes, or when the earliest timer is due.
        """
        ...

    def post_external(self, tick: Tick) -> None:
        """Feed a tick to the run whatever its loop (a tick posted to a parked loop)."""


class ResumedLoop(Protocol):
    """A loop brought back for a parked run (see ``resume_loop``)."""

    def post(self, tick: Tick) -> None:
        """Feed a tick; before ``resume`` begins, the posting task reduces it."""

    def resume(self) -> Coroutine[Any, Any, RunExit]:
        """The coroutine driving the run until it ends (its exit) or parks again
        (``PARKED``)."""
        ...
