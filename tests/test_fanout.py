"""End-to-end tests of fan-out streams and ``list[E]`` / multi-slot joins (api.md §21).

Every async test runs under asyncio and trio (see ``conftest.py``). Ordering-sensitive
tests never rely on sleeps: the test either gates the steps on ``anyio.Event``s, or the
stream consumer releases the next step once it has seen the previous one finish.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from typing import Annotated, Any

import anyio
import pytest

from tickwork import (
    Context,
    Event,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
    Workflow,
    catch_error,
    step,
)
from tickwork.collect import All, Collect, Take
from tickwork.decorators import make_step_function
from tickwork.errors import WorkflowRuntimeError, WorkflowTimeoutError, WorkflowValidationError
from tickwork.events import (
    CollectionReleaseEvent,
    StepFailedEvent,
    StepState,
    StepStateChanged,
    UnhandledEvent,
    WorkflowFailedEvent,
    WorkflowIdleEvent,
)
from tickwork.handler import WorkflowHandler
from tickwork.retry_policy import retry_policy, stop_after_attempt, wait_fixed

pytestmark = pytest.mark.anyio

TIMEOUT = 5.0

# --------------------------------------------------------------------------- events


class Item(Event):
    n: int


class Done(Event):
    n: int


class AllDone(Event):
    ns: list[int]


class TakeDone(Event):
    ns: list[int]


class ItemA(Event):
    n: int


class ItemB(Event):
    n: int


class DoneA(Event):
    n: int


class DoneB(Event):
    n: int


class Mixed(Event):
    tags: list[str]


class Answer(Event):
    n: int


class Ping(Event):
    pass


class Pair(Event):
    left: int
    right: int


# --------------------------------------------------------------------------- helpers


class Recording(Workflow):
    """A workflow that records what its steps saw, on the instance."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("timeout", TIMEOUT)
        super().__init__(**kwargs)
        self.log: list[Any] = []
        self.started: list[int] = []
        self.finished: list[int] = []
        self.cancelled: list[int] = []
        self.gate = anyio.Event()


async def drain(handler: WorkflowHandler) -> list[Event]:
    """Consume the whole stream (internal events included)."""
    return [ev async for ev in handler.stream_events(expose_internal=True)]


def stop_events(events: list[Event]) -> list[StopEvent]:
    return [ev for ev in events if isinstance(ev, StopEvent)]


def state_changes(events: list[Event], name: str | None = None) -> list[StepStateChanged]:
    return [
        ev
        for ev in events
        if isinstance(ev, StepStateChanged) and (name is None or ev.name == name)
    ]


async def slow_forever(wf: Recording, n: int) -> None:
    """Start, then block until cancelled; records started / cancelled / finished."""
    wf.started.append(n)
    try:
        await anyio.sleep_forever()
    finally:
        wf.cancelled.append(n)


# =========================================================================== §21.1.1


class EmptyFlow(Recording):
    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return []

    @step
    async def work(self, ev: Item) -> Done:
        self.log.append(("work", ev.n))
        return Done(n=ev.n)

    @step
    async def join_all(self, events: list[Done]) -> AllDone:
        self.log.append(("all", [e.n for e in events]))
        return AllDone(ns=[e.n for e in events])

    @step
    async def join_take(self, events: Annotated[list[Done], Collect(Take(2))]) -> TakeDone:
        self.log.append(("take", [e.n for e in events]))
        return TakeDone(ns=[e.n for e in events])

    @step
    async def final(self, a: AllDone, t: TakeDone) -> StopEvent:
        return StopEvent(result=(a.ns, t.ns))


async def test_empty_list_fires_every_bound_join_once_with_an_empty_batch() -> None:
    wf = EmptyFlow()
    handler = wf.run()
    events = await drain(handler)
    assert await handler == ([], [])
    assert sorted(wf.log) == [("all", []), ("take", [])]
    (split_done,) = [
        ev for ev in state_changes(events, "split") if ev.step_state is StepState.NOT_RUNNING
    ]
    assert split_done.output_event_name == str(type(None))


class NoneFlow(Recording):
    @step
    async def split(self, ev: StartEvent) -> list[Item] | None:
        return None

    @step
    async def work(self, ev: Item) -> Done:
        return Done(n=ev.n)

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        self.log.append([e.n for e in events])
        return StopEvent(result="joined")


async def test_returning_none_opens_no_stream_and_no_join_fires() -> None:
    wf = NoneFlow(timeout=0.2)
    handler = wf.run()
    events = await drain(handler)
    with pytest.raises(WorkflowTimeoutError):
        await handler
    assert wf.log == []
    # The run idled (no stream is open, so it is not stuck), then timed out.
    assert any(isinstance(ev, WorkflowIdleEvent) for ev in events)
    assert not any(isinstance(ev, WorkflowFailedEvent) for ev in events), (
        "a None return must not look like a stuck stream"
    )


class Outer(Event):
    n: int


class OuterDone(Event):
    n: int
    inner: list[int]


