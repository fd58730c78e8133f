"""One run hosted in this process: the loop's adapter and the handler's backend.

A ``RunSession`` is created by ``Workflow.run()``.  It owns the run's published
event stream, its outcome, the latest reduced state (so snapshots and
``running_steps()`` are O(state), never a replay), and the task that drives the control
loop (``run_loop``).  The task is spawned on the caller's event loop (asyncio task or
trio system task) with the caller's contextvars, because ``run()`` returns before any
nursery would exist.

A run whose only remaining work is waiters and timers parks (see ``runner``): its task
ends, and the session keeps the state, the stream and the timers, with the run counted
in its event loop's parking lot (``_parking``).  An input (a send, a cancel request, a
late send from a finished step) or the earliest deadline brings the run back, in a new
task; a hard abort or a stop ends a parked run right away.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio

if sys.version_info < (3, 11):  # pragma: no cover - anyio installs the backport there
    from exceptiongroup import BaseExceptionGroup

from tickwork.errors import WorkflowRuntimeError
from tickwork.events import StopEvent, WorkflowFailedEvent
from tickwork.runtime.control_loop._parking import (
    ParkingLot,
    TimerEntry,
    current_lot,
    lot_or_none,
)
from tickwork.runtime.control_loop.runner import (
    PARKED,
    EventSink,
    ResumedLoop,
    RunExit,
    StreamLane,
    TickFeed,
    TimerHeap,
    resume_loop,
    run_loop,
)
from tickwork.runtime.done_flag import DoneFlag
from tickwork.runtime.event_stream import EventStream
from tickwork.runtime.run_slots import RunSlots
from tickwork.runtime.step_worker import StepInvokers, execute_invocation
from tickwork.runtime.tracing import StepSpan, end_run_span, start_run_span, step_span
from tickwork.runtime.types.state import Invocation, RunConfig, RunState, StepSpec
from tickwork.runtime.types.ticks import AddEvent, CancelRun, Tick

if TYPE_CHECKING:
    import asyncio

    import trio

    # Journaled runs only: imported where a run with a journal store needs them.
    from tickwork.runtime.durable import DurableWriter
    from tickwork.runtime.inbox_watcher import InboxFeed
    from tickwork.runtime.ownership import Ownership
    from tickwork.stores.records import Lease, LeaseLost

__all__ = ["LIVE_RUNS", "DoneFlag", "RunSession", "detect_backend"]

HEARTBEAT_SECONDS = 1.0
"""How often a journaled run that waits records its alive time (api.md §24.2)."""

_FIRST_STORE_LOCK = threading.Lock()
"""Taken only while a run makes its state store on first use (``RunSession.store``)."""

_log = logging.getLogger("tickwork.runtime")


def _unwrap(error: BaseException) -> BaseException:
    """The one exception inside (nested) single-member exception groups (trio nurseries)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def detect_backend() -> str:
    """``"asyncio"`` or ``"trio"``: the event loop running in this thread.

    Raises ``RuntimeError`` when no event loop is running.
    """
    if "asyncio" in sys.modules:
        import asyncio

        try:
            asyncio.get_running_loop()
            return "asyncio"
        except RuntimeError:
            pass
    if "trio" in sys.modules:
        import trio

        try:
            trio.lowlevel.current_trio_token()
            return "trio"
        except RuntimeError:
            pass
    raise RuntimeError(
        "Workflow.run() needs a running event loop (asyncio or trio) in this thread; "
        "call it from async code, e.g. inside asyncio.run(main()) or trio.run(main)"
    )


class _PrintingSink:
    """The sink of a verbose run: its stream, and the printer."""

    __slots__ = ("_printer", "_stream")

    def __init__(self, stream: EventStream, printer: Any) -> None:
        self._stream = stream
        self._printer = printer

    def push(self, item: Any) -> None:
        """Append ``item`` to the stream and print it."""
        self._stream.push(item)
        self._printer.published(item)


async def _nothing() -> None:
    """What the task of a run stopped before it began awaits."""


class _Discard:
    """The sink of a session nobody in this process reads."""

    __slots__ = ()

    def push(self, item: Any) -> None:
        """Drop ``item``."""


_DISCARD = _Discard()


