"""The run's published-event buffer, read in order by a single consumer.

Published events are buffered until consumed, so a consumer that attaches late (even
after the run has ended) still sees everything.  Each event goes to exactly one reader;
concurrent readers take from one shared queue.  A step state change (a ``RunWorker``
stands for RUNNING, a ``PublishStepState`` for the others) is buffered as a small tuple
of strings, which the garbage collector stops tracking, and becomes a
``StepStateChanged`` only when read: a run nobody streams keeps two such records per
step execution and nothing more (not the invocation, not its events).  A
``WorkflowIdleEvent`` is buffered as one shared record too.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable
from functools import lru_cache
from typing import Any

import anyio
from pydantic import BaseModel

from tickwork.errors import WorkflowRuntimeError
from tickwork.events import (
    InternalDispatchEvent,
    StepState,
    StepStateChanged,
    StopEvent,
    WorkflowIdleEvent,
)
from tickwork.runtime.types.commands import PublishStepState, RunWorker
from tickwork.runtime.types.kinds import IS_INTERNAL, IS_STOP
from tickwork.runtime.types.step_id import WORKER_NAMES

__all__ = [
    "AS_IS",
    "EventStream",
    "finished_record",
    "materialize",
    "running_record",
    "step_state_record",
]

_STATES = {
    "running": StepState.RUNNING,
    "preparing": StepState.PREPARING,
    "not_running": StepState.NOT_RUNNING,
}

# Marks a buffered step-state record.  A plain ``object()`` is not tracked by the garbage
# collector, so neither is a tuple of it and strings.
_RECORD: Any = object()

StepStateRecord = tuple[Any, str, str, str, str, "str | None"]
"""``(_RECORD, state, step, worker_id, input_event_name, output_event_name)``."""


# Records are values: the same change of the same step in the same slot is one shared
# tuple.  An unread stream then holds a pointer per change instead of a new tuple, and
# publishing allocates nothing the garbage collector has to look at.  Bounded caches:
# keys hold event classes, which must stay collectable when a program makes many.
#
# The RUNNING and NOT_RUNNING records are kept in nested plain dicts, one level per
# field, which the loop subscripts itself (``RUNNING_RECORDS[step][slot][cls]``,
# ``FINISHED_RECORDS[step][worker_id][input][output][has_output]``, the function on a
# ``KeyError``): every step execution reads one of each, and a subscript per field
# costs about half of an ``lru_cache`` call (its key tuple, its hash and its frame).

RUNNING_RECORDS: dict[str, dict[int, dict[type, StepStateRecord]]] = {}
"""Step -> worker slot -> event class -> the RUNNING record (``running_record``)."""

FINISHED_RECORDS: dict[
    str, dict[str, dict[type, dict[Any, tuple[StepStateRecord, StepStateRecord]]]]
] = {}
"""Step -> worker id -> input class -> output class -> the NOT_RUNNING records without
and with an output, indexed by ``has_output`` (``finished_record``)."""

_MAX_RECORDS = 4096
_remembered = 0  # entries added to the two tables since they were last cleared


def _room_for_one() -> None:
    """Count one more remembered entry, forgetting every entry at the bound."""
    global _remembered
    if _remembered >= _MAX_RECORDS:
        RUNNING_RECORDS.clear()
        FINISHED_RECORDS.clear()
        _remembered = 0
    _remembered += 1


def running_record(step: str, worker_id: int, event_type: type) -> StepStateRecord:
    """The record of ``step`` starting in slot ``worker_id`` on an event of ``event_type``
    (a ``RunWorker``'s, called by the loop without ``push``'s frames)."""
    try:
        return RUNNING_RECORDS[step][worker_id][event_type]
    except KeyError:
        pass
    _room_for_one()
    record = (_RECORD, "running", step, WORKER_NAMES[worker_id], event_type.__name__, None)
    RUNNING_RECORDS.setdefault(step, {}).setdefault(worker_id, {})[event_type] = record
    return record


def finished_record(
    step: str, worker_id: str, input_type: type, output_type: type | None, has_output: bool
) -> StepStateRecord:
    """The record of a ``PublishStepState`` of state ``not_running`` with these fields
    (called by the loop without ``push``'s frames)."""
    try:
        return FINISHED_RECORDS[step][worker_id][input_type][output_type][has_output]
    except KeyError:
        pass
    _room_for_one()
    # NOT_RUNNING names its input and output types as ``str(cls)``.
    pair = (
        (_RECORD, "not_running", step, worker_id, str(input_type), None),
        (_RECORD, "not_running", step, worker_id, str(input_type), str(output_type)),
    )
    by_input = FINISHED_RECORDS.setdefault(step, {}).setdefault(worker_id, {})
    by_input.setdefault(input_type, {})[output_type] = pair
    return pair[has_output]


@lru_cache(maxsize=4096)
def _preparing(step: str, worker_id: str, input_type: type) -> StepStateRecord:
    return (_RECORD, "preparing", step, worker_id, input_type.__name__, None)


def _running_record(command: RunWorker) -> StepStateRecord:
    invocation = command.invocation
    event_type = type(invocation.event)
    return running_record(invocation.step, invocation.worker_id, event_type)


def _state_record(command: PublishStepState) -> StepStateRecord:
    if command.state == "not_running":
        return finished_record(
            command.step,
            command.worker_id,
            command.input_type,
            command.output_type,
            command.has_output,
        )
    # PREPARING, the other state: shared too, a fan-out queues thousands of items at once.
    return _preparing(command.step, command.worker_id, command.input_type)


# A buffered ``WorkflowIdleEvent`` (it has no fields): a run parked waiting for a human
# keeps the idle event it published until someone streams it, as this shared tuple.
_IDLE_RECORD: Any = (_RECORD, "idle")


def _idle_record(event: WorkflowIdleEvent) -> Any:
    return _IDLE_RECORD


# By exact type: a push checks one dict instead of walking isinstance checks.
_RECORDERS: dict[type, Callable[[Any], Any]] = {
    RunWorker: _running_record,
    PublishStepState: _state_record,
    WorkflowIdleEvent: _idle_record,
}


def step_state_record(command: RunWorker | PublishStepState) -> StepStateRecord:
    """The buffered form of a step state change command."""
    record: StepStateRecord = _RECORDERS[type(command)](command)
    return record


_new_step_state_changed = object.__new__
_set = object.__setattr__
_STEP_STATE_FIELDS = frozenset(StepStateChanged.model_fields)
# The setters of a model's slots, called directly: a third cheaper than
# ``object.__setattr__``, which looks the slot up by name first.
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
_recorder_of = _RECORDERS.get


def _is_record(item: Any) -> bool:
    return type(item) is tuple and len(item) > 1 and item[0] is _RECORD


def materialize(item: Any) -> Any:
    """Turn a buffered item (or a step state command) into the event a reader sees."""
    recorder = _recorder_of(type(item))
    if recorder is not None:
        item = recorder(item)
    elif not (type(item) is tuple and len(item) > 1 and item[0] is _RECORD):  # _is_record
        return item
    if item is _IDLE_RECORD:
        return WorkflowIdleEvent()
    _, state, step, worker_id, input_name, output = item
    # What StepStateChanged.model_construct() does, for this one known model, at a
    # third of the cost: snapshot loops read one of these per step execution.
    event = _new_step_state_changed(StepStateChanged)
    _set(
        event,
        "__dict__",
        {
            "name": step,
            "step_state": _STATES[state],
            "worker_id": worker_id,
            "input_event_name": input_name,
            "output_event_name": output,
        },
    )
    _set_fields_set(event, set(_STEP_STATE_FIELDS))
    _set_extra(event, None)
    _set_private(event, None)
    return event


def _is_internal(item: Any) -> bool:
    return _is_record(item) or isinstance(item, InternalDispatchEvent)


# What the stream needs to know about an item, by its class, as bit flags: a user's
# event is 0, and pushing or reading one costs a single dict lookup.
_INTERNAL = 1  # one of the runtime's own events (hidden unless asked for)
_STOP = 2  # a StopEvent: the terminal event
_SPECIAL = 4  # a tuple (maybe a step-state record) or a step-state command
_MAX_CLASSES = 4096

# The two tables below are plain dicts read as ``table[cls]``, a missing class computed
# in the ``except KeyError``: a subscript of a dict subclass (one with ``__missing__``)
# goes through a method call (``slot_mp_subscript``), some 300 instructions per event,
# where a plain dict's is specialized by the interpreter.  Both are bounded, as
# ``SubclassTable``: a program making event classes on the fly does not keep them alive.

_FLAGS: dict[type, int] = {}
"""Class -> its flags (``_flags_of``)."""


def _flags_of(cls: type) -> int:
    """Compute and remember the flags of ``cls``."""
    if len(_FLAGS) >= _MAX_CLASSES:
        _FLAGS.clear()
    flags = 0
    if cls is tuple or cls in _RECORDERS:
        flags |= _SPECIAL
    if IS_INTERNAL[cls]:
        flags |= _INTERNAL
    if IS_STOP[cls]:
        flags |= _STOP
    _FLAGS[cls] = flags
    return flags


_TERMINAL: Any = object()

_PUSHES: dict[type, Any] = {}
"""Class -> what ``push`` does with an item of it (``_push_handle_of``)."""

AS_IS: set[type] = set()
"""The classes ``push`` has met whose items it buffers as they are (neither a step state
command nor a ``StopEvent``): what may go straight into ``EventStream.quiet_items``."""


def _push_handle_of(cls: type) -> Any:
    """Compute and remember what ``push`` does with an item of ``cls``, in one lookup:
    its recorder (a step state command), ``_TERMINAL`` (a ``StopEvent``) or ``None``
    (keep it as is)."""
    if len(_PUSHES) >= _MAX_CLASSES:
        _PUSHES.clear()
        AS_IS.clear()
    handle = _RECORDERS.get(cls)
    if handle is None and IS_STOP[cls]:
        handle = _TERMINAL
    _PUSHES[cls] = handle
    if handle is None:
        AS_IS.add(cls)
    return handle


class _Shrunk(Exception):
    """An item for the buffer of a shrunk stream: ``push`` makes a real one."""


class _NoItems(deque[Any]):
    """The type of ``_NO_ITEMS``: an empty buffer that refuses items, so that it never
    becomes a buffer shared by streams."""

    def append(self, item: Any) -> None:
        raise _Shrunk


_NO_ITEMS: deque[Any] = _NoItems()

_KEEP_AT_MOST = 8
"""The most unread items ``EventStream.shrink`` moves into a tuple."""


class EventStream:
    """A FIFO buffer of the unread items, shared by every reader."""

    def __init__(self) -> None:
        # Unread items only: reading pops them, so a consumed event is released at once
        # and the buffer holds nothing per event read (no placeholder, no cursor).  An
        # empty deque still holds a block of 64 slots (about 600 bytes), so a stream
        # of a parked run lets it go (``shrink``): ``_NO_ITEMS`` until the next push,
        # the few unread items (the idle event, typically) kept in ``_kept``.
        self._items: deque[Any] = deque()
        self._kept: tuple[Any, ...] = ()
        self._closed = False
        self._changed: anyio.Event | None = None
        self.quiet_items: deque[Any] | None = self._items
        """The buffer while no reader waits for it (and it is not let go): an item of a
        class in ``AS_IS`` appended there is pushed, without ``push``'s frame (a run's
        loop does so for the stream writes of its steps); ``None`` otherwise."""
        self.consumed = False
        self.terminal_event: StopEvent | None = None

    def push(self, item: Any) -> None:
        """Append a published item (step state commands as records) and wake readers."""
        try:
            handle = _PUSHES[type(item)]
        except KeyError:
            handle = _push_handle_of(type(item))
        if handle is not None:
            if handle is _TERMINAL:
                self.terminal_event = item
            else:  # a step state change
                item = handle(item)
        try:
            self._items.append(item)
        except _Shrunk:  # no cost until raised
            self._restore().append(item)
        if self._changed is not None:  # someone waits: _wake() (inlined, pushes are hot)
            self._wake()

    def shrink(self) -> None:
        """Keep the few unread items in a tuple and let the buffer go (a run parks: it
        publishes nothing until it is back, and its stream is mostly read).

        Reads take from the tuple (``next_item``); the next push makes a buffer again.
        A long backlog keeps its buffer: it is much larger than the buffer's block.
        """
        items = self._items
        if items is not _NO_ITEMS and len(items) <= _KEEP_AT_MOST:
            self._kept = tuple(items)
            items.clear()  # a reader suspended in ``iterate`` may still hold it
            self._items = _NO_ITEMS
            self.quiet_items = None

    def _restore(self) -> deque[Any]:
        """A buffer again, for a push to a shrunk stream."""
        items = self._items = deque(self._kept)
        self._kept = ()
        if self._changed is None:
            self.quiet_items = items
        return items

    def close(self) -> None:
        """No more items will come (the terminal event was pushed, or the run aborted)."""
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            items = self._items
            self.quiet_items = items if items is not _NO_ITEMS else None
            changed.set()

    @property
    def drained(self) -> bool:
        """Closed and every item was handed out."""
        return self._closed and not self._items and not self._kept

    async def next_item(self) -> tuple[bool, Any]:
        """The next unread item, waiting for one; ``(False, None)`` at the end.

        The end is the stream's close, or a reader taking the terminal event: a
        concurrent reader waiting for more then ends too, without waiting for the run's
        task to finish (nothing is published after the terminal event).
        """
        while not self._items:
            kept = self._kept
            if kept:  # shrunk (maybe while this reader waited): read from the tuple
                self._kept = kept[1:]
                return True, kept[0]
            if self._closed or self.consumed:
                return False, None
            if self._changed is None:
                self._changed = anyio.Event()
                self.quiet_items = None  # pushes must wake this reader
            await self._changed.wait()
        return True, self._items.popleft()

    async def iterate(
        self, expose_internal: bool, consumed_error: str | None = None
    ) -> AsyncIterator[Any]:
        """Yield events until (and including) the first ``StopEvent``.

        Concurrent iterations share the buffer: each event goes to one of them, and
        when one takes the terminal event the others end (api.md §25.3).  With
        ``consumed_error``, a stream whose terminal event was already handed out
        raises ``WorkflowRuntimeError`` with that message instead of ending at once.
        """
        if consumed_error is not None and self.consumed:
            raise WorkflowRuntimeError(consumed_error)
        items = self._items
        take = items.popleft
        while True:
            if items:  # the common case: no coroutine, no wait
                item = take()
            else:
                ok, item = await self.next_item()
                if not ok:
                    return
                # The buffer may have been let go (``shrink``) and made anew since.
                items = self._items
                take = items.popleft
            try:
                flags = _FLAGS[type(item)]
            except KeyError:
                flags = _flags_of(type(item))
            if not flags:  # a user's event: the common case
                yield item
                continue
            if flags & _SPECIAL:  # a step state change (or a tuple)
                if not expose_internal and _is_internal(item):
                    continue
                item = materialize(item)
                cls = type(item)
                flags = (_FLAGS[cls] if cls in _FLAGS else _flags_of(cls)) & ~_SPECIAL
            elif flags & _INTERNAL and not expose_internal:
                continue
            if flags & _STOP:
                # Consumed once handed out, even if the reader then stops iterating.
                self.consumed = True
                self._wake()
                yield item
                return
            yield item
