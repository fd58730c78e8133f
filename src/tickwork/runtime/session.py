"""One run hosted in this process: the loop's adapter and the handler's backend.

A ``RunSession`` is created by ``Workflow.run()``.  It owns the run's published
event stream, its outcome, the latest reduced state (so snapshots and
``running_steps()`` are O(state), never a replay), and the task that drives
``control_loop``.  The task is spawned on the caller's event loop (asyncio task or trio
system task) with the caller's contextvars, because ``run()`` returns before any nursery
would exist.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

import anyio

if sys.version_info < (3, 11):  # pragma: no cover - anyio installs the backport there
    from exceptiongroup import BaseExceptionGroup

from tickwork.errors import WorkflowRuntimeError
from tickwork.events import StopEvent, WorkflowFailedEvent
from tickwork.runtime.control_loop.runner import RunExit, control_loop, using_adapter
from tickwork.runtime.event_stream import EventStream
from tickwork.runtime.run_slots import RunSlots
from tickwork.runtime.step_worker import StepInvoker, execute_invocation
from tickwork.runtime.tracing import StepSpan, end_run_span, start_run_span, step_span
from tickwork.runtime.types.results import StepOutcome
from tickwork.runtime.types.state import Invocation, RunConfig, RunState, StepSpec
from tickwork.runtime.types.ticks import AddEvent, CancelRun, Tick

if TYPE_CHECKING:
    # Journaled runs only: imported where a run with a journal store needs them.
    from tickwork.runtime.durable import DurableWriter
    from tickwork.runtime.ownership import Ownership
    from tickwork.stores.records import Lease, LeaseLost

__all__ = ["DoneFlag", "RunSession", "detect_backend"]

HEARTBEAT_SECONDS = 1.0
"""How often a journaled run that waits records its alive time (api.md §24.2)."""

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


class DoneFlag:
    """A one-shot event that allocates its backend event only when someone waits.

    Most runs are awaited once or not at all while they are live (a parked run waiting
    for a human usually has no awaiter); an eager ``anyio.Event`` per run costs about a
    kilobyte that such runs never use.
    """

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: anyio.Event | None = None

    def is_set(self) -> bool:
        """Whether ``set`` was called."""
        return self._set

    def set(self) -> None:
        """Set the flag and wake every waiter."""
        self._set = True
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        """Return once the flag is set."""
        if self._set:
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()


def _publish_and_print(stream: EventStream, printer: Any, item: Any) -> None:
    """``publish`` of a verbose run."""
    stream.push(item)
    printer.published(item)


def _drop(tick: Tick) -> None:
    """The tick feed of a run that has ended."""


def _discard(item: Any) -> None:
    """The stream of a session nobody in this process reads."""


class RunSession:
    """The in-process host of one run.

    Slotted: a run that waits for a human keeps its session for as long as it waits, and
    a slotted object is a fraction of an instance dict (past 30 attributes, an instance
    dict stops sharing its keys and costs over a kilobyte).
    """

    __slots__ = (
        "__weakref__",
        "_cancel_scope",
        "_early_ticks",
        "_journal_waiter",
        "_limiters",
        "_post",
        "_run_cache",
        "_run_slots",
        "_turn",
        "_verbose",
        "config",
        "done",
        "durable",
        "exit",
        "hard_aborted",
        "heartbeat_every",
        "host_done",
        "invokers",
        "journal",
        "loop_thread",
        "make_step_context",
        "ownership",
        "publish",
        "run_id",
        "run_span",
        "serializer",
        "spawn_context",
        "start_event",
        "state",
        "store",
        "stream",
        "workflow",
        "writer",
    )

    def __init__(
        self,
        *,
        workflow: Any,
        config: RunConfig,
        invokers: Mapping[str, StepInvoker],
        init_state: RunState,
        run_id: str,
        store: Any,
        make_step_context: Callable[[Any], Any],
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
        self.store = store
        self.make_step_context = make_step_context
        self.start_event = start_event
        self.stream = EventStream()
        self.done = DoneFlag()
        self.host_done = DoneFlag()
        """Set once the run's task has fully stopped (after ``done``, which comes first)."""
        self.exit: RunExit | None = None
        self.hard_aborted = False
        self.journal: list[tuple[Tick, int]] | None = [] if keep_journal else None
        self.serializer = serializer
        self.writer: DurableWriter | None = None
        if journal_store is not None:
            from tickwork.runtime.durable import DurableWriter
            from tickwork.runtime.ownership import Ownership

            self.writer = DurableWriter(
                journal_store, run_id, config.workflow_name, serializer, store
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
        self._post: Callable[[Tick], None] | None = None
        self._early_ticks: list[Tick] = []
        self._cancel_scope: anyio.CancelScope | None = None
        self._limiters: dict[str, anyio.CapacityLimiter] = {}
        self._run_cache: dict[Any, Any] = {}
        self.invokers = invokers
        """The call plan of each step by name (the workflow's, shared by its runs)."""
        self.run_span: Any = None
        self._journal_waiter: anyio.Event | None = None
        self.spawn_context = contextvars.copy_context()
        self.loop_thread = threading.get_ident()
        """The event loop's thread (``run()`` is called in it)."""
        self._verbose = (
            workflow._verbose_printer() if getattr(workflow, "_verbose", False) else None
        )
        # Bound once, and to the stream rather than to the session: no Python frame of
        # ours per published item, and no reference cycle through the session.
        self.publish: Callable[[Any], None] = (
            self.stream.push
            if self._verbose is None
            else functools.partial(_publish_and_print, self.stream, self._verbose)
        )
        """Append to the run's stream (and print it when verbose)."""

    # -- lifecycle -------------------------------------------------------------------

    @property
    def live(self) -> bool:
        """Whether the run has not ended yet (a hard abort ends it at once)."""
        return not (self.hard_aborted or self.done.is_set())

    def start(self) -> None:
        """Spawn the run's task on the current event loop."""
        backend = detect_backend()
        if backend == "asyncio":
            import asyncio

            loop = asyncio.get_running_loop()
            self.spawn_context.run(loop.create_task, self._host())
        else:
            import trio

            trio.lowlevel.spawn_system_task(self._host, context=self.spawn_context.copy())

    async def _host(self) -> None:
        try:
            with anyio.CancelScope() as scope:
                self._cancel_scope = scope
                if self.hard_aborted:
                    scope.cancel()
                if self._run_slots is None:
                    await self._drive()
                else:
                    await self._drive_in_slot(self._run_slots)
        except BaseException as raised:  # the task must never leak into the event loop
            self._crashed(raised)
        finally:
            if self.exit is None:
                self.hard_aborted = True
                end_run_span(self.run_span, None, None)
                self.run_span = None
                if self.ownership is not None:
                    # As if this process had died: the lease is left to expire, so that
                    # a recovery can take the run over; renewing it would pin the run
                    # (and this session) here for as long as the process lives.
                    self.ownership.release()
            # Let go of the loop (its post method): the loop refers to this session,
            # and an ended run must be freed by reference counting, not by the GC.
            self._post = _drop
            self.stream.close()
            self.done.set()
            self._wake_journal_readers()
            self.host_done.set()

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
            self.publish(WorkflowFailedEvent(step_name="<runtime>", exception=failure))
            self.finish(RunExit("fail", exception=error, step_name="<runtime>"))

    async def _drive_in_slot(self, slots: RunSlots) -> None:
        """Wait for this run's turn (its session has not started, nor its clock)."""
        turn = self._turn
        if turn is not None:
            try:
                await turn.wait()
            except BaseException:
                slots.forfeit(turn)
                raise
        try:
            await self._drive()
        finally:
            slots.release()

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

    async def _drive(self) -> None:
        if self.exit is not None:
            # Stopped (a worker parked the run, or handed it back) or its lease lost before
            # the task began: the run must not move here, not even journal a record.
            return
        self.run_span = start_run_span(
            self.run_id, self.config.workflow_name, self.start_event, self.start_event is None
        )
        with using_adapter(self):
            if self.ownership is None:
                try:
                    await control_loop(self.start_event, self.state, self.run_id)
                except Exception:
                    if self.exit is None:
                        raise
                return
            await self._drive_owned(self.ownership)

    async def _drive_owned(self, ownership: Ownership) -> None:
        """The control loop of a journaled run, beside the pump of its inbox."""
        failure: Exception | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(ownership.pump_inbox, self.post_external, self.serializer)
            try:
                await control_loop(self.start_event, self.state, self.run_id)
            except Exception as error:
                if self.exit is None:
                    failure = error
            finally:
                group.cancel_scope.cancel()
        if failure is not None:
            raise failure

    def stop_here(self) -> None:
        """Stop this session without ending the run (a worker parks it or hands it back).

        Nothing is published and no outcome is recorded; await ``host_done`` before
        reading the final ``state``.
        """
        if self.exit is not None or self.done.is_set():
            return
        self.finish(RunExit("released"))
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()

    def discard_stream(self) -> None:
        """Publish nowhere: nobody in this process reads the run's events (a fleet worker;
        they are in the journal store's stream)."""
        self.publish = _discard

    def lose_lease(self, error: LeaseLost) -> None:
        """Another worker owns the run now: stop at once, start and publish nothing.

        The run is not over (its new owner continues it): ``await handler`` raises
        ``error`` and the stream ends without a terminal event.
        """
        if self.exit is not None or self.done.is_set():
            return
        _log.warning("run %s stopped here: %s", self.run_id, error)
        self.finish(RunExit("lost", exception=error))
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()

    def abort(self) -> None:
        """Hard abort: cancel everything now, publish nothing more."""
        if self.done.is_set():
            return
        self.hard_aborted = True
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()

    # -- LoopAdapter ---------------------------------------------------------------

    def bind(self, post: Callable[[Tick], None]) -> None:
        """Receive the loop's tick feed; flush ticks sent before the run started."""
        self._post = post
        for tick in self._early_ticks:
            post(tick)
        self._early_ticks.clear()

    def run_step(
        self,
        invocation: Invocation,
        post: Callable[[Tick], None],
        report: Callable[[Invocation, StepOutcome], None],
        started: Callable[[str], None],
    ) -> Coroutine[Any, Any, None]:
        """The coroutine executing one invocation (see ``tickwork.runtime.step_worker``),
        returned as is: a worker task is one coroutine over the step body."""
        return execute_invocation(self, invocation, post, report, started)

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

    async def commit(self) -> None:
        """Group-commit the last drain's ticks to the journal store."""
        if self.writer is not None:
            await self.writer.commit(self.state)

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

    def post_external(self, tick: Tick) -> None:
        """Feed a tick from the caller's side (handler sends, cancel requests)."""
        if self._post is None:
            self._early_ticks.append(tick)
        else:
            self._post(tick)

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
        limiter = self._limiters.get(spec.name)
        if limiter is None:
            limiter = anyio.CapacityLimiter(spec.num_workers)
            self._limiters[spec.name] = limiter
        return limiter

    async def resolve_resources(self, resources: list[Any]) -> dict[str, Any]:
        """Resolve a step's resources for one invocation (per-run cache included)."""
        manager = self.workflow._resource_manager
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
            invocation.item.event,
            invocation.item.attempts,
        )
