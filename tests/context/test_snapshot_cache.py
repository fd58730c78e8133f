"""``SnapshotCache``: snapshots built from cached encodings equal fresh encodings.

Each test folds changes into persistent run states the way the reducer does (new records
sharing what did not change) and checks that the snapshot taken with the run's cache is
exactly the snapshot taken without one, so a stale cached encoding shows up as a diff.
"""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.events import StepState, StepStateChanged
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

SER = JsonSerializer()


class Ping(Event):
    number: int


class Pong(Event):
    number: int


EVENTS = [Ping(number=i) for i in range(64)]
CONFIG = RunConfig(
    workflow_name="cache-test",
    steps={"a": StepSpec("a", (Ping,)), "b": StepSpec("b", (Ping,))},
)
IDLE_STEP = StepRunState()


@dataclass
class Model:
    """The mutable view of a run whose records are replaced, never changed."""

    queue: PQueue[WorkItem] = field(default_factory=PQueue)
    in_progress: PMap[str, Invocation] = field(default_factory=PMap)
    collect: dict[str, CollectBuffer] = field(default_factory=dict)
    join: PList[Any] = field(default_factory=PList)
    waiters: PMap[str, Waiter] = field(default_factory=PMap)
    streams: PMap[str, StreamState] = field(default_factory=PMap)
    releases: PMap[str, ReleaseState] = field(default_factory=PMap)
    elapsed: float = 0.0
    minted: int = 0
    state: RunState | None = None

    def mint(self) -> int:
        self.minted += 1
        return self.minted

    def new_item(self) -> WorkItem:
        number = self.mint()
        return WorkItem(f"wi-{number}", "a", EVENTS[number % len(EVENTS)], scope_path=("s",))

    def build(self) -> RunState:
        step_a = StepRunState(
            queue=self.queue,
            in_progress=self.in_progress,
            collect_buffers=self.collect,
            join_buffer=self.join,
            waiters=self.waiters,
        )
        self.state = RunState(
            config=CONFIG,
            steps={"a": step_a, "b": IDLE_STEP},
            status="running",
            is_running=True,
            queued=len(self.queue),
            running=len(self.in_progress),
            streams=self.streams,
            releases=self.releases,
            elapsed_alive=self.elapsed,
            work_item_seq=self.minted,
        )
        return self.state


def apply(model: Model, op: str) -> None:
    """Change ``model`` the way one reducer tick could."""
    if op == "append":
        model.queue = model.queue.append(model.new_item())
    elif op == "appendleft":
        model.queue = model.queue.appendleft(model.new_item())
    elif op == "pop" and model.queue:
        _, model.queue = model.queue.popleft()
    elif op == "pop_odd":
        _, model.queue = model.queue.pop_first(lambda it: it.work_item_id.endswith(("1", "3")))
    elif op == "retry" and model.queue:
        # Same work item, same event, a new record: its cached encoding must not be used.
        item, rest = model.queue.popleft()
        model.queue = rest.append(replace(item, attempts=item.attempts + 1, not_before=1.5))
    elif op == "start" and model.queue:
        item, model.queue = model.queue.popleft()
        inv_id = f"inv-{model.mint()}"
        invocation = Invocation(inv_id, "a", len(model.in_progress), item, 0.0)
        model.in_progress = model.in_progress.set(inv_id, invocation)
    elif op == "start_retried" and model.queue:
        # Dispatched as a record that differs from the queued one: encoded anew.
        item, model.queue = model.queue.popleft()
        inv_id = f"inv-{model.mint()}"
        again = replace(item, attempts=item.attempts + 1, last_exception=ValueError("x"))
        invocation = Invocation(inv_id, "a", len(model.in_progress), again, 0.0)
        model.in_progress = model.in_progress.set(inv_id, invocation)
    elif op == "finish" and model.in_progress:
        inv_id = next(iter(model.in_progress))
        model.in_progress = model.in_progress.delete(inv_id)
        key = "stream-1:bind"
        old = model.releases.get(key) or ReleaseState("bind", "stream-1")
        pong = Pong(number=model.mint())
        model.releases = model.releases.set(key, replace(old, buffer=old.buffer.append(pong)))
    elif op == "collect":
        old = model.collect.get("buf") or CollectBuffer()
        pong = Pong(number=model.mint())
        model.collect = {"buf": CollectBuffer(old.events.append(pong), {}, old.generation + 1)}
    elif op == "join":
        model.join = model.join.append(Pong(number=model.mint()))
    elif op == "stream":
        old = model.streams.get("stream-1") or StreamState("stream-1", "a", (), 0, frozenset())
        opened = replace(old, open_work_items=old.open_work_items + 1)
        model.streams = model.streams.set("stream-1", opened)
    elif op == "wait":
        waiter_id = f"w-{model.mint()}"
        waiter = Waiter(waiter_id, model.new_item(), Pong, None, None, 10.0, model.elapsed)
        model.waiters = model.waiters.set(waiter_id, waiter)
    elif op == "resolve" and model.waiters:
        model.waiters = model.waiters.delete(next(iter(model.waiters)))
    elif op == "tick":
        model.elapsed += 0.5


