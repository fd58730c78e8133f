"""The pure reducer: ``reduce(state, tick) -> (state, commands)``.

One dispatcher maps each tick type to a processor; each processor reads top to bottom
as named phases.  Every processor works on a :class:`_Tx`, a small accumulator that
holds the changed parts of the state and the commands produced so far, and builds the
new :class:`RunState` once at the end.  The input state is never mutated, and the new
state shares every part that did not change: a tick costs O(what it touches).

Time never comes from a clock: every decision uses ``tick.stamped_at``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from tickwork.errors import WorkflowCancelledByUser, WorkflowRuntimeError, WorkflowTimeoutError
from tickwork.events import (
    CollectionReleaseEvent,
    InputRequiredEvent,
    StepFailedEvent,
    StopEvent,
    UnhandledEvent,
    WorkflowCancelledEvent,
    WorkflowIdleEvent,
    WorkflowTimedOutEvent,
)
from tickwork.runtime.control_loop.streams import (
    AccountingError,
    Release,
    Settlement,
    add_open_work,
    buffer_member,
    close_stream,
    commit_collect_ops,
    nearest_binding,
    open_stream,
    release_key,
    settle,
)
from tickwork.runtime.types.commands import (
    CancelWorker,
    Command,
    CompleteRun,
    FailWorkflow,
    Halt,
    PublishEvent,
    PublishStepState,
    RunWorker,
    ScheduleIdleCheck,
    ScheduleTimeout,
    ScheduleWaiterTimeout,
    ScheduleWakeup,
)
from tickwork.runtime.types.evolve import evolve as replace
from tickwork.runtime.types.persistent import PMap, PQueue
from tickwork.runtime.types.results import Completed, Failed, Suspended
from tickwork.runtime.types.slots import SlotPool
from tickwork.runtime.types.state import (
    NO_SENDS,
    Invocation,
    ReleaseState,
    RunState,
    StepRunState,
    StepSpec,
    StreamState,
    Waiter,
    WorkItem,
)
from tickwork.runtime.types.step_id import invocation_id, stream_id, work_item_id
from tickwork.runtime.types.ticks import (
    AddEvent,
    CancelRun,
    IdleCheck,
    SessionStart,
    StepResult,
    Tick,
    Timeout,
    WaiterTimeout,
    Wakeup,
)
from tickwork.runtime.types.ticks import (
    PublishEvent as PublishTick,
)
from tickwork.runtime.types.waiter_index import WaiterIndex

__all__ = ["initial_state", "reduce"]

_FRESH_STEP = StepRunState()
_NO_WAITERS: Mapping[str, Waiter] = {}
_log = logging.getLogger("tickwork.runtime")


def initial_state(config: Any) -> RunState:
    """The state of a run that has not started: every step idle and empty."""
    return RunState(config=config, steps={name: _FRESH_STEP for name in config.steps})


_SCALARS = (
    "status",
    "is_running",
    "queued",
    "running",
    "waiter_index",
    "streams",
    "releases",
    "stream_seq",
    "work_item_seq",
    "invocation_seq",
    "journal_seq",
    "elapsed_alive",
    "last_alive_stamp",
    "idle_check_pending",
)


class _Tx:
    """The accumulator of one reduction: the run's fields as attributes, the changed
    steps, and the commands produced so far.  ``commit`` builds the new state once."""

    __slots__ = ("base", "commands", "now", "steps", "touched_streams", *_SCALARS)

    status: str
    is_running: bool
    queued: int
    running: int
    waiter_index: WaiterIndex
    streams: PMap[str, StreamState]
    releases: PMap[str, ReleaseState]
    stream_seq: int
    work_item_seq: int
    invocation_seq: int
    journal_seq: int
    elapsed_alive: float
    last_alive_stamp: float | None
    idle_check_pending: bool

    def __init__(self, base: RunState, now: float) -> None:
        self.base = base
        self.now = now
        self.touched_streams: set[str] = set()
        self.steps: dict[str, StepRunState] = {}
        self.commands: list[Command] = []
        self.status = base.status
        self.is_running = base.is_running
        self.queued = base.queued
        self.running = base.running
        self.waiter_index = base.waiter_index
        self.streams = base.streams
        self.releases = base.releases
        self.stream_seq = base.stream_seq
        self.work_item_seq = base.work_item_seq
        self.invocation_seq = base.invocation_seq
        self.journal_seq = base.journal_seq
        self.elapsed_alive = base.elapsed_alive
        self.last_alive_stamp = base.last_alive_stamp
        self.idle_check_pending = base.idle_check_pending

    def step(self, name: str) -> StepRunState:
        current = self.steps.get(name)
        return current if current is not None else self.base.steps[name]

    def put_step(self, name: str, value: StepRunState) -> None:
        self.steps[name] = value

    def spec(self, name: str) -> StepSpec:
        spec: StepSpec = self.base.config.steps[name]
        return spec

    def emit(self, command: Command) -> None:
        self.commands.append(command)

    def mint_work_item(self) -> str:
        seq = self.work_item_seq
        self.work_item_seq = seq + 1
        return work_item_id(seq)

    def mint_invocation(self) -> str:
        seq = self.invocation_seq
        self.invocation_seq = seq + 1
        return invocation_id(seq)

    @property
    def live(self) -> bool:
        return self.status == "running"

    def commit(self) -> RunState:
        base = self.base
        steps = base.steps
        if self.steps:
            steps = dict(steps)
            steps.update(self.steps)
        return RunState(
            base.config,
            steps,
            self.status,  # type: ignore[arg-type]
            self.is_running,
            self.queued,
            self.running,
            self.waiter_index,
            self.streams,
            self.releases,
            self.stream_seq,
            self.work_item_seq,
            self.invocation_seq,
            self.journal_seq,
            self.elapsed_alive,
            self.last_alive_stamp,
            self.idle_check_pending,
        )


# ---------------------------------------------------------------------------- dispatcher


def reduce(state: RunState, tick: Tick) -> tuple[RunState, list[Command]]:
    """Process one tick.  Pure: ``state`` is not modified and no clock is read."""
    tx = _Tx(state, tick.stamped_at)
    tx.journal_seq += 1
    if not isinstance(tick, SessionStart):
        _accrue_alive_time(tx)
    processor = _PROCESSORS[type(tick)]
    processor(tx, tick)
    if tx.touched_streams:
        _close_finished_streams(tx)
    _schedule_idle_check_if_quiescent(tx, tick)
    return tx.commit(), tx.commands


# ------------------------------------------------------------------------ common phases


def _accrue_alive_time(tx: _Tx) -> None:
    """Add the time since the last processed input to the spent timeout budget."""
    last = tx.last_alive_stamp
    if last is None:
        tx.last_alive_stamp = tx.now
    elif tx.now > last:
        tx.elapsed_alive = tx.elapsed_alive + (tx.now - last)
        tx.last_alive_stamp = tx.now


def _schedule_idle_check_if_quiescent(tx: _Tx, tick: Tick) -> None:
    """After an input that leaves the run quiescent, ask for one idle check."""
    if isinstance(tick, (SessionStart, IdleCheck)) or not tx.live:
        return
    if tx.queued == 0 and tx.running == 0 and not tx.idle_check_pending:
        tx.idle_check_pending = True
        tx.emit(ScheduleIdleCheck())


def _has_free_slot(spec: StepSpec, step_state: StepRunState) -> bool:
    return step_state.slots.busy < spec.num_workers


def _start_invocation(tx: _Tx, step: str, item: WorkItem) -> None:
    """Dispatch ``item`` to the smallest free slot: record the invocation, ask for a worker."""
    current = tx.step(step)
    slot, slots = current.slots.acquire()
    waiters = current.waiters
    item_waiters = current.waiters_by_item.get(item.work_item_id) if waiters else None
    resumed = item.resume_identity
    if resumed is None:
        inv_id, received = tx.mint_invocation(), NO_SENDS
    else:
        (inv_id, received), item = resumed, replace(item, resume_identity=None)
    invocation = Invocation(
        inv_id,
        step,
        slot,
        item,
        tx.now,
        received,
        current.collect_buffers,
        {wid: waiters[wid] for wid in item_waiters} if item_waiters else _NO_WAITERS,
    )
    tx.steps[step] = StepRunState(
        current.queue,
        current.in_progress.set(inv_id, invocation),
        slots,
        current.collect_buffers,
        current.join_buffer,
        waiters,
        current.waiters_by_item,
    )
    tx.running += 1
    tx.emit(PublishStepState(step, "running", str(slot), type(item.event), event=item.event))
    tx.emit(RunWorker(invocation))


def _dispatch_or_queue(tx: _Tx, step: str, item: WorkItem) -> None:
    """Run ``item`` in the smallest free slot, or queue it (publishing PREPARING)."""
    if _has_free_slot(tx.spec(step), tx.step(step)):
        _start_invocation(tx, step, item)
        return
    current = tx.step(step)
    tx.put_step(step, replace(current, queue=current.queue.append(item)))
    tx.queued += 1
    tx.emit(PublishStepState(step, "preparing", "<enqueued>", type(item.event)))


def _drain_queue(tx: _Tx, step: str) -> None:
    """Fill free slots of ``step`` with the first eligible queued items, in order."""
    spec = tx.spec(step)
    now = tx.now
    while True:
        current = tx.step(step)
        if not current.queue:
            return
        if not _has_free_slot(spec, current):
            return
        item, rest = current.queue.pop_first(
            lambda it: it.not_before is None or it.not_before <= now
        )
        if item is None:
            return
        tx.put_step(step, replace(current, queue=rest))
        tx.queued += -1
        _start_invocation(tx, step, item)


# ------------------------------------------------------------------------ session start


def _process_session_start(tx: _Tx, tick: SessionStart) -> None:
    """Start or resume a session: rewind in-flight work, arm the run timer."""
    tx.status = "running"
    tx.is_running = True
    tx.last_alive_stamp = tx.now
    tx.idle_check_pending = False
    _rewind_in_flight(tx)
    _arm_delayed_retries(tx)
    _arm_waiter_timeouts(tx)
    _rerun_waiters_with_requirements(tx)
    timeout = tx.base.config.timeout
    if timeout is not None:
        remaining = max(0.0, timeout - tx.elapsed_alive)
        tx.emit(ScheduleTimeout(tx.now + remaining))


def _rewind_in_flight(tx: _Tx) -> None:
    """Put interrupted invocations back at the front of their queues, then dispatch."""
    for step in sorted(tx.base.steps):
        current = tx.step(step)
        if not current.in_progress:
            continue
        interrupted = sorted(
            current.in_progress.values(), key=lambda inv: int(inv.invocation_id.split("-")[1])
        )
        queue = current.queue
        for invocation in reversed(interrupted):
            identity = (invocation.invocation_id, invocation.received)
            queue = queue.appendleft(replace(invocation.item, resume_identity=identity))
        tx.put_step(
            step,
            replace(
                current,
                queue=queue,
                in_progress=type(current.in_progress)(),
                slots=SlotPool(),
            ),
        )
        tx.queued += len(interrupted)
        tx.running += -len(interrupted)
    for step in sorted(tx.base.steps):
        _drain_queue(tx, step)


def _arm_delayed_retries(tx: _Tx) -> None:
    """After a resume, arm the wakeup chain of every step with delayed retries."""
    for step in tx.base.steps:
        _arm_next_delayed_retry(tx, step)


def _arm_next_delayed_retry(tx: _Tx, step: str) -> None:
    """Schedule a wakeup for the earliest queued retry of ``step`` not due yet.

    Each wakeup re-arms the next one, so every delayed retry gets dispatched, not only
    the earliest.  Cost: O(queued delayed items of the step), which stay at the front.
    """
    future = [
        it.not_before
        for it in tx.step(step).queue
        if it.not_before is not None and it.not_before > tx.now
    ]
    if future:
        tx.emit(ScheduleWakeup(min(future), step))


def _rerun_waiters_with_requirements(tx: _Tx) -> None:
    """Requirements are not stored; re-run their steps so they register them again."""
    for step in sorted(tx.base.steps):
        for waiter in list(tx.step(step).waiters.values()):
            if (
                waiter.has_requirements
                and waiter.requirements is None
                and not (waiter.resolved_event is not None or waiter.timed_out)
            ):
                _dispatch_or_queue(tx, step, waiter.item)


def _arm_waiter_timeouts(tx: _Tx) -> None:
    """Schedule a check for every waiter that has a timeout budget."""
    for step in tx.base.steps:
        for waiter in tx.step(step).waiters.values():
            if waiter.timeout is not None and waiter.resolved_event is None:
                remaining = waiter.timeout - (tx.elapsed_alive - waiter.registered_alive)
                tx.emit(ScheduleWaiterTimeout(tx.now + max(0.0, remaining), step, waiter.waiter_id))


# ---------------------------------------------------------------------------- add event


def _process_add_event(tx: _Tx, tick: AddEvent) -> None:
    """An event enters the run: claim its key, resolve waiters, route, report unhandled."""
    if not tx.live or not _claim_emission(tx, tick):
        return
    _deliver_event(tx, tick.event, tick.target_step, tick.recovery_counts, ())


def _claim_emission(tx: _Tx, tick: AddEvent) -> bool:
    """Record a keyed send as routed; ``False`` if it was routed before or is orphaned."""
    if tick.emission_key is None or tick.source_step is None:
        return True
    inv_id, index = tick.emission_key
    current = tx.step(tick.source_step)
    invocation = current.in_progress.get(inv_id)
    if invocation is None or index in invocation.received:
        return False
    updated = replace(invocation, received=invocation.received.add(index))
    tx.put_step(
        tick.source_step, replace(current, in_progress=current.in_progress.set(inv_id, updated))
    )
    return True


def _deliver_event(
    tx: _Tx,
    event: Any,
    target: str | None,
    recovery_counts: Mapping[str, int],
    scope_path: tuple[str, ...],
) -> int:
    """Resolve waiters, then route ``event`` to every accepting step (or ``target``).

    Returns the number of new open work items this created in the event's stream
    (dispatched or queued work items; buffered arrivals and woken waiters count 0).
    """
    woken = _resolve_waiters(tx, event)
    delivered = bool(woken)
    opened = 0
    routes = (target,) if target is not None else tx.base.config.routes_for(type(event))
    for step in routes:
        if step in woken:
            continue
        opened += _route_to_step(tx, step, event, recovery_counts, scope_path)
        delivered = True
    if not delivered:
        _publish_unhandled(tx, event, target)
    return opened


def _route_to_step(
    tx: _Tx,
    step: str,
    event: Any,
    recovery_counts: Mapping[str, int],
    scope_path: tuple[str, ...],
) -> int:
    """Deliver one event to one step; returns the open work items it created (0 or 1)."""
    spec = tx.spec(step)
    if spec.kind == "collect":
        _arrive_at_collect_step(tx, step, event, scope_path)
        return 0
    if spec.kind == "join":
        return _arrive_at_join(tx, step, event, recovery_counts, scope_path)
    item = WorkItem(
        work_item_id=tx.mint_work_item(),
        step=step,
        event=event,
        scope_path=scope_path,
        recovery_counts=recovery_counts,
    )
    _dispatch_or_queue(tx, step, item)
    return 1


def _arrive_at_collect_step(tx: _Tx, step: str, event: Any, scope_path: tuple[str, ...]) -> None:
    """Buffer a stream member for the nearest enclosing stream bound to ``step``."""
    config = tx.base.config
    found = nearest_binding(tx.streams, scope_path, config.bindings_by_producer, step, type(event))
    if found is None:
        _log.warning(
            "%s reached the list[E] step %r outside any fan-out stream bound to it; "
            "list[E] steps only collect members of a stream, so it is ignored",
            type(event).__name__,
            step,
        )
        return
    stream_id, binding = found
    streams, releases, release = buffer_member(tx.streams, tx.releases, stream_id, binding, event)
    tx.streams = streams
    tx.releases = releases
    if release is not None:
        _dispatch_release(tx, release)
        if binding.cancel_rest:
            _cut_stream(tx, stream_id)


def _dispatch_release(tx: _Tx, release: Release) -> None:
    """A binding fired: its batch is a work item of the target step, in the parent scope."""
    event = CollectionReleaseEvent(
        events=list(release.events),
        stream_id=release.stream_id,
        binding_id=release.binding.binding_id,
    )
    item = WorkItem(
        work_item_id=f"work_item_collect_{release.stream_id}:{release.binding.binding_id}",
        step=release.binding.target,
        event=event,
        scope_path=release.output_scope_path,
    )
    _dispatch_or_queue(tx, release.binding.target, item)


def _arrive_at_join(
    tx: _Tx,
    step: str,
    event: Any,
    recovery_counts: Mapping[str, int],
    scope_path: tuple[str, ...],
) -> int:
    """Buffer a multi-slot arrival; dispatch the join when a batch is complete."""
    spec = tx.spec(step)
    current = tx.step(step)
    buffer = (*current.join_buffer, event)
    found = _assign_slots(spec, buffer)
    if found is None:
        tx.put_step(step, replace(current, join_buffer=buffer))
        return 0
    positions = dict(found)
    assignment = {name: buffer[pos] for name, pos in positions.items()}
    used = set(positions.values())
    rest = tuple(ev for pos, ev in enumerate(buffer) if pos not in used)
    tx.put_step(step, replace(current, join_buffer=rest))
    item = WorkItem(
        work_item_id=tx.mint_work_item(),
        step=step,
        event=event,
        bound_events=assignment,
        scope_path=scope_path,
        recovery_counts=recovery_counts,
    )
    _dispatch_or_queue(tx, step, item)
    return 1


def _assign_slots(spec: StepSpec, buffer: tuple[Any, ...]) -> dict[str, int] | None:
    """Assign slots in declaration order to the earliest matching arrivals (backtracking).

    Returns each slot's position in ``buffer`` (positions, not objects: the same event
    object may arrive twice and is then two arrivals)."""

    def matches(slot_type: type, event: Any) -> bool:
        if spec.subclass_mode:
            return isinstance(event, slot_type)
        return type(event) is slot_type

    def search(index: int, used: frozenset[int]) -> dict[str, int] | None:
        if index == len(spec.slots):
            return {}
        name, slot_type = spec.slots[index]
        for position, event in enumerate(buffer):
            if position in used or not matches(slot_type, event):
                continue
            rest = search(index + 1, used | {position})
            if rest is not None:
                return {name: position, **rest}
        return None

    return search(0, frozenset())


def _publish_unhandled(tx: _Tx, event: Any, target: str | None) -> None:
    if isinstance(event, InputRequiredEvent):
        return
    etype = type(event)
    idle = tx.queued == 0 and tx.running == 0
    tx.emit(
        PublishEvent(
            UnhandledEvent(
                event_type=etype.__name__,
                qualified_name=f"{etype.__module__}.{etype.__qualname__}",
                step_name=target,
                idle=idle,
            )
        )
    )


# ------------------------------------------------------------------------------ waiters


def _resolve_waiters(tx: _Tx, event: Any) -> set[str]:
    """Resolve every waiter ``event`` matches; re-deliver their work items.

    Returns the names of the steps woken this way (they do not also receive the event).
    """
    index = tx.waiter_index
    if not index:
        return set()
    woken: set[str] = set()
    # Sorted: the index iterates in hash order, and resolution order decides dispatch
    # order, which must not depend on the process (replay elsewhere must agree).
    for step, waiter_id in sorted(set(index.candidates(event))):
        current = tx.step(step)
        waiter = current.waiters.get(waiter_id)
        if waiter is None or not waiter.matches(event):
            continue
        resolved = replace(waiter, resolved_event=event)
        tx.put_step(step, replace(current, waiters=current.waiters.set(waiter_id, resolved)))
        _unindex_waiter(tx, step, waiter)
        _dispatch_or_queue(tx, step, waiter.item)
        woken.add(step)
    return woken


def _index_waiter(tx: _Tx, step: str, waiter: Waiter) -> None:
    tx.waiter_index = tx.waiter_index.add(
        waiter.event_type, waiter.requirements, (step, waiter.waiter_id)
    )


def _unindex_waiter(tx: _Tx, step: str, waiter: Waiter) -> None:
    tx.waiter_index = tx.waiter_index.remove(
        waiter.event_type, waiter.requirements, (step, waiter.waiter_id)
    )


def _register_waiter(tx: _Tx, invocation: Invocation, outcome: Suspended) -> None:
    """Record a suspension: keep an existing budget, publish ``waiter_event`` once."""
    request = outcome.waiter
    step = invocation.step
    current = tx.step(step)
    existing = current.waiters.get(request.waiter_id)
    waiter = Waiter(
        waiter_id=request.waiter_id,
        item=invocation.item,
        event_type=request.event_type,
        requirements=request.requirements,
        waiter_event=request.waiter_event,
        timeout=request.timeout,
        registered_alive=(existing.registered_alive if existing is not None else tx.elapsed_alive),
        subclass_mode=tx.spec(step).subclass_mode,
        has_requirements=bool(request.requirements) or request.has_requirements,
    )
    item_id = invocation.item.work_item_id
    by_item = current.waiters_by_item.get(item_id, frozenset()) | {request.waiter_id}
    tx.put_step(
        step,
        replace(
            current,
            waiters=current.waiters.set(request.waiter_id, waiter),
            waiters_by_item=current.waiters_by_item.set(item_id, by_item),
        ),
    )
    if existing is not None:
        _unindex_waiter(tx, step, existing)
    _index_waiter(tx, step, waiter)
    if existing is None:
        if request.waiter_event is not None:
            tx.emit(PublishEvent(request.waiter_event))
        if request.timeout is not None:
            tx.emit(ScheduleWaiterTimeout(tx.now + request.timeout, step, request.waiter_id))


def _delete_waiters(tx: _Tx, step: str, item_id: str, only: tuple[str, ...] | None) -> None:
    """Forget the waiters of a work item (all of them, or the ``only`` ids)."""
    current = tx.step(step)
    ids = current.waiters_by_item.get(item_id)
    if not ids:
        return
    doomed = ids if only is None else ids & frozenset(only)
    if not doomed:
        return
    waiters = current.waiters
    for waiter_id in doomed:
        waiter = waiters.get(waiter_id)
        if waiter is not None:
            if waiter.resolved_event is None and not waiter.timed_out:
                _unindex_waiter(tx, step, waiter)
            waiters = waiters.delete(waiter_id)
    left = ids - doomed
    by_item = (
        current.waiters_by_item.set(item_id, left)
        if left
        else current.waiters_by_item.delete(item_id)
    )
    tx.put_step(step, replace(tx.step(step), waiters=waiters, waiters_by_item=by_item))


def _process_waiter_timeout(tx: _Tx, tick: WaiterTimeout) -> None:
    """A waiter's budget may be spent: re-arm for what remains, or time it out."""
    if not tx.live:
        return
    current = tx.step(tick.step)
    waiter = current.waiters.get(tick.waiter_id)
    if waiter is None or waiter.resolved_event is not None or waiter.timed_out:
        return
    assert waiter.timeout is not None
    remaining = waiter.timeout - (tx.elapsed_alive - waiter.registered_alive)
    if remaining > 1e-9:
        tx.emit(ScheduleWaiterTimeout(tx.now + remaining, tick.step, tick.waiter_id))
        return
    timed_out = replace(waiter, timed_out=True)
    tx.put_step(
        tick.step, replace(current, waiters=current.waiters.set(waiter.waiter_id, timed_out))
    )
    _unindex_waiter(tx, tick.step, waiter)
    _dispatch_or_queue(tx, tick.step, waiter.item)


