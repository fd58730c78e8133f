"""Stream and collect accounting: pure functions over the state's accounting records.

Two kinds of accounting live here.

**Fan-out streams** (api.md §21.1): a stream keeps an open-work counter.  Every finished
execution of a work item inside a stream is classified exactly once by ``settle``
(completed, fanned out, still live, absorbed), which moves the counter; arrivals at a
``list[E]`` binding are buffered by ``buffer_member``; ``close_stream`` fires
the bindings that have not fired.  Firings are returned as ``Release`` records for
the reducer to dispatch.  A negative counter is reported, never hidden.

**Collect buffers** (``ctx.collect_events``):

``ctx.collect_events`` decides inside the step, against the buffer view the invocation
was dispatched with (``decide_collect``).  When the result comes back, the reducer
commits those decisions with ``commit_collect_ops``, which re-checks them against the
buffer as it is *now*: a decision that still holds is applied without re-running the
step, and one that no longer holds reports the invocation as stale (it must re-run).
This module never imports the reducer: it returns data, the reducer acts on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tickwork.runtime.types.evolve import new_record as _new
from tickwork.runtime.types.persistent import PList, PMap
from tickwork.runtime.types.results import CollectOp
from tickwork.runtime.types.state import BindingSpec, CollectBuffer, ReleaseState, StreamState

__all__ = [
    "EMPTY_BUFFER",
    "AccountingError",
    "add_open_work",
    "Release",
    "Settlement",
    "buffer_member",
    "close_stream",
    "commit_collect_ops",
    "decide_collect",
    "nearest_binding",
    "open_stream",
    "release_key",
    "settle",
    "settle_open",
]

Streams = PMap[str, StreamState]
Releases = PMap[str, ReleaseState]
Settlement = Literal["completed", "fanned_out", "still_live", "absorbed"]


class AccountingError(Exception):
    """An impossible accounting state; the reducer turns it into a failed run."""


@dataclass(frozen=True, slots=True)
class Release:
    """A binding fired: dispatch ``events`` to ``binding.target`` in the parent scope."""

    binding: BindingSpec
    stream_id: str
    events: tuple[Any, ...]
    output_scope_path: tuple[str, ...]


def release_key(stream_id: str, binding_id: str) -> str:
    """The key of a binding's release state for one stream."""
    return f"{stream_id}:{binding_id}"


def open_stream(
    streams: Streams,
    releases: Releases,
    stream_id: str,
    source_step: str,
    scope_path: tuple[str, ...],
    bindings: Sequence[BindingSpec],
) -> tuple[Streams, Releases]:
    """Open a stream with a zero counter and one empty release state per binding."""
    streams = streams.set(
        stream_id,
        StreamState(
            stream_id, source_step, scope_path, 0, frozenset(b.binding_id for b in bindings)
        ),
    )
    for binding in bindings:
        releases = releases.set(
            release_key(stream_id, binding.binding_id),
            ReleaseState(binding.binding_id, stream_id),
        )
    return streams, releases


def settle(
    streams: Streams,
    stream_id: str,
    kind: Settlement,
    deliveries: int = 0,
    new_bindings: int = 0,
) -> tuple[Streams, int]:
    """Classify one finished execution of a work item of ``stream_id``; returns the
    streams and the stream's open-work count after it.

    * ``completed``: its emitted events made ``deliveries`` deliveries: ``+deliveries-1``;
    * ``fanned_out``: it became one pending release per binding: ``+new_bindings-1``;
    * ``still_live``: it will be delivered again (retry, hand-off, waiter): ``0``;
    * ``absorbed``: an arrival that was only buffered: ``-1``.

    Raises ``AccountingError`` when the stream is unknown or the counter would go
    negative.
    """
    stream = streams.get(stream_id)
    if stream is None:
        raise AccountingError(f"stream {stream_id} is not open")
    return settle_open(streams, stream, kind, deliveries, new_bindings)


