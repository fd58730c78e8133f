"""The async side of the control loop: the only place that awaits, spawns and reads clocks.

One ``_Loop`` drives one run.  It stamps ticks, folds them through the pure reducer,
and executes the commands the reducer returns: starting worker tasks, publishing to the
stream, scheduling timers in a heap, and ending the run.  Everything run-specific (how a
step body is called, where published events go, journaling) is reached through a
``LoopAdapter``, set by tickwork's runtime for the run's task.

A run whose only remaining work is waiters and timers **parks**: the loop hands its
timers to the adapter (``LoopAdapter.park``) and returns, so the run keeps no task, no
coroutine frame and no loop object, only its reduced state.  An input or a due timer
brings it back with ``resume_loop``: a new loop over the same state and timers, in the
same session (no session start is recorded, nothing is rewound).
"""

from __future__ import annotations

import contextvars
import heapq
import logging
import time
import types
import weakref
from collections import deque
from collections.abc import Callable, Coroutine, Generator, Iterable
from typing import Any

import anyio
import anyio.lowlevel

from tickwork.errors import WorkflowRuntimeError
from tickwork.runtime.control_loop._ports import (
    PARKED,
    EventSink,
    LoopAdapter,
    ResumedLoop,
    RunExit,
    ScheduleCommand,
    StreamLane,
    TickFeed,
    TimerHeap,
    WorkerLane,
)
from tickwork.runtime.control_loop._task_pool import (
    AsyncioPool,
    TaskPool,
    TrioPool,
    running_asyncio,
)
from tickwork.runtime.control_loop.reduce import account_stream_writes, reduce
from tickwork.runtime.event_stream import (
    AS_IS,
    FINISHED_RECORDS,
    RUNNING_RECORDS,
    EventStream,
    finished_record,
    running_record,
    step_state_record,
)
from tickwork.runtime.types.commands import (
    CancelWorker,
    Command,
    CompleteRun,
    FailWorkflow,
    Halt,
    PublishEvent,
    PublishStepState,
    ReportDropped,
    RunWorker,
    ScheduleIdleCheck,
    ScheduleTimeout,
    ScheduleWaiterTimeout,
    ScheduleWakeup,
    terminal_event,
)
from tickwork.runtime.types.state import RunState
from tickwork.runtime.types.ticks import (
    AddEvent,
    IdleCheck,
    SessionStart,
    StepResult,
    Tick,
    Timeout,
    WaiterTimeout,
    Wakeup,
)
from tickwork.runtime.types.ticks import PublishEvent as PublishTick

# The ports (``_ports``) are re-exported: the runtime reaches them through the runner.
__all__ = [
    "PARKED",
    "LoopAdapter",
    "EventSink",
    "ResumedLoop",
    "RunExit",
    "StreamLane",
    "TickFeed",
    "TimerHeap",
    "WorkerLane",
    "control_loop",
    "run_loop",
    "resume_loop",
    "using_adapter",
]

_log = logging.getLogger("tickwork.runtime")


class _Unbuffered:
    """The ``stream`` of a loop whose sink is not a bare ``EventStream``
    (verbose output, a fleet worker's discarded stream): it never takes a write."""

    quiet_items = None


_UNBUFFERED = _Unbuffered()

_ADAPTER: contextvars.ContextVar[weakref.ref[LoopAdapter] | None] = contextvars.ContextVar(
    "tickwork_loop_adapter", default=None
)
"""The adapter of the run driven in this task, weakly (api.md §19.3).

Weak because anything scheduled from the run's task copies its contextvars: an asyncio
timer handle keeps its copy even once cancelled, for as long as it sits in the loop's
heap, and a strong reference there would keep the run (and its workflow) alive."""


class using_adapter:
    """Context manager that makes ``adapter`` the one ``control_loop`` will use.

    The caller keeps ``adapter`` alive for the duration of the block.
    """

    def __init__(self, adapter: LoopAdapter) -> None:
        self._adapter = weakref.ref(adapter)
        self._token: contextvars.Token[weakref.ref[LoopAdapter] | None] | None = None

    def __enter__(self) -> None:
        self._token = _ADAPTER.set(self._adapter)

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        _ADAPTER.reset(self._token)


