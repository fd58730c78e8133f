"""The pure reducer: ``reduce(state, tick) -> (state, commands)``.

One dispatcher maps each tick type to a processor; each processor reads top to bottom
as named phases.  Every processor works on a ``Tx``, the accumulator: the new
``RunState`` under construction (a copy of the input's fields that the phases change)
with the commands produced so far; ``commit`` hands it out as the new state.  The input
state is never mutated, and the new state shares every part that did not change: a tick
costs O(what it touches).

Time never comes from a clock: every decision uses ``tick.stamped_at``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

from tickwork.errors import WorkflowCancelledByUser, WorkflowTimeoutError
from tickwork.events import (
    StepFailedEvent,
    WorkflowCancelledEvent,
    WorkflowIdleEvent,
    WorkflowTimedOutEvent,
)
from tickwork.runtime.control_loop._holding import (
    describe_dropped,
    drop_unclaimed,
    forget_questions,
)
from tickwork.runtime.control_loop._routing import (
    claim_emission,
    close_finished_streams,
    count_open_work,
    deliver_event,
    emit_event,
    emit_events,
    emit_fanned_out,
    fail_stuck_stream,
    join_member_and_refill,
    release_held_events,
    settle_in_stream,
)
from tickwork.runtime.control_loop._tx import (
    FRESH_STEP,
    NO_QUEUE,
    Tx,
    cancel_all_workers,
    commit,
    complete_run,
    dispatch_or_queue,
    drain_queue,
    end_run,
    fail_run,
    finish_invocation,
    fresh_steps,
    invocation_order,
    mint_work_item,
    open_tx,
    put_step,
    set_status,
    start_invocation,
)
from tickwork.runtime.control_loop._waiters import (
    arm_waiter_timeouts,
    delete_waiters,
    describe_pending_waiters,
    process_waiter_timeout,
    register_waiter,
    rerun_waiters_with_requirements,
)
from tickwork.runtime.control_loop.streams import (
    commit_collect_ops,
    open_stream,
)
from tickwork.runtime.types.commands import (
    Command,
    Halt,
    PublishEvent,
    PublishStepState,
    ScheduleIdleCheck,
    ScheduleTimeout,
    ScheduleWakeup,
)
from tickwork.runtime.types.evolve import evolve as replace
from tickwork.runtime.types.evolve import new_record as _new
from tickwork.runtime.types.kinds import (
    IS_STOP,
    RETURNED,
    RETURNED_EVENT,
    RETURNED_LIST,
    RETURNED_NONE,
    RETURNED_STOP,
)
from tickwork.runtime.types.results import Completed, Failed, Suspended
from tickwork.runtime.types.slots import SlotPool
from tickwork.runtime.types.state import (
    NO_HOLDINGS,
    NOTHING_HELD,
    Invocation,
    RunState,
    WorkItem,
)
from tickwork.runtime.types.step_id import WORKER_NAMES, stream_id
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

__all__ = ["account_stream_writes", "initial_state", "reduce", "reduce_all"]


def initial_state(config: Any) -> RunState:
    """The state of a run that has not started: every step idle and empty.

    One record per config, shared by every run that starts from it: a state is a value
    nobody changes, and a run that starts allocates nothing here.
    """
    cached: RunState | None = config.__dict__.get("_initial_state")
    if cached is None:
        cached = RunState(config=config, steps=fresh_steps(config))
        object.__setattr__(config, "_initial_state", cached)  # a frozen config's cache
    return cached


def reduce(state: RunState, tick: Tick) -> tuple[RunState, list[Command]]:
    """Process one tick.  Pure: ``state`` is not modified and no clock is read."""
    kind = type(tick)
    if kind is PublishTick and not _may_schedule_idle_check(state):
        return _reduce_stream_write(state, tick)  # type: ignore[arg-type]  # a PublishTick
    # open_tx(state, tick.stamped_at), spelled out (a frame per tick): a change there
    # must be made here too (test_records_complete reads every slot of what this builds).
    tx: Tx = _new(RunState)  # type: ignore[assignment]  # a Tx: see there
    now = tx.now = tick.stamped_at
    tx.touched_streams = None
    tx._own_steps = None
    tx._draft_step = None
    tx._draft_running = None
    commands: list[Command] = []
    tx.commands = commands
    tx.quiet = False
    tx.config = state.config
    tx.steps = state.steps  # the input's map (read-only) until the first put_step copies it
    status = tx.status = state.status
    tx.live = status == "running"
    tx.is_running = state.is_running
    tx.queued = state.queued
    tx.running = state.running
    tx.waiter_index = state.waiter_index
    tx.streams = state.streams
    tx.releases = state.releases
    tx.stream_seq = state.stream_seq
    tx.work_item_seq = state.work_item_seq
    tx.invocation_seq = state.invocation_seq
    # _count_tick(tx, kind), spelled out on the fields as they are copied (one write
    # each instead of a copy and an update): a change there must be made here too.
    tx.journal_seq = state.journal_seq + 1
    elapsed, last = state.elapsed_alive, state.last_alive_stamp
    if kind is not SessionStart:
        if last is None:
            last = now
        elif now > last:
            elapsed += now - last
            last = now
    tx.elapsed_alive = elapsed
    tx.last_alive_stamp = last
    tx.idle_check_pending = state.idle_check_pending
    tx.holdings = state.holdings
    # _apply(tx, tick, kind), spelled out (a frame per tick): a change there must be
    # made here too.  A step result (most ticks) skips the table.
    if kind is StepResult:
        _process_step_result(tx, tick)  # type: ignore[arg-type]  # a StepResult
    else:
        _PROCESSORS[kind](tx, tick)
    if tx.holdings is not NO_HOLDINGS and tx.holdings.held:
        release_held_events(tx)
    if tx.touched_streams:
        close_finished_streams(tx)
    if not (tx.queued or tx.running):
        if tx.holdings.unclaimed:  # nothing left that could still wait for them
            drop_unclaimed(tx)
        if not tx.idle_check_pending:
            _schedule_idle_check_if_quiescent(tx, tick)
    # commit(tx), spelled out (a frame per tick): the new state keeps neither the
    # commands nor the drafts alive.
    tx.commands = tx._draft_step = tx._draft_running = None  # type: ignore[assignment]
    return tx, commands


def reduce_all(state: RunState, ticks: Iterable[Tick]) -> RunState:
    """The state after every tick of ``ticks`` in order (their commands are dropped).

    The same state as folding ``reduce`` over them, but one accumulator serves the
    whole fold and the run state is built once at the end instead of once per tick:
    this is how journals are replayed.  Pure: ``state`` is not modified.
    """
    tx = open_tx(state, 0.0)  # each tick sets its own time
    tx.quiet = True
    commands = tx.commands
    for tick in ticks:
        kind = type(tick)
        tx.now = tick.stamped_at
        commands.clear()
        _count_tick(tx, kind)
        _apply(tx, tick, kind)
    return commit(tx)


def _count_tick(tx: Tx, kind: type) -> None:
    """Every tick's bookkeeping, before its phases: one more journal sequence number,
    and (but for a ``SessionStart``) the alive time since the last input (``_accrued``;
    ``reduce`` spells this out)."""
    tx.journal_seq += 1
    if kind is not SessionStart:
        tx.elapsed_alive, tx.last_alive_stamp = _accrued(
            tx.elapsed_alive, tx.last_alive_stamp, tx.now
        )


def _apply(tx: Tx, tick: Tick, kind: type) -> None:
    """One tick's phases, in order, on the accumulator once the tick is counted
    (``_count_tick``; ``kind`` is ``type(tick)``).  ``reduce`` spells it out: a change
    here must be made there too."""
    _PROCESSORS[kind](tx, tick)
    if tx.holdings is not NO_HOLDINGS and tx.holdings.held:
        release_held_events(tx)
    if tx.touched_streams:
        close_finished_streams(tx)
    if not (tx.queued or tx.running):
        if tx.holdings.unclaimed:  # nothing left that could still wait for them
            drop_unclaimed(tx)
        if not tx.idle_check_pending:
            _schedule_idle_check_if_quiescent(tx, tick)


def _accrued(elapsed: float, last: float | None, now: float) -> tuple[float, float | None]:
    """``(elapsed alive time, last stamp)`` after an input stamped ``now``."""
    if last is None:
        return elapsed, now
    if now > last:
        return elapsed + (now - last), now
    return elapsed, last


def _may_schedule_idle_check(state: RunState) -> bool:
    """Whether an input now could leave the run quiescent with no idle check pending."""
    return not (state.queued or state.running or state.idle_check_pending)


def _reduce_stream_write(state: RunState, tick: PublishTick) -> tuple[RunState, list[Command]]:
    """A stream write while work is in flight: it changes only the run's counters.

    The same result as the general path (journal sequence, alive time, publish while
    live), without an accumulator: stream writes come by the thousand per step.
    """
    elapsed, last = _accrued(state.elapsed_alive, state.last_alive_stamp, tick.stamped_at)
    new_state = account_stream_writes(state, 1, elapsed, last)
    if state.status == "running" and tick.event is not None:
        return new_state, [PublishEvent(tick.event)]
    return new_state, []


def account_stream_writes(
    state: RunState, count: int, elapsed: float, last_stamp: float | None
) -> RunState:
    """The state after ``count`` stream writes (``_reduce_stream_write`` reduces one; the
    runner accounts a batch of those made while work was in flight).

    Each write advances the journal sequence by one and accrues alive time; ``elapsed``
    and ``last_stamp`` are the alive time and last stamp after the last of them, computed
    write by write with ``_accrued``'s arithmetic.  Their commands (publishing each
    event) are the caller's.
    """
    s = state
    return RunState(  # positional: several times cheaper than keyword evolve()
        s.config,
        s.steps,
        s.status,
        s.is_running,
        s.queued,
        s.running,
        s.waiter_index,
        s.streams,
        s.releases,
        s.stream_seq,
        s.work_item_seq,
        s.invocation_seq,
        s.journal_seq + count,
        elapsed,
        last_stamp,
        s.idle_check_pending,
        s.holdings,
    )


def _schedule_idle_check_if_quiescent(tx: Tx, tick: Tick) -> None:
    """After an input that leaves the run quiescent, ask for one idle check."""
    if tx.queued or tx.running or tx.idle_check_pending or not tx.live:
        return
    if not isinstance(tick, (SessionStart, IdleCheck)):
        tx.idle_check_pending = True
        tx.commands.append(ScheduleIdleCheck())


def _process_session_start(tx: Tx, tick: SessionStart) -> None:
    """Start or resume a session: rewind in-flight work, arm the run timer."""
    set_status(tx, "running")
    tx.is_running = True
    tx.last_alive_stamp = tx.now
    tx.idle_check_pending = False
    if not all(current is FRESH_STEP for current in tx.steps.values()):
        # A new run skips these: its steps hold nothing to rewind, retry or arm.
        _rewind_in_flight(tx)
        _arm_delayed_retries(tx)
        arm_waiter_timeouts(tx)
    rerun_waiters_with_requirements(tx)
    timeout = tx.config.timeout
    if timeout is not None:
        remaining = max(0.0, timeout - tx.elapsed_alive)
        tx.commands.append(ScheduleTimeout(tx.now + remaining))


def _rewind_in_flight(tx: Tx) -> None:
    """Put interrupted invocations back at the front of their queues, then dispatch."""
    for step in sorted(tx.steps):
        current = tx.steps[step]
        if not current.in_progress:
            continue
        interrupted = sorted(
            current.in_progress.values(), key=lambda inv: invocation_order(inv.invocation_id)
        )
        queue = current.queue
        for invocation in reversed(interrupted):
            identity = (invocation.invocation_id, invocation.received)
            item = replace(invocation.work_item(), resume_identity=identity)
            queue = queue.appendleft(item)
        put_step(
            tx,
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
    for step in sorted(tx.steps):
        drain_queue(tx, step)


def _arm_delayed_retries(tx: Tx) -> None:
    """After a resume, arm the wakeup chain of every step with delayed retries."""
    for step in tuple(tx.steps):
        _arm_next_delayed_retry(tx, step)


def _arm_next_delayed_retry(tx: Tx, step: str) -> None:
    """Schedule a wakeup for the earliest queued retry of ``step`` not due yet.

    Each wakeup re-arms the next one, so every delayed retry gets dispatched, not only
    the earliest.  Cost: O(queued delayed items of the step), which stay at the front.
    """
    future = [
        it.not_before
        for it in tx.steps[step].queue
        if it.not_before is not None and it.not_before > tx.now
    ]
    if future:
        tx.commands.append(ScheduleWakeup(min(future), step))


def _process_add_event(tx: Tx, tick: AddEvent) -> None:
    """An event enters the run: claim its key, resolve waiters, route, report unhandled."""
    if not tx.live or not claim_emission(tx, tick):
        return
    if tick.source_step is None and tx.holdings.questions:
        forget_questions(tx)  # the caller answered (or moved on)
    deliver_event(tx, tick.event, tick.target_step, tick.recovery_counts, (), tick.source_step)


def _process_step_result(tx: Tx, tick: StepResult) -> None:
    """An invocation finished.  Phases: find, stale check, outcome, finalize.

    A completed invocation's outcome (publish NOT_RUNNING, emit what the body returned,
    settle the item) is spelled out here rather than in a function of its own: every hop
    completes one, and the frame cost about 440 machine instructions per tick.
    """
    # Find: the in-flight invocation; none for a discarded (cancelled) one.
    if not tx.live:
        return
    current = tx.steps[tick.step]
    pair = current.in_progress.root
    invocation: Invocation | None
    if type(pair) is tuple and pair[0] == tick.invocation_id:
        invocation = pair[1]  # the step's only running invocation: get() without a frame
    elif type(pair) is dict:
        invocation = pair.get(tick.invocation_id)  # a busy step's: the same
    else:
        invocation = current.in_progress.get(tick.invocation_id)
    if invocation is None:
        return
    outcome = tick.outcome
    if type(outcome) is Completed:  # the usual outcome: one exact-type test
        # Stale check.  Buffer changes take effect when the invocation completes: a
        # suspended body runs again from the top and will make the same collect calls
        # on the same view.
        if outcome.collect_ops:
            committed = commit_collect_ops(
                current.collect_buffers, invocation.collect_view, outcome.collect_ops
            )
            if committed is None:
                _rerun_stale_invocation(tx, invocation)
                return
            current = replace(current, collect_buffers=committed)
            put_step(tx, tick.step, current)
        # Outcome: one lookup tells a list, a stop, None and an input request apart.
        value = outcome.value
        kind = RETURNED[type(value)]
        if kind == RETURNED_LIST:
            _apply_returned_list(tx, invocation, value)
        elif (
            invocation.scope_path  # (first: a top-level item, a chain's hop, is not one)
            and tx.queued
            and kind == RETURNED_EVENT
            and join_member_and_refill(tx, invocation, value, current)
        ):
            return  # a fan-out member joined its batch and its slot was refilled
        else:
            if (
                current.in_progress.size == 1
                and current.queue is NO_QUEUE
                and current.held is NOTHING_HELD
            ):
                # The step held nothing but this invocation (a chain's every hop):
                # finish_invocation()'s first case, spelled out (a frame per hop; a
                # change there must be made here too).
                own = tx._own_steps
                if own is None:
                    own = tx._own_steps = {**tx.steps}
                    tx.steps = own
                own[tick.step] = FRESH_STEP
                tx.running -= 1
                if not tx.quiet:
                    command = _new(PublishStepState)
                    command.step = tick.step
                    command.state = "not_running"
                    command.worker_id = WORKER_NAMES[invocation.worker_id]
                    command.input_type = type(invocation.event)
                    command.output_type = type(value)
                    command.has_output = True
                    command.event = value
                    tx.commands.append(command)
                held = NOTHING_HELD
            else:
                held = finish_invocation(tx, invocation, True, type(value), True, value, current)
            if kind == RETURNED_STOP:
                complete_run(tx, value)
                return  # the run is over: nothing to finalize
            if held.waiters.size:  # the usual step has none: skip the call
                delete_waiters(tx, invocation.step, invocation.work_item_id, None)
            if kind == RETURNED_EVENT:  # emit_event() without its frame: the usual case
                opened = deliver_event(
                    tx,
                    value,
                    None,
                    invocation.recovery_counts,
                    invocation.scope_path,
                    invocation.step,
                )
            elif kind == RETURNED_NONE:
                opened = 0
            else:  # an input request: published, then routed
                opened = emit_event(tx, value, invocation)
            if invocation.scope_path and tx.live:  # (a top-level item has nothing to settle)
                settle_in_stream(tx, invocation.scope_path, "completed", opened)
    elif isinstance(outcome, Suspended):
        finish_invocation(tx, invocation, publish=True, output=None)
        if outcome.deleted_waiters:
            delete_waiters(tx, invocation.step, invocation.work_item_id, outcome.deleted_waiters)
        register_waiter(tx, invocation, outcome)
    else:
        assert isinstance(outcome, Failed)
        _apply_failure(tx, invocation, outcome)
    # Finalize: a slot was freed (tx.queued: no step has a queue, the usual case).
    if tx.queued and tx.live and tx.steps[tick.step].queue.size:
        drain_queue(tx, tick.step)


def _rerun_stale_invocation(tx: Tx, invocation: Invocation) -> None:
    """The collect view went stale: run the same work item again, silently."""
    finish_invocation(tx, invocation, False)
    start_invocation(tx, invocation.step, invocation.work_item())


def _apply_returned_list(tx: Tx, invocation: Invocation, events: list[Any]) -> None:
    """The outcome phase of a completed invocation that returned a list: a fan-out, or
    several events."""
    held = finish_invocation(
        tx, invocation, True, type(events[-1] if events else None), True, events
    )
    # A stop ends the run: asked once per class, not once per element (a fan-out list
    # holds thousands of elements of one class).
    if any(IS_STOP[cls] for cls in set(map(type, events))):
        complete_run(tx, next(ev for ev in events if IS_STOP[type(ev)]))
        return
    item = invocation  # the work item it ran
    if held.waiters.size:
        delete_waiters(tx, invocation.step, item.work_item_id, None)
    if tx.config.steps[invocation.step].is_fan_out:
        _fan_out(tx, invocation, events)
        return
    opened = emit_events(tx, events, item.recovery_counts, item.scope_path, item.step)
    if tx.live and item.scope_path:
        settle_in_stream(tx, item.scope_path, "completed", opened)


def _fan_out(tx: Tx, invocation: Invocation, events: list[Any]) -> None:
    """Open a stream for a returned list and deliver its elements inside it."""
    item = invocation  # the work item it ran
    seq = tx.stream_seq
    tx.stream_seq = seq + 1
    new_stream = stream_id(item.scope_path, invocation.step, seq)
    bindings = tx.config.bindings_by_producer.get(invocation.step, ())
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
    settle_in_stream(tx, item.scope_path, "fanned_out", new_bindings=len(bindings))
    opened = emit_fanned_out(
        tx, events, item.recovery_counts, (*item.scope_path, new_stream), invocation.step
    )
    if tx.live:
        count_open_work(tx, new_stream, opened)


def _apply_failure(tx: Tx, invocation: Invocation, outcome: Failed) -> None:
    """Retry the work item, hand it to its ``@catch_error`` owner, or fail the run."""
    finish_invocation(tx, invocation, publish=True, output=None)
    if outcome.deleted_waiters:
        delete_waiters(tx, invocation.step, invocation.work_item_id, outcome.deleted_waiters)
    item = invocation  # the work item it ran
    if outcome.retry_delay is not None:
        _queue_retry(tx, invocation, outcome)
        return
    first = item.first_attempt_at if item.first_attempt_at is not None else invocation.dispatched_at
    attempts = item.attempts + 1
    elapsed = max(0.0, outcome.failed_at - first)
    if _hand_to_catch_error(tx, invocation, outcome, attempts, elapsed):
        return
    fail_run(tx, invocation.step, outcome.exception, attempts=attempts, elapsed=elapsed)


def _hand_to_catch_error(
    tx: Tx, invocation: Invocation, outcome: Failed, attempts: int, elapsed: float
) -> bool:
    """Deliver a ``StepFailedEvent`` to the owning handler if its budget allows."""
    owner = tx.config.catch_error_owner.get(invocation.step)
    if owner is None:
        return False
    item = invocation  # the work item it ran
    used = item.recovery_counts.get(owner, 0)
    if used + 1 > tx.config.steps[owner].max_recoveries:
        return False
    delete_waiters(tx, invocation.step, item.work_item_id, None)
    failed = StepFailedEvent(
        step_name=invocation.step,
        input_event=item.event,
        exception=outcome.exception,
        attempts=attempts,
        elapsed_seconds=elapsed,
        failed_at=datetime.fromtimestamp(outcome.failed_at, tz=timezone.utc),
    )
    handoff = WorkItem(
        work_item_id=mint_work_item(tx),
        step=owner,
        event=failed,
        scope_path=item.scope_path,
        recovery_counts={**item.recovery_counts, owner: used + 1},
    )
    dispatch_or_queue(tx, owner, handoff)
    return True


def _queue_retry(tx: Tx, invocation: Invocation, outcome: Failed) -> None:
    delay = outcome.retry_delay or 0.0
    first = invocation.first_attempt_at
    item = replace(
        invocation.work_item(),  # the queued retry outlives the invocation
        first_attempt_at=first if first is not None else invocation.dispatched_at,
        attempts=invocation.attempts + 1,
        last_exception=outcome.exception,
        last_failed_at=outcome.failed_at,
        not_before=(outcome.failed_at + delay) if delay > 0 else None,
    )
    current = tx.steps[invocation.step]
    put_step(tx, invocation.step, replace(current, queue=current.queue.appendleft(item)))
    tx.queued += 1
    if delay > 0:
        tx.commands.append(ScheduleWakeup(outcome.failed_at + delay, invocation.step))


def _process_timeout(tx: Tx, tick: Timeout) -> None:
    """The run timer fired: re-arm if budget is left (after a resume), else time out."""
    timeout = tx.config.timeout
    if not tx.live or timeout is None:
        return
    remaining = timeout - tx.elapsed_alive
    if remaining > 1e-6:
        tx.commands.append(ScheduleTimeout(tx.now + remaining))
        return
    active = sorted(s for s in tx.steps if tx.steps[s].in_progress)
    message = _timeout_message(tx, timeout, active)
    end_run(tx, "timed_out")
    tx.commands.append(
        Halt(
            "timeout",
            WorkflowTimeoutError(message),
            WorkflowTimedOutEvent(timeout=timeout, active_steps=active),
        )
    )


def _timeout_message(tx: Tx, timeout: float, active: list[str]) -> str:
    """What a timed-out run was doing: active steps, pending waiters, dropped events."""
    parts = [f"active steps: {', '.join(active)}" if active else "no step was active"]
    waiting = describe_pending_waiters(tx)
    if waiting:
        parts.append(f"waiting for: {waiting}")
    dropped = describe_dropped(tx.holdings)
    if dropped:
        parts.append(f"dropped because no step or waiter took them: {dropped}")
    return f"Operation timed out after {timeout} seconds ({'; '.join(parts)})"


def _process_cancel(tx: Tx, tick: CancelRun) -> None:
    """Graceful cancel: stop workers but keep everything recorded (resumable)."""
    if not tx.live:
        return
    cancel_all_workers(tx, keep_records=True)
    set_status(tx, "cancelled")
    tx.commands.append(
        Halt(
            "cancel",
            WorkflowCancelledByUser("Run was cancelled by the user"),
            WorkflowCancelledEvent(),
        )
    )


def _process_publish(tx: Tx, tick: PublishTick) -> None:
    """A stream write: publish it while the run is live."""
    if tx.live and tick.event is not None:
        tx.commands.append(PublishEvent(tick.event))


def _process_wakeup(tx: Tx, tick: Wakeup) -> None:
    """A delayed retry is due: dispatch it, and keep a wakeup for the next one."""
    if tx.live:
        drain_queue(tx, tick.step)
        _arm_next_delayed_retry(tx, tick.step)


def _process_idle_check(tx: Tx, tick: IdleCheck) -> None:
    """Publish ``WorkflowIdleEvent`` if the run is still quiescent."""
    tx.idle_check_pending = False
    if tx.live and tx.queued == 0 and tx.running == 0:
        if fail_stuck_stream(tx):
            return
        tx.commands.append(PublishEvent(WorkflowIdleEvent()))


_PROCESSORS: dict[type, Callable[[Tx, Any], None]] = {
    SessionStart: _process_session_start,
    AddEvent: _process_add_event,
    StepResult: _process_step_result,
    PublishTick: _process_publish,
    CancelRun: _process_cancel,
    Timeout: _process_timeout,
    Wakeup: _process_wakeup,
    WaiterTimeout: process_waiter_timeout,
    IdleCheck: _process_idle_check,
}
