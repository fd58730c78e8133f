"""The run state: an immutable config shared by every run of a workflow, plus the
per-run part that the reducer replaces tick by tick.

Records are **values**: nothing ever changes one after it is built; the reducer makes
a new record (``evolve``) instead.  They are slotted dataclasses without ``frozen=True``
on purpose: a frozen dataclass routes every field of ``__init__`` through
``object.__setattr__``, which made building records about 7x slower, and a tick builds
a dozen of them.  Immutability is enforced by the reducer's property tests (the input
state is compared before and after every reduction) instead of at run time.
Containers that can grow with the run (queues, in-flight maps, waiters, buffers) are
persistent containers from ``tickwork.runtime.types.persistent``, so one tick copies
only what it touches.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from tickwork.runtime.types.evolve import MISSING, new_record, register_evolver
from tickwork.runtime.types.persistent import EMPTY_MAPPING, PList, PMap, PQueue
from tickwork.runtime.types.slots import SlotPool
from tickwork.runtime.types.waiter_index import WaiterIndex

__all__ = [
    "BindingSpec",
    "CollectBuffer",
    "EMPTY_PMAP",
    "NO_WAITER_INDEX",
    "HeldEvent",
    "Holdings",
    "NO_HOLDINGS",
    "NOTHING_HELD",
    "UnclaimedEvent",
    "ReleaseState",
    "StreamState",
    "Invocation",
    "RunConfig",
    "RunState",
    "NO_SENDS",
    "RunStatus",
    "SendIndexes",
    "StepHeld",
    "StepRunState",
    "StepSpec",
    "Waiter",
    "WorkItem",
]

# Shared empty defaults.  Every container of a record is immutable (persistent, or a
# mapping nobody mutates), so one empty instance serves every record; a default_factory
# would instead cost a check per field in every constructor call, and the reducer
# builds a dozen records per tick.
_EMPTY_MAP: PMap[Any, Any] = PMap()
_EMPTY_LIST: PList[Any] = PList()
_EMPTY_QUEUE: PQueue[Any] = PQueue()
_NO_SLOTS = SlotPool()
_NO_WAITERS = WaiterIndex()
EMPTY_PMAP: PMap[Any, Any] = _EMPTY_MAP
"""The shared empty ``PMap`` of the records' defaults."""
NO_WAITER_INDEX = _NO_WAITERS
"""The shared empty ``WaiterIndex`` of the records' defaults."""

StepKind = Literal["plain", "join", "collect"]
RunStatus = Literal["pending", "running", "completed", "failed", "timed_out", "cancelled"]


@dataclass(frozen=True, slots=True)
class StepSpec:
    """What the reducer needs to know about one step (derived from its ``StepConfig``)."""

    name: str
    accepted: tuple[type, ...]
    subclass_mode: bool = False
    num_workers: int = 4
    kind: StepKind = "plain"
    slots: tuple[tuple[str, type], ...] = ()
    is_catch_error: bool = False
    max_recoveries: int = 1
    is_fan_out: bool = False
    bare_return_types: tuple[type, ...] = ()
    list_only_types: frozenset[type] = frozenset()

    def accepts(self, event_type: type) -> bool:
        """Whether an event of ``event_type`` matches this step's parameter."""
        if self.subclass_mode:
            return issubclass(event_type, self.accepted)
        return event_type in self.accepted


@dataclass(frozen=True, slots=True)
class BindingSpec:
    """A ``list[E]`` step bound to a fan-out producer's streams (api.md §21.1.2)."""

    binding_id: str
    producer: str
    target: str
    element_types: tuple[type, ...]
    subclass_mode: bool = False
    take: int | None = None
    cancel_rest: bool = False

    def collects(self, event_type: type) -> bool:
        """Whether an event of ``event_type`` is a member this binding collects."""
        if self.subclass_mode:
            return issubclass(event_type, self.element_types)
        return event_type in self.element_types


class _Routes(dict[type, tuple[str, ...]]):
    """Event type -> the accepting steps, each entry computed when first asked for: a
    pure function of the steps, so memoizing it never changes what the reducer does."""

    def __init__(self, steps: Mapping[str, StepSpec]) -> None:
        super().__init__()
        self._steps = steps

    def __missing__(self, event_type: type) -> tuple[str, ...]:
        routes = self[event_type] = tuple(
            name
            for name, spec in self._steps.items()
            if not spec.is_catch_error and spec.accepts(event_type)
        )
        return routes