# -------------------------------------------------------------------------- step result


def _process_step_result(tx: _Tx, tick: StepResult) -> None:
    """An invocation finished.  Phases: find, stale check, outcome, finalize."""
    invocation = _find_invocation(tx, tick)
    if invocation is None:
        return
    outcome = tick.outcome
    if not isinstance(outcome, Failed) and outcome.collect_ops:
        committed = commit_collect_ops(
            tx.step(tick.step).collect_buffers, invocation.collect_view, outcome.collect_ops
        )
        if committed is None:
            _rerun_stale_invocation(tx, invocation)
            return
        tx.put_step(tick.step, replace(tx.step(tick.step), collect_buffers=committed))
    if isinstance(outcome, Suspended):
        _finish_invocation(tx, invocation, publish=True, output=None)
        if outcome.deleted_waiters:
            _delete_waiters(
                tx, invocation.step, invocation.item.work_item_id, outcome.deleted_waiters
            )
        _register_waiter(tx, invocation, outcome)
    elif isinstance(outcome, Failed):
        _apply_failure(tx, invocation, outcome)
    else:
        _apply_completion(tx, invocation, outcome)
    if tx.live:
        _drain_queue(tx, tick.step)


def _find_invocation(tx: _Tx, tick: StepResult) -> Invocation | None:
    """The in-flight invocation of ``tick``; ``None`` for a discarded (cancelled) one."""
    if not tx.live:
        return None
    invocation: Invocation | None = tx.step(tick.step).in_progress.get(tick.invocation_id)
    return invocation


