"""One tick's work must not grow with the size of the run (architecture.md §4, "Cheap").

No timing here: each test builds the same situation at two sizes (100 and 10,000 queued
items, buffered members, parked waiters...) and measures *one* reduction with two
deterministic counters:

* Python-level work: the number of ``call`` and ``line`` trace events (``sys.settrace``),
  which grows with every Python loop iteration and function call;
* C-level work: the peak of memory allocated during the reduction (``tracemalloc``),
  which grows when a container of the run's size is copied (``dict(...)``,
  ``frozenset | {x}``, tuple concatenation) even though no Python line runs.

``reduce`` is pure, so the same reduction can be measured twice, once per counter.  A
tick is accepted as O(what it touches) when both counters at 10,000 stay within a small
factor of those at 100.  The Python counter aborts once it passes a budget, so a tick
that is accidentally quadratic fails fast instead of running for minutes.
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.events import HumanResponseEvent
from tickwork.runtime.control_loop.reduce import reduce
from tickwork.runtime.control_loop.streams import EMPTY_BUFFER, decide_collect
from tickwork.runtime.types.evolve import evolve
from tickwork.runtime.types.persistent import PList
from tickwork.runtime.types.results import Completed, Suspended, WaiterRequest
from tickwork.runtime.types.state import RunState
from tickwork.runtime.types.ticks import AddEvent, StepResult, Tick
from tickwork.testing import ReducerKit

SMALL, LARGE = 100, 10_000
MAX_GROWTH = 2.0  # allowed ratio of the LARGE to the SMALL measurement
SLACK_EVENTS = 200  # absolute slack for tiny counts (e.g. a trie one level deeper)
SLACK_BYTES = 8 * 1024


class Task(Event):
    n: int = 0


class Done(Event):
    n: int = 0


class Reply(HumanResponseEvent):
    n: int = 0


class Other(Event):
    n: int = 0


class QueueFlow(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> Task | None: ...

    @step(num_workers=1)
    async def work(self, ev: Task) -> StopEvent | None: ...


class CollectFlow(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> Done | None: ...

    @step(num_workers=1)
    async def gather(self, ctx: Context, ev: Done) -> StopEvent | None: ...


class FanFlow(Workflow):
    @step
    async def fan(self, ev: StartEvent) -> list[Task]: ...

    @step
    async def join(self, events: list[Done]) -> StopEvent: ...

    @step(num_workers=1)
    async def work(self, ev: Task) -> Done: ...


class ParkedFlow(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> None: ...

    @step(num_workers=1)
    async def wait(self, ev: Task) -> StopEvent | None: ...


class WideFlow(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> None: ...

    @step(num_workers=LARGE)
    async def work(self, ev: Task) -> StopEvent | None: ...


class JoinFlow(Workflow):
    @step
    async def assemble(self, task: Task, other: Other) -> StopEvent: ...

    @step
    async def begin(self, ev: StartEvent) -> None: ...


# ------------------------------------------------------------------------ measuring


class _OverBudget(Exception):
    pass


@dataclass(frozen=True)
class Work:
    python_events: int  # -1 when the budget was exceeded
    peak_bytes: int


def measure(state: RunState, tick: Tick, budget: int | None = None) -> Work:
    """Trace events, then peak allocation, of ``reduce(state, tick)``.

    Past ``budget`` trace events the reduction is abandoned and reported as
    ``Work(-1, -1)``; the allocation is then not measured (it would re-run it in full).
    """
    count = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        nonlocal count
        if event in ("call", "line"):
            count += 1
            if budget is not None and count > budget:
                raise _OverBudget
        return tracer

    sys.settrace(tracer)
    try:
        reduce(state, tick)
    except _OverBudget:
        return Work(-1, -1)
    finally:
        sys.settrace(None)

    gc.collect()
    tracemalloc.start()
    try:
        reduce(state, tick)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return Work(count, peak)


def assert_flat(build: Callable[[int], tuple[RunState, Tick]], large_size: int = LARGE) -> None:
    """The same tick at SMALL and ``large_size`` costs about the same."""
    small = measure(*build(SMALL))
    budget = int(small.python_events * MAX_GROWTH) + SLACK_EVENTS
    large = measure(*build(large_size), budget=budget)
    assert large.python_events != -1, (
        f"one tick ran over {budget} Python trace events at size {large_size} "
        f"(it took {small.python_events} at size {SMALL})"
    )
    assert large.peak_bytes <= small.peak_bytes * MAX_GROWTH + SLACK_BYTES, (
        f"one tick allocated {large.peak_bytes} bytes at size {large_size} "
        f"against {small.peak_bytes} at size {SMALL}: something of the run's size is copied"
    )


# ------------------------------------------------------------------------- scenarios


def _queued(size: int) -> ReducerKit:
    """``work`` (one slot) running one Task with ``size`` more queued behind it."""
    kit = ReducerKit(QueueFlow())
    kit.start()
    (begin,) = kit.running("begin")
    for n in range(size + 2):
        kit.send_from(begin, n, Task(n=n))
    kit.complete(begin, None, sends=size + 2)
    (first,) = kit.running("work")
    kit.complete(first, None)  # the first pop normalizes the queue (amortized O(1))
    assert len(kit.queued("work")) == size
    return kit


def test_enqueueing_behind_a_long_queue_is_flat() -> None:
    def build(size: int) -> tuple[RunState, Tick]:
        kit = _queued(size)
        return kit.state, AddEvent(kit.now, Task(n=-1))

    assert_flat(build)


def test_draining_a_long_queue_is_flat() -> None:
    def build(size: int) -> tuple[RunState, Tick]:
        kit = _queued(size)
        (running,) = kit.running("work")
        return kit.state, StepResult(kit.now, "work", running.invocation_id, Completed(None))

    assert_flat(build)


def test_committing_to_a_large_collect_buffer_is_flat() -> None:
    def build(size: int) -> tuple[RunState, Tick]:
        kit = ReducerKit(CollectFlow())
        kit.start()
        expected = [Done] * (size + 10)
        for n in range(size + 1):
            kit.send(Done(n=n))
            (inv,) = kit.running("gather")
            if n == size:
                break
            view = inv.collect_view.get("default", EMPTY_BUFFER)
            op, _, _ = decide_collect(view, "default", inv.item.event, expected)
            kit.feed(StepResult(kit.now, "gather", inv.invocation_id, Completed(None, 0, (op,))))
        assert len(kit.state.steps["gather"].collect_buffers["default"].events) == size
        view = inv.collect_view.get("default", EMPTY_BUFFER)
        op, _, _ = decide_collect(view, "default", inv.item.event, expected)
        return kit.state, StepResult(
            kit.now, "gather", inv.invocation_id, Completed(None, 0, (op,))
        )

    assert_flat(build)


def test_buffering_into_a_large_list_join_release_is_flat() -> None:
    def build(size: int) -> tuple[RunState, Tick]:
        kit = ReducerKit(FanFlow())
        kit.start()
        (fan,) = kit.running("fan")
        kit.complete(fan, [Task(n=n) for n in range(size + 2)])
        for n in range(size):
            (inv,) = kit.running("work")
            kit.complete(inv, Done(n=n))
        (inv,) = kit.running("work")
        (release,) = kit.state.releases.values()
        assert len(release.buffer) == size
        return kit.state, StepResult(kit.now, "work", inv.invocation_id, Completed(Done(n=-1)))

    assert_flat(build)


def test_a_keyed_send_after_many_sends_is_flat() -> None:
    def build(size: int) -> tuple[RunState, Tick]:
        kit = ReducerKit(QueueFlow())
        kit.start()
        (begin,) = kit.running("begin")
        for n in range(size):
            kit.send_from(begin, n, Task(n=n))
        key = (begin.invocation_id, size)
        return kit.state, AddEvent(kit.now, Task(n=-1), emission_key=key, source_step="begin")

    assert_flat(build)


def _parked(size: int) -> ReducerKit:
    """``size`` work items of ``wait`` suspended on Reply(n=i), one more running."""
    kit = ReducerKit(ParkedFlow())
    kit.start()
    for n in range(size):
        kit.send(Task(n=n))
        (inv,) = kit.running("wait")
        kit.suspend(inv, Reply, f"w{n}", requirements={"n": n})
    kit.send(Task(n=size))
    assert len(kit.state.steps["wait"].waiters) == size
    return kit


def test_registering_a_waiter_among_many_parked_ones_is_flat() -> None:
    def build(size: int) -> tuple[RunState, Tick]:
        kit = _parked(size)
        (last,) = kit.running("wait")
        request = WaiterRequest("w-last", Reply, {"n": -1}, None, None)
        return kit.state, StepResult(kit.now, "wait", last.invocation_id, Suspended(request))

    assert_flat(build)


def test_resolving_one_waiter_among_many_parked_ones_is_flat() -> None:
    def build(size: int) -> tuple[RunState, Tick]:
        kit = _parked(size)
        return kit.state, AddEvent(kit.now, Reply(n=size // 2))

    assert_flat(build)


def test_dispatching_next_to_many_running_invocations_is_flat() -> None:
    def build(size: int) -> tuple[RunState, Tick]:
        kit = ReducerKit(WideFlow())
        kit.start()
        for n in range(size):
            kit.send(Task(n=n))
        assert len(kit.running("work")) == size
        return kit.state, AddEvent(kit.now, Task(n=-1))

    # building N running invocations is itself O(N^2) here: keep N moderate
    assert_flat(build, large_size=3_000)


def test_a_join_arrival_next_to_many_unmatched_ones_is_flat() -> None:
    def build(size: int) -> tuple[RunState, Tick]:
        kit = ReducerKit(JoinFlow())
        kit.start()
        # Build the buffer directly: feeding `size` arrivals one by one would itself be
        # quadratic in this situation.
        state = kit.state
        buffered = PList.of(Task(n=n) for n in range(size))
        steps = dict(state.steps)
        steps["assemble"] = evolve(
            steps["assemble"], join_buffer=buffered, join_counts={Task: size}
        )
        return evolve(state, steps=steps), AddEvent(kit.now, Task(n=-1))

    assert_flat(build)