class NestedNoneFlow(Recording):
    """Outer branch 0 returns None for its inner fan-out, branch 1 returns []."""

    @step
    async def split(self, ev: StartEvent) -> list[Outer]:
        return [Outer(n=0), Outer(n=1), Outer(n=2)]

    @step
    async def inner_split(self, ev: Outer) -> list[Item] | None:
        if ev.n == 0:
            return None
        return [Item(n=ev.n * 10 + i) for i in range(ev.n - 1)]

    @step
    async def work(self, ev: Item) -> Done:
        return Done(n=ev.n)

    @step
    async def inner_join(self, events: list[Done]) -> OuterDone:
        ns = sorted(e.n for e in events)
        self.log.append(("inner", ns))
        return OuterDone(n=ns[0] // 10 if ns else -1, inner=ns)

    @step
    async def outer_join(self, events: list[OuterDone]) -> StopEvent:
        self.log.append(("outer", len(events)))
        return StopEvent(result=sorted(e.inner for e in events))


async def test_none_inside_a_nested_stream_skips_that_inner_join_only() -> None:
    wf = NestedNoneFlow()
    # branch 1 -> [] (inner join fires with []), branch 2 -> [20] ; branch 0 -> None.
    assert await wf.run() == [[], [20]]
    assert sorted(wf.log) == [("inner", []), ("inner", [20]), ("outer", 2)]


# =========================================================================== §21.2 order


class OrderFlow(Recording):
    """``work`` item k (k < 4) waits for ``gates[k]``; the test opens the gates."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gates = {k: anyio.Event() for k in range(5)}
        self.dispatch_order: list[int] = []

    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=k) for k in range(5)]

    @step(num_workers=5)
    async def work(self, ev: Item) -> Done:
        self.dispatch_order.append(ev.n)
        if ev.n != 4:
            await self.gates[ev.n].wait()
        return Done(n=ev.n)

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        return StopEvent(result=[e.n for e in events])


async def run_in_reverse_completion(wf: OrderFlow) -> list[Event]:
    """Let item k finish only once the stream showed item k+1's NOT_RUNNING.

    Items are dispatched in list order to the smallest free slot, so slot k runs item k.
    """
    handler = wf.run()
    events: list[Event] = []
    async for ev in handler.stream_events(expose_internal=True):
        events.append(ev)
        if (
            isinstance(ev, StepStateChanged)
            and ev.name == "work"
            and ev.step_state is StepState.NOT_RUNNING
            and int(ev.worker_id) > 0
        ):
            wf.gates[int(ev.worker_id) - 1].set()
    assert await handler == [4, 3, 2, 1, 0]
    return events


class SerialFlow(Recording):
    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=k) for k in (3, 1, 4, 0, 2)]

    @step(num_workers=1)
    async def work(self, ev: Item) -> Done:
        self.log.append(ev.n)
        return Done(n=ev.n)

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        return StopEvent(result=[e.n for e in events])


async def test_elements_are_emitted_in_list_order() -> None:
    wf = SerialFlow()
    handler = wf.run()
    events = await drain(handler)
    # One worker: the queue (hence the completion order) is the emission order.
    assert await handler == [3, 1, 4, 0, 2]
    assert wf.log == [3, 1, 4, 0, 2]
    preparing = [
        (ev.worker_id, ev.input_event_name)
        for ev in state_changes(events, "work")
        if ev.step_state is StepState.PREPARING
    ]
    assert preparing == [("<enqueued>", "Item")] * 4


async def test_the_join_sees_arrival_order_not_list_order() -> None:
    wf = OrderFlow()
    await run_in_reverse_completion(wf)
    assert sorted(wf.dispatch_order) == [0, 1, 2, 3, 4]


async def test_step_state_changed_sequence_for_a_five_way_fan_out() -> None:
    """The §25.2 example, field by field."""
    wf = OrderFlow()
    events = await run_in_reverse_completion(wf)

    def cls(t: type) -> str:
        return str(t)

    expected: list[tuple[str, StepState, str, str, str | None]] = [
        ("split", StepState.RUNNING, "0", "StartEvent", None),
        ("split", StepState.NOT_RUNNING, "0", cls(StartEvent), cls(Item)),
    ]
    expected += [("work", StepState.RUNNING, str(k), "Item", None) for k in range(5)]
    expected += [
        ("work", StepState.NOT_RUNNING, str(k), cls(Item), cls(Done)) for k in (4, 3, 2, 1, 0)
    ]
    expected += [
        ("join", StepState.RUNNING, "0", "CollectionReleaseEvent", None),
        ("join", StepState.NOT_RUNNING, "0", cls(CollectionReleaseEvent), cls(StopEvent)),
    ]
    seen = [
        (ev.name, ev.step_state, ev.worker_id, ev.input_event_name, ev.output_event_name)
        for ev in events[:-1]
        if isinstance(ev, StepStateChanged)
    ]
    assert seen == expected
    # Nothing else is published: no idle point, no unhandled event; the StopEvent is last.
    assert all(isinstance(ev, StepStateChanged) for ev in events[:-1])
    assert type(events[-1]) is StopEvent
    assert events[-1].result == [4, 3, 2, 1, 0]


# =========================================================================== dead branches


class DeadFlow(Recording):
    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=k) for k in range(6)]

    @step
    async def work(self, ev: Item) -> Done | None:
        return Done(n=ev.n) if ev.n % 2 == 0 else None

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        self.log.append(len(events))
        return StopEvent(result=sorted(e.n for e in events))


async def test_dead_branches_are_absent_and_the_join_still_fires_once() -> None:
    wf = DeadFlow()
    assert await wf.run() == [0, 2, 4]
    assert wf.log == [3]


# =========================================================================== heterogeneous


class HeteroFlow(Recording):
    @step
    async def split(self, ev: StartEvent) -> list[ItemA | ItemB]:
        return [ItemA(n=0), ItemB(n=1), ItemA(n=2), ItemB(n=3)]

    @step
    async def work_a(self, ev: ItemA) -> DoneA:
        return DoneA(n=ev.n)

    @step
    async def work_b(self, ev: ItemB) -> DoneB | None:
        return DoneB(n=ev.n) if ev.n == 1 else None

    @step
    async def join_done(self, events: list[DoneA | DoneB]) -> Mixed:
        return Mixed(tags=sorted(f"{type(e).__name__}{e.n}" for e in events))

    @step
    async def join_items(self, events: list[ItemA | ItemB]) -> AllDone:
        # The producer's own elements are members of its stream too.
        return AllDone(ns=sorted(e.n for e in events))

    @step
    async def final(self, mixed: Mixed, items: AllDone) -> StopEvent:
        return StopEvent(result=(mixed.tags, items.ns))


async def test_heterogeneous_list_collects_a_flat_mixed_batch() -> None:
    wf = HeteroFlow()
    assert await wf.run() == (["DoneA0", "DoneA2", "DoneB1"], [0, 1, 2, 3])


# =========================================================================== nesting


class L1(Event):
    path: tuple[int, ...]
    shape: list[Any] | None


class L2(Event):
    path: tuple[int, ...]
    leaves: int | None


class L3(Event):
    path: tuple[int, ...]


class D3(Event):
    path: tuple[int, ...]


class D2(Event):
    members: list[tuple[int, ...]]


class D2b(Event):
    members: list[tuple[int, ...]]


class D1(Event):
    groups: list[list[tuple[int, ...]]]


class Depth3Flow(Recording):
    """Three nested streams; each inner join's output continues in the parent stream."""

    @step
    async def split0(self, ev: StartEvent) -> list[L1]:
        return [L1(path=(i,), shape=s) for i, s in enumerate(ev.shape)]

    @step
    async def split1(self, ev: L1) -> list[L2] | None:
        if ev.shape is None:
            return None
        return [L2(path=(*ev.path, j), leaves=k) for j, k in enumerate(ev.shape)]

    @step
    async def split2(self, ev: L2) -> list[L3] | None:
        if ev.leaves is None:
            return None
        return [L3(path=(*ev.path, k)) for k in range(ev.leaves)]

    @step(num_workers=3)
    async def leaf(self, ev: L3) -> D3:
        return D3(path=ev.path)

    @step
    async def join3(self, events: list[D3]) -> D2:
        members = sorted(e.path for e in events)
        self.log.append(("join3", members))
        return D2(members=members)

    @step
    async def relay(self, ev: D2) -> D2b:
        # An ordinary step between an inner join and the outer join: it still belongs to
        # the parent stream, so the outer join waits for it.
        await anyio.sleep(0.01)
        return D2b(members=ev.members)

    @step
    async def join2(self, events: list[D2b]) -> D1:
        groups = sorted(e.members for e in events)
        self.log.append(("join2", groups))
        return D1(groups=groups)

    @step
    async def join1(self, events: list[D1]) -> StopEvent:
        groups = sorted(e.groups for e in events)
        self.log.append(("join1", groups))
        return StopEvent(result=groups)


async def test_nesting_to_depth_three_with_inner_joins_feeding_outer_joins() -> None:
    wf = Depth3Flow()
    # L1 0: three L2s (2 leaves, dead, 0 leaves); L1 1: dead; L1 2: []; L1 3: one L2 (1 leaf)
    shape = [[2, None, 0], None, [], [1]]
    result = await wf.run(shape=shape)
    join3 = sorted(m for kind, m in wf.log if kind == "join3")
    join2 = sorted(m for kind, m in wf.log if kind == "join2")
    join1 = [m for kind, m in wf.log if kind == "join1"]
    assert join3 == [[], [(0, 0, 0), (0, 0, 1)], [(3, 0, 0)]]
    assert join2 == [[], [[], [(0, 0, 0), (0, 0, 1)]], [[(3, 0, 0)]]]
    assert join1 == [[[], [[], [(0, 0, 0), (0, 0, 1)]], [[(3, 0, 0)]]]]
    assert result == join1[0]


# =========================================================================== bindings


class TwoJoinsFlow(Recording):
    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=k) for k in range(4)]

    @step
    async def work(self, ev: Item) -> Done:
        return Done(n=ev.n)

    @step
    async def tap(self, ev: Done) -> None:
        # An ordinary step that accepts the collected type gets every member too.
        self.log.append(("tap", ev.n))

    @step
    async def join_a(self, events: list[Done]) -> AllDone:
        self.log.append(("a", sorted(e.n for e in events)))
        return AllDone(ns=sorted(e.n for e in events))

    @step
    async def join_b(self, events: Annotated[list[Done], Collect(All())]) -> TakeDone:
        self.log.append(("b", sorted(e.n for e in events)))
        return TakeDone(ns=sorted(e.n for e in events))

    @step
    async def final(self, a: AllDone, b: TakeDone) -> StopEvent:
        return StopEvent(result=(a.ns, b.ns))