class _Collectors(dict[tuple[str, str, type], "BindingSpec | None"]):
    """``(producer, target, event type)`` -> the first of ``producer``'s bindings by which
    ``target`` collects events of that type (``None``: none), each entry computed when
    first asked for: a pure function of the bindings, memoized as ``_Routes`` is."""

    def __init__(self, bindings_by_producer: Mapping[str, tuple[BindingSpec, ...]]) -> None:
        super().__init__()
        self._bindings = bindings_by_producer

    def __missing__(self, key: tuple[str, str, type]) -> BindingSpec | None:
        producer, target, event_type = key
        found = self[key] = next(
            (
                binding
                for binding in self._bindings.get(producer, ())
                if binding.target == target and binding.collects(event_type)
            ),
            None,
        )
        return found


class _MemberJoins(dict[tuple[str, type], "BindingSpec | None"]):
    """``(producer, event type)`` -> the binding by which the only step that takes such
    an event collects it as a member of ``producer``'s streams, when that step is a
    ``list[E]`` step and the binding has no ``Take`` (``None`` otherwise: no route or
    several, another kind of step, no binding, a ``Take``).  What a fan-out member's
    tick asks (``join_member_and_refill``): one lookup instead of four.  Each entry is
    computed when first asked for, from ``routes``, ``steps`` and ``collectors``: a
    pure function of the config, memoized as ``_Routes`` is."""

    def __init__(
        self,
        routes: Mapping[type, tuple[str, ...]],
        steps: Mapping[str, StepSpec],
        collectors: Mapping[tuple[str, str, type], BindingSpec | None],
    ) -> None:
        super().__init__()
        self._routes = routes
        self._steps = steps
        self._collectors = collectors

    def __missing__(self, key: tuple[str, type]) -> BindingSpec | None:
        producer, event_type = key
        routes = self._routes[event_type]
        found: BindingSpec | None = None
        if len(routes) == 1 and self._steps[routes[0]].kind == "collect":
            binding = self._collectors[producer, routes[0], event_type]
            if binding is not None and binding.take is None:
                found = binding
        self[key] = found
        return found


@dataclass(frozen=True)
class RunConfig:
    """The immutable part of a run's state, computed once per workflow instance.

    ``routes`` maps an event type to the names of the steps that accept it, in
    declaration order (``@catch_error`` handlers excluded); ``collectors`` maps
    ``(producer, target, event type)`` to the binding by which ``target`` collects such
    members of ``producer``'s streams; ``member_joins`` (see ``_MemberJoins``) maps
    ``(producer, event type)`` to the binding of the one ``list[E]`` step such a member
    goes to.  All three are filled on first use.
    """

    workflow_name: str
    steps: Mapping[str, StepSpec]
    timeout: float | None = None
    catch_error_owner: Mapping[str, str] = field(default_factory=dict)
    bindings_by_producer: Mapping[str, tuple[BindingSpec, ...]] = field(default_factory=dict)
    bindings_by_id: Mapping[str, BindingSpec] = field(default_factory=dict)
    routes: Mapping[type, tuple[str, ...]] = field(init=False, compare=False, repr=False)
    collectors: Mapping[tuple[str, str, type], BindingSpec | None] = field(
        init=False, compare=False, repr=False
    )
    member_joins: Mapping[tuple[str, type], BindingSpec | None] = field(
        init=False, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "routes", _Routes(self.steps))
        object.__setattr__(self, "collectors", _Collectors(self.bindings_by_producer))
        object.__setattr__(
            self, "member_joins", _MemberJoins(self.routes, self.steps, self.collectors)
        )

    @property
    def step_order(self) -> tuple[str, ...]:
        """Step names in declaration order."""
        return tuple(self.steps)

    def routes_for(self, event_type: type) -> tuple[str, ...]:
        """The names of the steps that accept ``event_type``, in declaration order."""
        return self.routes[event_type]


