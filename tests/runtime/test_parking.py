"""Parked runs: a run whose only remaining work is waiters and timers lets go of its
task, its coroutine frames and its loop, and an input or a deadline brings it back.

Every async test runs under asyncio and trio (see ``conftest.py``).  Nothing here
measures time: "parked" is observed through the tasks and objects that exist.
"""

from __future__ import annotations

import collections
import gc
import sys
import types
from collections.abc import Iterable
from typing import Any

import anyio
import pytest

from tickwork import (
    Context,
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
    Workflow,
    step,
)
from tickwork.errors import WorkflowCancelledByUser, WorkflowTimeoutError
from tickwork.events import WorkflowIdleEvent
from tickwork.handler import WorkflowHandler
from tickwork.runtime.control_loop import _parking
from tickwork.runtime.control_loop.runner import _Loop

pytestmark = pytest.mark.anyio


class Ask(InputRequiredEvent):
    n: int = 0


class Answer(HumanResponseEvent):
    value: int = 0


class AskFlow(Workflow):
    """Asks once, waits (``timeout`` of the start event: the waiter's deadline)."""

    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        try:
            answer = await ctx.wait_for_event(
                Answer, waiter_event=Ask(n=ev.get("n", 0)), timeout=ev.get("timeout")
            )
        except TimeoutError:
            return StopEvent(result="no answer")
        return StopEvent(result=answer.value)


class TwoQuestionsFlow(Workflow):
    """Asks twice in a row: the run parks, comes back, and parks again."""

    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        first = await ctx.wait_for_event(Answer, waiter_event=Ask(n=1), timeout=None)
        second = await ctx.wait_for_event(
            Answer, waiter_event=Ask(n=2), requirements={"value": 20}, timeout=None
        )
        return StopEvent(result=first.value + second.value)


# --------------------------------------------------------------------------- helpers


async def _until_idle(handler: WorkflowHandler) -> list[Any]:
    """Read the run's stream up to its idle event (published just before it parks)."""
    seen: list[Any] = []
    async for event in handler.stream_events(expose_internal=True):
        seen.append(event)
        if isinstance(event, WorkflowIdleEvent):
            return seen
    raise AssertionError(f"the run ended without going idle: {seen}")


async def _park(workflow: Workflow, count: int, **start: Any) -> list[WorkflowHandler]:
    """Start ``count`` runs and return once each has parked and its task is gone."""
    handlers = [workflow.run(n=i, **start) for i in range(count)]
    for handler in handlers:
        await _until_idle(handler)
    await anyio.wait_all_tasks_blocked()  # let the tasks that parked finish unwinding
    return handlers


def _task_coroutines(backend: str) -> list[Any]:
    """The coroutines of every task of the running event loop."""
    if backend == "asyncio":
        import asyncio

        return [task.get_coro() for task in asyncio.all_tasks()]
    import trio

    found: list[Any] = []

    def walk(task: Any) -> None:
        found.append(task.coro)
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    walk(trio.lowlevel.current_root_task())
    return found


def _frames_of(coroutine: Any) -> Iterable[types.FrameType]:
    """The frames of a coroutine and of everything it awaits."""
    while coroutine is not None:
        frame = getattr(coroutine, "cr_frame", None) or getattr(coroutine, "gi_frame", None)
        if frame is not None:
            yield frame
        coroutine = getattr(coroutine, "cr_await", None) or getattr(coroutine, "gi_yieldfrom", None)


def _tasks_holding(backend: str, handlers: list[WorkflowHandler]) -> list[str]:
    """Tasks whose frames refer to one of the runs (its session or its context)."""
    sessions = {id(handler._session) for handler in handlers}
    sessions |= {id(handler.ctx) for handler in handlers}
    holding = []
    for coroutine in _task_coroutines(backend):
        for frame in _frames_of(coroutine):
            values = list(frame.f_locals.values())
            bound = [getattr(value, "__self__", None) for value in values]
            if any(id(value) in sessions for value in values + bound):
                holding.append(frame.f_code.co_name)
    return holding


_SHARED_TYPES = (type, types.ModuleType, types.FunctionType, types.CodeType)


