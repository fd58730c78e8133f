"""Collect-buffer accounting: pure functions over :class:`CollectBuffer` records.

``ctx.collect_events`` decides inside the step, against the buffer view the invocation
was dispatched with (:func:`decide_collect`).  When the result comes back, the reducer
commits those decisions with :func:`commit_collect_ops`, which re-checks them against the
buffer as it is *now*: a decision that still holds is applied without re-running the
step, and one that no longer holds reports the invocation as stale (it must re-run).
This module never imports the reducer: it returns data, the reducer acts on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tickwork.runtime.types.persistent import PList
from tickwork.runtime.types.results import CollectOp
from tickwork.runtime.types.state import CollectBuffer

__all__ = ["EMPTY_BUFFER", "commit_collect_ops", "decide_collect"]

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