OPS = [
    "append",
    "appendleft",
    "pop",
    "pop_odd",
    "retry",
    "start",
    "start_retried",
    "finish",
    "collect",
    "join",
    "stream",
    "wait",
    "resolve",
    "tick",
    "same",
]


def assert_cached_equals_fresh(cache: SnapshotCache, state: RunState) -> dict[str, Any]:
    """Snapshot ``state`` with ``cache``; it must equal a snapshot taken without one."""
    cached = encode_snapshot(state, SER, None, cache)
    fresh = encode_snapshot(state, SER, None)
    assert cached == fresh
    assert json.dumps(cached) == json.dumps(fresh)
    return cached


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(OPS), min_size=1, max_size=60))
def test_cached_snapshots_equal_fresh_ones_after_any_changes(ops: list[str]) -> None:
    model, cache = Model(), SnapshotCache()
    for op in ["append"] * 4:
        apply(model, op)
    taken: list[tuple[dict[str, Any], str]] = []
    state = model.build()
    for op in ops:
        if op != "same":
            apply(model, op)
            state = model.build()
        snap = assert_cached_equals_fresh(cache, state)
        taken.append((snap, json.dumps(snap)))
    # Later snapshots never change earlier ones.
    for snap, text in taken:
        assert json.dumps(snap) == text


def test_a_changed_record_shows_exactly_where_it_changed() -> None:
    model, cache = Model(), SnapshotCache()
    for op in ["append", "append", "append", "start", "finish", "stream"]:
        apply(model, op)
    before = assert_cached_equals_fresh(cache, model.build())
    for op in ["start", "finish", "retry", "append", "stream"]:
        apply(model, op)
    after = assert_cached_equals_fresh(cache, model.build())

    old_queue, new_queue = before["workers"]["a"]["queue"], after["workers"]["a"]["queue"]
    assert [i["work_item_id"] for i in old_queue] == ["wi-2", "wi-3"]
    assert [i["work_item_id"] for i in new_queue] == ["wi-3", "wi-8"]
    assert [i["attempts"] for i in old_queue] == [0, 0]
    assert [i["attempts"] for i in new_queue] == [1, 0]
    assert before["workers"]["a"]["in_progress"] == after["workers"]["a"]["in_progress"] == []
    buffers = [
        len(snap["collection_release_states"]["stream-1:bind"]["buffer"])
        for snap in (before, after)
    ]
    assert buffers == [1, 2]
    opened = [snap["streams"]["stream-1"]["open_work_items"] for snap in (before, after)]
    assert opened == [1, 2]
    # Everything else is unchanged.
    strip = ("workers", "streams", "collection_release_states", "work_item_seq")
    assert {k: v for k, v in before.items() if k not in strip} == {
        k: v for k, v in after.items() if k not in strip
    }
    assert before["workers"]["b"] == after["workers"]["b"]