def _is_step_tick(tick: Tick) -> bool:
    if isinstance(tick, StepResult):
        return True
    if isinstance(tick, AddEvent):
        return tick.emission_key is not None
    return isinstance(tick, PublishTick) and tick.invocation_id is not None


def _due_tick(command: ScheduleCommand, now: float) -> Tick:
    """The tick a due timer feeds in."""
    if type(command) is ScheduleTimeout:
        return Timeout(now)
    if type(command) is ScheduleWakeup:
        return Wakeup(now, command.step)
    assert isinstance(command, ScheduleWaiterTimeout)
    return WaiterTimeout(now, command.step, command.waiter_id)


# The inbox and the timer heap of every loop that has none yet: a loop makes its own
# list on its first tick or timer (``_queue``, ``_push_timer``), and nothing else ever
# adds to these two.  Most runs never post to their inbox or set a timer, and each
# list a live run holds is one more object for the garbage collector to scan.
_NO_TICKS: list[Tick] = []
_NO_TIMERS: TimerHeap = []


class _NoPending(deque[Tick]):
    """The type of ``_NO_PENDING``: an empty queue that refuses ticks, so that it never
    becomes a queue shared by loops."""

    def append(self, tick: Tick) -> None:
        raise AssertionError("a tick for the shared empty queue: use _Loop._pending()")

    def extend(self, ticks: Iterable[Tick]) -> None:
        raise AssertionError("ticks for the shared empty queue: use _Loop._pending()")


# The queue of ticks to reduce of every loop between drains: a loop makes its own when
# a tick comes (``_pending``) and lets it go once drained.  A live run spends most of
# its life waiting with nothing to reduce, and a queue is one more object to scan.
_NO_PENDING: deque[Tick] = _NoPending()