def _release_slot(tx: _Tx, invocation: Invocation) -> None:
    step = invocation.step
    current = tx.step(step)
    tx.steps[step] = StepRunState(
        current.queue,
        current.in_progress.delete(invocation.invocation_id),
        current.slots.release(invocation.worker_id),
        current.collect_buffers,
        current.join_buffer,
        current.waiters,
        current.waiters_by_item,
    )
    tx.running -= 1


def _finish_invocation(
    tx: _Tx,
    invocation: Invocation,
    *,
    publish: bool,
    output: type | None,
    has_output: bool = False,
    value: Any = None,
) -> None:
    """Free the invocation's slot and publish its NOT_RUNNING."""
    _release_slot(tx, invocation)
    if publish:
        tx.emit(
            PublishStepState(
                invocation.step,
                "not_running",
                str(invocation.worker_id),
                type(invocation.item.event),
                output,
                has_output,
                event=value,
            )
        )


def _rerun_stale_invocation(tx: _Tx, invocation: Invocation) -> None:
    """The collect view went stale: run the same work item again, silently."""
    _release_slot(tx, invocation)
    _start_invocation(tx, invocation.step, invocation.item)


def _apply_completion(tx: _Tx, invocation: Invocation, outcome: Completed) -> None:
    """Publish NOT_RUNNING, then emit what the body returned, then settle the item."""
    value = outcome.value
    is_list = isinstance(value, list)
    events: list[Any] = value if is_list else ([] if value is None else [value])
    last = (value[-1] if value else None) if is_list else value
    output_type = type(last)
    _finish_invocation(
        tx, invocation, publish=True, output=output_type, has_output=True, value=value
    )
    stop = next((ev for ev in events if isinstance(ev, StopEvent)), None)
    if stop is not None:
        _complete_run(tx, stop)
        return
    item = invocation.item
    _delete_waiters(tx, invocation.step, item.work_item_id, None)
    if is_list and tx.spec(invocation.step).is_fan_out:
        _fan_out(tx, invocation, events)
        return
    opened = _emit_events(tx, events, item.recovery_counts, item.scope_path)
    if tx.live:
        _settle(tx, item.scope_path, "completed", deliveries=opened)


