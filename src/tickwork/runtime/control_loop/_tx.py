"""The reducer's accumulator and its dispatch primitives.

A reduction works on a ``Tx``: the new run state under construction (the input's
fields, changed in place, and the steps it changed) with the commands it produced;
``commit`` hands it out as the new state.  The functions here are the moves every phase
makes: dispatch a work item to a free slot or queue it, drain a queue, free a slot, end
the run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from tickwork.runtime.types.commands import (
    CancelWorker,
    Command,
    CompleteRun,
    FailWorkflow,
    PublishStepState,
    RunWorker,
)
from tickwork.runtime.types.evolve import new_record as _new
from tickwork.runtime.types.persistent import SMALL_MAP_SIZE, PMap, PQueue
from tickwork.runtime.types.slots import SlotPool
from tickwork.runtime.types.state import (
    EMPTY_PMAP,
    NO_HOLDINGS,
    NO_SENDS,
    NO_WAITER_INDEX,
    NOTHING_HELD,
    Invocation,
    RunState,
    RunStatus,
    StepHeld,
    StepRunState,
    Waiter,
    WorkItem,
)
from tickwork.runtime.types.step_id import WORKER_NAMES

FRESH_STEP = StepRunState()
NO_QUEUE = FRESH_STEP.queue
"""The empty queue every step starts with (compare with ``is``)."""
FIRST_SLOT = FRESH_STEP.slots.acquire()
"""What an idle, empty step's pool gives every time (slot 0, a shared pool): the usual
step of a chain starts from ``FRESH_STEP`` on every hop."""


def fresh_steps(config: Any) -> Mapping[str, StepRunState]:
    """Every step of ``config`` idle and empty: one shared mapping per config (read-only,
    as every mapping of a state is), cached on the frozen config."""
    steps: Mapping[str, StepRunState] | None = config.__dict__.get("_fresh_steps")
    if steps is None:
        steps = {name: FRESH_STEP for name in config.steps}
        object.__setattr__(config, "_fresh_steps", steps)
    return steps


_NO_WAITERS: Mapping[str, Waiter] = {}


_log = logging.getLogger("tickwork.runtime")


if TYPE_CHECKING:

    class Tx(RunState):
        """The type of the accumulator: a ``RunState`` with its working slots typed."""

        __slots__ = ()
        now: float
        touched_streams: list[str] | None
        _own_steps: dict[str, StepRunState] | None
        """``steps`` once this reduction copied the input's map (see ``put_step``)."""
        _draft_step: StepRunState | None
        """The step state this reduction built last (see ``writable_step``)."""
        _draft_running: PMap[str, Invocation] | None
        """The in-flight map with a ``dict`` root this reduction built last: a queued
        invocation that starts where one finished adds itself to it in place (see
        ``start_invocation``)."""
        commands: list[Command]
        quiet: bool
        """Set by folds that drop commands: the per-step ones are then not even built."""
        live: bool
        """Whether the run is running (kept in step with ``status`` by ``set_status``:
        read on every phase)."""

else:
    Tx = RunState
"""The accumulator of one reduction: the new run state under construction.

``open_tx`` makes one as a copy of the input state's fields; the phases change its
fields (the run's counters, ``streams``, ...) and its steps (``put_step``), and append
commands (``tx.commands``); ``commit`` hands the same object out as the new state.  A
reduction thus builds one record for the state, not an accumulator and then a state:
the working slots it needs besides the fields are ``ReductionSlots``.  At run time it
is a plain ``RunState``, not a subclass (the type checker sees one that types the
working slots), so that handing it out changes nothing: turning a subclass instance
into a ``RunState`` cost about 490 machine instructions per tick.  The moves it makes
are the functions of this module (a record carries no behaviour).

Read ``steps`` directly (``tx.steps[name]``) and change it with ``put_step`` (or
``writable_step``); set ``status`` with ``set_status``, which keeps ``live`` in step.
"""


