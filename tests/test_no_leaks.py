"""Finished runs leave nothing behind (api.md §19.3, §24.1, §24.7, §28).

Every async test runs under asyncio and trio (see ``conftest.py``).
"""

from __future__ import annotations

import contextlib
import gc
import time
import weakref
from typing import Any

import anyio
import pytest

from tickwork import (
    Context,
    Event,
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
    Workflow,
    step,
)
from tickwork.handler import WorkflowHandler
from tickwork.retry_policy import retry_policy, stop_after_attempt, wait_fixed

pytestmark = pytest.mark.anyio


class Middle(Event):
    value: int = 0


class Task(Event):
    n: int


class Done(Event):
    n: int


class Ask(InputRequiredEvent):
    pass


class Answer(HumanResponseEvent):
    text: str = ""


class BoomError(Exception):
    pass


class LeakFlow(Workflow):
    """One workflow covering every outcome, chosen by the start event's ``mode``."""

    @step
    async def start(self, ctx: Context, ev: StartEvent) -> Task | StopEvent | None:
        mode = ev.get("mode")
        await ctx.store.set("mode", mode)
        await ctx.store.set("self_ref", {"payload": list(range(10))})
        if mode == "fail":
            raise BoomError("boom")
        if mode in ("timeout", "cancel", "abort"):
            await anyio.sleep(5)
        if mode == "fanout":
            for i in range(5):
                ctx.send_event(Task(n=i))
            return None
        if mode == "wait":
            answer = await ctx.wait_for_event(Answer, waiter_event=Ask(), timeout=5)
            return StopEvent(result=answer.text)
        return StopEvent(result="ok")

    @step(num_workers=2)
    async def work(self, ctx: Context, ev: Task) -> Done:
        ctx.write_event_to_stream(Middle(value=ev.n))
        return Done(n=ev.n)

    @step(num_workers=1)
    async def join(self, ctx: Context, ev: Done) -> StopEvent | None:
        got = ctx.collect_events(ev, [Done] * 5)
        return None if got is None else StopEvent(result=len(got))


class SyncLeakFlow(Workflow):
    @step
    def start(self, ctx: Context, ev: StartEvent) -> Middle:
        ctx.store.sync.set("k", 1)
        ctx.send_event(Middle(value=1))
        return Middle(value=2)

    @step
    async def finish(self, ctx: Context, ev: Middle) -> StopEvent | None:
        got = ctx.collect_events(ev, [Middle, Middle])
        return None if got is None else StopEvent(result=sorted(m.value for m in got))


class RetryLeakFlow(Workflow):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls = 0

    @step(retry_policy=retry_policy(wait=wait_fixed(0), stop=stop_after_attempt(3)))
    async def flaky(self, ctx: Context, ev: StartEvent) -> StopEvent:
        self.calls += 1
        if self.calls < 3:
            raise BoomError(f"try {self.calls}")
        return StopEvent(result=self.calls)


class ChildLeakFlow(Workflow):
    @step
    async def only(self, ev: StartEvent) -> StopEvent:
        return StopEvent(result=ev.get("x"))


class ParentLeakFlow(Workflow):
    @step
    async def only(self, ev: StartEvent) -> StopEvent:
        child = ChildLeakFlow(timeout=5)
        return StopEvent(result=await child.run(x=3))


# --------------------------------------------------------------------------- helpers


def _collect() -> None:
    for _ in range(3):
        gc.collect()


async def _settle() -> None:
    """Give the runtime a few loop iterations to release its tasks."""
    for _ in range(5):
        await anyio.sleep(0.01)


async def _run_and_drop(
    mode: str, wf: LeakFlow | None = None
) -> tuple[weakref.ref[Any], weakref.ref[Any], weakref.ref[Any]]:
    """Run ``wf`` (default: a new workflow) in ``mode``; drop the handler (and the
    workflow when made here); return weak references to the workflow, the handler and
    the handler's Context."""
    wf = wf or LeakFlow(timeout=0.2 if mode == "timeout" else 5)
    handler = wf.run(mode=mode)
    if mode == "cancel":
        await anyio.sleep(0.02)
        await handler.cancel_run()
    elif mode == "abort":
        await anyio.sleep(0.02)
        with anyio.move_on_after(0.02):
            await handler
    elif mode == "wait":
        async for ev in handler.stream_events():
            if isinstance(ev, Ask):
                handler.ctx.send_event(Answer(text="hi"))
    elif mode == "stream":
        async for _ in handler.stream_events(expose_internal=True):
            pass
    with contextlib.suppress(BaseException):  # every outcome is acceptable here
        await handler
    if mode == "abort":
        with anyio.fail_after(2):
            while not handler.is_done():
                await anyio.sleep(0.01)
    refs = (weakref.ref(wf), weakref.ref(handler), weakref.ref(handler.ctx))
    del wf, handler
    return refs


def _task_count_trio() -> int:
    import trio

    def walk(task: Any) -> int:
        total = 1
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                total += walk(child)
        return total

    return walk(trio.lowlevel.current_root_task())


def _live_tasks(backend: str) -> Any:
    if backend == "asyncio":
        import asyncio

        return set(asyncio.all_tasks())
    return _task_count_trio()