def settle_open(
    streams: Streams, stream: StreamState, kind: Settlement, deliveries: int, new_bindings: int
) -> tuple[Streams, int]:
    """``settle`` for ``stream``, an open stream of ``streams`` the caller already holds
    (every member settles: one lookup fewer)."""
    stream_id = stream.stream_id
    if kind == "completed":
        delta = deliveries - 1
    elif kind == "fanned_out":
        delta = new_bindings - 1
    elif kind == "still_live":
        delta = 0
    elif kind == "absorbed":
        delta = -1
    else:
        raise KeyError(kind)
    count = stream.open_work_items + delta
    if count < 0:
        raise AccountingError(
            f"stream {stream_id} of step {stream.source_step!r} has a negative open-work "
            f"count ({count}) after a {kind} work item"
        )
    settled = _new(StreamState)  # _counted() without its frame: every member settles
    settled.stream_id = stream_id
    settled.source_step = stream.source_step
    settled.scope_path = stream.scope_path
    settled.open_work_items = count
    settled.accepting_binding_ids = stream.accepting_binding_ids
    pair = streams.root
    if type(pair) is tuple and pair[0] is stream_id:
        # The only open stream: its one-entry map, as ``set`` builds it (every member
        # settles, and a frame costs more than these writes).
        one: Streams = _new(PMap)
        one.root = (stream_id, settled)
        one.size = 1
        return one, count
    return streams.set(stream_id, settled), count


def add_open_work(streams: Streams, stream_id: str, count: int) -> Streams:
    """Count ``count`` new deliveries inside ``stream_id`` (elements of a new stream)."""
    stream = streams.get(stream_id)
    if stream is None:
        raise AccountingError(f"stream {stream_id} is not open")
    return streams.set(stream_id, _counted(stream, stream.open_work_items + count))


def _counted(stream: StreamState, count: int) -> StreamState:
    """``stream`` with ``count`` open work items (built without a class call, see
    ``new_record``, every field written; ``settle_open`` spells it out)."""
    new = _new(StreamState)
    new.stream_id = stream.stream_id
    new.source_step = stream.source_step
    new.scope_path = stream.scope_path
    new.open_work_items = count
    new.accepting_binding_ids = stream.accepting_binding_ids
    return new


def nearest_binding(
    streams: Streams,
    scope_path: tuple[str, ...],
    collectors: Mapping[tuple[str, str, type], BindingSpec | None],
    target: str,
    event_type: type,
) -> tuple[str, BindingSpec] | None:
    """The innermost enclosing stream bound to ``target`` that collects ``event_type``.

    ``collectors`` is the config's ``(producer, target, event type) -> binding`` memo
    (``RunConfig.collectors``): one lookup per enclosing stream, for every member.
    """
    for stream_id in reversed(scope_path):
        stream = streams.get(stream_id)
        if stream is None:
            continue
        binding = collectors[stream.source_step, target, event_type]
        if binding is not None:
            return stream_id, binding
    return None


def _fire(
    streams: Streams, releases: Releases, stream: StreamState, binding: BindingSpec
) -> tuple[Streams, Releases, Release]:
    key = release_key(stream.stream_id, binding.binding_id)
    state = releases[key]
    events = state.buffer.to_list()
    if binding.take is not None:
        events = events[: binding.take]
    releases = releases.set(
        key, ReleaseState(state.binding_id, state.stream_id, state.buffer, True)
    )
    streams = streams.set(
        stream.stream_id,
        StreamState(
            stream.stream_id,
            stream.source_step,
            stream.scope_path,
            stream.open_work_items,
            stream.accepting_binding_ids - {binding.binding_id},
        ),
    )
    return streams, releases, Release(binding, stream.stream_id, tuple(events), stream.scope_path)


def buffer_member(
    streams: Streams, releases: Releases, stream_id: str, binding: BindingSpec, event: Any
) -> tuple[Streams, Releases, Release | None]:
    """Buffer an arrival; fire a ``Take(n)`` binding on its ``n``-th member.

    Arrivals after the binding fired are dropped.
    """
    pair = releases.root
    if (
        type(pair) is tuple
        and pair[1].stream_id == stream_id
        and pair[1].binding_id == binding.binding_id
    ):
        # The run's only release state is this one (one stream, one binding: the usual
        # fan-out): its key is the one ``release_key`` gives, found without building it.
        key, state = pair
    else:
        key = f"{stream_id}:{binding.binding_id}"  # release_key(), inlined: once per member
        state = releases.get(key)
    if state is None or state.released:
        return streams, releases, None
    old = state.buffer  # buffer = old.append(event), without its frame: once per member
    buffer: PList[Any] = _new(PList)
    buffer._cell = (event, old._cell)
    buffer._len = old._len + 1
    buffered = _new(ReleaseState)  # ReleaseState(...) without a class call: once per member
    buffered.binding_id = state.binding_id
    buffered.stream_id = stream_id
    buffered.buffer = buffer
    buffered.released = False
    if releases.size == 1 and pair[0] is key:  # its one-entry map, as set() builds it
        releases = _new(PMap)
        releases.root = (key, buffered)
        releases.size = 1
    else:
        releases = releases.set(key, buffered)
    if binding.take is not None and len(buffer) >= binding.take:
        return _fire(streams, releases, streams[stream_id], binding)
    return streams, releases, None


