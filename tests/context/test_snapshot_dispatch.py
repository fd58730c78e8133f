"""A dispatched item's invocation reuses the encoding its item had while queued.

An invocation carries its work item's fields (a dispatch copies them), so the snapshot
taken after a dispatch takes the item fields of the running invocation from the queued
item's cached encoding, but only when the invocation holds the very same values: any
field that differs makes it encode the invocation anew.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tickwork import Event
from tickwork.runtime.types.persistent import PMap, PQueue
from tickwork.runtime.types.state import (
    Invocation,
    RunConfig,
    RunState,
    StepRunState,
    StepSpec,
    WorkItem,
)
from tickwork.serde.serializers import JsonSerializer
from tickwork.serde.snapshot import SnapshotCache, encode_snapshot

SER = JsonSerializer()


class Ping(Event):
    number: int


EVENTS = [Ping(number=i) for i in range(10)]
CONFIG = RunConfig(
    workflow_name="dispatch-test",
    steps={"a": StepSpec("a", (Ping,)), "b": StepSpec("b", (Ping,))},
)

# A value that changes the encoding, for every work item field a snapshot writes.
CHANGED: dict[str, Any] = {
    "event": EVENTS[7],
    "bound_events": {"other": EVENTS[8]},
    "scope_path": ("s", "t"),
    "recovery_counts": {"handler": 1},
    "attempts": 2,
    "first_attempt_at": 2.5,
    "last_exception": ValueError("boom"),
    "last_failed_at": 3.5,
    "not_before": 4.5,
}

# Fields no snapshot writes for an invocation's item (the step is the entry's key, the
# resume identity becomes the invocation's id and received indexes).
NOT_WRITTEN = {"step", "resume_identity", "work_item_id"}


def _state(queue: PQueue[WorkItem], running: PMap[str, Invocation]) -> RunState:
    step_a = StepRunState(queue=queue, in_progress=running)
    return RunState(
        config=CONFIG,
        steps={"a": step_a, "b": StepRunState()},
        status="running",
        is_running=True,
        queued=len(queue),
        running=len(running),
    )


def _snap(cache: SnapshotCache, state: RunState) -> dict[str, Any]:
    """The cached snapshot of ``state``, checked against a fresh one."""
    cached = encode_snapshot(state, SER, None, cache)
    assert cached == encode_snapshot(state, SER, None)
    return cached


def _dispatch(field: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Snapshots before and after the dispatch of the queue's first item, whose invocation
    has ``field`` changed (``None``: a plain dispatch)."""
    items = [WorkItem(f"wi-{i}", "a", EVENTS[i], scope_path=("s",)) for i in range(4)]
    queue: PQueue[WorkItem] = PQueue()
    for item in items:
        queue = queue.append(item)
    _, queue = queue.popleft()  # the rest moves to the front cells, which pops then share
    cache = SnapshotCache()
    before = _snap(cache, _state(queue, PMap()))
    item, rest = queue.popleft()
    invocation = Invocation("inv-1", "a", 0, item, 0.0)
    if field is not None:
        setattr(invocation, field, CHANGED[field])
    after = _snap(cache, _state(rest, PMap().set("inv-1", invocation)))
    return before["workers"]["a"]["queue"][0], after["workers"]["a"]["in_progress"][0]


def test_every_written_item_field_is_checked() -> None:
    written = {f.name for f in dataclasses.fields(WorkItem)} - NOT_WRITTEN
    assert written == set(CHANGED)


def test_a_dispatched_item_shares_its_queued_encoding() -> None:
    queued, running = _dispatch(None)
    assert {k: v for k, v in running.items() if k in queued} == queued
    # The invocation's entry is a copy of the queued item's: its containers are shared.
    assert running["scope_path"] is queued["scope_path"]
    assert running["recovery_counts"] is queued["recovery_counts"]


@pytest.mark.parametrize("field", sorted(CHANGED))
def test_an_invocation_that_differs_from_its_queued_item_is_encoded_anew(field: str) -> None:
    queued, running = _dispatch(field)
    assert running["scope_path"] is not queued["scope_path"]
    assert {k: v for k, v in running.items() if k in queued} != queued