def test_a_retried_item_is_encoded_again() -> None:
    model, cache = Model(), SnapshotCache()
    apply(model, "append")
    first = assert_cached_equals_fresh(cache, model.build())
    apply(model, "retry")
    second = assert_cached_equals_fresh(cache, model.build())
    assert first["workers"]["a"]["queue"][0]["attempts"] == 0
    assert second["workers"]["a"]["queue"][0]["attempts"] == 1
    assert second["workers"]["a"]["queue"][0]["not_before"] == 1.5


def test_editing_the_fresh_parts_of_a_snapshot_does_not_change_the_next_ones() -> None:
    model, cache = Model(), SnapshotCache()
    for op in ["append", "append", "append", "start", "finish", "stream", "wait"]:
        apply(model, op)
    state = model.build()
    first = assert_cached_equals_fresh(cache, state)
    # Snapshots are read-only, but what is new in each one may be edited safely: the top
    # level, the workers map, and the entries (and waiters) of steps with waiters. That
    # is what dropping volatile keys before comparing two snapshots needs.
    first["workers"]["a"].pop("in_progress")
    first["workers"]["a"]["collected_waiters"][0].pop("deadline")
    first["workers"]["b"] = {}
    first.pop("streams")
    first.pop("workers")
    assert_cached_equals_fresh(cache, state)


def test_unchanged_parts_are_shared_between_snapshots() -> None:
    model, cache = Model(), SnapshotCache()
    for op in ["append", "append", "start", "stream"]:
        apply(model, op)
    state = model.build()
    first = encode_snapshot(state, SER, None, cache)
    second = encode_snapshot(state, SER, None, cache)
    assert first == second and first is not second
    assert first["workers"] is not second["workers"]
    assert first["workers"]["b"] is second["workers"]["b"]  # no waiters: shared
    assert first["streams"]["stream-1"] is second["streams"]["stream-1"]


def test_every_snapshot_of_an_unchanged_state_has_its_own_maps() -> None:
    model, cache = Model(), SnapshotCache()
    for op in ["append", "append", "start", "finish", "stream"]:
        apply(model, op)
    state = model.build()
    # The first snapshot makes the frame's base; the next ones are copies of it (taken in
    # encode_snapshot), and so are those after a pruning pass, whose frame has no base.
    taken = [assert_cached_equals_fresh(cache, state) for _ in range(3)]
    cache.frame.base = None  # type: ignore[union-attr]
    taken += [assert_cached_equals_fresh(cache, state) for _ in range(2)]
    for key in ["workers", "deliveries", "streams", "collection_release_states"]:
        assert len({id(snap[key]) for snap in taken}) == len(taken)
    assert len({id(snap) for snap in taken}) == len(taken)
    assert all(json.dumps(snap) == json.dumps(taken[0]) for snap in taken)


def test_changed_queues_and_buffers_are_derived_from_the_cache_own_copies() -> None:
    model, cache = Model(), SnapshotCache()
    for op in ["append", "append", "append", "start", "finish", "collect", "join"]:
        apply(model, op)
    first = assert_cached_equals_fresh(cache, model.build())
    # Read-only is the contract, but an edited list must not leak into later versions
    # of the queue or buffer it came from.
    first["workers"]["a"]["queue"].clear()
    first["workers"]["a"]["collected_events"]["buf"].append("junk")
    first["workers"]["a"]["static_collect_events"].append("junk")
    first["collection_release_states"]["stream-1:bind"]["buffer"].append("junk")
    for op in ["pop", "append", "start", "finish", "collect", "join"]:
        apply(model, op)
    assert_cached_equals_fresh(cache, model.build())