async def test_two_joins_on_one_producer_each_see_the_whole_stream() -> None:
    wf = TwoJoinsFlow()
    assert await wf.run() == ([0, 1, 2, 3], [0, 1, 2, 3])
    assert sorted(x for x in wf.log if x[0] in ("a", "b")) == [
        ("a", [0, 1, 2, 3]),
        ("b", [0, 1, 2, 3]),
    ]


async def test_an_event_accepted_by_an_ordinary_step_and_a_join_goes_to_both() -> None:
    wf = TwoJoinsFlow()
    await wf.run()
    assert sorted(n for kind, n in wf.log if kind == "tap") == [0, 1, 2, 3]
    # The stream only closed after tap had handled every member (its None returns count).
    assert [kind for kind, _ in wf.log].count("tap") == 4


# =========================================================================== Take(n)


class TakeFlow(Recording):
    """Items 0 and 1 finish at once; items 2-4 only once the Take(2) join has run."""

    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=k) for k in range(5)]

    @step(num_workers=5)
    async def work(self, ev: Item) -> Done:
        if ev.n >= 2:
            await self.gate.wait()
        self.finished.append(ev.n)
        return Done(n=ev.n)

    @step
    async def first_two(self, events: Annotated[list[Done], Collect(Take(2))]) -> TakeDone:
        self.log.append(("take", [e.n for e in events], sorted(self.finished)))
        self.gate.set()
        return TakeDone(ns=sorted(e.n for e in events))

    @step
    async def everything(self, events: list[Done]) -> AllDone:
        self.log.append(("all", sorted(e.n for e in events)))
        return AllDone(ns=sorted(e.n for e in events))

    @step
    async def final(self, a: AllDone, t: TakeDone) -> StopEvent:
        return StopEvent(result=(t.ns, a.ns))


async def test_take_fires_on_the_nth_arrival_and_drops_later_arrivals() -> None:
    wf = TakeFlow()
    # If Take(2) waited for the close, items 2-4 would never finish: the run would time out.
    assert await wf.run() == ([0, 1], [0, 1, 2, 3, 4])
    takes = [entry for entry in wf.log if entry[0] == "take"]
    assert len(takes) == 1, "Take(2) fires exactly once; later arrivals are dropped"
    assert takes[0][2] == [0, 1], "it fired before any later member finished"


class TakeFewerFlow(Recording):
    dead: set[int] = set()

    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=k) for k in range(ev.count)]

    @step
    async def work(self, ev: Item) -> Done | None:
        return None if ev.n in self.dead else Done(n=ev.n)

    @step
    async def join(self, events: Annotated[list[Done], Collect(Take(3))]) -> StopEvent:
        self.log.append(sorted(e.n for e in events))
        return StopEvent(result=sorted(e.n for e in events))


@pytest.mark.parametrize(
    ("count", "dead", "expected"),
    [(2, set(), [0, 1]), (5, {0, 2, 3}, [1, 4]), (4, {0, 1, 2, 3}, []), (0, set(), [])],
)
async def test_take_fires_on_close_with_fewer_members(
    count: int, dead: set[int], expected: list[int]
) -> None:
    wf = TakeFewerFlow()
    wf.dead = dead
    assert await wf.run(count=count) == expected
    assert wf.log == [expected]


class Deep(Event):
    n: int


class Sub(Event):
    n: int


class SubDone(Event):
    n: int


