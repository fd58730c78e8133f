"""The worker's fast paths agree with the slow ones they stand for.

- The step scope a worker builds without a class call has every slot as
  ``StepScope.__init__`` writes it, whatever the shape of the body.
- A direct body's return value is checked once per class (``StepInvoker.event_returns``):
  a class that passed as a bare event is not checked again, and everything else is
  checked every time, as ``check_return_value`` checks it.
- A step's invoker is built once, on its first invocation, and read from the plain
  ``StepInvokers.table`` from then on.
- A step's worker task is named after its invocation id, whichever way it was started.
- A step started by the loop's ``_process`` itself (the stream buffered, no reader
  waiting) and one started through ``_run_worker`` (a reader waiting) publish the same
  step states.
- A worker posts its outcome itself: a ``StepResult`` with every field, once it has
  left the asyncio pool's task map (so a drain it runs never cancels it).
- Results posted while the loop waits and some dispatched worker has not begun are
  queued, and wake the loop once per wait, not once each.
- A fan-out's queued elements publish the same PREPARING states whether ``_process``
  buffers them itself (one record looked up per batch) or pushes each to the stream.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.errors import WorkflowRuntimeError
from tickwork.events import StepStateChanged
from tickwork.runtime import step_worker
from tickwork.runtime.control_loop import _task_pool, runner
from tickwork.runtime.step_scope import CURRENT_SCOPE, StepScope
from tickwork.runtime.step_worker import StepInvoker
from tickwork.runtime.types.ticks import StepResult

pytestmark = pytest.mark.anyio


class Ping(Event):
    n: int


class Item(Event):
    n: int


def _scope() -> StepScope:
    ref = CURRENT_SCOPE.get()
    scope = ref() if ref is not None else None
    assert scope is not None
    return scope


def keywords_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A ``(*args, **kwargs)`` wrapper: the runtime calls the body by keyword."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        return await fn(*args, **kwargs)

    return wrapper


def _slots_of(scope: StepScope) -> dict[str, Any]:
    """Every slot of ``scope`` (an unset one would raise ``AttributeError``)."""
    return {name: getattr(scope, name) for name in StepScope.__slots__ if name != "__weakref__"}


def _as_built(scope: StepScope) -> tuple[dict[str, Any], dict[str, Any]]:
    """The slots of ``scope`` and of a scope built by the class with its arguments."""
    built = StepScope(scope.session, scope.invocation, scope.lane, scope.loop_thread)
    return _slots_of(scope), _slots_of(built)


class Done(Event):
    pass


class Shapes(Workflow):
    """One step per call shape: event only, context first, by keyword, and sync."""

    scopes: list[tuple[dict[str, Any], dict[str, Any]]]

    @step
    async def begin(self, ev: StartEvent) -> Ping:
        self.scopes.append(_as_built(_scope()))
        return Ping(n=0)

    @step
    async def with_context(self, ctx: Context, ev: Ping) -> Item:
        self.scopes.append(_as_built(_scope()))
        return Item(n=ev.n)

    @step
    @keywords_only
    async def by_keyword(self, ev: Item, ctx: Context) -> Done:
        self.scopes.append(_as_built(_scope()))
        return Done()

    @step
    def in_a_thread(self, ev: Done) -> StopEvent:
        mine, built = _as_built(_scope())
        mine["worker_thread"] = None  # the body's own thread, written as it starts
        self.scopes.append((mine, built))
        return StopEvent(result=len(self.scopes))


async def test_the_scope_a_worker_builds_has_every_slot_of_a_constructed_one() -> None:
    workflow = Shapes(timeout=None)
    workflow.scopes = []
    with anyio.fail_after(5):
        assert await workflow.run() == 4
    for mine, built in workflow.scopes:
        mine["face"] = built["face"] = None  # the step's Context, made on first use
        assert mine == built


class Returns(Workflow):
    """``pick`` returns what ``plan`` says, one entry per hop (then it stops)."""

    plan: list[str]

    @step
    async def begin(self, ev: StartEvent) -> Ping:
        return Ping(n=0)

    @step
    async def pick(self, ev: Ping) -> list[Item] | Ping | StopEvent:
        what = self.plan[ev.n] if ev.n < len(self.plan) else "stop"
        if what == "ping":
            return Ping(n=ev.n + 1)
        if what == "bare item":  # Item is list-only in this annotation
            return Item(n=ev.n)  # type: ignore[return-value]
        if what == "not an event":
            return "oops"  # type: ignore[return-value]
        return StopEvent(result=ev.n)

    @step
    async def take(self, ev: Item) -> None:
        return None


def _returns(plan: list[str]) -> Returns:
    workflow = Returns(timeout=None)
    workflow.plan = plan
    return workflow


async def test_a_learned_return_class_skips_the_check_and_nothing_else_does() -> None:
    with anyio.fail_after(5):
        await _learned_and_refused()


async def _learned_and_refused() -> None:
    workflow = _returns(["ping", "ping", "ping"])
    assert await workflow.run() == 3
    learned = workflow._invokers["pick"].event_returns
    assert learned == {Ping, StopEvent}
    # The same workflow (the same invokers, what they learned) refuses the rest.
    workflow.plan = ["ping", "ping", "bare item"]
    with pytest.raises(WorkflowRuntimeError, match="returned a bare Item"):
        await workflow.run()
    workflow.plan = ["ping", "not an event"]
    with pytest.raises(WorkflowRuntimeError, match="returned str, which is not an Event"):
        await workflow.run()
    assert workflow._invokers["pick"].event_returns == {Ping, StopEvent}


def test_the_learned_classes_are_bounded() -> None:
    workflow = _returns([])
    workflow._reducer_config()
    invoker: StepInvoker = workflow._invokers["pick"]
    classes = [type(f"Made{i}", (Event,), {}) for i in range(step_worker._MAX_EVENT_RETURNS + 1)]
    for cls in classes:
        step_worker._check_direct_return(invoker, cls())
    assert 0 < len(invoker.event_returns) <= step_worker._MAX_EVENT_RETURNS
    assert classes[-1] in invoker.event_returns
    step_worker._check_direct_return(invoker, None)  # None passes, and is not learned
    assert type(None) not in invoker.event_returns
    with pytest.raises(WorkflowRuntimeError, match="returned a bare Item"):
        step_worker._check_direct_return(invoker, Item(n=1))
    assert Item not in invoker.event_returns


class Named(Workflow):
    names: list[tuple[str, str]]

    def _record(self) -> None:
        self.names.append((anyio.get_current_task().name, _scope().invocation.invocation_id))

    @step
    async def begin(self, ev: StartEvent) -> Ping:
        self._record()
        return Ping(n=0)

    @step
    async def hop(self, ev: Ping) -> Ping | StopEvent:
        self._record()
        if ev.n >= 2:
            return StopEvent(result=ev.n)
        return Ping(n=ev.n + 1)


async def test_a_step_task_is_named_after_its_invocation(anyio_backend: str) -> None:
    workflow = Named(timeout=None)
    workflow.names = []
    assert await workflow.run() == 2
    assert len(workflow.names) == 4
    assert all(name == invocation_id for name, invocation_id in workflow.names)
    if anyio_backend != "asyncio":
        return
    # Through the pool (a task factory), as through the loop's own start.
    loop = asyncio.get_running_loop()
    loop.set_task_factory(lambda loop, coro, **kwargs: asyncio.Task(coro, loop=loop, **kwargs))
    try:
        workflow.names = []
        assert await workflow.run() == 2
    finally:
        loop.set_task_factory(None)
    assert len(workflow.names) == 4
    assert all(name == invocation_id for name, invocation_id in workflow.names)


async def test_an_invoker_is_built_once_then_read_from_the_table() -> None:
    workflow = Named(timeout=None)
    workflow.names = []
    workflow._reducer_config()
    invokers = workflow._invokers
    assert invokers.table == {}  # none built before the first run
    assert await workflow.run() == 2  # the workers build them (invokers[step])
    built = dict(invokers.table)
    assert set(built) == {"begin", "hop"}
    assert await workflow.run() == 2  # the workers read them from the table
    assert invokers.table.keys() == built.keys()
    assert all(invokers.table[name] is built[name] for name in built)
    assert invokers["hop"] is built["hop"]


class Chain(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> Ping:
        return Ping(n=0)

    @step
    async def hop(self, ev: Ping) -> Ping | StopEvent:
        await anyio.sleep(0)  # a reader streaming the run gets to wait on the stream
        if ev.n >= 3:
            return StopEvent(result=ev.n)
        return Ping(n=ev.n + 1)


def _state_changes(events: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (ev.name, ev.step_state, ev.worker_id, ev.input_event_name, ev.output_event_name)
        for ev in events
        if isinstance(ev, StepStateChanged)
    ]


async def test_step_states_are_the_same_whether_a_reader_waits_or_not(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[str] = []
    run_worker = runner._Loop._run_worker

    def counting(loop: Any, command: Any) -> None:
        started.append(command.invocation.step)
        run_worker(loop, command)

    monkeypatch.setattr(runner._Loop, "_run_worker", counting)
    # Read once the run is over: nobody waits on the stream while it runs.
    handler = Chain(timeout=None).run()
    assert await handler == 3
    late = [ev async for ev in handler.stream_events(expose_internal=True)]
    through_run_worker_late = len(started)
    # Read as the run goes: a reader waits on the stream.
    started.clear()
    handler = Chain(timeout=None).run()
    live = [ev async for ev in handler.stream_events(expose_internal=True)]
    assert await handler == 3
    assert _state_changes(live) == _state_changes(late)
    assert len(_state_changes(live)) == 2 * 5  # RUNNING and NOT_RUNNING per step
    assert [type(ev) for ev in live] == [type(ev) for ev in late]
    if anyio_backend == "asyncio":
        assert through_run_worker_late == 0  # the loop started every step itself
    assert started  # some steps started while the reader waited


class Fan(Workflow):
    """A fan-out whose elements queue: one worker slot for five elements."""

    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=n) for n in range(5)]

    @step(num_workers=1)
    async def work(self, ev: Item) -> Ping:
        return Ping(n=ev.n)

    @step
    async def join(self, events: list[Ping]) -> StopEvent:
        return StopEvent(result=sorted(ev.n for ev in events))


def _all_states(events: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (ev.name, ev.step_state, ev.worker_id, ev.input_event_name, ev.output_event_name)
        for ev in events
        if isinstance(ev, StepStateChanged)
    ]


async def test_queued_fan_out_elements_publish_the_same_preparing_states_either_way(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked_up: list[str] = []
    record_of = runner.step_state_record

    def counting(command: Any) -> Any:
        looked_up.append(command.state)
        return record_of(command)

    monkeypatch.setattr(runner, "step_state_record", counting)
    # The loop buffers the records itself (its sink is a bare stream).
    handler = Fan(timeout=None).run()
    assert await handler == [0, 1, 2, 3, 4]
    buffered = [ev async for ev in handler.stream_events(expose_internal=True)]
    assert looked_up == ["preparing"]  # one look-up for the four queued elements
    # The loop pushes each record (it takes its sink for something else than a stream).
    looked_up.clear()
    monkeypatch.setattr(runner, "EventStream", type("NotTheStream", (), {}))
    handler = Fan(timeout=None).run()
    pushed = [ev async for ev in handler.stream_events(expose_internal=True)]
    assert await handler == [0, 1, 2, 3, 4]
    assert looked_up == []
    assert _all_states(pushed) == _all_states(buffered)
    preparing = [s for s in _all_states(buffered) if s[1].value == "preparing"]
    assert preparing == [("work", preparing[0][1], "<enqueued>", "Item", None)] * 4


async def test_a_worker_posts_its_result_once_out_of_the_task_map(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    posted: list[tuple[str, bool, float]] = []
    post = runner._Loop.post

    def checking(loop: Any, tick: Any) -> None:
        if type(tick) is StepResult:
            tasks = loop.worker_tasks
            gone = tasks is None or tick.invocation_id not in tasks
            posted.append((tick.step, gone, tick.stamped_at))
            assert tick.outcome is not None
        post(loop, tick)

    monkeypatch.setattr(runner._Loop, "post", checking)
    assert await Fan(timeout=None).run() == [0, 1, 2, 3, 4]
    assert [step for step, _, _ in posted].count("work") == 5
    assert all(gone for _, gone, _ in posted)
    assert all(isinstance(stamp, float) and stamp > 0 for _, _, stamp in posted)


class WideFan(Workflow):
    """Eight workers: their results come by the batch while the loop waits."""

    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=n) for n in range(64)]

    @step(num_workers=8)
    async def work(self, ev: Item) -> Ping:
        return Ping(n=ev.n)

    @step
    async def join(self, events: list[Ping]) -> StopEvent:
        return StopEvent(result=sum(ev.n for ev in events))


async def test_a_batch_of_queued_results_wakes_the_waiting_loop_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counts = {"wake": 0, "wait": 0}
    for pool in (_task_pool.AsyncioPool, _task_pool.TrioPool):
        for name in counts:
            real = getattr(pool, name)

            def wrapper(self: Any, *args: Any, _name: str = name, _real: Any = real) -> Any:
                if _name == "wait" or sys._getframe(1).f_code.co_name == "post":
                    counts[_name] += 1  # waits, and the wake-ups posts ask for
                return _real(self, *args)

            monkeypatch.setattr(pool, name, wrapper)
    assert await WideFan(timeout=None).run() == sum(range(64))
    assert counts["wait"] >= 1
    # At most one wake-up per wait from the posted results, and one as the run ends.
    assert counts["wake"] <= counts["wait"] + 1, counts