def put_step(tx: Tx, name: str, value: StepRunState) -> None:
    """Set step ``name``'s new state, copying the input's map on the first change.

    ``start_invocation`` and ``finish_invocation`` spell it out (a frame each per hop):
    a change here must be made there too.  The copy is ``{**steps}``: the same dict as
    ``dict(steps)`` without a class call (about 240 machine instructions fewer)."""
    own = tx._own_steps
    if own is None:
        own = tx._own_steps = {**tx.steps}
        tx.steps = own
    own[name] = value


def touch_stream(tx: Tx, stream: str) -> None:
    """Mark ``stream`` for the end-of-tick check for finished streams."""
    touched = tx.touched_streams
    if touched is None:
        tx.touched_streams = [stream]  # usually the only one: no set per tick
    elif stream not in touched:
        touched.append(stream)


def mint_work_item(tx: Tx) -> str:
    """A new work item id (``work_item_id`` of the next sequence number)."""
    seq = tx.work_item_seq
    tx.work_item_seq = seq + 1
    # ``work_item_id(seq)``, spelled out: an f-string formats an int without parsing
    # a format string (two ids per hop; ``test_ids_match_step_id`` keeps them equal).
    return f"wi-{seq}"


def set_status(tx: Tx, value: str) -> None:
    tx.status = cast(RunStatus, value)
    tx.live = value == "running"


def commit(tx: Tx) -> RunState:
    """The new run state: ``tx`` itself, its references to the commands dropped (the new
    state must not keep them alive), and to the drafts (which another phase may have
    replaced).  ``_own_steps`` (``None`` or ``steps`` itself) and
    ``touched_streams`` (``None`` after every tick) keep nothing else alive, and stay.
    ``reduce`` spells it out: a change here must be made there too."""
    tx.commands = tx._draft_step = tx._draft_running = None  # type: ignore[assignment]
    return tx


def open_tx(base: RunState, now: float) -> Tx:
    """The accumulator of a reduction of ``base`` by inputs stamped ``now``.

    Built without a class call (see ``new_record``): every field of ``RunState`` and
    every working slot is written here.  ``reduce`` spells it out (a frame per tick): a
    change here must be made there too.
    """
    tx: Tx = _new(RunState)  # type: ignore[assignment]  # a Tx: see there
    tx.now = now
    tx.touched_streams = None
    tx._own_steps = None
    tx._draft_step = None
    tx._draft_running = None
    tx.commands = []
    tx.quiet = False
    tx.config = base.config
    tx.steps = base.steps  # the input's map (read-only) until the first put_step copies it
    status = tx.status = base.status
    tx.live = status == "running"
    tx.is_running = base.is_running
    tx.queued = base.queued
    tx.running = base.running
    tx.waiter_index = base.waiter_index
    tx.streams = base.streams
    tx.releases = base.releases
    tx.stream_seq = base.stream_seq
    tx.work_item_seq = base.work_item_seq
    tx.invocation_seq = base.invocation_seq
    tx.journal_seq = base.journal_seq
    tx.elapsed_alive = base.elapsed_alive
    tx.last_alive_stamp = base.last_alive_stamp
    tx.idle_check_pending = base.idle_check_pending
    tx.holdings = base.holdings
    return tx


def invocation_order(invocation_id: str) -> int:
    """Sort key of invocation ids: minting order (maps iterate in hash order, and
    anything the reducer emits while walking one must not depend on the process)."""
    return int(invocation_id.rsplit("-", 1)[1])


def waiter_order(waiter: Waiter) -> str:
    """Sort key of waiters: their id."""
    return waiter.waiter_id


def step_state(
    queue: PQueue[WorkItem],
    in_progress: PMap[str, Invocation],
    slots: SlotPool,
    current: StepRunState,
) -> StepRunState:
    """``current`` with a new queue, in-flight map and slots (what a dispatch, a queued
    item or a finished invocation changes): built without a class call."""
    new = _new(StepRunState)
    new.queue = queue
    new.in_progress = in_progress
    new.slots = slots
    new.held = current.held
    return new