@dataclass(slots=True)
class WorkItem:
    """One delivery of one event (or one join batch) to one step.

    It keeps its identity across retries, waiter suspensions and resumes.
    """

    work_item_id: str
    step: str
    event: Any
    bound_events: Mapping[str, Any] | None = None
    scope_path: tuple[str, ...] = ()
    recovery_counts: Mapping[str, int] = EMPTY_MAPPING
    attempts: int = 0
    first_attempt_at: float | None = None
    last_exception: BaseException | None = None
    last_failed_at: float | None = None
    not_before: float | None = None
    resume_identity: tuple[str, SendIndexes] | None = None


@dataclass(slots=True)
class CollectBuffer:
    """A ``ctx.collect_events`` buffer of one step.

    ``generation`` increases on every committed change; an invocation whose dispatch-time
    view has an older generation may be re-run (see ``reduce.py``).
    """

    events: PList[Any] = _EMPTY_LIST
    type_counts: Mapping[type, int] = EMPTY_MAPPING
    generation: int = 0


@dataclass(slots=True)
class Waiter:
    """A suspended ``wait_for_event`` call and the work item to re-deliver."""

    waiter_id: str
    item: WorkItem
    event_type: type
    requirements: Mapping[str, Any] | None
    waiter_event: Any
    timeout: float | None
    deadline: float | None
    """Wall-clock time (epoch seconds) at which it times out: the stamp of the tick that
    first registered it plus ``timeout``; ``None`` without a timeout (api.md §23.1)."""
    subclass_mode: bool = False
    resolved_event: Any = None
    timed_out: bool = False
    has_requirements: bool = False

    def matches(self, event: Any) -> bool:
        """Whether ``event`` resolves this waiter (type, then every requirement).

        A blind waiter (see ``blind``) matches nothing.
        """
        if self.resolved_event is not None or self.timed_out or self.blind:
            return False
        if not self.awaits_type(type(event)):
            return False
        if self.requirements:
            return all(getattr(event, k, None) == v for k, v in self.requirements.items())
        return True

    def awaits_type(self, event_type: type) -> bool:
        """Whether events of ``event_type`` are of the awaited type (requirements aside)."""
        if self.subclass_mode:
            return issubclass(event_type, self.event_type)
        return event_type is self.event_type

    @property
    def blind(self) -> bool:
        """Its requirements exist but are unknown (a snapshot could not store them): until
        its step runs again and registers them, it matches nothing (api.md §23.1)."""
        return self.has_requirements and self.requirements is None

    @property
    def pending(self) -> bool:
        """Neither resolved nor timed out."""
        return self.resolved_event is None and not self.timed_out


class SendIndexes:
    """The send indexes of an invocation already routed: a watermark plus stragglers.

    Sends arrive in call order, so the routed set is almost always ``0..n-1``; keeping it
    as a count makes recording one more send O(1) instead of copying a set of size n.
    """

    __slots__ = ("_extra", "_upto")

    def __init__(self, upto: int = 0, extra: frozenset[int] = frozenset()) -> None:
        self._upto = upto
        self._extra = extra

    @classmethod
    def of(cls, indexes: Iterable[int]) -> SendIndexes:
        """The set holding ``indexes``."""
        out = cls()
        for index in sorted(indexes):
            out = out.add(index)
        return out

    def __contains__(self, index: object) -> bool:
        return isinstance(index, int) and (0 <= index < self._upto or index in self._extra)

    def add(self, index: int) -> SendIndexes:
        """A new set that also holds ``index``."""
        if index in self:
            return self
        if index != self._upto:
            return SendIndexes(self._upto, self._extra | {index})
        upto, extra = index + 1, self._extra
        while upto in extra:
            extra = extra - {upto}
            upto += 1
        return SendIndexes(upto, extra)

    def __iter__(self) -> Iterator[int]:
        yield from range(self._upto)
        yield from sorted(self._extra)

    def __len__(self) -> int:
        return self._upto + len(self._extra)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SendIndexes):
            return self._upto == other._upto and self._extra == other._extra
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._upto, self._extra))

    def __repr__(self) -> str:
        return f"SendIndexes(upto={self._upto}, extra={sorted(self._extra)})"


NO_SENDS = SendIndexes()