class CutFlow(Recording):
    """Take(1, cancel_rest=True): item 0 wins once the slow sibling and a nested stream run."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sub_started = anyio.Event()
        self.inner_fired: list[Any] = []

    @step
    async def split(self, ev: StartEvent) -> list[Item | Deep]:
        return [Item(n=0), Item(n=1), Deep(n=2)]

    @step(num_workers=4, retry_policy=retry_policy(wait=wait_fixed(0), stop=stop_after_attempt(3)))
    async def work(self, ev: Item) -> Done:
        if ev.n == 0:
            await self.sub_started.wait()
            while 1 not in self.started:
                await anyio.sleep(0.001)
        else:
            await slow_forever(self, ev.n)
        self.finished.append(ev.n)
        return Done(n=ev.n)

    @step
    async def deep_split(self, ev: Deep) -> list[Sub]:
        return [Sub(n=ev.n * 10)]

    @step
    async def sub_work(self, ev: Sub) -> SubDone:
        self.sub_started.set()
        await slow_forever(self, ev.n)
        self.finished.append(ev.n)
        return SubDone(n=ev.n)

    @step
    async def inner_join(self, events: list[SubDone]) -> Done:
        self.inner_fired.append([e.n for e in events])
        return Done(n=99)

    @catch_error
    async def recover(self, ev: StepFailedEvent) -> None:
        self.log.append(("recover", ev.step_name))

    @step
    async def winner(
        self, events: Annotated[list[Done], Collect(Take(1, cancel_rest=True))]
    ) -> TakeDone:
        self.log.append(("take", [e.n for e in events]))
        return TakeDone(ns=[e.n for e in events])

    @step
    async def everyone(self, events: list[Done]) -> AllDone:
        self.log.append(("all", [e.n for e in events]))
        return AllDone(ns=[e.n for e in events])

    @step
    async def final(self, t: TakeDone, a: AllDone) -> StopEvent:
        return StopEvent(result=(t.ns, a.ns))


async def test_take_cancel_rest_cancels_running_siblings_and_nested_streams() -> None:
    wf = CutFlow()
    handler = wf.run()
    events = await drain(handler)
    # The cut closes the stream at once: the All join fires with what had arrived.
    assert await handler == ([0], [0])
    await anyio.sleep(0.02)  # let cancelled tasks finish unwinding
    # Cancelled work is no failure: no retry (each started once), no @catch_error.
    assert sorted(wf.started) == [1, 20]
    assert sorted(wf.cancelled) == [1, 20]
    assert wf.finished == [0], "the slow sibling and the nested member never finished"
    assert wf.inner_fired == [], "pending releases of nested streams are dropped"
    assert sorted(wf.log) == [("all", [0]), ("take", [0])]

    # Each cancelled invocation publishes NOT_RUNNING with output_event_name=None ...
    cut = [
        ev
        for ev in state_changes(events)
        if ev.step_state is StepState.NOT_RUNNING and ev.output_event_name is None
    ]
    assert sorted((ev.name, ev.input_event_name) for ev in cut) == [
        ("sub_work", str(Sub)),
        ("work", str(Item)),
    ]
    # ... before the run ends, and no invocation is reported twice.
    stop_index = next(i for i, ev in enumerate(events) if isinstance(ev, StopEvent))
    assert all(events.index(ev) < stop_index for ev in cut)
    running = Counter(ev.name for ev in state_changes(events) if ev.step_state is StepState.RUNNING)
    not_running = Counter(
        ev.name for ev in state_changes(events) if ev.step_state is StepState.NOT_RUNNING
    )
    assert running == not_running
    assert running["inner_join"] == 0


class QueuedCutFlow(Recording):
    """Take(1, cancel_rest=True) with one worker slot: queued members never start."""

    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=k) for k in range(4)]

    @step(num_workers=1)
    async def work(self, ev: Item) -> Done:
        self.started.append(ev.n)
        return Done(n=ev.n)

    @step
    async def first(
        self, events: Annotated[list[Done], Collect(Take(1, cancel_rest=True))]
    ) -> StopEvent:
        await anyio.sleep(0.02)  # queued members would run meanwhile if not dropped
        return StopEvent(result=[e.n for e in events])


async def test_take_cancel_rest_drops_queued_members() -> None:
    wf = QueuedCutFlow()
    assert await wf.run() == [0]
    assert wf.started == [0]


class DispatchedCutFlow(Recording):
    """Take(2, cancel_rest=True), two slots: the first completion hands its freed slot to
    item 2, whose task is started but has not begun when the second completion cuts it."""

    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=k) for k in range(4)]

    @step(num_workers=2)
    async def work(self, ev: Item) -> Done:
        self.started.append(ev.n)
        return Done(n=ev.n)

    @step
    async def first(
        self, events: Annotated[list[Done], Collect(Take(2, cancel_rest=True))]
    ) -> StopEvent:
        await anyio.sleep(0.02)  # a cut worker that still ran would have run by now
        return StopEvent(result=sorted(e.n for e in events))


async def test_take_cancel_rest_drops_a_dispatched_member_that_has_not_begun() -> None:
    # Under trio such a worker's body used to run anyway (its cancel scope did not exist
    # yet); under asyncio its task was cancelled before its first step.  Both now agree.
    wf = DispatchedCutFlow()
    assert await wf.run() == [0, 1]
    assert sorted(wf.started) == [0, 1]


class CutRetryWaiterFlow(Recording):
    """The cut also drops a delayed retry and a waiter inside the stream.

    Item 1 fails (its retry is due in 1 s), item 2 waits for an ``Answer``; the test lets
    item 0 win only once both are parked.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ready = anyio.Event()

    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=0), Item(n=1), Item(n=2)]

    @step(
        num_workers=3,
        retry_policy=retry_policy(wait=wait_fixed(1), stop=stop_after_attempt(5)),
    )
    async def work(self, ctx: Context, ev: Item) -> Done:
        self.log.append(("work", ev.n, ctx.retry_info().retry_number))
        if ev.n == 1:
            raise ValueError("retried later")
        if ev.n == 2:
            answer = await ctx.wait_for_event(Answer)
            return Done(n=answer.n)
        await self.ready.wait()
        return Done(n=ev.n)

    @catch_error
    async def recover(self, ev: StepFailedEvent) -> None:
        self.log.append(("recover", ev.step_name))

    @step
    async def first(
        self, events: Annotated[list[Done], Collect(Take(1, cancel_rest=True))]
    ) -> Pair:
        return Pair(left=events[0].n, right=0)

    @step
    async def finish(self, ctx: Context, ev: Pair) -> StopEvent:
        ctx.send_event(Answer(n=5))  # the dropped waiter must not wake item 2 again
        await self.gate.wait()
        return StopEvent(result=ev.left)


async def test_take_cancel_rest_drops_delayed_retries_and_waiters_of_the_stream() -> None:
    wf = CutRetryWaiterFlow()
    handler = wf.run()
    events: list[Event] = []
    parked = 0
    snapshot: dict[str, Any] = {}
    async for ev in handler.stream_events(expose_internal=True):
        events.append(ev)
        if not isinstance(ev, StepStateChanged):
            continue
        if ev.name == "work" and ev.step_state is StepState.NOT_RUNNING:
            parked += 1  # item 1's failure, item 2's suspension
            if parked == 2:
                wf.ready.set()
        if ev.name == "finish" and ev.step_state is StepState.RUNNING:
            snapshot = handler.ctx.to_dict()
            wf.gate.set()
    assert await handler == 0
    assert snapshot["workers"]["work"]["queue"] == [], "the delayed retry was dropped"
    assert snapshot["workers"]["work"]["collected_waiters"] == [], "the waiter was dropped"
    assert snapshot["streams"] == {}
    assert sorted(wf.log) == [("work", 0, 0), ("work", 1, 0), ("work", 2, 0)]
    unhandled = [ev for ev in events if isinstance(ev, UnhandledEvent)]
    assert [ev.event_type for ev in unhandled] == ["Answer"]


class Watch(Event):
    pass