def test_the_cache_drops_what_the_state_no_longer_holds() -> None:
    model, cache = Model(), SnapshotCache()
    for _ in range(3000):
        apply(model, "append")
    assert_cached_equals_fresh(cache, model.build())
    assert len(cache.values) >= 3000
    model.queue = PQueue()
    assert_cached_equals_fresh(cache, model.build())
    assert len(cache.values) <= 1024


def test_a_pruning_pass_keeps_every_value_the_state_still_holds() -> None:
    # A pass that found a value in the cache stores nothing; a pruning pass builds a new
    # table of values and must store each value it finds (or the next pass re-encodes).
    model, cache = Model(), SnapshotCache()
    for op in ["append"] * 6 + ["start", "start", "finish", "collect", "join", "wait"]:
        apply(model, op)
    assert_cached_equals_fresh(cache, model.build())
    for _ in range(3000):
        apply(model, "join")
    assert_cached_equals_fresh(cache, model.build())
    model.join = PList()
    state = model.build()
    assert_cached_equals_fresh(cache, state)  # outgrew the state: pruned
    assert len(cache.values) <= 1024
    step = state.steps["a"]
    held = [*step.queue, *step.in_progress.values(), *step.collect_buffers["buf"].events]
    assert all(id(value) in cache.values for value in held)


def test_another_serializer_starts_a_new_cache() -> None:
    model, cache = Model(), SnapshotCache()
    apply(model, "append")
    state = model.build()
    encode_snapshot(state, SER, None, cache)
    other = JsonSerializer()
    assert encode_snapshot(state, other, None, cache) == encode_snapshot(state, other, None)
    assert cache.serializer is other


class Item(Event):
    number: int


class Result(Event):
    number: int


class FanOut(Workflow):
    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(number=i) for i in range(ev.size)]

    @step(num_workers=3)
    async def work(self, ev: Item) -> Result:
        return Result(number=ev.number)

    @step
    async def join(self, results: list[Result]) -> StopEvent:
        return StopEvent(result=sum(r.number for r in results))


@pytest.mark.anyio
async def test_snapshots_after_every_step_of_a_fan_out_match_fresh_encodings() -> None:
    wf = FanOut(timeout=None)
    handler = wf.run(size=40)
    middle: dict[str, Any] | None = None
    taken = 0
    async for event in handler.stream_events(expose_internal=True):
        if isinstance(event, StepStateChanged) and event.step_state is StepState.NOT_RUNNING:
            ctx = handler.ctx
            snap = ctx.to_dict()
            state = ctx._current_run_state()
            assert snap == encode_snapshot(state, ctx._serializer, ctx.store.to_dict(SER))
            taken += 1
            if taken == 10:
                middle = copy.deepcopy(snap)
    assert await handler == sum(range(40))
    assert taken == 42
    assert middle is not None and middle["is_running"] is True
    restored = Context.from_dict(wf, json.loads(json.dumps(middle)))
    assert restored._current_run_state().queued == len(middle["workers"]["work"]["queue"])


class _Unicode(Event):
    text: str = ""
    ratio: float = 0.0


@pytest.mark.parametrize(
    "members",
    [
        [],
        [Ping(number=1)],
        [Ping(number=1), Pong(number=0), Ping(number=2, extra={"k": [1, 2]})],  # dynamic
        [_Unicode(text='héllo "quoted" ✓', ratio=float("inf")), _Unicode(ratio=1e300)],
    ],
)
def test_a_release_event_spliced_from_its_members_is_the_serializer_text(
    members: list[Event],
) -> None:
    from tickwork.events import CollectionReleaseEvent
    from tickwork.serde.snapshot import _Encoder

    event = CollectionReleaseEvent(events=members, stream_id="stream-9", binding_id="b:1")
    encoder = _Encoder(SER, SnapshotCache())
    assert encoder.splice
    for member in members:  # the members are already in the cache, as in a real run
        encoder.event(member)
    assert encoder.event(event) == SER.serialize(event)
    # A serializer with its own serialize() is never bypassed.

    class Custom(JsonSerializer):
        def serialize(self, value: Any) -> str:
            return "custom:" + super().serialize(value)

    assert not _Encoder(Custom(), SnapshotCache()).splice