@dataclass(slots=True, init=False, kw_only=True)  # kw_only: fields without defaults
class Invocation(WorkItem):
    """One execution of a step body for a work item, and what it saw at dispatch.

    It carries the work item's fields itself (it is a ``WorkItem``), so a dispatch builds
    one record, not a work item and then an invocation.  ``item`` gives the work item as
    a plain ``WorkItem`` record, equal to the one dispatched; the reducer stores such a
    record (``work_item()``) where the work item outlives the invocation (a retry, a
    waiter, a rewind), never the invocation.

    The constructor takes the work item (``Invocation(invocation_id, step, worker_id,
    item, dispatched_at, ...)``) and copies its fields; ``evolve`` changes any field.
    """

    invocation_id: str
    worker_id: int
    dispatched_at: float
    received: SendIndexes
    collect_view: Mapping[str, CollectBuffer]
    waiters_view: Mapping[str, Waiter]

    __evolve_by_writes__: ClassVar[bool] = True
    """``evolve`` changes its fields, building the copy without the constructor."""

    def __init__(
        self,
        invocation_id: str,
        step: str,
        worker_id: int,
        item: WorkItem,
        dispatched_at: float,
        received: SendIndexes = NO_SENDS,
        collect_view: Mapping[str, CollectBuffer] = EMPTY_MAPPING,
        waiters_view: Mapping[str, Waiter] = EMPTY_MAPPING,
    ) -> None:
        self.work_item_id = item.work_item_id
        self.step = step
        self.event = item.event
        self.bound_events = item.bound_events
        self.scope_path = item.scope_path
        self.recovery_counts = item.recovery_counts
        self.attempts = item.attempts
        self.first_attempt_at = item.first_attempt_at
        self.last_exception = item.last_exception
        self.last_failed_at = item.last_failed_at
        self.not_before = item.not_before
        self.resume_identity = item.resume_identity
        self.invocation_id = invocation_id
        self.worker_id = worker_id
        self.dispatched_at = dispatched_at
        self.received = received
        self.collect_view = collect_view
        self.waiters_view = waiters_view

    @property
    def item(self) -> WorkItem:
        """The work item this invocation runs, as a plain ``WorkItem`` record (a new
        one, equal to the one dispatched: hot paths read the fields directly)."""
        return WorkItem(
            self.work_item_id,
            self.step,
            self.event,
            self.bound_events,
            self.scope_path,
            self.recovery_counts,
            self.attempts,
            self.first_attempt_at,
            self.last_exception,
            self.last_failed_at,
            self.not_before,
            self.resume_identity,
        )

    def work_item(self) -> WorkItem:
        """``item``, for the reducer: a record that outlives the invocation (a queued
        retry, a waiter) holds a plain ``WorkItem``, never the invocation."""
        return self.item


@dataclass(slots=True)
class StreamState:
    """An open fan-out stream and its open-work counter (api.md §21.1.3)."""

    stream_id: str
    source_step: str
    scope_path: tuple[str, ...]
    open_work_items: int
    accepting_binding_ids: frozenset[str]


@dataclass(slots=True)
class ReleaseState:
    """The buffer of one binding for one stream, until it fires."""

    binding_id: str
    stream_id: str
    buffer: PList[Any] = _EMPTY_LIST
    released: bool = False


@dataclass(slots=True)
class StepHeld:
    """What a step holds beyond its queue and its running work: ``collect_events``
    buffers, join arrivals and parked waiters.

    Most steps of most runs hold none of it, and they share ``NOTHING_HELD``: a step's
    own record (``StepRunState``) then keeps one reference for all five, so building it
    (the reducer does on every dispatch and every finished invocation) writes four
    fields instead of eight, and "does the step hold anything?" is one identity test.
    """

    collect_buffers: Mapping[str, CollectBuffer] = EMPTY_MAPPING
    join_buffer: PList[Any] = _EMPTY_LIST
    join_counts: Mapping[type, int] = EMPTY_MAPPING
    waiters: PMap[str, Waiter] = _EMPTY_MAP
    waiters_by_item: PMap[str, frozenset[str]] = _EMPTY_MAP


NOTHING_HELD = StepHeld()
"""The shared ``StepHeld`` of a step that holds nothing (compare with ``is``)."""