class _Loop:
    """The drain/wait loop of one run (until it ends or parks)."""

    def __init__(
        self,
        adapter: LoopAdapter,
        state: RunState,
        run_id: str,
        timers: TimerHeap | None = None,
    ) -> None:
        self.adapter = adapter
        self.state = state
        self.run_id = run_id
        self.pending: deque[Tick] = _NO_PENDING
        self.heap: TimerHeap = timers if timers is not None else _NO_TIMERS
        self.heap_seq = max(seq for _, seq, _ in timers) if timers else 0
        self.exit: RunExit | None = None
        self.idle_requested = False
        # A list, not a deque: it is always drained whole, and an empty deque costs a
        # 64-slot block per run.
        self.inbox: list[Tick] = _NO_TICKS
        self.waiting = False
        # Whether a post woke the loop since it began waiting (``post``): further wake
        # calls would do nothing until it waits again.
        self.woken = False
        self.crash: Exception | None = None
        # Whether a tick posted while the loop waits is reduced by the posting task: not
        # in a durable run (it must commit first), nor after a crash.
        self.drains_inline = not adapter.durable
        # How many dispatched workers have not begun yet (each takes itself off as it
        # begins; ``_cancel_worker`` takes off one cancelled before it began).  While
        # any has not, posted ticks wait for the loop task: every worker dispatched
        # before a result is processed gets to start first (see ``post``).  A count,
        # not a set of invocations: only whether it is zero is ever read, and a set
        # would be one more object per busy run for the collector, and a call per step.
        self.unstarted = 0
        # Stream writes published but not yet accounted in ``state``: how many, and
        # the alive time and last stamp they accrued (see ``write``).
        self.batches_writes = not adapter.durable and not adapter.observes_ticks
        self.unaccounted = 0
        self.write_elapsed = 0.0
        self.write_stamp = 0.0
        self.pool: TaskPool = (
            AsyncioPool() if running_asyncio() else TrioPool(wake_when_idle=self.drains_inline)
        )
        self.sink = adapter.sink
        # The stream a batched write appends to directly (``EventStream.quiet_items``)
        # when the sink is a bare ``EventStream``.
        sink = self.sink
        self.stream: EventStream | _Unbuffered = sink if type(sink) is EventStream else _UNBUFFERED
        self.run_step = adapter.run_step
        # The asyncio pool's task map, which a worker leaves as it posts its outcome
        # (``pool.done`` inlined: a call per step); ``None`` under trio, whose workers
        # leave on exit (``WorkerLane.worker_tasks``).
        self.worker_tasks = self.pool.tasks if isinstance(self.pool, AsyncioPool) else None
        # How ``_run_worker`` starts an asyncio worker task itself (``AsyncioPool.spawn``
        # inlined): the task class, for as long as the event loop has no task factory
        # (read as its ``_task_factory``: only asyncio's own loops give the pair).
        # (Neither is a bound method, which would be one more object per live run.)
        self.new_task: Any = None
        self.event_loop: Any = None
        if isinstance(self.pool, AsyncioPool):
            self.new_task, self.event_loop = self.pool.task_maker()
        self.observes_ticks = adapter.observes_ticks
        self.spawn_context = adapter.spawn_context
        self.heartbeat_every = adapter.heartbeat_every
        self.last_commit = time.time()

    # -- feeding ticks -------------------------------------------------------------

    def post(self, tick: Tick) -> None:
        """Add a tick from a worker or the caller (same thread as the loop).

        Handing a tick to the sleeping loop costs a whole event-loop iteration; when the
        loop is idle-waiting (so nothing else is draining), the task that posted (a
        finishing worker, a step writing to the stream, the caller sending an event)
        reduces the ticks itself, here, which is safe because a drain never awaits.  The
        loop is woken only when it has something to do: the run ended, an idle check is
        due, or a timer it does not know about was scheduled.  Ticks left in the inbox
        while a dispatched worker had not started come first, so that ticks are reduced
        in the order they were posted.  A durable run must commit before acting, which
        only the loop task can await, so it is woken instead.

        A tick posted while a dispatched worker has not started yet is left to the loop
        task, which lets every such worker start before it reduces anything.  Results are
        therefore processed as an event loop with a separate control task would process
        them: two joins released together both run, even when the first one's result
        ends the run (reducing it inline would cancel the second before it began).
        """
        if self.exit is not None:
            if self.exit is PARKED:  # a late tick (a returned step's send): the run's now
                self.adapter.post_external(tick)
            return
        if self.waiting and self.drains_inline and not self.unstarted:
            # Reduce ``tick`` here while the loop task sleeps (see above).
            timers = self.heap_seq  # counts the timers scheduled (see ``_push_timer``)
            self.waiting = False
            try:
                if self.inbox:
                    self._queue(tick)
                    self._take_available()
                    self._drain()
                else:
                    self._process(tick)
                # Commands never post, but a tick posted meanwhile must not be stranded.
                while self.inbox and self.exit is None:
                    self._take_available()
                    self._drain()
            except Exception as error:  # a runtime bug: let the loop task raise it
                self.crash = error
                self.drains_inline = False
            finally:
                self.waiting = True
            if self.exit is not None:
                # Deliver the outcome now, as the loop itself would at the end of a drain.
                self.adapter.finish(self.exit)
            if (
                self.crash is not None
                or self.exit is not None
                or self.idle_requested
                or self.heap_seq != timers
            ):
                self.pool.wake()
            return
        # ``_queue(tick)`` without its frame: a fan-out's workers post here by the batch.
        if self.inbox is _NO_TICKS:
            self.inbox = []
        self.inbox.append(tick)
        if self.waiting and not self.woken:
            self.woken = True  # one wake-up per wait: a batch of posts wakes it once
            self.pool.wake()

    def _queue(self, tick: Tick) -> None:
        """Add ``tick`` to the inbox (the loop's own list from the first tick on)."""
        if self.inbox is _NO_TICKS:
            self.inbox = []
        self.inbox.append(tick)

    def run(self, start_event: Any) -> Coroutine[Any, Any, RunExit]:
        """Start the session; the coroutine returned drives the run until it ends (or
        parks: ``PARKED``).

        Not a coroutine itself: it returns ``_host``'s, so that a waiting run holds one
        coroutine frame less (every live run holds its chain of them).
        """
        self._attach()
        self.adapter.bind(self)
        now = time.time()
        pending = self._pending()
        pending.append(SessionStart(now, self.run_id))
        if start_event is not None:
            pending.append(AddEvent(now, start_event))
        return self._host(resumed=False)

    def resume(self) -> Coroutine[Any, Any, RunExit]:
        """The coroutine driving a loop made by ``resume_loop`` until the run ends or
        parks again (``_host``'s, as in ``run``)."""
        self.waiting = False
        return self._host(resumed=True)

    def _attach(self) -> None:
        """Hand the stream its way into this loop (``_stop`` takes it back)."""
        self.adapter.stream_lane = self

    def _host(self, resumed: bool) -> Coroutine[Any, Any, RunExit]:
        """The coroutine the run's task awaits: ``_drive`` itself under asyncio (every
        coroutine between the task and the loop's wait is an object that each live run
        holds), ``_drive`` in a nursery under trio.

        asyncio step bodies are plain tasks, cancelled when this loop unwinds; a durable
        loop may then be waiting for its store on a thread, which no cancellation
        interrupts, so the adapter stopping such a run cancels the steps itself
        (``cancel_steps``).  Under trio, cancelling the run's scope cancels the nursery
        and its step bodies at once.
        """
        if isinstance(self.pool, AsyncioPool):
            return self._drive(resumed)
        return self._drive_in_nursery(resumed)

    async def _drive_in_nursery(self, resumed: bool) -> RunExit:
        import trio

        pool = self.pool
        assert isinstance(pool, TrioPool)
        async with trio.open_nursery() as nursery:
            pool.attach(nursery)
            await self._drive(resumed)
        assert self.exit is not None
        return self.exit

    def _stop(self) -> None:
        """The run's loop ends (or parks): cancel the workers, let go of what refers back
        to it."""
        self.pool.cancel_all()
        self.unstarted = 0
        self.settle_writes()
        self.adapter.stream_lane = None

    def cancel_steps(self) -> None:
        """Cancel every step body now (see ``StreamLane.cancel_steps``)."""
        self.pool.cancel_all()

    @types.coroutine
    def _drive(self, resumed: bool) -> Generator[Any, Any, RunExit]:
        """Drive the run until it ends or parks (its exit); the loop stops (``_stop``)
        whatever happens.

        Between drains it waits for the first of: a posted tick, the next due timer, an
        idle check.  The wait is written out here, not in a coroutine of its own: every
        coroutine between the run's task and the loop's wait is an object that each live
        run holds.  For the same reason this is a generator-based coroutine: under
        asyncio it hands the wait's future to the run's task itself, as the future's own
        iterator would (``yield from`` the rest, as ``await`` does).
        """
        adapter = self.adapter
        try:
            if resumed:  # a tick reduced before this task began may have dispatched workers
                while self.unstarted and self.exit is None:
                    yield from anyio.lowlevel.checkpoint()
            while True:
                if adapter.durable:
                    yield from self._drain_durably()
                else:
                    self._drain()
                if self.exit is not None:
                    adapter.finish(self.exit)
                    return self.exit
                if self.idle_requested:
                    yield from anyio.lowlevel.checkpoint()
                    self._take_idle_check()
                elif not self._input_ready():
                    self.waiting = True
                    self.woken = False
                    try:
                        wait: Any = self.pool.wait(self._wait_limit())
                        if getattr(wait, "_asyncio_future_blocking", None) is None:
                            yield from wait  # a coroutine (trio, or a wait with a limit)
                        elif not wait.done():
                            wait._asyncio_future_blocking = True  # the task waits for it
                            yield wait
                        del wait
                        self._take_due_timers()
                    finally:
                        self.waiting = False
                    while self.unstarted and self.exit is None:
                        yield from anyio.lowlevel.checkpoint()  # let dispatched workers begin
                    if not self._take_available() and self._heartbeat_due():
                        yield from adapter.heartbeat()
                        self.last_commit = time.time()
                elif self.exit is PARKED:
                    return PARKED
                if self.crash is not None:
                    raise self.crash
        finally:
            self._stop()

    def _drain(self) -> None:
        """Reduce every pending tick, executing each tick's commands right away."""
        pending = self.pending
        while pending and self.exit is None:
            self._process(pending.popleft())
        if not pending:
            self.pending = _NO_PENDING

    def _pending(self) -> deque[Tick]:
        """The queue of ticks to reduce (the loop's own from the first tick on)."""
        pending = self.pending
        if pending is _NO_PENDING:
            pending = self.pending = deque()
        return pending

    def _process(self, tick: Tick) -> None:
        """Reduce one tick and execute its commands, in order."""
        if self.unaccounted:
            self.settle_writes()
        self.state, commands = reduce(self.state, tick)
        if self.observes_ticks:
            self.adapter.processed(tick, self.state, commands)
        else:  # all that ``processed`` does then (see ``LoopAdapter.state``), without its frame
            self.adapter.state = self.state
        handlers = _HANDLERS
        # The last PREPARING buffered and its record: a fan-out queues its elements with
        # one shared PREPARING command (per step and event type), repeated.
        preparing: PublishStepState | None = None
        prepared: Any = None
        for command in commands:
            if type(command) is PublishStepState:
                # ``_publish_step_state`` without its frame: every step publishes one.
                items = self.stream.quiet_items
                if items is None:
                    self.sink.push(command)
                elif command.state == "not_running":
                    # What ``sink.push`` does then, without its two frames (and the
                    # record looked up as ``finished_record`` would, without its own).
                    try:
                        record = FINISHED_RECORDS[command.step][command.worker_id][
                            command.input_type
                        ][command.output_type][command.has_output]
                    except KeyError:
                        record = finished_record(
                            command.step,
                            command.worker_id,
                            command.input_type,
                            command.output_type,
                            command.has_output,
                        )
                    items.append(record)
                elif command is preparing:  # the same record again, without a lookup
                    items.append(prepared)
                else:
                    preparing = command
                    prepared = step_state_record(command)
                    items.append(prepared)
            elif type(command) is RunWorker:
                # ``_run_worker`` without its frame (every step starts one), where it
                # would append the record and start the asyncio task itself.
                tasks = self.worker_tasks
                items = self.stream.quiet_items
                if (
                    tasks is None
                    or items is None
                    or self.new_task is None
                    or self.event_loop._task_factory is not None
                ):
                    self._run_worker(command)
                    continue
                invocation = command.invocation
                event_type = type(invocation.event)
                try:  # running_record() without its frame
                    record = RUNNING_RECORDS[invocation.step][invocation.worker_id][event_type]
                except KeyError:
                    record = running_record(invocation.step, invocation.worker_id, event_type)
                items.append(record)
                self.unstarted += 1  # until the worker begins (see ``WorkerLane.unstarted``)
                key = invocation.invocation_id
                tasks[key] = self.new_task(
                    self.run_step(self.adapter, invocation, self),
                    loop=self.event_loop,
                    context=self.spawn_context.copy(),
                    name=key,
                )
            else:
                handlers[type(command)](self, command)

    async def _drain_durably(self) -> None:
        """Reduce every pending tick, commit them in one transaction, then act.

        Write-ahead: no step starts and nothing is published before the ticks that
        caused it are durable, so a crash never loses a result whose consequences have
        already been seen (a published request, a started next step).
        """
        adapter = self.adapter
        # The commands of the first tick are the list to run (one tick per drain is the
        # common case: no list of our own waits through the commit).
        deferred: list[Command] | None = None
        while self.pending and not self.state.finished:
            tick = self.pending.popleft()
            self.state, commands = reduce(self.state, tick)
            adapter.processed(tick, self.state, commands)
            if deferred is None:
                deferred = commands
            else:
                deferred += commands
        if not self.pending:
            self.pending = _NO_PENDING
        await adapter.commit()
        self.last_commit = time.time()
        if deferred is None:
            return
        handlers = _HANDLERS
        for command in deferred:
            handlers[type(command)](self, command)

    def _take_idle_check(self) -> None:
        """The idle check asked for is due (after a checkpoint): feed it in, unless a
        tick was posted meanwhile (the run is not idle then)."""
        if self._take_available():
            return
        self.idle_requested = False
        self._pending().append(IdleCheck(time.time()))

    def _input_ready(self) -> bool:
        """Whether the loop need not wait: a due timer or a posted tick was taken, or the
        run parked (its ``exit`` is ``PARKED`` then)."""
        if self._take_due_timers() or self._take_available():
            return True
        if self._parkable():
            self.settle_writes()  # the run parks with every write accounted
            if self.adapter.park(self.heap or None):
                # The adapter holds the timers now; nothing may refer to this loop but
                # late posts, which ``post`` forwards.
                self.heap = _NO_TIMERS
                self.exit = PARKED
                return True
        return False

    def _parkable(self) -> bool:
        """Whether the run's only remaining work is waiters and timers: no worker task
        (not even one dispatched and not begun), nothing posted, no idle check asked
        for, and nothing to commit or heartbeat (a journaled run never parks here)."""
        return (
            self.drains_inline
            and not self.unstarted
            and self.heartbeat_every is None
            and self.pool.idle()
        )

    def _wait_limit(self) -> float | None:
        """How long to wait for input: until the next timer or heartbeat (or forever)."""
        now = time.time()
        limit = self.heap[0][0] - now if self.heap else None
        if self.heartbeat_every is not None:
            beat = self.last_commit + self.heartbeat_every - now
            limit = beat if limit is None else min(limit, beat)
        return None if limit is None else max(0.0, limit)

    def _heartbeat_due(self) -> bool:
        every = self.heartbeat_every
        return every is not None and self.exit is None and time.time() - self.last_commit >= every

    def _take_available(self) -> bool:
        """Move every tick already posted into ``pending``, step ticks first."""
        inbox = self.inbox
        if not inbox:
            return bool(self.pending)
        if len(inbox) > 1:
            # A stable partition, step ticks first.  Several workers finishing together
            # post a batch per wake-up, nearly all step results: the exact type test
            # spares each of them a call.
            pending = self._pending()
            later: list[Tick] = []
            for tick in inbox:
                if type(tick) is StepResult or _is_step_tick(tick):
                    pending.append(tick)
                else:
                    later.append(tick)
            pending.extend(later)
        else:
            self._pending().append(inbox[0])
        inbox.clear()
        return True

    def _take_due_timers(self) -> bool:
        now = time.time()
        took = False
        while self.heap and self.heap[0][0] <= now:
            _, _, command = heapq.heappop(self.heap)
            self._pending().append(_due_tick(command, now))
            took = True
        return took

    # -- commands ------------------------------------------------------------------

    def _run_worker(self, command: RunWorker) -> None:
        """Record the invocation's RUNNING state and start its worker task (``_process``
        does both itself when the stream is buffered and asyncio makes the task: keep
        the two alike)."""
        invocation = command.invocation
        # The command stands for the invocation's RUNNING state in the stream.
        items = self.stream.quiet_items
        if items is not None:  # what ``sink.push`` does then, without its two frames
            event_type = type(invocation.event)
            items.append(running_record(invocation.step, invocation.worker_id, event_type))
        else:
            self.sink.push(command)
        self.unstarted += 1  # until the worker begins (see ``WorkerLane.unstarted``)
        worker = self.run_step(self.adapter, invocation, self)
        tasks = self.worker_tasks
        if (
            tasks is not None
            and self.new_task is not None
            and self.event_loop._task_factory is None  # see AsyncioPool.task_maker
        ):
            # What ``AsyncioPool.spawn`` does then, without its frame (the task named
            # after its invocation, as there).
            key = invocation.invocation_id
            tasks[key] = self.new_task(
                worker, loop=self.event_loop, context=self.spawn_context.copy(), name=key
            )
        else:
            self.pool.spawn(invocation.invocation_id, worker, self.spawn_context)

    def write(self, event: Any, invocation_id: str | None) -> None:
        """A step writes ``event`` to the stream (from the loop's thread).

        While work is in flight, reducing the write would change nothing but the journal
        sequence and the alive time (``_reduce_stream_write``): when the posting task
        would reduce it inline, the event is published at once and the write is
        accounted in the state later, in a batch, with the same arithmetic, before the
        next tick is reduced or when the state is read (``settle_writes``).  Steps
        write by the thousand, and a tick and a state per write were most of their cost.
        Otherwise the write is posted as a ``PublishEvent`` tick.
        """
        now = time.time()
        if self.unaccounted:
            # A batch is open: nothing was reduced since its first write, so the state
            # still qualifies; only whether the write would be reduced inline may differ.
            if self.waiting and not self.unstarted and not self.inbox:
                if now > self.write_stamp:  # what _accrued() does for each write in turn
                    self.write_elapsed += now - self.write_stamp
                    self.write_stamp = now
                self.unaccounted += 1
                items = self.stream.quiet_items
                if items is not None and type(event) in AS_IS:
                    items.append(event)  # what ``sink.push`` does then, without its frame
                    return
                self.sink.push(event)
                return
        elif self._opens_batch():
            state = self.state
            last = state.last_alive_stamp
            assert last is not None  # checked by _opens_batch
            elapsed = state.elapsed_alive
            if now > last:
                elapsed += now - last
                last = now
            self.write_elapsed = elapsed
            self.write_stamp = last
            self.unaccounted = 1
            self.sink.push(event)
            return
        self.post(PublishTick(now, event, invocation_id))

    def _opens_batch(self) -> bool:
        """Whether a stream write now may start a batch (see ``write``)."""
        state = self.state
        return bool(
            self.batches_writes
            and self.waiting
            and self.drains_inline
            and not self.unstarted
            and not self.inbox
            and self.exit is None
            and state.status == "running"
            and (state.queued or state.running or state.idle_check_pending)
            and state.last_alive_stamp is not None
        )

    def settle_writes(self) -> None:
        """Fold the stream writes published since the last reduction into the state.

        ``processed`` gets a ``PublishEvent`` tick standing for the batch (its last
        stamp, no event) and no commands: the events are already published.
        """
        count = self.unaccounted
        if not count:
            return
        self.unaccounted = 0
        stamp = self.write_stamp
        self.state = account_stream_writes(self.state, count, self.write_elapsed, stamp)
        self.adapter.processed(PublishTick(stamp, None), self.state, [])

    def _cancel_worker(self, command: CancelWorker) -> None:
        if self.pool.cancel(command.invocation_id):
            self.unstarted -= 1  # a worker that will never begin (nor take itself off)

    def _publish(self, command: PublishEvent) -> None:
        self.sink.push(command.event)

    def _publish_step_state(self, command: PublishStepState) -> None:
        self.sink.push(command)

    def _complete(self, command: CompleteRun) -> None:
        self.sink.push(terminal_event(command))
        self.exit = RunExit("complete", stop_event=command.stop_event)

    def _fail(self, command: FailWorkflow) -> None:
        self.sink.push(terminal_event(command))
        self.exit = RunExit("fail", exception=command.exception, step_name=command.step_name)

    def _halt(self, command: Halt) -> None:
        self.sink.push(terminal_event(command))
        self.exit = RunExit(command.reason, exception=command.exception)

    def _push_timer(self, command: ScheduleCommand) -> None:
        # The command itself is the entry's payload: no closure per timer.
        self.heap_seq += 1
        if self.heap is _NO_TIMERS:
            self.heap = []
        heapq.heappush(self.heap, (command.due_at, self.heap_seq, command))

    def _schedule_idle_check(self, command: ScheduleIdleCheck) -> None:
        self.idle_requested = True

    def _report_dropped(self, command: ReportDropped) -> None:
        origin = f"step {command.producer!r}" if command.producer else "the caller"
        _log.warning(
            "run %s: %s from %s reached no step and no waiter, and was dropped "
            "(no step accepts it, and no wait_for_event() asked for it while the run "
            "was busy)",
            self.run_id,
            command.event_type,
            origin,
        )


