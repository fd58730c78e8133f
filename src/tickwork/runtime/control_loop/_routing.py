"""Reducer phases that route events: emission claims, deliveries to steps and joins,
fan-out stream accounting (through ``.streams``), cuts and stuck-stream detection."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from tickwork.errors import WorkflowRuntimeError
from tickwork.events import (
    CollectionReleaseEvent,
    InputRequiredEvent,
    UnhandledEvent,
)
from tickwork.runtime.control_loop._holding import (
    blocks,
    hold_back,
    keep_unclaimed,
    remember_question,
    take_releasable,
)
from tickwork.runtime.control_loop._tx import (
    _NO_WAITERS,
    FIRST_SLOT,
    FRESH_STEP,
    NO_QUEUE,
    Tx,
    _log,
    dispatch_or_queue,
    drain_queue,
    fail_run,
    finish_invocation,
    invocation_order,
    mint_work_item,
    put_step,
    start_invocation,
    touch_stream,
    waiter_order,
)
from tickwork.runtime.control_loop._waiters import (
    delete_waiters,
    resolve_waiters,
)
from tickwork.runtime.control_loop.streams import (
    AccountingError,
    Release,
    Settlement,
    add_open_work,
    buffer_member,
    close_stream,
    nearest_binding,
    release_key,
    settle_open,
)
from tickwork.runtime.types.commands import (
    CancelWorker,
    PublishEvent,
    PublishStepState,
    RunWorker,
)
from tickwork.runtime.types.evolve import evolve as replace
from tickwork.runtime.types.evolve import new_record as _new
from tickwork.runtime.types.kinds import IS_INPUT_REQUIRED
from tickwork.runtime.types.persistent import PList, PMap, PQueue
from tickwork.runtime.types.state import (
    NO_SENDS,
    NOTHING_HELD,
    BindingSpec,
    HeldEvent,
    Invocation,
    ReleaseState,
    StepRunState,
    StepSpec,
    StreamState,
    WorkItem,
)
from tickwork.runtime.types.step_id import WORKER_NAMES
from tickwork.runtime.types.ticks import (
    AddEvent,
)


def claim_emission(tx: Tx, tick: AddEvent) -> bool:
    """Record a keyed send as routed; ``False`` if it was routed before or is orphaned."""
    if tick.emission_key is None or tick.source_step is None:
        return True
    inv_id, index = tick.emission_key
    current = tx.steps[tick.source_step]
    invocation = current.in_progress.get(inv_id)
    if invocation is None or index in invocation.received:
        return False
    updated = replace(invocation, received=invocation.received.add(index))
    put_step(
        tx, tick.source_step, replace(current, in_progress=current.in_progress.set(inv_id, updated))
    )
    return True


def deliver_event(
    tx: Tx,
    event: Any,
    target: str | None,
    recovery_counts: Mapping[str, int],
    scope_path: tuple[str, ...],
    producer: str | None,
) -> int:
    """Resolve waiters, then route ``event`` to every accepting step (or ``target``).

    ``producer`` is the step that returned or sent it (``None``: the caller).  Returns
    the number of new open work items this created in the event's stream (dispatched or
    queued work items, and an event held back for a blind waiter; buffered arrivals and
    woken waiters count 0).  An event nothing took is kept for waiters still to come
    (``._holding``).
    """
    if tx.holdings.blind.size and blocks(tx.holdings.blind, event):
        hold_back(tx, HeldEvent(event, target, recovery_counts, scope_path, producer))
        return 1
    woken: AbstractSet[str] | None
    if tx.waiter_index.empty:  # the usual run has no waiter: none to skip below
        woken, delivered = None, False
    else:
        woken = resolve_waiters(tx, event)
        delivered = bool(woken)
    opened = 0
    config = tx.config
    routes = (target,) if target is not None else config.routes[type(event)]
    for step in routes:
        if woken is not None and step in woken:
            continue
        delivered = True
        spec = config.steps[step]
        if spec.kind != "plain":  # a list[E] or multi-slot step: the event is buffered
            if spec.kind == "collect":  # (a member of a stream: no open work item)
                _arrive_at_collect_step(tx, step, event, scope_path)
            else:
                opened += _arrive_at_join(tx, step, event, recovery_counts, scope_path)
            continue
        # A plain step gets a new work item: the hottest construction of the reducer (a
        # hop routes one event), so built here without a class call or a frame (see
        # ``new_record``), every field written, and the id minted as
        # ``mint_work_item(tx)`` does.  Started at once (the usual case), it is built as
        # the invocation that runs it (``start_invocation`` writes the rest).
        seq = tx.work_item_seq
        tx.work_item_seq = seq + 1
        opened += 1
        current = tx.steps[step]
        if current.slots.busy >= spec.num_workers:  # every slot taken: it queues
            item = _work_item(f"wi-{seq}", step, event, scope_path, recovery_counts)
            dispatch_or_queue(tx, step, item)
            continue
        invocation = _new(Invocation)
        digits = f"{seq}"  # formatted once if the invocation id takes the same number
        invocation.work_item_id = "wi-" + digits
        invocation.step = step
        invocation.event = event
        invocation.bound_events = None
        invocation.scope_path = scope_path
        invocation.recovery_counts = recovery_counts
        invocation.attempts = 0
        invocation.first_attempt_at = None
        invocation.last_exception = None
        invocation.last_failed_at = None
        invocation.not_before = None
        invocation.resume_identity = None
        if current is not FRESH_STEP:
            start_invocation(
                tx, step, invocation, current, None, digits if tx.invocation_seq == seq else None
            )
            continue
        # The step is idle and empty (a chain's every hop): start_invocation()'s first
        # case, spelled out (a frame and six arguments per hop; a change there must be
        # made here too).
        started = tx.invocation_seq
        tx.invocation_seq = started + 1
        invocation.invocation_id = "inv-" + digits if started == seq else f"inv-{started}"
        invocation.worker_id = FIRST_SLOT[0]
        invocation.dispatched_at = tx.now
        invocation.received = NO_SENDS
        invocation.collect_view = NOTHING_HELD.collect_buffers
        invocation.waiters_view = _NO_WAITERS
        new = _new(StepRunState)
        new.queue = NO_QUEUE
        new.in_progress = in_progress = _new(PMap)
        in_progress.root = (invocation.invocation_id, invocation)
        in_progress.size = 1
        new.slots = FIRST_SLOT[1]
        new.held = NOTHING_HELD
        own = tx._own_steps
        if own is None:
            own = tx._own_steps = {**tx.steps}
            tx.steps = own
        own[step] = new
        tx.running += 1
        if not tx.quiet:
            command = _new(RunWorker)
            command.invocation = invocation
            tx.commands.append(command)
    if not delivered and not isinstance(event, InputRequiredEvent):
        _publish_unhandled(tx, event, target)
        keep_unclaimed(tx, event, producer)
    return opened


def release_held_events(tx: Tx) -> None:
    """Deliver the held events no blind waiter blocks any more, in arrival order.

    Each was one open work item of its stream while held; delivering it settles that.
    """
    for held in take_releasable(tx):
        if not tx.live:
            return
        opened = deliver_event(
            tx, held.event, held.target, held.recovery_counts, held.scope_path, held.producer
        )
        if held.scope_path:
            settle_in_stream(tx, held.scope_path, "completed", deliveries=opened)


def _arrive_at_collect_step(tx: Tx, step: str, event: Any, scope_path: tuple[str, ...]) -> None:
    """Buffer a stream member for the nearest enclosing stream bound to ``step``."""
    config = tx.config
    streams = tx.streams
    pair = streams.root
    binding: BindingSpec | None
    if type(pair) is tuple and scope_path and pair[0] == scope_path[-1]:
        # The innermost stream is the only open one (a flat fan-out, the usual case):
        # ``nearest_binding`` without its frames.
        stream_id = pair[0]
        binding = config.collectors[pair[1].source_step, step, type(event)]
    else:
        found = nearest_binding(streams, scope_path, config.collectors, step, type(event))
        stream_id, binding = found if found is not None else ("", None)
    if binding is None:
        _log.warning(
            "%s reached the list[E] step %r outside any fan-out stream bound to it; "
            "list[E] steps only collect members of a stream, so it is ignored",
            type(event).__name__,
            step,
        )
        return
    streams, releases, release = buffer_member(streams, tx.releases, stream_id, binding, event)
    tx.streams = streams
    tx.releases = releases
    if release is not None:
        _dispatch_release(tx, release)
        if binding.cancel_rest:
            _cut_stream(tx, stream_id)


def join_member_and_refill(
    tx: Tx, invocation: Invocation, value: Any, current: StepRunState
) -> bool:
    """A completed member of a fan-out stream whose returned event ``value`` joins the
    stream's ``list[E]`` batch, and whose slot the next queued item of its step takes:
    a fan-out's every tick, as one phase.  ``current`` is the step's state.

    The same state and commands as the general phases, in the same order:
    ``finish_invocation`` (NOT_RUNNING), ``deliver_event`` to the collect step
    (``_arrive_at_collect_step``, ``buffer_member``: no command), ``settle_in_stream``
    (``completed`` with no delivery: one open work item fewer) and ``drain_queue``
    (``start_invocation``: RUNNING).  Those cost eight frames and build the step's
    record twice; here each record is built once (``test_reduce_member_phase`` drives
    both and compares them).  A change to any of them must be made here too.

    Declines (returns ``False``, having changed nothing) unless the tick has exactly
    that shape: no blind or registered waiter could take the event, it goes to one
    step, a ``list[E]`` step bound (without ``Take``: ``RunConfig.member_joins``) to
    the run's only open stream, which is the member's own; the stream's only release
    state is that binding's, not fired; the step holds nothing but its queue and
    running work, every one of its slots was busy (a shared pool), its in-flight map is
    a small ``dict``, and the item at the front of its queue is due and new (neither a
    delayed retry nor a rewound invocation).
    """
    # Check: every condition under which the general phases do what this does.
    if tx.holdings.blind.size or not tx.waiter_index.empty:
        return False
    pair = tx.streams.root
    if type(pair) is not tuple or pair[0] != invocation.scope_path[-1]:
        return False
    stream_id, stream = pair
    config = tx.config
    cls = type(value)
    binding = config.member_joins[stream.source_step, cls]  # one route, to a list[E] step
    found = tx.releases.root
    if binding is None or type(found) is not tuple:
        return False
    release = found[1]
    count = stream.open_work_items - 1
    if (
        release.stream_id != stream_id
        or release.binding_id != binding.binding_id
        or release.released
        or count < 0
    ):
        return False
    step = invocation.step
    queue = current.queue
    front = queue._front
    slots = current.slots
    released = slots.released
    in_progress = current.in_progress
    running = in_progress.root
    inv_id = invocation.invocation_id
    if (
        front is None
        or current.held is not NOTHING_HELD
        or released is None
        or slots.busy != config.steps[step].num_workers
        or type(running) is not dict
        or inv_id not in running
    ):
        return False
    item: WorkItem = front[0]
    if item.not_before is not None or item.resume_identity is not None:
        return False
    # Refill: the slot freed goes to the front item, the step's record built once.  The
    # step was full (a shared gapless pool): the freed slot is its only free one, and
    # taking it back gives the same shared pool (``released[slot].acquired``).
    worker = invocation.worker_id
    seq = tx.invocation_seq
    tx.invocation_seq = seq + 1
    started_id = f"inv-{seq}"
    started = _new(Invocation)
    started.work_item_id = item.work_item_id
    started.step = step
    started.event = item.event
    started.bound_events = item.bound_events
    started.scope_path = item.scope_path
    started.recovery_counts = item.recovery_counts
    started.attempts = item.attempts
    started.first_attempt_at = item.first_attempt_at
    started.last_exception = item.last_exception
    started.last_failed_at = item.last_failed_at
    started.not_before = None
    started.resume_identity = None
    started.invocation_id = started_id
    started.worker_id = worker
    started.dispatched_at = tx.now
    started.received = NO_SENDS
    started.collect_view = NOTHING_HELD.collect_buffers
    started.waiters_view = _NO_WAITERS
    running = running.copy()
    del running[inv_id]
    running[started_id] = started
    progress = tx._draft_running = _new(PMap)
    progress.root = running
    progress.size = in_progress.size
    rest = _new(PQueue)
    rest._front = front[1]
    rest._back = queue._back
    rest.size = queue.size - 1
    new = _new(StepRunState)
    new.queue = rest
    new.in_progress = progress
    new.slots = slots
    new.held = NOTHING_HELD
    own = tx._own_steps
    if own is None:
        own = tx._own_steps = {**tx.steps}
        tx.steps = own
    own[step] = tx._draft_step = new
    tx.queued -= 1
    if not tx.quiet:
        done = _new(PublishStepState)
        done.step = step
        done.state = "not_running"
        done.worker_id = WORKER_NAMES[worker]
        done.input_type = type(invocation.event)
        done.output_type = cls
        done.has_output = True
        done.event = value
        run = _new(RunWorker)
        run.invocation = started
        commands = tx.commands
        commands.append(done)
        commands.append(run)
    # Join: the event at the end of the batch, the member's item settled.
    old = release.buffer
    buffer: PList[Any] = _new(PList)
    buffer._cell = (value, old._cell)
    buffer._len = old._len + 1
    buffered = _new(ReleaseState)
    buffered.binding_id = release.binding_id
    buffered.stream_id = stream_id
    buffered.buffer = buffer
    buffered.released = False
    releases = _new(PMap)
    releases.root = (found[0], buffered)
    releases.size = 1
    tx.releases = releases
    settled = _new(StreamState)
    settled.stream_id = stream.stream_id
    settled.source_step = stream.source_step
    settled.scope_path = stream.scope_path
    settled.open_work_items = count
    settled.accepting_binding_ids = stream.accepting_binding_ids
    streams = _new(PMap)
    streams.root = (stream.stream_id, settled)
    streams.size = 1
    tx.streams = streams
    if not count:
        touch_stream(tx, stream_id)
    return True


def _dispatch_release(tx: Tx, release: Release) -> None:
    """A binding fired: its batch is a work item of the target step, in the parent scope."""
    # Built without validation: its fields are the run's own events (validating them
    # only handed each one back, at about 1.8k machine instructions per member) and two
    # strings, and the result is the same (test_release_event_is_what_validation_builds).
    event = CollectionReleaseEvent.model_construct(
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
    dispatch_or_queue(tx, release.binding.target, item)


def _arrive_at_join(
    tx: Tx,
    step: str,
    event: Any,
    recovery_counts: Mapping[str, int],
    scope_path: tuple[str, ...],
) -> int:
    """Buffer a multi-slot arrival; dispatch the join when a batch is complete.

    An arrival that cannot complete a batch (some slot type has too few arrivals) is an
    O(1) append; the O(buffer) assignment search runs only when a batch may be ready.
    """
    spec = tx.config.steps[step]
    current = tx.steps[step]
    counts = dict(current.join_counts)
    counts[type(event)] = counts.get(type(event), 0) + 1
    appended = current.join_buffer.append(event)
    if not _may_complete(spec, counts):
        put_step(tx, step, replace(current, join_buffer=appended, join_counts=counts))
        return 0
    buffer = tuple(appended.to_list())
    found = _assign_slots(spec, buffer)
    if found is None:
        put_step(tx, step, replace(current, join_buffer=appended, join_counts=counts))
        return 0
    positions = dict(found)
    assignment = {name: buffer[pos] for name, pos in positions.items()}
    used = set(positions.values())
    rest = [ev for pos, ev in enumerate(buffer) if pos not in used]
    put_step(
        tx,
        step,
        replace(current, join_buffer=PList.of(rest), join_counts=dict(Counter(map(type, rest)))),
    )
    item = WorkItem(
        work_item_id=mint_work_item(tx),
        step=step,
        event=event,
        bound_events=assignment,
        scope_path=scope_path,
        recovery_counts=recovery_counts,
    )
    dispatch_or_queue(tx, step, item)
    return 1


def _may_complete(spec: StepSpec, counts: Mapping[type, int]) -> bool:
    """A cheap necessary condition for a batch: enough arrivals of every slot type.

    Subclass-mode slots can match several types, so they always go to the search.
    """
    if spec.subclass_mode:
        return True
    need = Counter(slot_type for _name, slot_type in spec.slots)
    return all(counts.get(slot_type, 0) >= count for slot_type, count in need.items())


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


def _publish_unhandled(tx: Tx, event: Any, target: str | None) -> None:
    etype = type(event)
    idle = tx.queued == 0 and tx.running == 0
    tx.commands.append(
        PublishEvent(
            UnhandledEvent(
                event_type=etype.__name__,
                qualified_name=f"{etype.__module__}.{etype.__qualname__}",
                step_name=target,
                idle=idle,
            )
        )
    )


def emit_events(
    tx: Tx,
    events: list[Any],
    recovery_counts: Mapping[str, int],
    scope_path: tuple[str, ...],
    producer: str,
) -> int:
    """Publish HITL requests and route each event; returns the work items opened."""
    opened = 0
    for event in events:
        if IS_INPUT_REQUIRED[type(event)]:
            tx.commands.append(PublishEvent(event))
            remember_question(tx, event)
    for event in events:
        opened += deliver_event(tx, event, None, recovery_counts, scope_path, producer)
        if not tx.live:
            break
    return opened


def emit_fanned_out(
    tx: Tx,
    events: list[Any],
    recovery_counts: Mapping[str, int],
    scope_path: tuple[str, ...],
    producer: str,
) -> int:
    """``emit_events`` for the elements of a fan-out list: the same state and commands.

    A fan-out delivers thousands of events in one tick.  When nothing can intercept them
    (no waiter, no blind waiter, no HITL request) and each goes only to plain steps,
    every delivery is a work item that starts in a free slot or joins its step's queue,
    so they are built in one pass and each step's queue is extended once at the end
    instead of rebuilt per element.  That is exact because a queued delivery means the
    step has no free slot, and nothing in the pass frees one: every later delivery to
    that step is queued too, in order.
    """
    if not _only_plain_deliveries(tx, events):
        return emit_events(tx, events, recovery_counts, scope_path, producer)
    routes = tx.config.routes
    specs = tx.config.steps
    commands = tx.commands
    queued: dict[str, list[WorkItem]] = {}  # step -> its deliveries that found no slot
    preparing: dict[tuple[str, type], PublishStepState] = {}
    first_seq = seq = tx.work_item_seq  # minted here: mint_work_item(tx) without a call
    # The last (step, class) queued, with its list and its PREPARING: the next delivery
    # of the same pair (a fan-out's every element, usually) is queued as well, and
    # reuses both without looking them up.
    last_step: str | None = None
    last_cls: type | None = None
    waiting: list[WorkItem]  # (bound with last_step: by the first delivery queued)
    command: PublishStepState
    for event in events:
        cls = type(event)
        for step in routes[cls]:
            # _work_item(f"wi-{seq}", ...) without its frame: once per element
            item = _new(WorkItem)
            item.work_item_id = f"wi-{seq}"
            item.step = step
            item.event = event
            item.bound_events = None
            item.scope_path = scope_path
            item.recovery_counts = recovery_counts
            item.attempts = 0
            item.first_attempt_at = None
            item.last_exception = None
            item.last_failed_at = None
            item.not_before = None
            item.resume_identity = None
            seq += 1
            if step is not last_step or cls is not last_cls:
                found = queued.get(step)
                if found is None:
                    if tx.steps[step].slots.busy < specs[step].num_workers:
                        start_invocation(tx, step, item)
                        continue
                    found = queued[step] = []
                waiting = found
                # Its PREPARING: one record per (step, event type) in a batch (commands
                # are values, and each one queued is the same).
                key = (step, cls)
                known = preparing.get(key)
                if known is None:
                    known = preparing[key] = PublishStepState(step, "preparing", "<enqueued>", cls)
                command = known
                last_step, last_cls = step, cls
            waiting.append(item)
            commands.append(command)
    tx.work_item_seq = seq
    for step, items in queued.items():
        current = tx.steps[step]
        put_step(tx, step, replace(current, queue=current.queue.extend(items)))
        tx.queued += len(items)
    return seq - first_seq  # one open work item per delivery


def _work_item(
    work_item_id: str,
    step: str,
    event: Any,
    scope_path: tuple[str, ...],
    recovery_counts: Mapping[str, int],
) -> WorkItem:
    """A new work item delivering ``event`` to ``step``: ``WorkItem(...)`` without a class
    call (see ``new_record``), every field written (``deliver_event`` builds its
    invocations the same way; ``emit_fanned_out`` spells it out: a change here must be
    made there too)."""
    item = _new(WorkItem)
    item.work_item_id = work_item_id
    item.step = step
    item.event = event
    item.bound_events = None
    item.scope_path = scope_path
    item.recovery_counts = recovery_counts
    item.attempts = 0
    item.first_attempt_at = None
    item.last_exception = None
    item.last_failed_at = None
    item.not_before = None
    item.resume_identity = None
    return item


def _only_plain_deliveries(tx: Tx, events: list[Any]) -> bool:
    """Whether delivering ``events`` can only start or queue work items of plain steps
    (``deliver_event`` would then do nothing else for any of them)."""
    if tx.holdings.blind.size or not tx.waiter_index.empty:
        return False
    config = tx.config
    for event_type in set(map(type, events)):
        targets = config.routes[event_type]
        if not targets or IS_INPUT_REQUIRED[event_type]:
            return False
        if any(config.steps[step].kind != "plain" for step in targets):
            return False
    return True


def emit_event(tx: Tx, event: Any, source: WorkItem) -> int:
    """``emit_events`` for the one event a step returned (the usual case)."""
    if IS_INPUT_REQUIRED[type(event)]:
        tx.commands.append(PublishEvent(event))
        remember_question(tx, event)
    return deliver_event(tx, event, None, source.recovery_counts, source.scope_path, source.step)


def settle_in_stream(
    tx: Tx,
    scope_path: tuple[str, ...],
    kind: Settlement,
    deliveries: int = 0,
    new_bindings: int = 0,
) -> None:
    """Classify a finished execution in its innermost stream (top level: nothing).

    A stream that was cut by ``Take(n, cancel_rest=True)`` while this item ran is gone,
    and there is nothing left to account for.
    """
    if not scope_path or not tx.live:
        return
    streams = tx.streams
    pair = streams.root
    if type(pair) is tuple and pair[0] == scope_path[-1]:
        stream = pair[1]  # the only open stream: get() without its frame
    else:
        stream = streams.get(scope_path[-1])
        if stream is None:
            return
    try:
        tx.streams, open_work = settle_open(streams, stream, kind, deliveries, new_bindings)
    except AccountingError as error:
        _fail_accounting(tx, scope_path[-1], error)
        return
    if open_work == 0:
        # Only a stream at zero may close at the end of the tick: anything that changes
        # the count later in the tick settles (or counts) again and is checked then.
        touch_stream(tx, scope_path[-1])


def count_open_work(tx: Tx, stream: str, count: int) -> None:
    tx.streams = add_open_work(tx.streams, stream, count)
    touch_stream(tx, stream)


def _fail_accounting(tx: Tx, stream: str, error: AccountingError) -> None:
    """An impossible accounting state fails the run loudly instead of hanging it."""
    state = tx.streams.get(stream)
    source = state.source_step if state is not None else "<unknown>"
    fail_run(tx, source, WorkflowRuntimeError(str(error)), attempts=None, elapsed=None)


def close_finished_streams(tx: Tx) -> None:
    """Close every touched stream whose open work reached zero; fire its releases."""
    touched = tx.touched_streams or ()
    pending = sorted(touched) if len(touched) > 1 else touched
    tx.touched_streams = None
    for stream in pending:
        if not tx.live:
            return
        state = tx.streams.get(stream)
        if state is None or state.open_work_items > 0:
            continue
        streams, releases, fired = close_stream(
            tx.streams, tx.releases, stream, tx.config.bindings_by_id
        )
        tx.streams = streams
        tx.releases = releases
        for release in fired:
            _dispatch_release(tx, release)


def _cut_stream(tx: Tx, stream: str) -> None:
    """``Take(n, cancel_rest=True)``: drop and cancel the rest of ``stream`` (and nested).

    Cost is O(queued + running + waiting work of the run), paid once per cut.
    """

    def inside(path: tuple[str, ...]) -> bool:
        return stream in path

    for step in tuple(tx.steps):
        current = tx.steps[step]
        kept = [it for it in current.queue if not inside(it.scope_path)]
        dropped = len(current.queue) - len(kept)
        if dropped:
            put_step(tx, step, replace(current, queue=PQueue.of(kept)))
            tx.queued += -dropped
        for invocation in sorted(
            tx.steps[step].in_progress.values(), key=lambda inv: invocation_order(inv.invocation_id)
        ):
            if inside(invocation.scope_path):
                tx.commands.append(CancelWorker(invocation.invocation_id))
                finish_invocation(tx, invocation, publish=True, output=None)
        for waiter in sorted(tx.steps[step].waiters.values(), key=waiter_order):
            if inside(waiter.item.scope_path):
                delete_waiters(tx, step, waiter.item.work_item_id, None)
        drain_queue(tx, step)
    nested = [sid for sid, st in tx.streams.items() if stream in (*st.scope_path, sid)]
    streams, releases = tx.streams, tx.releases
    for sid in nested:
        if sid == stream:
            continue
        for binding_id in tx.config.bindings_by_id:
            releases = releases.delete(release_key(sid, binding_id))
        streams = streams.delete(sid)
    tx.streams = streams
    tx.releases = releases
    if stream in tx.streams:
        streams, releases, fired = close_stream(
            tx.streams, tx.releases, stream, tx.config.bindings_by_id
        )
        tx.streams = streams
        tx.releases = releases
        for release in fired:
            _dispatch_release(tx, release)


def fail_stuck_stream(tx: Tx) -> bool:
    """At a confirmed idle point, fail the run if an open stream can never close."""
    streams = tx.streams
    if not streams and not tx.releases:
        return False
    waiting_paths = [
        waiter.item.scope_path
        for step in tx.steps
        for waiter in tx.steps[step].waiters.values()
        if waiter.resolved_event is None
    ]
    for key, release in sorted(tx.releases.items()):
        if release.stream_id not in streams:
            binding = tx.config.bindings_by_id.get(release.binding_id)
            source = binding.producer if binding is not None else "<unknown>"
            error = WorkflowRuntimeError(
                f"the collect buffer {key} of step {source!r} belongs to a stream that no "
                "longer exists, so its join can never fire"
            )
            fail_run(tx, source, error, attempts=None, elapsed=None)
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
        fail_run(tx, stream.source_step, error, attempts=None, elapsed=None)
        return True
    return False