def _emit_events(
    tx: _Tx,
    events: list[Any],
    recovery_counts: Mapping[str, int],
    scope_path: tuple[str, ...],
) -> int:
    """Publish HITL requests and route each event; returns the work items opened."""
    opened = 0
    for event in events:
        if isinstance(event, InputRequiredEvent):
            tx.emit(PublishEvent(event))
    for event in events:
        opened += _deliver_event(tx, event, None, recovery_counts, scope_path)
        if not tx.live:
            break
    return opened


def _fan_out(tx: _Tx, invocation: Invocation, events: list[Any]) -> None:
    """Open a stream for a returned list and deliver its elements inside it."""
    item = invocation.item
    seq = tx.stream_seq
    tx.stream_seq = seq + 1
    new_stream = stream_id(item.scope_path, invocation.step, seq)
    bindings = tx.base.config.bindings_by_producer.get(invocation.step, ())
    streams, releases = open_stream(
        tx.streams,
        tx.releases,
        new_stream,
        invocation.step,
        item.scope_path,
        bindings,
    )
    tx.streams = streams
    tx.releases = releases
    _settle(tx, item.scope_path, "fanned_out", new_bindings=len(bindings))
    opened = _emit_events(tx, events, item.recovery_counts, (*item.scope_path, new_stream))
    if tx.live:
        _count_open_work(tx, new_stream, opened)