def _held(
    collect_buffers: Mapping[str, CollectBuffer],
    join_buffer: PList[Any],
    join_counts: Mapping[type, int],
    waiters: PMap[str, Waiter],
    waiters_by_item: PMap[str, frozenset[str]],
) -> StepHeld:
    """The ``StepHeld`` of these parts: the shared ``NOTHING_HELD`` when they are its
    own (shared empty) parts, so that a step emptied again is recognized by identity."""
    n = NOTHING_HELD
    if (
        collect_buffers is n.collect_buffers
        and join_buffer is n.join_buffer
        and join_counts is n.join_counts
        and waiters is n.waiters
        and waiters_by_item is n.waiters_by_item
    ):
        return n
    return StepHeld(collect_buffers, join_buffer, join_counts, waiters, waiters_by_item)


@dataclass(slots=True, init=False)
class StepRunState:
    """The per-run state of one step: its queue, its running work and its slots, and
    (``held``) what it holds beyond them.

    It is built and read as if it had all eight fields: the constructor takes them,
    ``collect_buffers``, ``join_buffer``, ``join_counts``, ``waiters`` and
    ``waiters_by_item`` read through ``held``, and ``evolve`` changes any of the eight
    (``_evolve_step``).
    """

    queue: PQueue[WorkItem]
    in_progress: PMap[str, Invocation]
    slots: SlotPool
    held: StepHeld

    def __init__(
        self,
        queue: PQueue[WorkItem] = _EMPTY_QUEUE,
        in_progress: PMap[str, Invocation] = _EMPTY_MAP,
        slots: SlotPool = _NO_SLOTS,
        collect_buffers: Mapping[str, CollectBuffer] = EMPTY_MAPPING,
        join_buffer: PList[Any] = _EMPTY_LIST,
        join_counts: Mapping[type, int] = EMPTY_MAPPING,
        waiters: PMap[str, Waiter] = _EMPTY_MAP,
        waiters_by_item: PMap[str, frozenset[str]] = _EMPTY_MAP,
    ) -> None:
        self.queue = queue
        self.in_progress = in_progress
        self.slots = slots
        self.held = _held(collect_buffers, join_buffer, join_counts, waiters, waiters_by_item)

    @property
    def collect_buffers(self) -> Mapping[str, CollectBuffer]:
        """The step's ``ctx.collect_events`` buffers, by buffer id."""
        return self.held.collect_buffers

    @property
    def join_buffer(self) -> PList[Any]:
        """A multi-slot step's arrivals not yet part of a batch, oldest first."""
        return self.held.join_buffer

    @property
    def join_counts(self) -> Mapping[type, int]:
        """How many arrivals of each type ``join_buffer`` holds."""
        return self.held.join_counts

    @property
    def waiters(self) -> PMap[str, Waiter]:
        """The step's ``wait_for_event`` waiters, by waiter id."""
        return self.held.waiters

    @property
    def waiters_by_item(self) -> PMap[str, frozenset[str]]:
        """The ids of the waiters of each work item."""
        return self.held.waiters_by_item

    @property
    def busy_slots(self) -> frozenset[int]:
        """The slots of the running invocations (O(running); for inspection)."""
        return frozenset(inv.worker_id for inv in self.in_progress.values())


def _evolve_step(
    o: StepRunState,
    *,
    queue: PQueue[WorkItem] = MISSING,
    in_progress: PMap[str, Invocation] = MISSING,
    slots: SlotPool = MISSING,
    collect_buffers: Mapping[str, CollectBuffer] = MISSING,
    join_buffer: PList[Any] = MISSING,
    join_counts: Mapping[type, int] = MISSING,
    waiters: PMap[str, Waiter] = MISSING,
    waiters_by_item: PMap[str, frozenset[str]] = MISSING,
) -> StepRunState:
    """``evolve`` for a step's state: its own fields written, ``held`` shared unless one
    of its parts changes (built without the constructor, see ``new_record``)."""
    new: StepRunState = new_record(StepRunState)
    new.queue = o.queue if queue is MISSING else queue
    new.in_progress = o.in_progress if in_progress is MISSING else in_progress
    new.slots = o.slots if slots is MISSING else slots
    held = o.held
    if (
        collect_buffers is MISSING
        and join_buffer is MISSING
        and join_counts is MISSING
        and waiters is MISSING
        and waiters_by_item is MISSING
    ):
        new.held = held
    else:
        new.held = _held(
            held.collect_buffers if collect_buffers is MISSING else collect_buffers,
            held.join_buffer if join_buffer is MISSING else join_buffer,
            held.join_counts if join_counts is MISSING else join_counts,
            held.waiters if waiters is MISSING else waiters,
            held.waiters_by_item if waiters_by_item is MISSING else waiters_by_item,
        )
    return new