def close_stream(
    streams: Streams,
    releases: Releases,
    stream_id: str,
    bindings_by_id: Mapping[str, BindingSpec],
) -> tuple[Streams, Releases, list[Release]]:
    """Fire every binding that has not fired yet, then forget the stream."""
    stream = streams[stream_id]
    fired: list[Release] = []
    for binding_id in sorted(stream.accepting_binding_ids):
        streams, releases, release = _fire(
            streams, releases, streams[stream_id], bindings_by_id[binding_id]
        )
        fired.append(release)
    for binding_id in bindings_by_id:
        releases = releases.delete(release_key(stream_id, binding_id))
    return streams.delete(stream_id), releases, fired


EMPTY_BUFFER = CollectBuffer()


def _appended(buffer: CollectBuffer, event: Any) -> CollectBuffer:
    etype = type(event)
    counts = dict(buffer.type_counts)
    counts[etype] = counts.get(etype, 0) + 1
    return CollectBuffer(buffer.events.append(event), counts, buffer.generation + 1)


def _cleared(buffer: CollectBuffer) -> CollectBuffer:
    return CollectBuffer(PList(), {}, buffer.generation + 1)


def _release_order(events: list[Any], expected: Sequence[type]) -> list[Any] | None:
    """The events ordered as ``expected`` (earliest first per type), or ``None``."""
    by_type: dict[type, list[Any]] = {}
    for ev in events:
        by_type.setdefault(type(ev), []).append(ev)
    out: list[Any] = []
    taken: dict[type, int] = {}
    for etype in expected:
        index = taken.get(etype, 0)
        candidates = by_type.get(etype, ())
        if index >= len(candidates):
            return None
        out.append(candidates[index])
        taken[etype] = index + 1
    return out


def decide_collect(
    buffer: CollectBuffer, buffer_id: str, event: Any, expected: Sequence[type]
) -> tuple[CollectOp, CollectBuffer, list[Any] | None]:
    """Decide one ``collect_events`` call against ``buffer``.

    Returns the op to record, the buffer as this invocation now sees it, and the
    released events (``None`` unless ``event`` completed the multiset).  Matching is by
    exact type.  Cost: O(len(expected)) for the count, plus O(buffer) on a release.
    """
    etype = type(event)
    needed = expected.count(etype)
    have = buffer.type_counts.get(etype, 0)
    if needed == 0 or have >= needed:
        op = CollectOp(buffer_id, event, "dropped", needed, len(expected))
        return op, buffer, None
    if len(buffer.events) + 1 >= len(expected):
        released = _release_order([*buffer.events.to_list(), event], expected)
        if released is not None:
            op = CollectOp(buffer_id, event, "released", needed, len(expected), len(released))
            return op, _cleared(buffer), released
    op = CollectOp(buffer_id, event, "buffered", needed, len(expected))
    return op, _appended(buffer, event), None


def _still_valid(op: CollectOp, current: CollectBuffer) -> bool:
    """Whether a decision taken on an older view gives the same answer on ``current``."""
    have = current.type_counts.get(type(op.event), 0)
    if op.decision == "dropped":
        return op.needed_of_type == 0 or have >= op.needed_of_type
    if op.decision == "buffered":
        return have < op.needed_of_type and len(current.events) + 1 < op.expected_len
    return False


def commit_collect_ops(
    current: Mapping[str, CollectBuffer],
    view: Mapping[str, CollectBuffer],
    ops: Sequence[CollectOp],
) -> dict[str, CollectBuffer] | None:
    """The step's buffers after committing ``ops``, or ``None`` when the view went stale.

    A buffer whose generation still equals the invocation's view takes the ops as they
    were decided.  A buffer another invocation changed meanwhile accepts a single
    ``buffered``/``dropped`` op that still holds; anything else is stale.
    """
    out = dict(current)
    by_buffer: dict[str, list[CollectOp]] = {}
    for op in ops:
        by_buffer.setdefault(op.buffer_id, []).append(op)
    for buffer_id, buffer_ops in by_buffer.items():
        now = current.get(buffer_id, EMPTY_BUFFER)
        seen = view.get(buffer_id, EMPTY_BUFFER)
        if now.generation != seen.generation and (
            len(buffer_ops) > 1 or not _still_valid(buffer_ops[0], now)
        ):
            return None
        for op in buffer_ops:
            if op.decision == "buffered":
                now = _appended(now, op.event)
            elif op.decision == "released":
                now = _cleared(now)
        out[buffer_id] = now
    return out