def writable_step(tx: Tx, step: str, current: StepRunState) -> StepRunState:
    """Step ``step``'s new state, whose fields the caller then changes: ``current``
    itself if this reduction built it (the step changes twice in a tick: an invocation
    finishes and a queued one starts), else a copy of it, put in ``tx.steps``.

    A state built by this reduction is still under construction: nothing holds it but
    ``tx.steps`` (no command, no record, not the input), so changing it in place is
    building it; the last one built is ``tx._draft_step``.
    """
    if current is tx._draft_step:
        return current
    new = _new(StepRunState)
    new.queue = current.queue
    new.in_progress = current.in_progress
    new.slots = current.slots
    new.held = current.held
    own = tx._own_steps  # put_step(tx, step, new) without its frame
    if own is None:
        own = tx._own_steps = {**tx.steps}
        tx.steps = own
    own[step] = tx._draft_step = new
    return new


def start_invocation(
    tx: Tx,
    step: str,
    item: WorkItem,
    current: StepRunState | None = None,
    queue: PQueue[WorkItem] | None = None,
    digits: str | None = None,
) -> StepRunState:
    """Dispatch ``item`` to the smallest free slot: record the invocation, ask for a worker.

    ``item`` is a ``WorkItem`` (queued, handed over, re-delivered), whose fields the
    new ``Invocation`` copies, or an ``Invocation`` this reduction has just made with
    only its work item's fields written, which is completed in place: ``deliver_event``
    starts a plain step that way, one record per hop.  No other ``Invocation`` may be
    passed (one the state holds is turned into a ``WorkItem`` first, see
    ``Invocation.work_item``).  ``current`` is the step's state when the caller already
    holds it; ``queue`` is the step's queue once ``item`` was taken from it (a drained
    item), so that the step's new state is built once.  ``digits`` is
    ``str(tx.invocation_seq)`` when the caller has it: a chain's hop mints its work item
    and its invocation from the same number, and formatting it once saves about 700
    machine instructions (``deliver_event``).  Returns the step's new state (what
    ``tx.steps[step]`` now holds: ``drain_queue`` goes on from it).  ``deliver_event``
    spells out the first case (a step idle and empty): a change here must be made
    there too.
    """
    if current is None:
        current = tx.steps[step]
    if current is FRESH_STEP:  # idle and empty (a chain's every hop): no waiter either
        slot, slots = FIRST_SLOT
        held, waiters_view = NOTHING_HELD, _NO_WAITERS
    else:
        slot, slots = current.slots.acquired or current.slots.acquire()  # a shared pool
        held = current.held  # knows what acquire() gives: no call
        if held is NOTHING_HELD:  # the usual step: no waiter can concern the item
            waiters_view = _NO_WAITERS
        else:
            waiters = held.waiters
            ids = held.waiters_by_item.get(item.work_item_id) if waiters.size else None
            waiters_view = {wid: waiters[wid] for wid in ids} if ids else _NO_WAITERS
    resumed = item.resume_identity
    if resumed is None:  # a new invocation: mint its id
        seq = tx.invocation_seq
        tx.invocation_seq = seq + 1
        # invocation_id(seq), spelled out as mint_work_item() does
        inv_id = f"inv-{seq}" if digits is None else "inv-" + digits
        received = NO_SENDS
    else:
        inv_id, received = resumed
    if type(item) is Invocation:  # deliver_event's: its work item's fields are written
        invocation = item
    else:  # Invocation(...) without a class call: the work item's fields, then its own
        invocation = _new(Invocation)
        invocation.work_item_id = item.work_item_id
        invocation.step = step
        invocation.event = item.event
        invocation.bound_events = item.bound_events
        invocation.scope_path = item.scope_path
        invocation.recovery_counts = item.recovery_counts
        invocation.attempts = item.attempts
        invocation.first_attempt_at = item.first_attempt_at
        invocation.last_exception = item.last_exception
        invocation.last_failed_at = item.last_failed_at
        invocation.not_before = item.not_before
        invocation.resume_identity = None
    invocation.invocation_id = inv_id
    invocation.worker_id = slot
    invocation.dispatched_at = tx.now
    invocation.received = received
    invocation.collect_view = held.collect_buffers
    invocation.waiters_view = waiters_view
    if current is tx._draft_step:  # writable_step() spelled out: every hop dispatches
        new = current  # (an invocation of this step finished in this tick)
    else:
        new = _new(StepRunState)
        new.held = held
        own = tx._own_steps  # put_step(tx, step, new) without its frame
        if own is None:
            own = tx._own_steps = {**tx.steps}
            tx.steps = own
        own[step] = new
    new.queue = current.queue if queue is None else queue
    in_progress = current.in_progress
    if not in_progress.size:  # the step's only running invocation: its one-entry map,
        new.in_progress = in_progress = _new(PMap)  # built as set() builds it
        in_progress.root = (inv_id, invocation)
        in_progress.size = 1
    elif in_progress is tx._draft_running and in_progress.size < SMALL_MAP_SIZE:
        # A map this reduction built (an invocation of this step finished, and this one
        # takes its slot: a busy step's usual tick) is still under construction, held by
        # nothing but the step's new state: it takes the new entry in place.
        running = in_progress.root
        running[inv_id] = invocation
        in_progress.size = len(running)
        new.in_progress = in_progress
    else:
        new.in_progress = in_progress.set(inv_id, invocation)
    new.slots = slots
    tx.running += 1
    if not tx.quiet:
        command = _new(RunWorker)
        command.invocation = invocation
        tx.commands.append(command)
    return new