class _Ended:
    """The tick feed of a run that has ended: ticks are dropped."""

    __slots__ = ()

    def post(self, tick: Tick) -> None:
        """Drop ``tick``."""


class _Parked:
    """The tick feed of a parked run: a marker, ``post_external`` resumes the run."""

    __slots__ = ()

    def post(self, tick: Tick) -> None:
        raise AssertionError("a parked run's ticks go through post_external")  # pragma: no cover


_ENDED = _Ended()
_PARKED = _Parked()


LIVE_RUNS: weakref.WeakValueDictionary[str, RunSession] = weakref.WeakValueDictionary()
"""Live runs of this process by id, held weakly so that a finished run leaves nothing
behind (``Workflow.run()`` registers them)."""


def _abort_parked_runs(lot: ParkingLot) -> None:
    """The event loop of ``lot`` shuts down: abort the runs parked on it, as the
    cancellation of their tasks would have."""
    for session in list(LIVE_RUNS.values()):
        if session._feed is _PARKED and session._home is lot:
            session.loop_ended()


class RunSession(DoneFlag):
    """The in-process host of one run.

    It is its own ``done`` flag (set when the run ends): one object less per live run.

    Slotted: a run that waits for a human keeps its session for as long as it waits, and
    a slotted object is a fraction of an instance dict (past 30 attributes, an instance
    dict stops sharing its keys and costs over a kilobyte).
    """

    __slots__ = (
        "__weakref__",
        "_cancel_scope",
        "_early_ticks",
        "_feed",
        "_home",
        "_host_done",
        "_inbox",
        "_journal_waiter",
        "_limiters",
        "_make_store",
        "_run_cache",
        "_run_slots",
        "_store",
        "_timer_entry",
        "_timers",
        "_turn",
        "_verbose",
        "config",
        "durable",
        "exit",
        "hard_aborted",
        "heartbeat_every",
        "invokers",
        "journal",
        "loop_thread",
        "make_step_context",
        "observes_ticks",
        "ownership",
        "run_id",
        "run_span",
        "serializer",
        "sink",
        "spawn_context",
        "start_event",
        "state",
        "stream",
        "stream_lane",
        "workflow",
        "writer",
    )

    def __init__(
        self,
        *,
        workflow: Any,
        config: RunConfig,
        invokers: StepInvokers,
        init_state: RunState,
        run_id: str,
        store: Any,
        make_step_context: Callable[[Any], Any],
        make_store: Callable[[Any], Any] | None = None,
        start_event: Any,
        run_slots: Any = None,
        keep_journal: bool = False,
        journal_store: Any = None,
        serializer: Any = None,
    ) -> None:
        self.workflow = workflow
        self.config = config
        self.state = init_state
        self.run_id = run_id
        # ``None`` until first used (``store``), when ``make_store`` is given.
        self._store = store
        self._make_store = make_store
        self.make_step_context = make_step_context
        self.start_event = start_event
        self.stream = EventStream()
        super().__init__()  # the ``done`` flag
        self._host_done: DoneFlag | None = None  # made when asked for (see host_done)
        self.exit: RunExit | None = None
        self.hard_aborted = False
        self.journal: list[tuple[Tick, int]] | None = [] if keep_journal else None
        self.serializer = serializer
        self.writer: DurableWriter | None = None
        if journal_store is not None:
            from tickwork.runtime.durable import DurableWriter
            from tickwork.runtime.ownership import Ownership

            self.writer = DurableWriter(
                journal_store, run_id, config.workflow_name, serializer, self.store
            )
        self.durable = self.writer is not None
        self.ownership: Ownership | None = (
            Ownership(self.writer) if self.writer is not None else None
        )
        # Journaled runs with a time budget record their alive time while they wait.
        self.heartbeat_every: float | None = (
            HEARTBEAT_SECONDS if self.writer is not None and config.timeout is not None else None
        )
        self._run_slots: RunSlots | None = run_slots
        self._turn = run_slots.take_ticket() if run_slots is not None else None
        # Where the run's ticks go: its loop (its ``post``), ``_PARKED`` or ``_ENDED``;
        # the loop itself, not its bound ``post``: one object less per live run.
        self._feed: TickFeed | None = None
        # Made on first use (most runs never need them; a parked run keeps its session).
        self._early_ticks: list[Tick] | None = None
        # An anyio scope, or the run's asyncio task itself (see _host_own_task).
        self._cancel_scope: anyio.CancelScope | trio.CancelScope | asyncio.Task[None] | None = None
        self._limiters: dict[str, anyio.CapacityLimiter] | None = None
        self._run_cache: dict[Any, Any] | None = None
        # While parked: the lot it is counted in, its timers and their entry there.
        self._home: ParkingLot | None = None
        self._timers: TimerHeap | None = None
        self._timer_entry: TimerEntry | None = None
        self.invokers = invokers
        """The call plan of each step by name (the workflow's, shared by its runs)."""
        self.run_span: Any = None
        self._journal_waiter: anyio.Event | None = None
        # A journaled run's inbox reader while its loop runs (see ``_drive``).
        self._inbox: InboxFeed | None = None
        self.spawn_context = contextvars.copy_context()
        self.loop_thread = threading.get_ident()
        """The event loop's thread (``run()`` is called in it)."""
        self._verbose = (
            workflow._verbose_printer() if getattr(workflow, "_verbose", False) else None
        )
        # The stream itself rather than its bound ``push`` (one object less per live
        # run), and not the session: no Python frame of ours per published item, and no
        # reference cycle through the session.
        self.sink: EventSink = (
            self.stream if self._verbose is None else _PrintingSink(self.stream, self._verbose)
        )
        """Where the run's items are published (``push``): its stream, printed when
        verbose."""
        self.observes_ticks = (
            self.journal is not None or self.writer is not None or self._verbose is not None
        )
        """Whether ``processed`` needs every tick (a journal, verbose output)."""
        self.stream_lane: StreamLane | None = None
        """The loop while it runs this session: steps write to the stream through it,
        and it brings ``state`` up to date with writes not yet accounted."""

    @property
    def done(self) -> DoneFlag:
        """Set once the run has ended (its outcome is in ``exit``): the session itself."""
        return self

    @property
    def store(self) -> Any:
        """The run's state store: the one given, or ``make_store(workflow)`` made when
        first asked for (most runs never use theirs, and every live run would hold it)."""
        store = self._store
        if store is None:
            # Sync steps run in worker threads: two of them asking first at once must get
            # the same store (a second one would take the other's writes with it).
            with _FIRST_STORE_LOCK:
                store = self._store
                if store is None:
                    assert self._make_store is not None, "a session needs a store or make_store"
                    store = self._store = self._make_store(self.workflow)
        return store

    # -- lifecycle -------------------------------------------------------------------

    @property
    def host_done(self) -> DoneFlag:
        """Set once the run's task has fully stopped (after ``done``, which comes first)
        and the session let go of everything it held."""
        flag = self._host_done
        if flag is None:
            flag = self._host_done = DoneFlag()
            if self._feed is _ENDED:  # already closed
                flag.set()
        return flag

    @property
    def live(self) -> bool:
        """Whether the run has not ended yet (a hard abort ends it at once)."""
        return not (self.hard_aborted or self.done.is_set())

    def start(self) -> None:
        """Spawn the run's task on the current event loop."""
        self._spawn(None)

    def _spawn(self, resumed: ResumedLoop | None) -> None:
        """Spawn a task driving the run: from its start, or a parked run's new loop."""
        backend = detect_backend()
        if backend == "asyncio":
            import asyncio

            loop = asyncio.get_running_loop()
            if self.ownership is None:
                host = self._host_own_task(resumed, asyncio.current_task)
                # The task runs in the spawn context itself, not in a copy: it sets no
                # context variable (the step bodies run in copies of their own), and a
                # copy is one more object that every live run holds.
                context = self.spawn_context
            else:
                host = self._host(resumed, anyio.CancelScope)
                context = self.spawn_context.copy()
            if sys.version_info >= (3, 11) and loop.get_task_factory() is None:
                # What create_task() does with no task factory, minus its checks and
                # frame (as the loop's worker pool does).
                asyncio.Task(host, loop=loop, context=context)
            else:
                self.spawn_context.run(loop.create_task, host)
        else:
            import trio

            # trio's own scope: anyio's wraps one, an object more per live run.
            trio.lowlevel.spawn_system_task(
                self._host, resumed, trio.CancelScope, context=self.spawn_context.copy()
            )

    async def _host(self, resumed: ResumedLoop | None, scope_type: Callable[[], Any]) -> None:
        """Drive the run in the run's task, in a cancel scope of ``scope_type`` (anyio's
        or, under trio, trio's own: ``_stop_task`` only cancels it)."""
        parked = False
        try:
            with scope_type() as scope:
                self._cancel_scope = scope
                if self.hard_aborted:
                    scope.cancel()
                parked = await self._run_task(resumed) is PARKED
            inbox = self._inbox
            if inbox is not None and inbox.error is not None:
                self._crashed(inbox.error)  # it cancelled the run (see inbox_failed)
        except BaseException as raised:  # the task must never leak into the event loop
            self._crashed(raised)
        finally:
            # A parked run goes on without this task (it may even have come back in
            # another one already): nothing here is this task's to close.
            if not parked:
                self._close()

    async def _host_own_task(
        self, resumed: ResumedLoop | None, current_task: Callable[[], Any]
    ) -> None:
        """``_host`` for an asyncio run with no journal store: the run's task is its
        cancel scope.

        An anyio ``CancelScope`` costs a scope, two sets, a task-state record and a weak
        reference, held by every live run, and two task look-ups.  This task awaits
        nothing but tickwork's own futures and sleeps (its run's steps are tasks of their
        own), so cancelling the task itself stops it at the same await; the
        ``CancelledError`` ends here, as the scope would have absorbed it (``_crashed``
        ignores a cancellation, as it does one that comes from outside).  A journaled
        run keeps the scope: its store calls shield themselves in anyio scopes.
        ``current_task`` is asyncio's (this module imports asyncio only when it runs
        under it).
        """
        parked = False
        try:
            task = current_task()
            self._cancel_scope = task
            if self.hard_aborted:
                task.cancel()  # raised at the first await, as the scope's cancel is
            parked = await self._run_task(resumed) is PARKED
        except BaseException as raised:  # the task must never leak into the event loop
            self._crashed(raised)
        finally:
            if not parked:  # as in _host
                self._close()

    def _run_task(self, resumed: ResumedLoop | None) -> Awaitable[RunExit | None]:
        """What the run's task awaits: the loop's exit, ``PARKED`` if the run parked (it
        is not over), or ``None`` when no loop ran here.

        The loop's own coroutine when it can be, rather than one of ours awaiting it:
        every coroutine between the run's task and the loop's wait is an object that
        each live run holds.  Neither ``_host`` nor ``_drive`` catches a failure here:
        once the run has an exit, ``_crashed`` ignores what its loop raises.
        """
        if resumed is not None:
            return resumed.resume()
        if self._run_slots is None:
            return self._drive()
        return self._drive_in_slot(self._run_slots)

    def _close(self) -> None:
        """The run has ended (or was aborted): release everything it held."""
        if self.exit is None:
            self.hard_aborted = True
            end_run_span(self.run_span, None, None)
            self.run_span = None
            if self.ownership is not None:
                # As if this process had died: the lease is left to expire, so that a
                # recovery can take the run over; renewing it would pin the run (and
                # this session) here for as long as the process lives.
                self.ownership.release()
        if self._feed is _PARKED:
            self._unpark()
        inbox, self._inbox = self._inbox, None
        if inbox is not None:
            inbox.close()
        # Let go of the loop: it refers to this session, and an ended run must be freed
        # by reference counting, not by the GC.
        self._feed = _ENDED
        self._cancel_scope = None
        self.start_event = None  # a run stopped before its loop took it
        self.stream.close()
        self.done.set()
        self._wake_journal_readers()
        slots, self._run_slots = self._run_slots, None
        if slots is not None and self._turn is None:
            slots.release()
        if self._host_done is not None:
            self._host_done.set()

    def _crashed(self, raised: BaseException) -> None:
        """The run's task raised: end the run with that error unless it already ended.

        A frame of its own, so that no local of ``_host`` (whose frame the traceback
        holds) keeps the exception.
        """
        from tickwork.stores.records import LeaseLost

        error = _unwrap(raised)
        if isinstance(error, LeaseLost):
            self.lose_lease(error)
            return
        if self.exit is None and not isinstance(error, anyio.get_cancelled_exc_class()):
            _log.error("run %s crashed", self.run_id, exc_info=error)
            # Still exactly one terminal event: the stream must end with one.
            failure = error if isinstance(error, Exception) else RuntimeError(str(error))
            self.sink.push(WorkflowFailedEvent(step_name="<runtime>", exception=failure))
            self.finish(RunExit("fail", exception=error, step_name="<runtime>"))

    async def _drive_in_slot(self, slots: RunSlots) -> RunExit | None:
        """Wait for this run's turn (its session has not started, nor its clock).

        The slot is held until the run ends, parked or not (``_close`` releases it).
        """
        turn = self._turn
        if turn is not None:
            try:
                await turn.wait()
            except BaseException:
                self._run_slots = None
                slots.forfeit(turn)
                raise
            self._turn = None
        return await self._drive()

    def register(
        self,
        options: Mapping[str, Any] | None,
        lease: Lease | None = None,
        lease_seconds: float | None = None,
    ) -> None:
        """Make a journaled run recoverable before ``run()`` returns its handler.

        A new run stores its start event and ``options`` with its starting snapshot in
        one transaction; a resumed one (no start event) keeps what the store has.  The
        run is owned by this process from then on: with ``lease`` (a claim's), or with a
        new lease it takes (``LeaseLost`` if another live process owns the run).  The
        lease is renewed for ``lease_seconds`` (a claim's lease time; by default the
        store's) every third of that time.
        """
        if self.writer is None or self.ownership is None:
            return
        from tickwork.runtime.ownership import Ownership

        if lease_seconds is not None:
            self.ownership.lease_seconds = lease_seconds
        owned = self.writer.register(
            self.state,
            self.start_event,
            options,
            owner=None if lease is not None else Ownership.local_owner(),
            lease=lease,
            lease_seconds=self.ownership.lease_seconds,
        )
        self.ownership.hold(owned, self.lose_lease)

    def _drive(self) -> Awaitable[RunExit | None]:
        """Start the run; what is returned drives it (see ``_run_task``)."""
        if self.exit is not None:
            # Stopped (a worker parked the run, or handed it back) or its lease lost before
            # the task began: the run must not move here, not even journal a record.
            return _nothing()
        self.run_span = start_run_span(
            self.run_id, self.config.workflow_name, self.start_event, self.start_event is None
        )
        loop = run_loop(self, self.start_event, self.state, self.run_id)
        # The loop has it now (and lets go of it once reduced): a live run does not keep
        # its start event, nor the pydantic set and dict that come with it.
        self.start_event = None
        if self.ownership is not None:
            # Read until the loop ends (``_close``); items posted meanwhile wait in it.
            self._inbox = self.ownership.open_inbox(self, self.serializer, self.spawn_context)
        return loop

    def stop_here(self) -> None:
        """Stop this session without ending the run (a worker parks it or hands it back).

        Nothing is published and no outcome is recorded; await ``host_done`` before
        reading the final ``state``.
        """
        if self.exit is not None or self.done.is_set():
            return
        self.finish(RunExit("released"))
        self._stop_task()

    def discard_stream(self) -> None:
        """Publish nowhere: nobody in this process reads the run's events (a fleet worker;
        they are in the journal store's stream)."""
        self.sink = _DISCARD

    def lose_lease(self, error: LeaseLost) -> None:
        """Another worker owns the run now: stop at once, start and publish nothing.

        The run is not over (its new owner continues it): ``await handler`` raises
        ``error`` and the stream ends without a terminal event.
        """
        if self.exit is not None or self.done.is_set():
            return
        _log.warning("run %s stopped here: %s", self.run_id, error)
        self.finish(RunExit("lost", exception=error))
        self._stop_task()

    def abort(self) -> None:
        """Hard abort: cancel everything now, publish nothing more."""
        if self.done.is_set():
            return
        self.hard_aborted = True
        self._stop_task()

    def _stop_task(self) -> None:
        """Cancel the run's task; a parked run has none and is closed at once."""
        if self._feed is _PARKED:
            self._close()
        elif self._cancel_scope is not None:
            self._cancel_scope.cancel()
            lane = self.stream_lane
            if self.durable and lane is not None:
                # Now, not once the loop unwinds: it may be waiting for its store.
                lane.cancel_steps()

    # -- LoopAdapter ---------------------------------------------------------------

    def bind(self, feed: TickFeed) -> None:
        """Receive the loop's tick feed; flush ticks sent before the run started."""
        self._feed = feed
        early, self._early_ticks = self._early_ticks, None
        for tick in early or ():
            feed.post(tick)

    # The coroutine executing one invocation (see ``tickwork.runtime.step_worker``), as
    # the loop's ``run_step``: a plain function of the session, so that the loop calls
    # it with no frame of ours in between (a worker task is one coroutine over the body).
    run_step = staticmethod(execute_invocation)

    def processed(self, tick: Tick, state: RunState, commands: list[Any]) -> None:
        """Remember the latest state; keep the journal when asked to."""
        self.state = state
        if self._verbose is not None:
            self._verbose.processed(tick)
        if self.journal is not None:
            self.journal.append((tick, state.journal_seq - 1))
            self._wake_journal_readers()
        if self.writer is not None:
            self.writer.record(tick, state.journal_seq - 1, commands)

    def commit(self) -> Awaitable[None]:
        """Group-commit the last drain's ticks to the journal store (await it).

        The writer's own coroutine, not one of ours awaiting it: every journaled run
        waiting for its commit holds its chain of coroutines."""
        if self.writer is None:
            return _nothing()
        return self.writer.commit(self.state)

    async def heartbeat(self) -> None:
        """Record the alive time spent so far (a waiting run journals nothing)."""
        if self.writer is not None:
            await self.writer.heartbeat(self.state, time.time())

    def finish(self, run_exit: RunExit) -> None:
        """Deliver the outcome now, before cancelled workers finish unwinding."""
        if self.exit is not None:
            return
        self.exit = run_exit
        if self.writer is not None:
            self.writer.abandon_acks("the run ended before the event was journaled")
        if self.ownership is not None:
            self.ownership.release()
        self._wake_journal_readers()
        end_run_span(self.run_span, run_exit.kind, run_exit.exception)
        self.run_span = None
        self.stream.close()
        self.done.set()

    # -- handler-side operations ---------------------------------------------------

    async def journal_grew(self) -> None:
        """Wait until a record is added to the in-memory journal or the run ends."""
        if not self.live:
            return
        if self._journal_waiter is None:
            self._journal_waiter = anyio.Event()
        await self._journal_waiter.wait()

    def _wake_journal_readers(self) -> None:
        if self._journal_waiter is not None:
            self._journal_waiter.set()
            self._journal_waiter = None

    def inbox_failed(self, error: BaseException) -> None:
        """The run's inbox cannot be read: end the run with ``error`` (its task, once
        cancelled, reports it), as a read of its own would have."""
        if self.exit is None and not self.done.is_set():
            self._stop_task()

    def post_external(self, tick: Tick) -> None:
        """Feed a tick from the caller's side (handler sends, cancel requests), or a
        late one from a finished step; it brings a parked run back."""
        feed = self._feed
        if feed is None:
            if self._early_ticks is None:
                self._early_ticks = []
            self._early_ticks.append(tick)
        elif feed is _PARKED:
            self._resume(tick)
        else:
            feed.post(tick)

    # -- parking ---------------------------------------------------------------------

    def park(self, timers: TimerHeap | None) -> bool:
        """The loop has nothing to do but wait: keep ``timers``, count the run in its
        event loop's lot, and let the loop and its task go.

        A journaled run does not park here (its session must commit and heartbeat);
        a run being aborted is left to its task's cancellation.
        """
        if self.durable or self.hard_aborted or self.exit is not None:
            return False
        self._feed = _PARKED
        self._cancel_scope = None
        self.stream.shrink()
        self._timers = timers
        lot = self._home = current_lot(_abort_parked_runs)
        self._timer_entry = lot.arrive(self, timers[0][0] if timers else None)
        return True

    def _unpark(self) -> None:
        """Leave the lot; the caller gives the run a new feed."""
        lot, self._home = self._home, None
        entry, self._timer_entry = self._timer_entry, None
        if lot is not None:
            lot.leave(entry)

    def _resume(self, tick: Tick | None) -> None:
        """Bring the run back: a new loop over the kept state and timers, and a new task
        to drive it.  ``tick`` (an input) is reduced now, by the caller, as it would be
        for a run waiting in its task."""
        if lot_or_none() is not self._home:
            # Its event loop is gone (or this is another one): the run cannot go on,
            # and the lot it was counted in is gone with that loop.
            self._home = self._timer_entry = None
            _log.warning(
                "run %s was parked on an event loop that is no longer running; it is "
                "aborted and %s is ignored",
                self.run_id,
                "its deadline" if tick is None else type(tick).__name__,
            )
            self.abort()
            return
        timers, self._timers = self._timers, None
        self._unpark()
        loop = resume_loop(self, self.state, self.run_id, timers)
        self._feed = loop
        self._spawn(loop)
        if tick is not None:
            loop.post(tick)

    def deadline_due(self) -> None:
        """The parking lot's timer: the run's earliest deadline has come."""
        self._timer_entry = None
        if self._feed is _PARKED:
            self._resume(None)

    def loop_ended(self) -> None:
        """The event loop shuts down with the run parked: abort it, as the cancellation
        of its task would have."""
        self.abort()

    def __del__(self) -> None:
        # A parked run dropped unanswered (nothing refers to it): uncount it.
        if getattr(self, "_feed", None) is _PARKED and self._home is not None:
            self._home.forget()

    def send_from_handler(self, event: Any, step: str | None) -> None:
        """An unkeyed send from handler code; ignored with a warning after the run."""
        if not self.live:
            _log.warning(
                "send_event(%s) after run %s ended was ignored", type(event).__name__, self.run_id
            )
            return
        self.post_external(AddEvent(time.time(), event, step))

    async def send_durably(self, event: Any, step: str | None) -> None:
        """Send to a journaled run; return once the event is in the journal.

        Raises ``WorkflowRuntimeError`` when it cannot be journaled or the run ended
        first (it was then not delivered).
        """
        assert self.writer is not None
        if not self.live:
            raise WorkflowRuntimeError(
                f"send_event({type(event).__name__}): run {self.run_id} has ended; the event "
                "was not delivered"
            )
        tick = AddEvent(time.time(), event, step)
        ack = self.writer.ack_when_durable(tick)
        self.post_external(tick)
        await ack.done.wait()
        if ack.error is not None:
            raise WorkflowRuntimeError(
                f"send_event({type(event).__name__}) to run {self.run_id} was not journaled: "
                f"{ack.error}"
            ) from ack.error

    def request_cancel(self) -> None:
        """Ask for a graceful cancel."""
        if self.live:
            self.post_external(CancelRun(time.time()))

    def running_steps(self) -> list[str]:
        """Sorted names of the steps with a running invocation (O(number of steps))."""
        return sorted(name for name, st in self.state.steps.items() if st.in_progress)

    def stop_event(self) -> StopEvent | None:
        """The terminal event that was published, if the run ended with one."""
        if self.exit is None or self.hard_aborted:
            return None
        return self.stream.terminal_event

    # -- step support ---------------------------------------------------------------

    def thread_limiter(self, spec: StepSpec) -> anyio.CapacityLimiter:
        """At most ``num_workers`` threads per sync step per run."""
        limiters = self._limiters
        if limiters is None:
            limiters = self._limiters = {}
        limiter = limiters.get(spec.name)
        if limiter is None:
            limiter = limiters[spec.name] = anyio.CapacityLimiter(spec.num_workers)
        return limiter

    async def resolve_resources(self, resources: list[Any]) -> dict[str, Any]:
        """Resolve a step's resources for one invocation (per-run cache included)."""
        manager = self.workflow._resource_manager
        if self._run_cache is None:
            self._run_cache = {}
        values: dict[str, Any] = await manager.resolve_invocation(
            resources, run_cache=self._run_cache
        )
        return values

    def step_span(self, invocation: Invocation) -> StepSpan | None:
        """The tracing span of one invocation (``None`` when tracing is off)."""
        if self.run_span is None:
            return None
        return step_span(
            self.run_span,
            self.run_id,
            self.config.workflow_name,
            invocation.step,
            invocation.worker_id,
            invocation.event,
            invocation.attempts,
        )