def _reachable(root: Any, stop: set[int]) -> dict[int, Any]:
    """Objects reachable from ``root`` through ``gc.get_referents``, not crossing the
    objects in ``stop`` (nor classes, modules, functions: shared by every run)."""
    seen: dict[int, Any] = {}
    todo = [root]
    while todo:
        obj = todo.pop()
        key = id(obj)
        if key in seen or key in stop or isinstance(obj, _SHARED_TYPES):
            continue
        seen[key] = obj
        todo.extend(gc.get_referents(obj))
    return seen


def _own_objects(handlers: list[WorkflowHandler], workflow: Workflow) -> list[dict[int, Any]]:
    """For each run, the objects only it holds: reachable from its handler and from no
    other run's handler, nor from the workflow."""
    shared = set(_reachable(workflow, set())) | {id(workflow)}
    graphs = [_reachable(handler, shared) for handler in handlers]
    counts: dict[int, int] = {}
    for graph in graphs:
        for key in graph:
            counts[key] = counts.get(key, 0) + 1
    return [{k: v for k, v in graph.items() if counts[k] == 1} for graph in graphs]


# ------------------------------------------------------------- what a parked run holds


async def test_a_parked_run_holds_no_task_and_no_loop(anyio_backend: str) -> None:
    workflow = AskFlow(timeout=None)
    before = len(_task_coroutines(anyio_backend))
    handlers = await _park(workflow, 5, timeout=None)

    assert _tasks_holding(anyio_backend, handlers) == []
    # At most one task more than before, whatever the number of runs: the event loop's
    # parking lot (it serves every parked run of the loop).
    assert len(_task_coroutines(anyio_backend)) <= before + 1
    gc.collect()
    sessions = [handler._session for handler in handlers]
    assert not [obj for obj in gc.get_objects() if type(obj) is _Loop and obj.adapter in sessions]

    for i, handler in enumerate(handlers):
        await handler.send_event(Answer(value=i))
    assert [await handler for handler in handlers] == [0, 1, 2, 3, 4]


async def test_a_parked_run_keeps_a_bounded_number_of_objects(anyio_backend: str) -> None:
    workflow = AskFlow(timeout=None)
    few = await _park(workflow, 3, timeout=None)
    many = await _park(workflow, 30, timeout=None)
    gc.collect()

    own = _own_objects(few + many, workflow)
    kinds = {type(obj) for graph in own for obj in graph.values()}
    assert not kinds & {types.CoroutineType, types.FrameType, types.GeneratorType, _Loop}
    sizes = [len(graph) for graph in own]
    # The same per run, however many runs are parked (no shared structure grows per
    # run through a run's objects), and a few dozen at most: the session, the context
    # and handler, the reduced state with its waiter, the two events and the stream
    # (42 when this was written).
    assert max(sizes) <= 50, sorted(sizes)
    assert max(sizes) - min(sizes) <= 2, sorted(sizes)
    # And no large buffer among them: the stream of a parked run keeps its unread items
    # (the idle event) in a tuple, not in a deque with its 64-slot block (about 600 B).
    # Their sizes add up to the goal of a parked run, 4 KiB (3.5 KiB when this was
    # written; 4.3 KiB with the deque).
    own_bytes = [sum(sys.getsizeof(obj) for obj in graph.values()) for graph in own]
    assert not kinds & {collections.deque}
    assert max(own_bytes) <= 4 * 1024, sorted(own_bytes)

    # gc-tracked objects as a whole: parking 30 more runs costs 30 times what one does.
    tracked = len(gc.get_objects())
    more = await _park(workflow, 30, timeout=None)
    gc.collect()
    grown = len(gc.get_objects()) - tracked
    assert grown <= 30 * 40, grown

    for handler in few + many + more:
        await handler.send_event(Answer(value=1))
    assert sum([await handler for handler in few + many + more]) == 63


# ------------------------------------------------------------------ what brings it back