def dispatch_or_queue(tx: Tx, step: str, item: WorkItem) -> None:
    """Run ``item`` in the smallest free slot, or queue it (publishing PREPARING)."""
    current = tx.steps[step]
    if current.slots.busy < tx.config.steps[step].num_workers:
        start_invocation(tx, step, item, current)
        return
    put_step(
        tx,
        step,
        step_state(current.queue.append(item), current.in_progress, current.slots, current),
    )
    tx.queued += 1
    tx.commands.append(PublishStepState(step, "preparing", "<enqueued>", type(item.event)))


def drain_queue(tx: Tx, step: str) -> None:
    """Fill free slots of ``step`` with the first eligible queued items, in order."""
    workers = tx.config.steps[step].num_workers
    now = tx.now
    current = tx.steps[step]
    while True:
        queue = current.queue
        if not queue.size or current.slots.busy >= workers:
            return
        front = queue._front  # popleft() without its frame (a busy step drains one per tick)
        if front is not None:
            item = front[0]
            rest = _new(PQueue)
            rest._front = front[1]
            rest._back = queue._back
            rest.size = queue.size - 1
        else:
            item, rest = queue.popleft()
        if item.not_before is not None and item.not_before > now:
            # A delayed retry at the front (rare): take the first item that is due.
            due, rest = queue.pop_first(lambda it: it.not_before is None or it.not_before <= now)
            if due is None:
                return
            item = due
        tx.queued += -1
        current = start_invocation(tx, step, item, current, rest)


