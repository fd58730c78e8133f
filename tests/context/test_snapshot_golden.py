"""Snapshots are written byte for byte as they were when ``snapshot_golden.json`` was made.

A fixed sequence of changes is folded into persistent run states the way the reducer
makes them (queued items, dispatches that share or do not share their item's fields,
retries, a join's release item queued and dispatched, collect and join buffers, streams,
waiters, events written by the plain-text path, by pydantic and with dynamic fields), and
every state is snapshotted with a cache and without one.  The digest of each snapshot's
``json.dumps`` text must be the recorded one: a change in the encoder that is meant to
make snapshots cheaper can change neither their content nor their key order.

Regenerate the file only for an intended format change:
``TW_WRITE_GOLDEN=1 pytest tests/context/test_snapshot_golden.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tickwork import Event
from tickwork.events import CollectionReleaseEvent
from tickwork.runtime.types.persistent import PList, PMap, PQueue
from tickwork.runtime.types.state import (
    CollectBuffer,
    Invocation,
    ReleaseState,
    RunConfig,
    RunState,
    StepRunState,
    StepSpec,
    StreamState,
    Waiter,
    WorkItem,
)
from tickwork.serde.serializers import JsonSerializer
from tickwork.serde.snapshot import SnapshotCache, encode_snapshot

GOLDEN = Path(__file__).with_name("snapshot_golden.json")
SER = JsonSerializer()


class Ping(Event):
    number: int
    label: str = ""
    flag: bool | None = None


class Tally(Event):
    number: int


class Weighed(Event):
    number: int
    weight: float = 0.5  # not a plain field: written by pydantic


def _event(number: int) -> Event:
    """An event of one of the kinds snapshots write differently."""
    kind = number % 5
    if kind == 0:
        return Ping(number=number)
    if kind == 4:
        return Tally(number=number)
    if kind == 1:
        return Ping(number=number, label=f'é{number} "q"', flag=number % 3 == 0)
    if kind == 2:
        return Weighed(number=number, weight=number / 7)
    return Ping(number=number, extra={"k": [number, None]})  # a dynamic field


CONFIG = RunConfig(
    workflow_name="golden",
    steps={"a": StepSpec("a", (Ping, Tally, Weighed)), "join": StepSpec("join", (Ping,))},
)
IDLE_STEP = StepRunState()


@dataclass
class _Run:
    """The mutable view of a run whose records are replaced, never changed."""

    queue: PQueue[WorkItem] = field(default_factory=PQueue)
    in_progress: PMap[str, Invocation] = field(default_factory=PMap)
    join_queue: PQueue[WorkItem] = field(default_factory=PQueue)
    join_running: PMap[str, Invocation] = field(default_factory=PMap)
    collect: dict[str, CollectBuffer] = field(default_factory=dict)
    join: PList[Any] = field(default_factory=PList)
    waiters: PMap[str, Waiter] = field(default_factory=PMap)
    streams: PMap[str, StreamState] = field(default_factory=PMap)
    releases: PMap[str, ReleaseState] = field(default_factory=PMap)
    elapsed: float = 0.0
    minted: int = 0

    def mint(self) -> int:
        self.minted += 1
        return self.minted

    def new_item(self) -> WorkItem:
        number = self.mint()
        return WorkItem(f"wi-{number}", "a", _event(number), scope_path=("stream-1",))

    def dispatch(self, item: WorkItem, running: PMap[str, Invocation]) -> PMap[str, Invocation]:
        inv_id = f"inv-{self.mint()}"
        return running.set(inv_id, Invocation(inv_id, item.step, len(running), item, 1.25))

    def build(self) -> RunState:
        step_a = StepRunState(
            queue=self.queue,
            in_progress=self.in_progress,
            collect_buffers=self.collect,
            join_buffer=self.join,
            waiters=self.waiters,
        )
        join = StepRunState(queue=self.join_queue, in_progress=self.join_running)
        return RunState(
            config=CONFIG,
            steps={"a": step_a, "join": join},
            status="running",
            is_running=True,
            queued=len(self.queue) + len(self.join_queue),
            running=len(self.in_progress) + len(self.join_running),
            streams=self.streams,
            releases=self.releases,
            elapsed_alive=self.elapsed,
            work_item_seq=self.minted,
        )


def _apply(run: _Run, op: str) -> None:
    """Change ``run`` the way one reducer tick could."""
    if op == "append":
        run.queue = run.queue.append(run.new_item())
    elif op == "append_bound":
        item = run.new_item()
        bound = {"other": _event(run.mint()), "more": _event(run.mint())}
        run.queue = run.queue.append(replace(item, bound_events=bound, not_before=0.25))
    elif op == "pop" and run.queue:
        _, run.queue = run.queue.popleft()
    elif op == "retry" and run.queue:
        item, rest = run.queue.popleft()
        run.queue = rest.append(replace(item, attempts=item.attempts + 1, not_before=1.5))
    elif op == "start" and run.queue:
        item, run.queue = run.queue.popleft()
        run.in_progress = run.dispatch(item, run.in_progress)
    elif op == "start_failed" and run.queue:
        item, run.queue = run.queue.popleft()
        again = replace(
            item,
            attempts=item.attempts + 1,
            first_attempt_at=2.5,
            last_exception=ValueError("boom"),
            last_failed_at=3.0,
            recovery_counts={"crash": 1},
        )
        run.in_progress = run.dispatch(again, run.in_progress)
    elif op == "finish" and run.in_progress:
        inv_id = next(iter(run.in_progress))
        run.in_progress = run.in_progress.delete(inv_id)
        key = "stream-1:bind"
        old = run.releases.get(key) or ReleaseState("bind", "stream-1")
        made = _event(run.mint())
        run.releases = run.releases.set(key, replace(old, buffer=old.buffer.append(made)))
    elif op == "release":
        old = run.releases.get("stream-1:bind")
        members = list(old.buffer) if old is not None else []
        event = CollectionReleaseEvent(events=members, stream_id="stream-1", binding_id="bind")
        number = run.mint()
        item = WorkItem(f"wi-{number}", "join", event, scope_path=("stream-1",))
        run.join_queue = run.join_queue.append(item)
        run.releases = run.releases.delete("stream-1:bind") if old is not None else run.releases
    elif op == "start_join" and run.join_queue:
        item, run.join_queue = run.join_queue.popleft()
        run.join_running = run.dispatch(item, run.join_running)
    elif op == "finish_join" and run.join_running:
        run.join_running = run.join_running.delete(next(iter(run.join_running)))
    elif op == "collect":
        old_buffer = run.collect.get("buf") or CollectBuffer()
        made = _event(run.mint())
        run.collect = {"buf": CollectBuffer(old_buffer.events.append(made), {}, 1)}
    elif op == "join":
        run.join = run.join.append(_event(run.mint()))
    elif op == "stream":
        old_stream = run.streams.get("stream-1") or StreamState(
            "stream-1", "a", (), 0, frozenset({"bind"})
        )
        opened = replace(old_stream, open_work_items=old_stream.open_work_items + 1)
        run.streams = run.streams.set("stream-1", opened)
    elif op == "wait":
        waiter_id = f"w-{run.mint()}"
        waiter = Waiter(waiter_id, run.new_item(), Ping, None, None, 10.0, run.elapsed)
        run.waiters = run.waiters.set(waiter_id, waiter)
    elif op == "resolve" and run.waiters:
        run.waiters = run.waiters.delete(next(iter(run.waiters)))
    elif op == "tick":
        run.elapsed += 0.5


OPS = [
    "append",
    "append",
    "append_bound",
    "pop",
    "retry",
    "start",
    "start",
    "start_failed",
    "finish",
    "finish",
    "release",
    "start_join",
    "finish_join",
    "collect",
    "join",
    "stream",
    "wait",
    "resolve",
    "tick",
    "same",
]


def _sequences() -> list[list[str]]:
    """The changes of each run: a fan-out's shape, then seeded random mixes."""
    fan_out = ["append"] * 30 + ["stream"]
    for _ in range(10):
        fan_out += ["start", "start", "start", "same", "finish", "finish", "finish", "same"]
    fan_out += ["release", "same", "start_join", "same", "finish_join"]
    mixes = [random.Random(seed).choices(OPS, k=120) for seed in range(4)]
    return [fan_out, *mixes]


def _digests() -> list[str]:
    """The digest of every snapshot the runs take, cached and fresh alike."""
    digests = []
    for ops in _sequences():
        run, cache = _Run(), SnapshotCache()
        for op in ops:
            if op != "same":
                _apply(run, op)
            state = run.build()
            cached = json.dumps(encode_snapshot(state, SER, {"k": "v"}, cache))
            fresh = json.dumps(encode_snapshot(state, SER, {"k": "v"}))
            assert cached == fresh
            digests.append(hashlib.sha256(cached.encode()).hexdigest()[:16])
    return digests


def test_snapshots_are_written_as_the_recorded_ones() -> None:
    digests = _digests()
    if os.environ.get("TW_WRITE_GOLDEN"):
        GOLDEN.write_text(json.dumps(digests, indent=0) + "\n")
    recorded = json.loads(GOLDEN.read_text())
    assert len(digests) == len(recorded)
    changed = [i for i, (a, b) in enumerate(zip(digests, recorded, strict=True)) if a != b]
    assert not changed, f"snapshots {changed[:10]} are not written as recorded"