class WaiterReplacesDelivery(Recording):
    """A member's ``Done`` resolves a waiter in ``tap`` instead of being delivered to it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.waiting = anyio.Event()

    @step
    async def split(self, ctx: Context, ev: StartEvent) -> list[Item] | Watch:
        ctx.send_event(Watch())
        return [Item(n=0), Item(n=1)]

    @step
    async def work(self, ev: Item) -> Done:
        await self.waiting.wait()
        if ev.n == 1:
            await anyio.sleep(0.01)
        return Done(n=ev.n)

    @step
    async def tap(self, ctx: Context, ev: Watch | Done) -> None:
        if isinstance(ev, Done):
            self.log.append(("tap", ev.n))
            return None
        resolved = await ctx.wait_for_event(Done)
        self.log.append(("woken", resolved.n))
        return None

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        return StopEvent(result=sorted(e.n for e in events))


async def test_a_member_that_resolves_a_waiter_still_lets_the_stream_close() -> None:
    wf = WaiterReplacesDelivery()
    handler = wf.run()
    async for ev in handler.stream_events(expose_internal=True):
        if (
            isinstance(ev, StepStateChanged)
            and ev.name == "tap"
            and ev.step_state is StepState.NOT_RUNNING
        ):
            wf.waiting.set()  # the waiter is registered
    assert await handler == [0, 1]
    assert sorted(wf.log) == [("tap", 1), ("woken", 0)]


class NearestFlow(Recording):
    """One join bound to an outer and an inner producer: members join the nearest stream."""

    @step
    async def split(self, ev: StartEvent) -> list[Item | Deep]:
        return [Item(n=1), Item(n=2), Deep(n=0)]

    @step
    async def work(self, ev: Item) -> Done:
        return Done(n=ev.n)

    @step
    async def deep_split(self, ev: Deep) -> list[Sub]:
        return [Sub(n=100), Sub(n=101)]

    @step
    async def sub_work(self, ev: Sub) -> Done:
        return Done(n=ev.n)

    @step
    async def join(self, events: list[Done]) -> Done | StopEvent:
        ns = sorted(e.n for e in events)
        self.log.append(ns)
        if ns and ns[0] >= 100:
            return Done(n=sum(ns))  # continues in the outer stream
        return StopEvent(result=ns)


async def test_members_are_buffered_for_the_nearest_bound_stream() -> None:
    wf = NearestFlow()
    assert await wf.run() == [1, 2, 201]
    assert wf.log == [[100, 101], [1, 2, 201]]


class StopInListFlow(Recording):
    @step
    async def split(self, ev: StartEvent) -> list[Item | StopEvent]:
        return [Item(n=0), StopEvent(result="first"), StopEvent(result="second")]

    @step
    async def work(self, ev: Item) -> Done:
        self.log.append(ev.n)
        return Done(n=ev.n)

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        return StopEvent(result="joined")


async def test_a_stop_event_in_a_fan_out_list_wins_and_discards_the_rest() -> None:
    wf = StopInListFlow()
    handler = wf.run()
    events = await drain(handler)
    assert await handler == "first"
    assert wf.log == []
    assert len(stop_events(events)) == 1


class SyncFlow(Recording):
    @step
    def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=k) for k in range(3)]

    @step
    def work(self, ev: Item) -> Done | None:
        return Done(n=ev.n) if ev.n else None

    @step
    def join(self, events: list[Done]) -> StopEvent:
        return StopEvent(result=sorted(e.n for e in events))


async def test_sync_steps_fan_out_and_join_too() -> None:
    assert await SyncFlow().run() == [1, 2]


class Ask(InputRequiredEvent):
    n: int


class AskFlow(Recording):
    @step
    async def split(self, ev: StartEvent) -> list[Item | Ask]:
        return [Ask(n=0), Item(n=1), Ask(n=2)]

    @step
    async def work(self, ev: Item) -> Done:
        return Done(n=ev.n)

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        return StopEvent(result=[e.n for e in events])


async def test_input_required_elements_are_published_right_after_the_producer() -> None:
    handler = AskFlow().run()
    events = await drain(handler)
    assert await handler == [1]
    names = [
        f"{ev.name}:{ev.step_state.value}" if isinstance(ev, StepStateChanged) else ev
        for ev in events
    ]
    assert names[:5] == [
        "split:running",
        "split:not_running",
        Ask(n=0),
        Ask(n=2),
        "work:running",
    ]
    assert not any(isinstance(ev, UnhandledEvent) for ev in events)


class NoJoinFlow(Recording):
    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=k) for k in range(3)]

    @step
    async def work(self, ev: Item) -> Done:
        return Done(n=ev.n)

    @step
    async def tally(self, ev: Done) -> StopEvent | None:
        self.log.append(ev.n)
        return StopEvent(result=sorted(self.log)) if len(self.log) == 3 else None


async def test_a_fan_out_without_any_join_just_dispatches_its_elements() -> None:
    assert await NoJoinFlow().run() == [0, 1, 2]


class DoneChild(Done):
    pass


class SubclassJoin(Recording):
    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=k) for k in range(3)]

    @step
    async def work(self, ev: Item) -> DoneChild:
        return DoneChild(n=ev.n)

    @step(accept_event_subclasses=True)
    async def join(self, events: list[Done]) -> StopEvent:
        return StopEvent(result=sorted((type(e).__name__, e.n) for e in events))


async def test_a_subclass_mode_join_collects_subclass_members() -> None:
    assert await SubclassJoin().run() == [("DoneChild", 0), ("DoneChild", 1), ("DoneChild", 2)]


class ListFromPlainStep(Recording):
    @step
    async def begin(self, ev: StartEvent) -> Item:
        return [Item(n=0)]  # type: ignore[return-value]

    @step
    async def work(self, ev: Item) -> StopEvent:
        return StopEvent(result=ev.n)


async def test_a_list_from_a_step_not_annotated_as_fan_out_is_a_runtime_error() -> None:
    handler = ListFromPlainStep().run()
    events = await drain(handler)
    with pytest.raises(WorkflowRuntimeError) as info:
        await handler
    assert "begin" in str(info.value) and "list" in str(info.value)
    assert isinstance(events[-1], WorkflowFailedEvent) and events[-1].step_name == "begin"


class GatedJoin(Recording):
    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=k) for k in range(2)]

    @step
    async def work(self, ev: Item) -> Done:
        return Done(n=ev.n)

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        await self.gate.wait()
        return StopEvent(result=sorted(e.n for e in events))


async def test_a_running_release_is_recorded_with_its_collect_work_item_id() -> None:
    wf = GatedJoin()
    handler = wf.run()
    snapshot: dict[str, Any] = {}
    async for ev in handler.stream_events(expose_internal=True):
        if (
            isinstance(ev, StepStateChanged)
            and ev.name == "join"
            and ev.step_state is StepState.RUNNING
        ):
            snapshot = handler.ctx.to_dict()
            wf.gate.set()
    assert await handler == [0, 1]
    (running,) = snapshot["workers"]["join"]["in_progress"]
    payload = running["collection_release_payload"]
    assert payload is not None
    assert re.fullmatch(r"stream-[0-9a-f]{16}", payload["stream_id"])
    assert running["work_item_id"] == (
        f"work_item_collect_{payload['stream_id']}:{payload['binding_id']}"
    )
    assert len(payload["events"]) == 2


@pytest.mark.parametrize(
    "flow",
    [TakeFlow, TakeFewerFlow, DeadFlow, EmptyFlow, CutFlow],
    ids=lambda cls: cls.__name__,
)
async def test_a_completed_fan_out_run_leaves_no_stream_state(flow: type[Recording]) -> None:
    wf = flow()
    handler = wf.run(count=3)
    await handler
    snapshot = handler.ctx.to_dict()
    assert snapshot["is_running"] is False
    assert snapshot["streams"] == {}
    assert snapshot["collection_release_states"] == {}
    assert snapshot["deliveries"] == []
    for name, worker in snapshot["workers"].items():
        assert worker["queue"] == [] and worker["in_progress"] == [], name
        assert worker["static_collect_events"] == [] and worker["collected_waiters"] == [], name


async def test_a_completed_run_leaves_the_multi_slot_buffer_empty() -> None:
    handler = SlotFlow().run(order=[("A", 0), ("B", 10), ("A", 1)])
    assert await handler == [(0, 10)]
    snapshot = handler.ctx.to_dict()
    assert snapshot["workers"]["pair"]["static_collect_events"] == []


async def test_a_failed_fan_out_run_leaves_no_stream_state() -> None:
    handler = FailingMemberFlow().run()
    with pytest.raises(ValueError):
        await handler
    snapshot = handler.ctx.to_dict()
    assert snapshot["is_running"] is False
    assert snapshot["streams"] == {} and snapshot["collection_release_states"] == {}
    assert all(w["in_progress"] == [] for w in snapshot["workers"].values())


class SendInsideStream(Recording):
    """Members *send* their results: sends are top-level, never members of the stream."""

    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=0), Item(n=1)]

    @step
    async def work(self, ctx: Context, ev: Item) -> Done | None:
        ctx.send_event(Done(n=ev.n))
        return None

    @step
    async def tap(self, ev: Done) -> None:
        self.log.append(("tap", ev.n))

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        self.log.append(("join", [e.n for e in events]))
        return StopEvent(result=[e.n for e in events])


async def test_sends_from_inside_a_stream_are_not_members() -> None:
    wf = SendInsideStream()
    handler = wf.run()
    events = [ev async for ev in handler.stream_events(expose_internal=True)]
    assert await handler == []
    assert [entry for entry in wf.log if entry[0] == "join"] == [("join", [])]
    # The sends still reach the ordinary step: each one dispatches ``tap``.  (Whether a
    # tap finishes before the join's StopEvent cancels it is up to the scheduler.)
    tap_runs = [
        ev
        for ev in events
        if isinstance(ev, StepStateChanged)
        and ev.name == "tap"
        and ev.step_state is StepState.RUNNING
    ]
    assert len(tap_runs) == 2


class Branch(Event):
    n: int


class BranchDone(Event):
    pairs: list[tuple[int, int]]


class CrossBranchSlots(Recording):
    """Branch 0 yields an A, branch 1 a B: the multi-slot join pairs them across streams."""

    @step
    async def split(self, ev: StartEvent) -> list[Branch]:
        return [Branch(n=0), Branch(n=1)]

    @step
    async def branch(self, ev: Branch) -> list[ItemA | ItemB]:
        return [ItemA(n=ev.n)] if ev.n == 0 else [ItemB(n=ev.n)]

    @step
    async def pair(self, a: ItemA, b: ItemB) -> Pair:
        return Pair(left=a.n, right=b.n)

    @step
    async def pairs(self, events: list[Pair]) -> BranchDone:
        return BranchDone(pairs=[(p.left, p.right) for p in events])

    @step
    async def outer(self, events: list[BranchDone]) -> StopEvent:
        return StopEvent(result=sorted(e.pairs for e in events))


async def test_a_multi_slot_join_pairs_across_parallel_branches() -> None:
    assert await CrossBranchSlots().run() == [[], [(0, 1)]]


class NestedCut(Recording):
    """A Take(1, cancel_rest=True) on each inner stream cuts only that stream."""

    @step
    async def split(self, ev: StartEvent) -> list[Branch]:
        return [Branch(n=0), Branch(n=1)]

    @step
    async def branch(self, ev: Branch) -> list[Item]:
        return [Item(n=ev.n * 10), Item(n=ev.n * 10 + 1)]

    @step(num_workers=4)
    async def work(self, ev: Item) -> Done:
        if ev.n % 10:
            await slow_forever(self, ev.n)
        else:
            while ev.n + 1 not in self.started:
                await anyio.sleep(0.001)
        return Done(n=ev.n)

    @step
    async def first(
        self, events: Annotated[list[Done], Collect(Take(1, cancel_rest=True))]
    ) -> BranchDone:
        return BranchDone(pairs=[(e.n, e.n) for e in events])

    @step
    async def outer(self, events: list[BranchDone]) -> StopEvent:
        return StopEvent(result=sorted(e.pairs for e in events))


async def test_a_cut_inner_stream_leaves_the_outer_stream_running() -> None:
    wf = NestedCut()
    assert await wf.run() == [[(0, 0)], [(10, 10)]]
    await anyio.sleep(0.01)
    assert sorted(wf.cancelled) == [1, 11]


class Orphan(Event):
    pass


class UnhandledMember(Recording):
    @step
    async def split(self, ev: StartEvent) -> list[Item | Orphan]:
        return [Orphan(), Item(n=1)] if ev.mixed else [Orphan()]

    @step
    async def work(self, ev: Item) -> Done:
        return Done(n=ev.n)

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        return StopEvent(result=[e.n for e in events])


@pytest.mark.parametrize(("mixed", "expected"), [(True, [1]), (False, [])])
async def test_an_unhandled_member_is_reported_and_counts_no_work(
    mixed: bool, expected: list[int]
) -> None:
    handler = UnhandledMember(disable_validation=True).run(mixed=mixed)
    events = await drain(handler)
    assert await handler == expected
    assert [ev.event_type for ev in events if isinstance(ev, UnhandledEvent)] == ["Orphan"]


# =========================================================================== multi-slot


class SlotFlow(Recording):
    """A multi-slot join inside a stream, feeding a ``list[Pair]`` join."""

    @step
    async def split(self, ev: StartEvent) -> list[ItemA | ItemB]:
        order = {"A": ItemA, "B": ItemB}
        return [order[kind](n=n) for kind, n in ev.order]

    @step
    async def pair(self, a: ItemA, b: ItemB) -> Pair:
        return Pair(left=a.n, right=b.n)

    @step
    async def pairs(self, events: list[Pair]) -> StopEvent:
        return StopEvent(result=sorted((p.left, p.right) for p in events))


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        ([("A", 0), ("B", 10), ("A", 1), ("B", 11)], [(0, 10), (1, 11)]),
        ([("A", 0), ("A", 1), ("B", 10), ("B", 11)], [(0, 10), (1, 11)]),
        ([("B", 10), ("B", 11), ("B", 12), ("A", 0), ("A", 1)], [(0, 10), (1, 11)]),
        ([("A", 0), ("B", 10), ("A", 1)], [(0, 10)]),  # the leftover A is absorbed
        ([("A", 0), ("A", 1)], []),
    ],
)
async def test_multi_slot_join_pairs_in_arrival_order_in_repeated_batches(
    order: list[tuple[str, int]], expected: list[tuple[int, int]]
) -> None:
    assert await SlotFlow().run(order=order) == expected


class SameTypeSlots(Recording):
    @step
    async def split(self, ev: StartEvent) -> list[ItemA]:
        return [ItemA(n=n) for n in range(5)]

    @step
    async def pair(self, x: ItemA, y: ItemA) -> Pair:
        return Pair(left=x.n, right=y.n)

    @step
    async def pairs(self, events: list[Pair]) -> StopEvent:
        return StopEvent(result=sorted((p.left, p.right) for p in events))


async def test_two_slots_of_one_type_bind_in_arrival_order() -> None:
    assert await SameTypeSlots().run() == [(0, 1), (2, 3)]


class TopLevelSlots(Recording):
    @step
    async def begin(self, ctx: Context, ev: StartEvent) -> ItemA | ItemB | None:
        for kind, n in ev.order:
            ctx.send_event(ItemA(n=n) if kind == "A" else ItemB(n=n))
        return None

    @step
    async def pair(self, a: ItemA, b: ItemB) -> Pair:
        return Pair(left=a.n, right=b.n)

    @step
    async def tally(self, ev: Pair) -> StopEvent | None:
        self.log.append((ev.left, ev.right))
        # ``pair`` runs its batches concurrently, so tally sees them in any order.
        return StopEvent(result=sorted(self.log)) if len(self.log) == 3 else None


async def test_top_level_multi_slot_join_fires_repeatedly() -> None:
    order = [("A", 0), ("A", 1), ("B", 10), ("A", 2), ("B", 11), ("B", 12)]
    assert await TopLevelSlots().run(order=order) == [(0, 10), (1, 11), (2, 12)]


# =========================================================================== fan-out errors


class BadElementFlow(Recording):
    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=0), 42]  # type: ignore[list-item]

    @step
    async def work(self, ev: Item) -> Done:
        self.log.append(ev.n)
        return Done(n=ev.n)

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        return StopEvent(result=len(events))


async def test_a_non_event_element_fails_the_step_with_a_runtime_error() -> None:
    wf = BadElementFlow()
    handler = wf.run()
    events = await drain(handler)
    with pytest.raises(WorkflowRuntimeError) as info:
        await handler
    assert "split" in str(info.value) and "int" in str(info.value)
    assert wf.log == [], "a failing fan-out emits nothing (all or nothing)"
    last = events[-1]
    assert isinstance(last, WorkflowFailedEvent)
    assert last.step_name == "split" and last.exception is info.value


class BareListOnlyFlow(Recording):
    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return Item(n=0)  # type: ignore[return-value]

    @step
    async def work(self, ev: Item) -> Done:
        self.log.append(ev.n)
        return Done(n=ev.n)

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        return StopEvent(result=len(events))


async def test_a_bare_event_of_a_list_only_type_is_a_runtime_error() -> None:
    wf = BareListOnlyFlow()
    handler = wf.run()
    events = await drain(handler)
    with pytest.raises(WorkflowRuntimeError) as info:
        await handler
    assert "split" in str(info.value) and "Item" in str(info.value)
    assert wf.log == []
    assert isinstance(events[-1], WorkflowFailedEvent)
    assert events[-1].step_name == "split"


class BareUnionFlow(Recording):
    @step
    async def split(self, ev: StartEvent) -> list[Item] | Item:
        return Item(n=7)  # ordinary dispatch: Item is also a bare union member

    @step
    async def work(self, ev: Item) -> StopEvent:
        return StopEvent(result=ev.n)


async def test_a_bare_event_declared_as_a_union_member_is_ordinary_dispatch() -> None:
    assert await BareUnionFlow().run() == 7


class FailingMemberFlow(Recording):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error = ValueError("member 2 broke")
        self.joined: list[Any] = []

    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=k) for k in range(4)]

    @step(num_workers=4)
    async def work(self, ev: Item) -> Done:
        if ev.n == 2:
            while len(self.started) < 3:  # every sibling is running
                await anyio.sleep(0.001)
            raise self.error
        await slow_forever(self, ev.n)
        self.finished.append(ev.n)
        return Done(n=ev.n)

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        self.joined.append(events)
        return StopEvent(result=len(events))


async def test_a_failing_member_without_retry_or_handler_fails_the_run_at_once() -> None:
    wf = FailingMemberFlow()
    handler = wf.run()
    events = await drain(handler)
    with pytest.raises(ValueError) as info:
        await handler
    assert info.value is wf.error, "await raises the original exception object"
    await anyio.sleep(0.02)
    assert sorted(wf.cancelled) == [0, 1, 3], "siblings are cancelled"
    assert wf.finished == [] and wf.joined == []
    last = events[-1]
    assert isinstance(last, WorkflowFailedEvent)
    assert last.step_name == "work" and last.exception is wf.error
    assert last.attempts == 1
    assert len(stop_events(events)) == 1
    # The failure's NOT_RUNNING (output None) is published; the siblings cancelled by the
    # end of the run publish none.
    work = state_changes(events, "work")
    assert [ev.step_state for ev in work].count(StepState.RUNNING) == 4
    done = [ev for ev in work if ev.step_state is StepState.NOT_RUNNING]
    assert len(done) == 1 and done[0].output_event_name is None


# =========================================================================== sends


class SendOutsideFlow(Recording):
    @step
    async def split(self, ctx: Context, ev: StartEvent) -> list[Item]:
        ctx.send_event(Done(n=99))  # top-level: never a member of the stream
        try:
            ctx.send_event(Done(n=98), step="join")
        except WorkflowRuntimeError as exc:
            self.log.append(("targeted", str(exc)))
        return [Item(n=1), Item(n=2)]

    @step
    async def work(self, ev: Item) -> Done:
        return Done(n=ev.n)

    @step
    async def tap(self, ev: Done) -> None:
        self.log.append(("tap", ev.n))

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        return StopEvent(result=sorted(e.n for e in events))


async def test_untargeted_send_of_a_collected_type_is_ignored_by_the_join_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    wf = SendOutsideFlow()
    with caplog.at_level(logging.WARNING, logger="tickwork"):
        assert await wf.run() == [1, 2]
    # ... and still reaches the other accepting steps.
    assert sorted(n for kind, n in wf.log if kind == "tap") == [1, 2, 99]
    warnings = [
        rec
        for rec in caplog.records
        if rec.levelno == logging.WARNING
        and rec.name.split(".")[0] == "tickwork"
        and "Done" in rec.getMessage()
        and "join" in rec.getMessage()
    ]
    assert len(warnings) == 1, [rec.getMessage() for rec in caplog.records]


async def test_targeted_send_to_a_collect_step_raises_at_the_call_inside_a_step() -> None:
    wf = SendOutsideFlow()
    await wf.run()
    targeted = [msg for kind, msg in wf.log if kind == "targeted"]
    assert len(targeted) == 1
    assert "join" in targeted[0] and "Done" in targeted[0]
    assert 98 not in [n for kind, n in wf.log if kind == "tap"]


class WaitingFlow(Recording):
    """A member waits for an ``Answer``: the stream stays open on an in-stream waiter."""

    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=0), Item(n=1)]

    @step
    async def work(self, ctx: Context, ev: Item) -> Done:
        if ev.n == 1:
            answer = await ctx.wait_for_event(Answer)
            return Done(n=answer.n)
        return Done(n=ev.n)

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        return StopEvent(result=sorted(e.n for e in events))


async def test_targeted_send_to_a_collect_step_raises_at_the_call_from_the_handler() -> None:
    wf = WaitingFlow()
    handler = wf.run()
    with pytest.raises(WorkflowRuntimeError) as info:
        handler.ctx.send_event(Done(n=5), step="join")
    assert "join" in str(info.value) and "Done" in str(info.value)
    with pytest.raises(WorkflowRuntimeError):
        await handler.send_event(Done(n=5), step="join")
    async for ev in handler.stream_events(expose_internal=True):
        if isinstance(ev, WorkflowIdleEvent):
            handler.ctx.send_event(Answer(n=41))
    assert await handler == [0, 41]


# =========================================================================== stuck streams


async def test_an_open_stream_with_an_in_stream_waiter_is_not_stuck() -> None:
    wf = WaitingFlow()
    handler = wf.run()
    seen: list[Event] = []
    async for ev in handler.stream_events(expose_internal=True):
        seen.append(ev)
        if isinstance(ev, WorkflowIdleEvent):
            await anyio.sleep(0.02)  # stays idle; no failure arrives meanwhile
            assert not handler.is_done()
            await handler.send_event(Answer(n=7))
    assert await handler == [0, 7]
    assert not any(isinstance(ev, WorkflowFailedEvent) for ev in seen)


async def _snapshot_of_a_waiting_stream() -> dict[str, Any]:
    wf = WaitingFlow()
    handler = wf.run()
    async for ev in handler.stream_events(expose_internal=True):
        if isinstance(ev, WorkflowIdleEvent):
            await handler.cancel_run()
    snapshot = handler.ctx.to_dict()
    assert snapshot["is_running"] is True
    assert len(snapshot["streams"]) == 1
    assert len(snapshot["workers"]["work"]["collected_waiters"]) == 1
    return snapshot


async def test_an_open_stream_nobody_can_resume_fails_the_run_naming_the_producer() -> None:
    snapshot = await _snapshot_of_a_waiting_stream()
    # Drop the only in-stream waiter: nothing can ever close the stream now.
    snapshot["workers"]["work"]["collected_waiters"] = []
    wf = WaitingFlow()
    handler = wf.run(ctx=Context.from_dict(wf, snapshot))
    # A session start alone schedules no idle check (§24.5): feed the run one input.
    handler.ctx.send_event(Ping())
    events = await drain(handler)
    with pytest.raises(WorkflowRuntimeError) as info:
        await handler
    assert "split" in str(info.value)
    assert re.search(r"(?<![\w-])1(?![\w-])", str(info.value)), "names the open-work count"
    last = events[-1]
    assert isinstance(last, WorkflowFailedEvent)
    assert last.step_name == "split"
    assert last.attempts is None and last.elapsed_seconds is None
    assert last.exception is info.value
    assert not any(isinstance(ev, WorkflowIdleEvent) for ev in events)
    assert len(stop_events(events)) == 1


async def test_a_release_state_whose_stream_is_gone_is_stuck() -> None:
    snapshot = await _snapshot_of_a_waiting_stream()
    snapshot["workers"]["work"]["collected_waiters"] = []
    snapshot["streams"] = {}
    assert snapshot["collection_release_states"], "the join had buffered member 0"
    wf = WaitingFlow(timeout=0.3)
    handler = wf.run(ctx=Context.from_dict(wf, snapshot))
    # A session start alone schedules no idle check (§24.5): feed the run one input.
    handler.ctx.send_event(Ping())
    events = await drain(handler)
    with pytest.raises(WorkflowRuntimeError):
        await handler
    assert isinstance(events[-1], WorkflowFailedEvent)
    assert events[-1].attempts is None


# =========================================================================== validation


class NoProducerFlow(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> Done:
        return Done(n=1)

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        return StopEvent(result=len(events))


async def test_a_list_join_without_a_fan_out_producer_fails_validation() -> None:
    wf = NoProducerFlow()
    with pytest.raises(WorkflowValidationError) as info:
        wf.validate()
    message = str(info.value)
    assert "join" in message and "events" in message and "Done" in message
    assert "collect_events" in message
    with pytest.raises(WorkflowValidationError):
        wf.run()


class LevelMismatchFlow(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> list[ItemB] | ItemA:
        return [ItemB(n=1)]

    @step
    async def pair(self, a: ItemA, b: ItemB) -> StopEvent:
        return StopEvent(result=(a.n, b.n))


async def test_multi_slot_join_whose_slots_live_at_different_levels_fails_validation() -> None:
    with pytest.raises(WorkflowValidationError) as info:
        LevelMismatchFlow().validate()
    message = str(info.value)
    assert "pair" in message
    assert "a" in message and "b" in message
    assert "ItemA" in message or "ItemB" in message


def test_collect_on_a_non_list_parameter_is_rejected_at_decoration() -> None:
    async def join(self: Any, events: Annotated[Done, Collect()]) -> StopEvent:
        return StopEvent()

    with pytest.raises(WorkflowValidationError) as info:
        make_step_function(join)
    assert "join" in str(info.value) and "events" in str(info.value)

    async def join_ints(self: Any, numbers: Annotated[list[int], Collect()]) -> StopEvent:
        return StopEvent()

    with pytest.raises(WorkflowValidationError) as info:
        make_step_function(join_ints)
    assert "join_ints" in str(info.value) and "numbers" in str(info.value)


def test_two_collection_parameters_are_rejected_at_decoration() -> None:
    with pytest.raises(WorkflowValidationError) as info:

        class TwoCollections(Workflow):
            @step
            async def join(self, done: list[Done], items: list[Item]) -> StopEvent:
                return StopEvent()

    message = str(info.value)
    assert "join" in message
    assert "done" in message or "items" in message


def test_a_collection_parameter_with_an_event_parameter_is_rejected() -> None:
    with pytest.raises(WorkflowValidationError) as info:

        class Both(Workflow):
            @step
            async def join(self, done: list[Done], item: Item) -> StopEvent:
                return StopEvent()

    assert "join" in str(info.value)


def test_collect_with_a_bad_cardinality_is_rejected() -> None:
    async def join(self: Any, events: Annotated[list[Done], Collect("all")]) -> StopEvent:  # type: ignore[arg-type]
        return StopEvent()

    with pytest.raises(WorkflowValidationError) as info:
        make_step_function(join)
    assert "events" in str(info.value)


class ReleaseFlow(Recording):
    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=n) for n in range(3)]

    @step
    async def work(self, ev: Item) -> Done:
        return Done(n=ev.n)

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        return StopEvent(result=sorted(e.n for e in events))


async def test_release_event_is_what_validation_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reducer builds a join's ``CollectionReleaseEvent`` without validating it (its
    members are the run's own events): it is the event validation would build, its set
    fields included, and its dump loads back to an equal one."""
    from tickwork.runtime.control_loop import runner
    from tickwork.runtime.types.commands import RunWorker

    released: list[CollectionReleaseEvent] = []
    reduce = runner.reduce

    def capturing(state: Any, tick: Any) -> Any:
        new_state, commands = reduce(state, tick)
        for command in commands:
            if type(command) is RunWorker:
                event = command.invocation.item.event
                if isinstance(event, CollectionReleaseEvent):
                    released.append(event)
        return new_state, commands

    monkeypatch.setattr(runner, "reduce", capturing)
    assert await ReleaseFlow().run() == [0, 1, 2]
    (release,) = released
    validated = CollectionReleaseEvent(
        events=list(release.events), stream_id=release.stream_id, binding_id=release.binding_id
    )
    assert release == validated
    assert release.model_fields_set == validated.model_fields_set
    assert release.stream_id and release.binding_id
    assert sorted(ev.n for ev in release.events) == [0, 1, 2]
    assert CollectionReleaseEvent.model_validate(release.model_dump()) == validated