def _settle(
    tx: _Tx,
    scope_path: tuple[str, ...],
    kind: Settlement,
    deliveries: int = 0,
    new_bindings: int = 0,
) -> None:
    """Classify a finished execution in its innermost stream (top level: nothing).

    A stream that was cut by ``Take(n, cancel_rest=True)`` while this item ran is gone,
    and there is nothing left to account for.
    """
    if not scope_path or not tx.live or scope_path[-1] not in tx.streams:
        return
    try:
        tx.streams = settle(tx.streams, scope_path[-1], kind, deliveries, new_bindings)
    except AccountingError as error:
        _fail_accounting(tx, scope_path[-1], error)
        return
    tx.touched_streams.add(scope_path[-1])


def _count_open_work(tx: _Tx, stream: str, count: int) -> None:
    tx.streams = add_open_work(tx.streams, stream, count)
    tx.touched_streams.add(stream)


def _fail_accounting(tx: _Tx, stream: str, error: AccountingError) -> None:
    """An impossible accounting state fails the run loudly instead of hanging it."""
    state = tx.streams.get(stream)
    source = state.source_step if state is not None else "<unknown>"
    _fail_run(tx, source, WorkflowRuntimeError(str(error)), attempts=None, elapsed=None)


def _close_finished_streams(tx: _Tx) -> None:
    """Close every touched stream whose open work reached zero; fire its releases."""
    pending = sorted(tx.touched_streams)
    tx.touched_streams = set()
    for stream in pending:
        if not tx.live:
            return
        state = tx.streams.get(stream)
        if state is None or state.open_work_items > 0:
            continue
        streams, releases, fired = close_stream(
            tx.streams, tx.releases, stream, tx.base.config.bindings_by_id
        )
        tx.streams = streams
        tx.releases = releases
        for release in fired:
            _dispatch_release(tx, release)