def _count_instances(cls: type) -> int:
    return sum(1 for obj in gc.get_objects() if isinstance(obj, cls))


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize(
    "mode", ["ok", "fail", "timeout", "cancel", "abort", "fanout", "wait", "stream"]
)
async def test_workflow_is_collectable_after_run(mode: str) -> None:
    wf_ref, handler_ref, ctx_ref = await _run_and_drop(mode)
    await _settle()
    _collect()
    assert handler_ref() is None, f"handler kept alive after {mode}"
    assert ctx_ref() is None, f"context kept alive after {mode}"
    assert wf_ref() is None, f"workflow kept alive after {mode}: {gc.get_referrers(wf_ref())}"


async def test_sync_step_workflow_is_collectable() -> None:
    async def run() -> weakref.ref[Any]:
        wf = SyncLeakFlow(timeout=5)
        assert await wf.run() == [1, 2]
        return weakref.ref(wf)

    ref = await run()
    await _settle()
    _collect()
    assert ref() is None


async def test_retried_failure_workflow_is_collectable() -> None:
    async def run() -> weakref.ref[Any]:
        wf = RetryLeakFlow(timeout=5)
        assert await wf.run() == 3
        return weakref.ref(wf)

    ref = await run()
    await _settle()
    _collect()
    assert ref() is None


async def test_parent_and_child_workflows_are_collectable() -> None:
    async def run() -> weakref.ref[Any]:
        wf = ParentLeakFlow(timeout=5)
        assert await wf.run() == 3
        return weakref.ref(wf)

    before = _count_instances(ChildLeakFlow)
    ref = await run()
    await _settle()
    _collect()
    assert ref() is None
    assert _count_instances(ChildLeakFlow) == before


@pytest.mark.parametrize("mode", ["ok", "fail", "timeout", "cancel", "abort", "fanout", "wait"])
async def test_no_leftover_tasks_after_run(anyio_backend: str, mode: str) -> None:
    await _settle()
    before = _live_tasks(anyio_backend)
    await _run_and_drop(mode)
    deadline = time.monotonic() + 2
    while True:
        await _settle()
        after = _live_tasks(anyio_backend)
        leftover = after - before
        if not leftover or time.monotonic() > deadline:
            break
    assert not leftover, f"leftover tasks after {mode}: {leftover}"


async def test_many_runs_do_not_accumulate_handlers_or_contexts() -> None:
    wf = LeakFlow(timeout=5)
    _collect()
    handlers_before = _count_instances(WorkflowHandler)
    contexts_before = _count_instances(Context)
    for i in range(20):
        handler = wf.run(mode="fanout" if i % 2 else "ok")
        await handler
    del handler
    await _settle()
    _collect()
    assert _count_instances(WorkflowHandler) == handlers_before
    assert _count_instances(Context) == contexts_before
    ref = weakref.ref(wf)
    del wf
    _collect()
    assert ref() is None


class _Relay(Workflow):
    """Hands one event along three steps; the events it exchanges are only routed."""

    @step
    async def first(self, ev: StartEvent) -> Middle:
        return Middle(value=1)

    @step
    async def second(self, ev: Middle) -> Done:
        _exchanged.append(weakref.ref(ev))
        return Done(n=ev.value + 1)

    @step
    async def third(self, ev: Done) -> StopEvent:
        _exchanged.append(weakref.ref(ev))
        return StopEvent(result=ev.n)


_exchanged: list[weakref.ref[Event]] = []


async def test_an_unread_stream_keeps_step_states_but_not_the_exchanged_events() -> None:
    _exchanged.clear()
    handler = _Relay(timeout=10).run()
    assert await handler == 2
    gc.collect()
    # The handler (and its unread stream) is alive, yet the routed events are gone...
    assert [ref() for ref in _exchanged] == [None, None]
    # ...while every step state change is still there for a late reader.
    states = [
        (ev.name, ev.step_state.name)
        async for ev in handler.stream_events(expose_internal=True)
        if type(ev).__name__ == "StepStateChanged"
    ]
    assert states == [
        ("first", "RUNNING"),
        ("first", "NOT_RUNNING"),
        ("second", "RUNNING"),
        ("second", "NOT_RUNNING"),
        ("third", "RUNNING"),
        ("third", "NOT_RUNNING"),
    ]


@pytest.mark.parametrize("mode", ["ok", "fanout", "wait", "stream"])
async def test_a_finished_run_leaves_no_reference_cycle(mode: str) -> None:
    """A finished run is freed by reference counting alone: no cycle of tickwork objects
    waits for the garbage collector (a fan-in of n events used to leave n of them).
    The workflow is kept: a workflow instance is long-lived and may hold cycles."""
    workflow = LeakFlow(timeout=5)
    _collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        refs = await _run_and_drop(mode, workflow)
        await _settle()
        gc.collect()
        cyclic = [
            type(obj).__qualname__
            for obj in gc.garbage
            if type(obj).__module__.startswith(("tickwork", "tests"))
        ]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert cyclic == []
    assert refs[1]() is None and refs[2]() is None  # the handler and its Context


def _tickwork_garbage() -> list[str]:
    return [
        type(obj).__qualname__
        for obj in gc.garbage
        if type(obj).__module__.startswith(("tickwork", "tests"))
    ]


async def test_retried_step_failures_leave_no_reference_cycle() -> None:
    """A failure's traceback holds the worker's frame; the worker does not keep the
    outcome (which holds the exception) in a local, so each retried failure is freed
    by reference counting."""
    workflow = RetryLeakFlow(timeout=5)
    _collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        assert await workflow.run() == 3
        await _settle()
        gc.collect()
        cyclic = _tickwork_garbage()
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert cyclic == []