def finish_invocation(
    tx: Tx,
    invocation: Invocation,
    publish: bool,
    output: type | None = None,
    has_output: bool = False,
    value: Any = None,
    current: StepRunState | None = None,
) -> StepHeld:
    """Free the invocation's slot and (with ``publish``) publish its NOT_RUNNING.

    ``current`` is the step's state when the caller already holds it.

    Returns what the step holds besides its queue and running work (``held``, which
    this does not change): the caller's next question is whether the step has waiters,
    and the step's state is then one lookup away.  ``_process_step_result`` spells out
    the first case (a step left fresh): a change there must be made here too."""
    step = invocation.step
    if current is None:
        current = tx.steps[step]
    if current.in_progress.size == 1 and current.queue is NO_QUEUE and current.held is NOTHING_HELD:
        # The step held nothing but this invocation (the usual case): it is fresh again,
        # and the fresh state is shared instead of built (put_step() without its frame).
        own = tx._own_steps
        if own is None:
            own = tx._own_steps = {**tx.steps}
            tx.steps = own
        own[step] = FRESH_STEP
        held = NOTHING_HELD
    else:
        in_progress = current.in_progress
        running = in_progress.root
        inv_id = invocation.invocation_id
        if type(running) is dict and in_progress.size > 2 and inv_id in running:
            # delete() without its frame (a busy step's map is a small dict), and the
            # new map is this reduction's draft (see ``start_invocation``).
            running = running.copy()
            del running[inv_id]
            in_progress = tx._draft_running = _new(PMap)
            in_progress.root = running
            in_progress.size = len(running)
        else:
            in_progress = in_progress.delete(inv_id)
        slots = current.slots
        released = slots.released  # a shared pool knows what release() gives: no call
        if released is not None:
            slots = released[invocation.worker_id]
        else:
            slots = slots.release(invocation.worker_id)
        held = current.held
        if current is tx._draft_step:  # writable_step() without its frame
            new = current
        else:
            new = _new(StepRunState)
            new.queue = current.queue
            new.held = held
            own = tx._own_steps
            if own is None:
                own = tx._own_steps = {**tx.steps}
                tx.steps = own
            own[step] = tx._draft_step = new
        new.in_progress = in_progress
        new.slots = slots
    tx.running -= 1
    if publish and not tx.quiet:
        command = _new(PublishStepState)
        command.step = step
        command.state = "not_running"
        command.worker_id = WORKER_NAMES[invocation.worker_id]
        command.input_type = type(invocation.event)
        command.output_type = output
        command.has_output = has_output
        command.event = value
        tx.commands.append(command)
    return held


def cancel_all_workers(tx: Tx, keep_records: bool) -> list[str]:
    """Cancel every running invocation; returns the sorted names of active steps."""
    active: set[str] = set()
    for step in tuple(tx.steps):
        current = tx.steps[step]
        if current.in_progress.size:
            for inv_id in sorted(current.in_progress, key=invocation_order):
                tx.commands.append(CancelWorker(inv_id))
            active.add(step)
        if not keep_records and current is not FRESH_STEP:
            put_step(tx, step, FRESH_STEP)
    if not keep_records:
        fresh = fresh_steps(tx.config)
        if tx.steps is not fresh and list(tx.steps) == list(fresh):
            # Every step is fresh now: share the config's mapping (a finished run keeps
            # none of its own).
            tx.steps = fresh
            tx._own_steps = None
        tx.queued = 0
        tx.running = 0
        # The shared empty containers: a finished run keeps no containers of its own.
        tx.waiter_index = NO_WAITER_INDEX
        tx.streams = EMPTY_PMAP
        tx.releases = EMPTY_PMAP
        tx.holdings = NO_HOLDINGS
    return sorted(active)


def end_run(tx: Tx, status: str) -> list[str]:
    active = cancel_all_workers(tx, keep_records=False)
    set_status(tx, status)
    tx.is_running = False
    return active


def complete_run(tx: Tx, stop_event: Any) -> None:
    end_run(tx, "completed")
    tx.commands.append(CompleteRun(stop_event))


def fail_run(
    tx: Tx,
    step: str,
    exception: BaseException,
    attempts: int | None,
    elapsed: float | None,
) -> None:
    end_run(tx, "failed")
    tx.commands.append(FailWorkflow(step, exception, attempts, elapsed))