# Command type -> the _Loop method that executes it (class level: no per-run dict).
_HANDLERS: dict[type, Callable[[Any, Any], None]] = {
    RunWorker: _Loop._run_worker,
    CancelWorker: _Loop._cancel_worker,
    PublishEvent: _Loop._publish,
    PublishStepState: _Loop._publish_step_state,
    CompleteRun: _Loop._complete,
    FailWorkflow: _Loop._fail,
    Halt: _Loop._halt,
    ScheduleWakeup: _Loop._push_timer,
    ScheduleTimeout: _Loop._push_timer,
    ScheduleWaiterTimeout: _Loop._push_timer,
    ScheduleIdleCheck: _Loop._schedule_idle_check,
    ReportDropped: _Loop._report_dropped,
}


def resume_loop(
    adapter: LoopAdapter, state: RunState, run_id: str, timers: TimerHeap | None
) -> ResumedLoop:
    """A loop for a run that parked with ``state`` and ``timers``: the same session
    goes on (no session start, nothing rewound).

    Until its task awaits ``resume()``, the loop counts as waiting, so a tick posted
    meanwhile is reduced by the posting task, as for a run that never parked.  Call it
    in the event loop's thread, with the event loop running.
    """
    loop = _Loop(adapter, state, run_id, timers)
    loop._attach()
    loop.waiting = True
    return loop