def _cut_stream(tx: _Tx, stream: str) -> None:
    """``Take(n, cancel_rest=True)``: drop and cancel the rest of ``stream`` (and nested).

    Cost is O(queued + running + waiting work of the run), paid once per cut.
    """

    def inside(path: tuple[str, ...]) -> bool:
        return stream in path

    for step in tx.base.steps:
        current = tx.step(step)
        kept = [it for it in current.queue if not inside(it.scope_path)]
        dropped = len(current.queue) - len(kept)
        if dropped:
            tx.put_step(step, replace(current, queue=PQueue.of(kept)))
            tx.queued += -dropped
        for invocation in list(tx.step(step).in_progress.values()):
            if inside(invocation.item.scope_path):
                tx.emit(CancelWorker(invocation.invocation_id))
                _finish_invocation(tx, invocation, publish=True, output=None)
        for waiter in list(tx.step(step).waiters.values()):
            if inside(waiter.item.scope_path):
                _delete_waiters(tx, step, waiter.item.work_item_id, None)
        _drain_queue(tx, step)
    nested = [sid for sid, st in tx.streams.items() if stream in (*st.scope_path, sid)]
    streams, releases = tx.streams, tx.releases
    for sid in nested:
        if sid == stream:
            continue
        for binding_id in tx.base.config.bindings_by_id:
            releases = releases.delete(release_key(sid, binding_id))
        streams = streams.delete(sid)
    tx.streams = streams
    tx.releases = releases
    if stream in tx.streams:
        streams, releases, fired = close_stream(
            tx.streams, tx.releases, stream, tx.base.config.bindings_by_id
        )
        tx.streams = streams
        tx.releases = releases
        for release in fired:
            _dispatch_release(tx, release)