class _Nested(Event):
    inner: _Unicode
    tags: list[str] = []


@pytest.mark.parametrize(
    "event",
    [
        Ping(number=1),
        Ping(number=2, extra={"k": [1, 2]}),  # a dynamic field
        _Unicode(text='héllo "quoted" ✓\n', ratio=float("-inf")),
        _Nested(inner=_Unicode(text="ü"), tags=["a", "b"]),
        StopEvent(result={"x": [1, None]}),
    ],
)
def test_an_event_is_written_as_the_serializer_writes_it(event: Event) -> None:
    from tickwork.serde.snapshot import _Encoder

    cache = SnapshotCache()
    encoder = _Encoder(SER, cache)
    assert encoder.model_text
    assert encoder.event(event) == SER.serialize(event)
    # A second event of the class reuses the class's name text.
    assert type(event) in cache.tails
    twin = event.model_copy()
    assert encoder.event(twin) == SER.serialize(twin)


def test_a_class_of_main_is_named_anew_every_time() -> None:
    from tickwork.serde.serializers import model_text

    class Script(Event):
        n: int = 0

    Script.__module__ = "__main__"
    tails: dict[type, str] = {}
    assert model_text(Script(n=3), tails) == SER.serialize(Script(n=3))
    assert tails == {}


def test_a_serializer_that_writes_models_its_own_way_is_used_for_events() -> None:
    from tickwork.serde.snapshot import _Encoder

    class Tagged(JsonSerializer):
        def _model_envelope(self, model: Any) -> dict[str, Any]:
            return {**super()._model_envelope(model), "tag": 1}

    model, tagged = Model(), Tagged()
    apply(model, "append")
    snapshot = encode_snapshot(model.build(), tagged, None, SnapshotCache())
    text = snapshot["workers"]["a"]["queue"][0]["event"]
    assert json.loads(text)["tag"] == 1
    assert text == tagged.serialize(model.queue.popleft()[0].event)
    assert not _Encoder(tagged, SnapshotCache()).model_text


def test_a_snapshot_that_failed_midway_leaves_the_cache_consistent() -> None:
    model, cache = Model(), SnapshotCache()
    for op in ["append", "append", "join"]:
        apply(model, op)
    assert_cached_equals_fresh(cache, model.build())
    # The queue grows (its new version takes the cached list over), then the join
    # buffer, encoded after it, holds an event JSON cannot write: the snapshot fails.
    apply(model, "append")
    good_join = model.join
    model.join = good_join.append(Event(lock=threading.Lock()))
    with pytest.raises(ValueError, match=r"[Ll]ock"):
        encode_snapshot(model.build(), SER, None, cache)
    model.join = good_join
    after = assert_cached_equals_fresh(cache, model.build())
    assert [i["work_item_id"] for i in after["workers"]["a"]["queue"]] == ["wi-1", "wi-2", "wi-4"]


def test_finished_invocations_leave_the_cache_with_their_items_and_events() -> None:
    model, cache = Model(), SnapshotCache()
    for op in ["append", "append", "append", "start", "start"]:
        apply(model, op)
    assert_cached_equals_fresh(cache, model.build())
    running = list(model.in_progress.values())
    held = {id(v[0]) for v in cache.values.values()}
    assert all(id(inv) in held and id(inv.item.event) in held for inv in running)
    apply(model, "finish")
    assert_cached_equals_fresh(cache, model.build())
    kept = [v[0] for v in cache.values.values()]
    finished, still = running
    assert not any(x is finished or x is finished.item or x is finished.item.event for x in kept)
    assert any(x is still for x in kept)