async def control_loop(start_event: Any, init_state: RunState, run_id: str) -> Any:
    """Drive one run and return its terminal ``StopEvent``.

    tickwork's runtime calls this inside the run's task after setting the run's adapter;
    called anywhere else it raises ``WorkflowRuntimeError``.  A failed, timed-out or
    cancelled run raises the run's exception.  A run that parks returns ``None`` here:
    it goes on later with ``resume_loop``, in another task.
    """
    ref = _ADAPTER.get()
    adapter = ref() if ref is not None else None
    if adapter is None:
        raise WorkflowRuntimeError(
            "control_loop() drives a run hosted by tickwork's runtime and cannot be called "
            "directly; start runs with Workflow.run()"
        )
    run_exit = await run_loop(adapter, start_event, init_state, run_id)
    if run_exit is PARKED:
        return None
    if run_exit.kind == "complete":
        return run_exit.stop_event
    error = run_exit.exception
    assert error is not None
    del run_exit
    try:
        raise error
    finally:
        del error  # the traceback holds this frame: no cycle through a local


def run_loop(
    adapter: LoopAdapter, start_event: Any, init_state: RunState, run_id: str
) -> Coroutine[Any, Any, RunExit]:
    """Start a run's loop with ``adapter``; the coroutine returned drives it and returns
    its exit (``PARKED`` if the run parked): what tickwork's runtime awaits.

    Unlike ``control_loop``, the adapter is passed rather than set in a context variable
    (``using_adapter``) and read back, and the outcome is returned rather than raised:
    setting the variable makes a context, a token and a weak reference that every live
    run would hold, and each coroutine layer between the run's task and the loop's wait
    is one more object per live run.
    """
    return _Loop(adapter, init_state, run_id).run(start_event)