register_evolver(StepRunState, _evolve_step)


@dataclass(slots=True)
class UnclaimedEvent:
    """An added event that reached no step and no waiter, kept while the run is busy.

    A step that is queued or running may still be about to wait for it: the event is
    handed to each matching waiter registered before the run is quiescent again, once
    per work item (``taken_by``), as if that waiter had existed when it arrived.
    """

    event: Any
    producer: str | None
    taken_by: frozenset[str] = frozenset()


@dataclass(slots=True)
class HeldEvent:
    """An event held back, undelivered, while a blind waiter of its type exists.

    It counts as one open work item in its innermost stream until it is delivered.
    """

    event: Any
    target: str | None
    recovery_counts: Mapping[str, int]
    scope_path: tuple[str, ...]
    producer: str | None


@dataclass(frozen=True, slots=True)
class Holdings:
    """Events a run keeps beyond routing them.

    ``unclaimed`` and ``held`` wait for waiters that are not registered (or not known)
    yet; ``dropped`` describes the last events dropped unclaimed (for the timeout
    message); ``questions`` are the ``InputRequiredEvent``s steps returned since the
    caller last sent an event: what a run waiting for a human was asked (the command
    line shows them when it resumes the run).
    """

    unclaimed: PList[UnclaimedEvent] = _EMPTY_LIST
    blind: PMap[tuple[str, str], Waiter] = _EMPTY_MAP
    held: PList[HeldEvent] = _EMPTY_LIST
    dropped: tuple[str, ...] = ()
    questions: tuple[Any, ...] = ()


NO_HOLDINGS = Holdings()


class ReductionSlots:
    """The working slots of a reduction, part of every ``RunState``'s layout.

    A reduction builds its new state in place: the reducer's accumulator (``Tx`` in
    ``control_loop/_tx.py``) is a ``RunState`` under construction, starting as a copy of
    the input's fields, and ``commit`` hands that same object out as the new state.  The
    accumulator's own slots (the tick's time, the commands so far...)
    live here so that its layout is a ``RunState``'s; outside a reduction they hold
    ``None`` or scalars (or are unset, in a state built by a class call).  They are no
    fields: equality, ``repr``, snapshots and ``evolve`` see none of them.
    """

    __slots__ = (
        "_draft_running",
        "_draft_step",
        "_own_steps",
        "commands",
        "live",
        "now",
        "quiet",
        "touched_streams",
    )


@dataclass(slots=True)
class RunState(ReductionSlots):
    """Everything the reducer knows about one run.

    ``queued``/``running`` count work across all steps so that quiescence is O(1);
    ``waiter_index`` finds the waiters an event resolves (``.waiter_index``) so that an
    added event finds its waiters without scanning every step.
    """

    config: RunConfig
    steps: Mapping[str, StepRunState]
    status: RunStatus = "pending"
    is_running: bool = False
    queued: int = 0
    running: int = 0
    waiter_index: WaiterIndex = _NO_WAITERS
    streams: PMap[str, StreamState] = _EMPTY_MAP
    releases: PMap[str, ReleaseState] = _EMPTY_MAP
    stream_seq: int = 0
    work_item_seq: int = 0
    invocation_seq: int = 0
    journal_seq: int = 0
    elapsed_alive: float = 0.0
    last_alive_stamp: float | None = None
    idle_check_pending: bool = False
    holdings: Holdings = NO_HOLDINGS

    @property
    def quiescent(self) -> bool:
        """Live with nothing queued (delayed retries included) and nothing running."""
        return self.status == "running" and self.queued == 0 and self.running == 0

    @property
    def finished(self) -> bool:
        """Whether the run has reached a terminal outcome."""
        return self.status not in ("pending", "running")