async def test_a_parked_run_comes_back_for_an_answer_and_parks_again(anyio_backend: str) -> None:
    workflow = TwoQuestionsFlow(timeout=None)
    handler = workflow.run()
    first = await _until_idle(handler)
    await anyio.wait_all_tasks_blocked()
    assert _tasks_holding(anyio_backend, [handler]) == []

    await handler.send_event(Answer(value=10))
    second = await _until_idle(handler)
    await anyio.wait_all_tasks_blocked()
    assert _tasks_holding(anyio_backend, [handler]) == []
    await handler.send_event(Answer(value=5))  # not what the second wait requires
    await handler.send_event(Answer(value=20))

    assert await handler == 30
    assert [e.n for e in first + second if isinstance(e, Ask)] == [1, 2]


async def test_a_parked_runs_waiter_deadline_fires(anyio_backend: str) -> None:
    workflow = AskFlow(timeout=None)
    handlers = await _park(workflow, 3, timeout=0.2)
    assert _tasks_holding(anyio_backend, handlers) == []
    with anyio.fail_after(10):
        assert [await handler for handler in handlers] == ["no answer"] * 3


async def test_deadlines_of_parked_runs_fire_earliest_first(anyio_backend: str) -> None:
    workflow = AskFlow(timeout=None)
    late = workflow.run(timeout=1.5)
    await _until_idle(late)
    early = workflow.run(timeout=0.1)  # parks with an earlier deadline than the lot's
    await _until_idle(early)
    order: list[str] = []

    async def note(name: str, handler: WorkflowHandler) -> None:
        await handler
        order.append(name)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(note, "late", late)
            group.start_soon(note, "early", early)
    assert order == ["early", "late"]


async def test_a_parked_runs_timeout_fires(anyio_backend: str) -> None:
    workflow = AskFlow(timeout=0.2)
    (handler,) = await _park(workflow, 1, timeout=None)
    assert _tasks_holding(anyio_backend, [handler]) == []
    with anyio.fail_after(10), pytest.raises(WorkflowTimeoutError):
        await handler


async def test_cancel_run_of_a_parked_run(anyio_backend: str) -> None:
    workflow = AskFlow(timeout=None)
    (handler,) = await _park(workflow, 1, timeout=None)
    await handler.cancel_run()
    with pytest.raises(WorkflowCancelledByUser):
        await handler


async def test_a_late_consumer_of_a_parked_run_receives_everything(anyio_backend: str) -> None:
    workflow = AskFlow(timeout=None)
    handler = workflow.run(n=7, timeout=None)
    await anyio.wait_all_tasks_blocked()  # parked, nobody read its stream yet
    assert _tasks_holding(anyio_backend, [handler]) == []
    handler.ctx.send_event(Answer(value=3))
    names = [type(event).__name__ async for event in handler.stream_events()]
    assert names == ["Ask", "StopEvent"]
    assert await handler == 3


async def test_the_parking_lot_stops_when_no_run_is_parked(anyio_backend: str) -> None:
    workflow = AskFlow(timeout=None)
    handlers = await _park(workflow, 2, timeout=None)
    lot = _parking.lot_or_none()
    assert lot is not None and lot.parked == 2
    for handler in handlers:
        await handler.send_event(Answer(value=1))
        await handler
    await anyio.wait_all_tasks_blocked()
    assert lot.parked == 0
    assert not any(
        frame.f_code.co_name == "_serve"
        for coroutine in _task_coroutines(anyio_backend)
        for frame in _frames_of(coroutine)
    )


async def test_a_parked_run_that_nobody_holds_is_uncounted(anyio_backend: str) -> None:
    workflow = AskFlow(timeout=None)
    (handler,) = await _park(workflow, 1, timeout=None)
    lot = _parking.lot_or_none()
    assert lot is not None and lot.parked == 1
    del handler
    gc.collect()
    await anyio.wait_all_tasks_blocked()
    assert lot.parked == 0


def test_runs_parked_when_the_event_loop_ends_are_aborted(anyio_backend: str) -> None:
    handlers: list[WorkflowHandler] = []

    async def main() -> None:
        workflow = AskFlow(timeout=None)
        handlers.extend(await _park(workflow, 2, timeout=None))

    anyio.run(main, backend=anyio_backend)
    assert all(handler.is_done() for handler in handlers)
    assert all(handler._session.hard_aborted for handler in handlers)