def _apply_failure(tx: _Tx, invocation: Invocation, outcome: Failed) -> None:
    """Retry the work item, hand it to its ``@catch_error`` owner, or fail the run."""
    _finish_invocation(tx, invocation, publish=True, output=None)
    if outcome.deleted_waiters:
        _delete_waiters(tx, invocation.step, invocation.item.work_item_id, outcome.deleted_waiters)
    item = invocation.item
    if outcome.retry_delay is not None:
        _queue_retry(tx, invocation, outcome)
        return
    first = item.first_attempt_at if item.first_attempt_at is not None else invocation.dispatched_at
    attempts = item.attempts + 1
    elapsed = max(0.0, outcome.failed_at - first)
    if _hand_to_catch_error(tx, invocation, outcome, attempts, elapsed):
        return
    _fail_run(tx, invocation.step, outcome.exception, attempts=attempts, elapsed=elapsed)


def _hand_to_catch_error(
    tx: _Tx, invocation: Invocation, outcome: Failed, attempts: int, elapsed: float
) -> bool:
    """Deliver a ``StepFailedEvent`` to the owning handler if its budget allows."""
    owner = tx.base.config.catch_error_owner.get(invocation.step)
    if owner is None:
        return False
    item = invocation.item
    used = item.recovery_counts.get(owner, 0)
    if used + 1 > tx.spec(owner).max_recoveries:
        return False
    _delete_waiters(tx, invocation.step, item.work_item_id, None)
    failed = StepFailedEvent(
        step_name=invocation.step,
        input_event=item.event,
        exception=outcome.exception,
        attempts=attempts,
        elapsed_seconds=elapsed,
        failed_at=datetime.fromtimestamp(outcome.failed_at, tz=timezone.utc),
    )
    handoff = WorkItem(
        work_item_id=tx.mint_work_item(),
        step=owner,
        event=failed,
        scope_path=item.scope_path,
        recovery_counts={**item.recovery_counts, owner: used + 1},
    )
    _dispatch_or_queue(tx, owner, handoff)
    return True


def _queue_retry(tx: _Tx, invocation: Invocation, outcome: Failed) -> None:
    delay = outcome.retry_delay or 0.0
    first = invocation.item.first_attempt_at
    item = replace(
        invocation.item,
        first_attempt_at=first if first is not None else invocation.dispatched_at,
        attempts=invocation.item.attempts + 1,
        last_exception=outcome.exception,
        last_failed_at=outcome.failed_at,
        not_before=(outcome.failed_at + delay) if delay > 0 else None,
    )
    current = tx.step(invocation.step)
    tx.put_step(invocation.step, replace(current, queue=current.queue.appendleft(item)))
    tx.queued += 1
    if delay > 0:
        tx.emit(ScheduleWakeup(outcome.failed_at + delay, invocation.step))


# ---------------------------------------------------------------------- terminal phases


