"""Finished runs leave nothing behind (api.md §19.3, §24.1, §24.7, §28).

Every async test runs under asyncio and trio (see ``conftest.py``).
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
import time
import weakref
from collections.abc import Callable
from typing import Annotated, Any

import anyio
import pytest
import sniffio

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
from tickwork.errors import WorkflowRuntimeError
from tickwork.handler import WorkflowHandler
from tickwork.resource import Resource
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


# ------------------------------------------------- callbacks that outlive the run (§19.3)

# Test-global on purpose: what a step scheduled stays alive after its run has ended.
_pinned: list[Any] = []
_releases: list[Callable[[], None]] = []
_step_contexts: list[weakref.ref[Any]] = []
_late_lookups: list[str] = []


def _late_lookup() -> None:
    """A callback that asks for the step Context after its step (and run) ended."""
    try:
        Context.get_step_context()
        _late_lookups.append("found")
    except WorkflowRuntimeError:
        _late_lookups.append("none")


def _pin_callbacks() -> None:
    """Schedule what copies the current contextvars and outlives the run."""
    _pinned.append(contextvars.copy_context())
    if sniffio.current_async_library() == "asyncio":
        import asyncio

        loop = asyncio.get_running_loop()
        _pinned.append(loop.call_later(3600, _late_lookup))
        _pinned.append(loop.call_soon(_late_lookup))
    else:
        import trio

        release = trio.Event()

        async def linger() -> None:
            await release.wait()
            _late_lookup()

        trio.lowlevel.spawn_system_task(linger)
        _releases.append(release.set)


class RunResource:
    """A ``scope="run"`` resource: the run's own, dropped with the run."""


_run_resources: list[weakref.ref[RunResource]] = []


def _run_resource() -> RunResource:
    resource = RunResource()
    _run_resources.append(weakref.ref(resource))
    return resource


async def _pinning_resource() -> int:
    _pin_callbacks()  # runs while the invocation's resources are being resolved
    return 4


class PinningFlow(Workflow):
    @step
    async def start(
        self,
        ctx: Context,
        ev: StartEvent,
        shared: Annotated[RunResource, Resource(_run_resource, scope="run")],
        base: Annotated[int, Resource(_pinning_resource, cache=False)],
    ) -> Middle:
        assert Context.get_step_context() is ctx
        _step_contexts.append(weakref.ref(ctx))
        _pin_callbacks()
        await anyio.sleep(0.01)  # the run's loop waits on its timeout timer meanwhile
        return Middle(value=base)

    @step
    def finish(self, ctx: Context, ev: Middle) -> StopEvent:
        assert Context.get_step_context() is ctx
        _step_contexts.append(weakref.ref(ctx))
        _pinned.append(contextvars.copy_context())  # from the step's worker thread
        return StopEvent(result=ev.value + 1)


async def _run_pinning() -> dict[str, weakref.ref[Any]]:
    workflow = PinningFlow(timeout=3600)
    handler = workflow.run()
    assert await handler == 5
    return {
        "workflow": weakref.ref(workflow),
        "handler": weakref.ref(handler),
        "handler Context": weakref.ref(handler.ctx),
        "run session": weakref.ref(handler._session),
        **{f"step Context {i}": ref for i, ref in enumerate(_step_contexts)},
        **{f"run resource {i}": ref for i, ref in enumerate(_run_resources)},
    }


async def test_callbacks_scheduled_by_a_step_do_not_keep_the_run_alive(
    anyio_backend: str,
) -> None:
    """Timers, tasks and context copies made inside a step (or by its resource factory)
    hold the step's contextvars; tickwork's values there are weak, so once the run has
    ended nothing of the run survives them, and a late ``get_step_context()`` finds no
    step."""
    for pinned in (_pinned, _releases, _step_contexts, _late_lookups, _run_resources):
        pinned.clear()
    head = None
    if anyio_backend == "asyncio":
        import asyncio

        # A timer due before the run's own (cancelled) timeout timer keeps that one in
        # the loop's heap, with the copy of the run task's contextvars it holds.
        head = asyncio.get_running_loop().call_later(60, lambda: None)
    try:
        refs = await _run_pinning()
        await _settle()
        _collect()
        assert len(_pinned) == 7 if anyio_backend == "asyncio" else 3
        assert len(_step_contexts) == 2 and len(_run_resources) == 1
        alive = [name for name, ref in refs.items() if ref() is not None]
        assert alive == []
        # The call_soon callbacks ran while their step was live, and saw its Context.
        assert _late_lookups == (["found", "found"] if anyio_backend == "asyncio" else [])
        _late_lookups.clear()
        for pinned in _pinned:
            if isinstance(pinned, contextvars.Context):
                pinned.run(_late_lookup)
        for release in _releases:
            release()
        await _settle()
        assert _late_lookups == ["none"] * (5 if anyio_backend == "trio" else 3)
    finally:
        if head is not None:
            head.cancel()
        for release in _releases:
            release()
        for pinned in _pinned:
            if hasattr(pinned, "cancel"):
                pinned.cancel()
        _pinned.clear()
        _releases.clear()
        _step_contexts.clear()
        _run_resources.clear()