def _cancel_all_workers(tx: _Tx, keep_records: bool) -> list[str]:
    """Cancel every running invocation; returns the sorted names of active steps."""
    active: set[str] = set()
    for step in tx.base.steps:
        current = tx.step(step)
        for inv_id in current.in_progress:
            tx.emit(CancelWorker(inv_id))
            active.add(step)
        if not keep_records:
            tx.put_step(step, _FRESH_STEP)
    if not keep_records:
        tx.queued = 0
        tx.running = 0
        tx.waiter_index = WaiterIndex()
        tx.streams = PMap()
        tx.releases = PMap()
    return sorted(active)


def _end_run(tx: _Tx, status: str) -> list[str]:
    active = _cancel_all_workers(tx, keep_records=False)
    tx.status = status
    tx.is_running = False
    return active


def _complete_run(tx: _Tx, stop_event: Any) -> None:
    _end_run(tx, "completed")
    tx.emit(CompleteRun(stop_event))


def _fail_run(
    tx: _Tx,
    step: str,
    exception: BaseException,
    attempts: int | None,
    elapsed: float | None,
) -> None:
    _end_run(tx, "failed")
    tx.emit(FailWorkflow(step, exception, attempts, elapsed))


def _process_timeout(tx: _Tx, tick: Timeout) -> None:
    """The run timer fired: re-arm if budget is left (after a resume), else time out."""
    timeout = tx.base.config.timeout
    if not tx.live or timeout is None:
        return
    remaining = timeout - tx.elapsed_alive
    if remaining > 1e-6:
        tx.emit(ScheduleTimeout(tx.now + remaining))
        return
    active = sorted(s for s in tx.base.steps if tx.step(s).in_progress)
    _end_run(tx, "timed_out")
    where = f"active steps: {', '.join(active)}" if active else "no step was active"
    tx.emit(
        Halt(
            "timeout",
            WorkflowTimeoutError(f"Operation timed out after {timeout} seconds ({where})"),
            WorkflowTimedOutEvent(timeout=timeout, active_steps=active),
        )
    )


def _process_cancel(tx: _Tx, tick: CancelRun) -> None:
    """Graceful cancel: stop workers but keep everything recorded (resumable)."""
    if not tx.live:
        return
    _cancel_all_workers(tx, keep_records=True)
    tx.status = "cancelled"
    tx.emit(
        Halt(
            "cancel",
            WorkflowCancelledByUser("Run was cancelled by the user"),
            WorkflowCancelledEvent(),
        )
    )


# ----------------------------------------------------------------------- short ticks


def _process_publish(tx: _Tx, tick: PublishTick) -> None:
    """A stream write: publish it while the run is live."""
    if tx.live and tick.event is not None:
        tx.emit(PublishEvent(tick.event))


def _process_wakeup(tx: _Tx, tick: Wakeup) -> None:
    """A delayed retry is due: dispatch it, and keep a wakeup for the next one."""
    if tx.live:
        _drain_queue(tx, tick.step)
        _arm_next_delayed_retry(tx, tick.step)


def _process_idle_check(tx: _Tx, tick: IdleCheck) -> None:
    """Publish ``WorkflowIdleEvent`` if the run is still quiescent."""
    tx.idle_check_pending = False
    if tx.live and tx.queued == 0 and tx.running == 0:
        if _fail_stuck_stream(tx):
            return
        tx.emit(PublishEvent(WorkflowIdleEvent()))


def _fail_stuck_stream(tx: _Tx) -> bool:
    """At a confirmed idle point, fail the run if an open stream can never close."""
    streams = tx.streams
    if not streams and not tx.releases:
        return False
    waiting_paths = [
        waiter.item.scope_path
        for step in tx.base.steps
        for waiter in tx.step(step).waiters.values()
        if waiter.resolved_event is None
    ]
    for key, release in sorted(tx.releases.items()):
        if release.stream_id not in streams:
            binding = tx.base.config.bindings_by_id.get(release.binding_id)
            source = binding.producer if binding is not None else "<unknown>"
            error = WorkflowRuntimeError(
                f"the collect buffer {key} of step {source!r} belongs to a stream that no "
                "longer exists, so its join can never fire"
            )
            _fail_run(tx, source, error, attempts=None, elapsed=None)
            return True
    for sid in sorted(streams.keys()):
        if any(sid in path for path in waiting_paths):
            continue
        stream = streams[sid]
        error = WorkflowRuntimeError(
            f"the fan-out stream {sid} opened by step {stream.source_step!r} can never "
            f"close: the run is idle with {stream.open_work_items} open work item(s) in it "
            "and no waiter that could resume them"
        )
        _fail_run(tx, stream.source_step, error, attempts=None, elapsed=None)
        return True
    return False


_PROCESSORS: dict[type, Callable[[_Tx, Any], None]] = {
    SessionStart: _process_session_start,
    AddEvent: _process_add_event,
    StepResult: _process_step_result,
    PublishTick: _process_publish,
    CancelRun: _process_cancel,
    Timeout: _process_timeout,
    Wakeup: _process_wakeup,
    WaiterTimeout: _process_waiter_timeout,
    IdleCheck: _process_idle_check,
}
