"""End-to-end tests of ``Context`` faces and step-side APIs (api.md §8, §9.4, §23.1).

Every async test runs under asyncio and trio (see ``conftest.py``).
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

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
from tickwork.context.state_store import DictState, InMemoryStateStore
from tickwork.errors import (
    ContextStateError,
    WorkflowRuntimeError,
    WorkflowTimeoutError,
)
from tickwork.events import (
    StepStateChanged,
    UnhandledEvent,
    WorkflowFailedEvent,
)
from tickwork.retry_policy import RetryInfo, retry_policy, stop_after_attempt, wait_fixed

pytestmark = pytest.mark.anyio


# --------------------------------------------------------------------------- events


class Go(Event):
    pass


class Item(Event):
    n: int


class SubItem(Item):
    pass


class Other(Event):
    tag: str = ""


class Batch(Event):
    ns: list[int]


class Ask(InputRequiredEvent):
    prompt: str = ""


class Reply(HumanResponseEvent):
    key: str = ""
    text: str = ""


class Stopper(StopEvent):
    pass


# --------------------------------------------------------------------------- helpers


def _capture(fn: Callable[[], Any]) -> str:
    """Call ``fn`` and return ``"<ExcType>: <message>"`` or ``"ok"``."""
    try:
        fn()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


async def _acapture(fn: Callable[[], Awaitable[Any]]) -> str:
    try:
        await fn()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


async def _drain(handler: Any, expose_internal: bool = True) -> list[Event]:
    return [ev async for ev in handler.stream_events(expose_internal=expose_internal)]


# --------------------------------------------------------------------------- workflows


class SimpleFlow(Workflow):
    @step
    async def only(self, ctx: Context, ev: StartEvent) -> StopEvent:
        await anyio.sleep(float(ev.get("delay", 0)))
        return StopEvent(result=await ctx.store.get("k", default=None))


class StepFaceFlow(Workflow):
    """Tries every member in the step face and reports what happened."""

    @step
    async def only(self, ctx: Context, ev: StartEvent) -> StopEvent:
        report: dict[str, Any] = {}
        report["to_dict"] = _capture(lambda: ctx.to_dict())
        report["stream_events"] = _capture(ctx.stream_events)
        report["running_steps"] = await _acapture(ctx.running_steps)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            report["get_result"] = _capture(ctx.get_result)
            report["streaming_queue"] = _capture(lambda: ctx.streaming_queue)
            report["is_running"] = ctx.is_running
        report["is_running_warned"] = any(issubclass(w.category, DeprecationWarning) for w in rec)
        report["run_id"] = ctx.run_id
        report["store"] = ctx.store
        report["self"] = ctx
        report["current"] = Context.get_step_context()
        report["retry_info"] = ctx.retry_info()
        report["collect_empty"] = ctx.collect_events(ev, [])
        report["write_none"] = _capture(lambda: ctx.write_event_to_stream(None))
        report["run_from_step"] = _capture(lambda: self.run(ctx=ctx))
        return StopEvent(result=report)


class TwoRunningFlow(Workflow):
    @step
    async def start(self, ctx: Context, ev: StartEvent) -> Go | Other | None:
        ctx.send_event(Go())
        ctx.send_event(Other())
        return None

    @step
    async def zeta(self, ev: Go) -> StopEvent | None:
        await anyio.sleep(0.3)
        return StopEvent(result="z")

    @step
    async def alpha(self, ev: Other) -> None:
        await anyio.sleep(0.3)
        return None


class SendTargetFlow(Workflow):
    """Records which steps received which events; ``send_mode`` picks the send."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seen: list[tuple[str, int]] = []

    @step
    async def start(self, ctx: Context, ev: StartEvent) -> Item | Other | None:
        mode = ev.get("send_mode")
        await ctx.store.set("expected", 2 if mode == "untargeted" else 1)
        if mode == "targeted":
            ctx.send_event(Item(n=1), step="left")
        elif mode == "untargeted":
            ctx.send_event(Item(n=2))
        elif mode == "unknown":
            ctx.send_event(Item(n=3), step="nowhere_step")
        elif mode == "wrong":
            ctx.send_event(Item(n=4), step="finish")
        elif mode == "catch":
            results = [
                _capture(lambda: ctx.send_event(Item(n=5), step="nowhere_step")),
                _capture(lambda: ctx.send_event(Item(n=5), step="finish")),
                _capture(lambda: ctx.send_event(StopEvent(result=1))),
                _capture(lambda: ctx.send_event(Stopper())),
            ]
            ctx.send_event(Other(tag="|".join(results)))
        return None

    @step
    async def left(self, ev: Item) -> Go:
        self.seen.append(("left", ev.n))
        return Go()

    @step
    async def right(self, ev: Item) -> Go:
        self.seen.append(("right", ev.n))
        return Go()

    @step
    async def joiner(self, ctx: Context, ev: Go) -> Stopper | None:
        n = await ctx.store.get("expected")
        got = ctx.collect_events(ev, [Go] * n)
        if got is None:
            return None
        return Stopper(result=len(got))

    @step
    async def finish(self, ev: Other) -> Stopper:
        return Stopper(result=ev.tag)


class FanOutCollectFlow(Workflow):
    @step
    async def fan(self, ev: StartEvent) -> list[Item]:
        return [Item(n=1), Item(n=2)]

    @step
    async def gather(self, events: list[Item]) -> StopEvent:
        return StopEvent(result=sorted(e.n for e in events))


class CollectFlow(Workflow):
    """The producer sends ``Item``/``Other`` events; the joiner collects."""

    @step
    async def start(self, ctx: Context, ev: StartEvent) -> Item | Other | None:
        for spec in ev.get("sends"):
            if spec[0] == "item":
                ctx.send_event(Item(n=spec[1]))
            elif spec[0] == "sub":
                ctx.send_event(SubItem(n=spec[1]))
            else:
                ctx.send_event(Other(tag=spec[1]))
        return None

    @step(num_workers=1, accept_event_subclasses=True)
    async def join(self, ctx: Context, ev: Item | Other) -> StopEvent | None:
        expected = [Item, Other, Item]
        got = ctx.collect_events(ev, expected)
        if got is None:
            return None
        return StopEvent(
            result=[(type(e).__name__, getattr(e, "n", getattr(e, "tag", None))) for e in got]
        )


class BufferIdFlow(Workflow):
    @step
    async def start(self, ctx: Context, ev: StartEvent) -> Item | Other | None:
        for i in range(3):
            ctx.send_event(Item(n=i))
        ctx.send_event(Other(tag="x"))
        return None

    @step(num_workers=1)
    async def join(self, ctx: Context, ev: Item | Other) -> StopEvent | None:
        # Two independent buffers: "items" needs 3 Items, "mixed" needs Item + Other.
        if isinstance(ev, Item):
            a = ctx.collect_events(ev, [Item] * 3, buffer_id="items")
            b = ctx.collect_events(ev, [Item, Other], buffer_id="mixed")
        else:
            a = None
            b = ctx.collect_events(ev, [Item, Other], buffer_id="mixed")
        if a is not None:
            await ctx.store.set("items", [e.n for e in a])
        if b is not None:
            await ctx.store.set("mixed", [type(e).__name__ for e in b])
        items = await ctx.store.get("items", default=None)
        mixed = await ctx.store.get("mixed", default=None)
        if items is not None and mixed is not None:
            return StopEvent(result={"items": items, "mixed": mixed})
        return None


class ParallelCollectFlow(Workflow):
    @step
    async def start(self, ctx: Context, ev: StartEvent) -> Item | None:
        for i in range(12):
            ctx.send_event(Item(n=i))
        return None

    @step(num_workers=4)
    async def join(self, ctx: Context, ev: Item) -> Batch | None:
        await anyio.sleep(0.001 * (ev.n % 3))
        got = ctx.collect_events(ev, [Item] * 3)
        if got is None:
            return None
        await anyio.sleep(0.001)
        return Batch(ns=[e.n for e in got])

    @step(num_workers=1)
    async def final(self, ctx: Context, ev: Batch) -> StopEvent | None:
        got = ctx.collect_events(ev, [Batch] * 4)
        if got is None:
            return None
        return StopEvent(result=[b.ns for b in got])


class RetryCollectFlow(Workflow):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.attempts: list[tuple[int, list[int] | None]] = []

    @step
    async def start(self, ctx: Context, ev: StartEvent) -> Item | None:
        ctx.send_event(Item(n=1))
        ctx.send_event(Item(n=2))
        return None

    @step(num_workers=1, retry_policy=retry_policy(wait=wait_fixed(0), stop=stop_after_attempt(3)))
    async def join(self, ctx: Context, ev: Item) -> StopEvent | None:
        got = ctx.collect_events(ev, [Item, Item])
        info = ctx.retry_info()
        self.attempts.append((info.retry_number, None if got is None else [e.n for e in got]))
        if got is None:
            return None
        if info.retry_number == 0:
            raise RuntimeError("fail after collecting")
        return StopEvent(result=[e.n for e in got])


class WaitFlow(Workflow):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.body_runs = 0

    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        self.body_runs += 1
        req = ev.get("requirements")
        reply = await ctx.wait_for_event(
            Reply,
            waiter_event=Ask(prompt="name?"),
            requirements=req,
            timeout=ev.get("wait_timeout", 5),
        )
        return StopEvent(result=f"{reply.key}:{reply.text}")


class WaitTimeoutFlow(Workflow):
    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        try:
            await ctx.wait_for_event(Reply, timeout=0.1)
        except TimeoutError as exc:
            if ev.get("reraise"):
                raise
            return StopEvent(result=("caught", type(exc).__name__, str(exc)))
        return StopEvent(result="resolved")


class WokenNotTriggeredFlow(Workflow):
    """``main`` accepts ``Reply`` too, but a waiter resolution is not a new trigger."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.inputs: list[str] = []

    @step
    async def main(self, ctx: Context, ev: StartEvent | Reply) -> StopEvent | None:
        self.inputs.append(type(ev).__name__)
        if isinstance(ev, Reply):
            return StopEvent(result="triggered-by-reply")
        reply = await ctx.wait_for_event(
            Reply, waiter_event=Ask(prompt="main"), waiter_id="w1", timeout=5
        )
        return StopEvent(result=f"waited:{reply.text}")


class TwoWaitersFlow(Workflow):
    @step
    async def start(self, ctx: Context, ev: StartEvent) -> Go | None:
        ctx.send_event(Go())
        return None

    @step
    async def first(self, ctx: Context, ev: StartEvent) -> Item:
        reply = await ctx.wait_for_event(
            Reply, waiter_event=Ask(prompt="a"), waiter_id="a", timeout=5
        )
        return Item(n=len(reply.text))

    @step
    async def second(self, ctx: Context, ev: Go) -> Other | None:
        reply = await ctx.wait_for_event(
            Reply, waiter_event=Ask(prompt="b"), waiter_id="b", timeout=5
        )
        return Other(tag=reply.text)

    @step
    async def done(self, ctx: Context, ev: Item | Other) -> StopEvent | None:
        got = ctx.collect_events(ev, [Item, Other])
        if got is None:
            return None
        return StopEvent(result=(got[0].n, got[1].tag))


class SharedStoreFlow(Workflow):
    @step
    async def start(self, ctx: Context, ev: StartEvent) -> Go:
        seeded = await ctx.store.get("seed")
        await ctx.store.set("from_start", seeded * 2)
        return Go()

    @step
    async def middle(self, ctx: Context, ev: Go) -> StopEvent:
        # Wait for the handler side to write "from_handler".
        with anyio.fail_after(2):
            while await ctx.store.get("from_handler", default=None) is None:
                await anyio.sleep(0.005)
        total = await ctx.store.get("from_start") + await ctx.store.get("from_handler")
        await ctx.store.set("total", total)
        return StopEvent(result=total)


class MyState(BaseModel):
    count: int = 0
    names: list[str] = []


class MyChildState(MyState):
    extra: str = "x"


class OtherState(BaseModel):
    flag: bool = False


class TypedStateFlow(Workflow):
    @step
    async def start(self, ctx: Context[MyState], ev: StartEvent) -> Go:
        state = await ctx.store.get_state()
        assert isinstance(state, MyState)
        await ctx.store.set("count", state.count + 1)
        return Go()

    @step
    async def finish(self, ctx: Context[MyState], ev: Go) -> StopEvent:
        async with ctx.store.edit_state() as state:
            state.names.append("finish")
            state.count += 10
        return StopEvent(result=type(await ctx.store.get_state()).__name__)


class DerivedStateFlow(Workflow):
    @step
    async def start(self, ctx: Context[MyState], ev: StartEvent) -> Go:
        return Go()

    @step
    async def finish(self, ctx: Context[MyChildState], ev: Go) -> StopEvent:
        return StopEvent(result=type(await ctx.store.get_state()).__name__)


class ConflictingStateFlow(Workflow):
    @step
    async def start(self, ctx: Context[MyState], ev: StartEvent) -> Go:
        return Go()

    @step
    async def finish(self, ctx: Context[OtherState], ev: Go) -> StopEvent:
        return StopEvent()


class ThreadMisuseFlow(Workflow):
    @step
    async def only(self, ctx: Context, ev: StartEvent) -> StopEvent:
        def send_from_thread() -> str:
            return _capture(lambda: ctx.send_event(Go()))

        def write_from_thread() -> str:
            return _capture(lambda: ctx.write_event_to_stream(Go()))

        def sync_store_from_foreign_thread() -> str:
            return _capture(lambda: ctx.store.sync.get("x", default=None))

        report = {
            "send": await anyio.to_thread.run_sync(send_from_thread),
            "write": await anyio.to_thread.run_sync(write_from_thread),
            "sync_store_thread": await anyio.to_thread.run_sync(sync_store_from_foreign_thread),
            "sync_store_loop": _capture(lambda: ctx.store.sync.get("x", default=None)),
        }
        return StopEvent(result=report)


# --------------------------------------------------------------------------- pre-run face


async def test_pre_run_face_matrix() -> None:
    wf = SimpleFlow(timeout=5)
    ctx = Context(wf)
    assert ctx.is_running is False
    assert ctx.run_id is None
    assert isinstance(ctx.store, InMemoryStateStore)

    with pytest.raises(ContextStateError) as info:
        ctx.send_event(Go())
    assert "send_event" in str(info.value)
    assert "start" in str(info.value).lower()

    with pytest.raises(ContextStateError, match="stream_events") as info:
        ctx.stream_events()
    assert "running workflow" in str(info.value) or "handler" in str(info.value)
    with pytest.raises(ContextStateError, match="running_steps") as info:
        await ctx.running_steps()
    assert "running workflow" in str(info.value) or "handler" in str(info.value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ContextStateError, match="get_result"):
            ctx.get_result()

    for name, call in [
        ("collect_events", lambda: ctx.collect_events(Go(), [Go])),
        ("write_event_to_stream", lambda: ctx.write_event_to_stream(Go())),
        ("retry_info", ctx.retry_info),
    ]:
        with pytest.raises(ContextStateError) as info:
            call()
        assert name in str(info.value)
        assert "step" in str(info.value).lower()
    with pytest.raises(ContextStateError) as info:
        await ctx.wait_for_event(Reply)
    assert "wait_for_event" in str(info.value)


async def test_pre_run_streaming_queue_raises_context_state_error() -> None:
    ctx = Context(SimpleFlow(timeout=5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ContextStateError, match="streaming_queue"):
            ctx.streaming_queue  # noqa: B018


async def test_pre_run_to_dict_is_a_current_snapshot_with_staged_store() -> None:
    ctx = Context(SimpleFlow(timeout=5))
    await ctx.store.set("staged", 1)
    snapshot = ctx.to_dict()
    assert snapshot["version"] == 3
    assert snapshot["is_running"] is False
    assert "only" in snapshot["workers"]
    assert snapshot["state"] is not None
    assert ctx.to_dict(include_state=False)["state"] is None
    restored = Context.from_dict(SimpleFlow(timeout=5), snapshot)
    assert await restored.store.get("staged") == 1


async def test_pre_run_is_running_reflects_snapshot_flag() -> None:
    wf = SimpleFlow(timeout=5)
    handler = wf.run(delay=2)
    await anyio.sleep(0.02)
    await handler.cancel_run()
    snapshot = handler.ctx.to_dict()
    assert snapshot["is_running"] is True
    restored = Context.from_dict(SimpleFlow(timeout=5), snapshot)
    assert restored.is_running is True
    assert restored.run_id is None

    done = SimpleFlow(timeout=5).run()
    await done
    finished = Context.from_dict(SimpleFlow(timeout=5), done.ctx.to_dict())
    assert finished.is_running is False


async def test_get_step_context_outside_step_raises_runtime_error() -> None:
    with pytest.raises(WorkflowRuntimeError) as info:
        Context.get_step_context()
    assert "step" in str(info.value).lower()


async def test_pre_run_store_writes_carry_into_the_run() -> None:
    wf = SimpleFlow(timeout=5)
    ctx = Context(wf)
    await ctx.store.set("k", "staged")
    assert await ctx.store.get("k") == "staged"
    handler = wf.run(ctx=ctx)
    assert await handler == "staged"
    assert await handler.ctx.store.get("k") == "staged"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert handler.ctx.get_result() == "staged"


# --------------------------------------------------------------------------- handler face


async def test_handler_face_while_running_and_after() -> None:
    wf = SimpleFlow(timeout=5)
    handler = wf.run(delay=0.1)
    ctx = handler.ctx
    await anyio.sleep(0.02)
    assert ctx.is_running is True
    assert ctx.run_id == handler.run_id
    assert await ctx.running_steps() == ["only"]
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with pytest.raises(WorkflowRuntimeError) as info:
            ctx.get_result()
    assert handler.run_id in str(info.value)
    assert any(issubclass(w.category, DeprecationWarning) for w in rec)

    for name, call in [
        ("collect_events", lambda: ctx.collect_events(Go(), [Go])),
        ("write_event_to_stream", lambda: ctx.write_event_to_stream(Go())),
        ("retry_info", ctx.retry_info),
    ]:
        with pytest.raises(ContextStateError) as info2:
            call()
        assert name in str(info2.value)
        assert "step" in str(info2.value).lower()
    with pytest.raises(ContextStateError, match="wait_for_event"):
        await ctx.wait_for_event(Reply)

    await handler
    assert ctx.is_running is False
    assert ctx.run_id == handler.run_id
    assert await ctx.running_steps() == []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert ctx.get_result() is None


async def test_handler_to_dict_during_and_after_run() -> None:
    handler = SimpleFlow(timeout=5).run(delay=0.1)
    await anyio.sleep(0.02)
    live = handler.ctx.to_dict()
    assert live["version"] == 3
    assert live["is_running"] is True
    assert len(live["workers"]["only"]["in_progress"]) == 1
    await handler
    done = handler.ctx.to_dict()
    assert done["is_running"] is False
    assert done["workers"]["only"]["in_progress"] == []
    assert done["workers"]["only"]["queue"] == []


async def test_running_steps_are_sorted_names() -> None:
    handler = TwoRunningFlow(timeout=5).run()
    # ``start`` may still be running (returning) when the first step it sent to began.
    with anyio.fail_after(2):
        while (running := await handler.ctx.running_steps()) != ["alpha", "zeta"]:
            assert running == sorted(running)
            await anyio.sleep(0.005)
    assert await handler == "z"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_streaming_queue_under_asyncio() -> None:
    class WriteFlow(Workflow):
        @step
        async def only(self, ctx: Context, ev: StartEvent) -> StopEvent:
            ctx.write_event_to_stream(Go())
            return StopEvent(result=1)

    handler = WriteFlow(timeout=5).run()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        queue = handler.ctx.streaming_queue
    assert any(issubclass(w.category, DeprecationWarning) for w in rec)
    assert isinstance(queue, asyncio.Queue)
    seen = []
    with anyio.fail_after(2):
        while True:
            ev = await queue.get()
            seen.append(ev)
            if isinstance(ev, StopEvent):
                break
    assert any(isinstance(e, Go) for e in seen)
    assert await handler == 1


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_streaming_queue_under_trio_not_implemented() -> None:
    handler = SimpleFlow(timeout=5).run()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(NotImplementedError):
            handler.ctx.streaming_queue  # noqa: B018
    await handler


# --------------------------------------------------------------------------- step face


async def test_step_face_matrix() -> None:
    handler = StepFaceFlow(timeout=5).run()
    report = await handler
    for name in ("stream_events", "running_steps", "get_result"):
        assert report[name].startswith("ContextStateError"), (name, report[name])
        assert name in report[name], (name, report[name])
        # The message names the face the member needs.
        msg = report[name].lower()
        assert "handler" in msg or "running workflow" in msg, msg
    assert report["is_running"] is True
    assert report["is_running_warned"] is True
    assert report["run_id"] == handler.run_id
    assert report["store"] is handler.ctx.store
    assert report["self"] is not handler.ctx
    assert report["current"] is report["self"]
    assert report["retry_info"] == RetryInfo(
        retry_number=0, elapsed_seconds=0.0, last_exception=None, last_failed_at=None
    )
    assert report["collect_empty"] == []
    assert report["write_none"] == "ok"
    assert report["run_from_step"].startswith("ContextStateError")
    assert "step" in report["run_from_step"].lower()


async def test_step_face_to_dict_and_streaming_queue_raise_context_state_error() -> None:
    report = await StepFaceFlow(timeout=5).run()
    for name in ("to_dict", "streaming_queue"):
        assert report[name].startswith("ContextStateError"), (name, report[name])
        assert name in report[name], (name, report[name])


async def test_step_context_send_from_foreign_thread_raises_runtime_error() -> None:
    report = await ThreadMisuseFlow(timeout=5).run()
    assert report["send"].startswith("RuntimeError"), report["send"]


async def test_step_context_write_from_foreign_thread_raises_runtime_error() -> None:
    report = await ThreadMisuseFlow(timeout=5).run()
    assert report["write"].startswith("RuntimeError"), report["write"]


async def test_store_sync_from_loop_thread_raises_runtime_error() -> None:
    report = await ThreadMisuseFlow(timeout=5).run()
    outcome = report["sync_store_loop"]
    assert outcome.startswith("RuntimeError"), outcome
    assert "loop" in outcome


async def test_store_sync_from_foreign_thread_raises_runtime_error() -> None:
    report = await ThreadMisuseFlow(timeout=5).run()
    assert report["sync_store_thread"].startswith("RuntimeError"), report["sync_store_thread"]


async def test_handler_context_send_from_foreign_thread_raises_runtime_error() -> None:
    handler = SimpleFlow(timeout=5).run(delay=0.1)
    outcome = await anyio.to_thread.run_sync(lambda: _capture(lambda: handler.ctx.send_event(Go())))
    assert outcome.startswith("RuntimeError"), outcome
    await handler


# --------------------------------------------------------------------------- send_event


async def test_targeted_send_reaches_only_target_step() -> None:
    wf = SendTargetFlow(timeout=5)
    handler = wf.run(send_mode="targeted")
    events = await _drain(handler)
    result = await handler
    assert isinstance(result, Stopper) and result.result == 1
    assert wf.seen == [("left", 1)]
    dispatched = [
        e.name
        for e in events
        if isinstance(e, StepStateChanged) and e.step_state.value == "running"
    ]
    assert "left" in dispatched
    assert "right" not in dispatched


async def test_untargeted_send_reaches_every_accepting_step() -> None:
    wf = SendTargetFlow(timeout=5)
    result = await wf.run(send_mode="untargeted")
    assert isinstance(result, Stopper) and result.result == 2
    assert sorted(wf.seen) == [("left", 2), ("right", 2)]


async def test_invalid_targeted_sends_inside_step_raise_synchronously() -> None:
    result = await SendTargetFlow(timeout=5).run(send_mode="catch")
    assert isinstance(result, Stopper)
    unknown, wrong, stop, stop_sub = result.result.split("|")
    assert unknown.startswith("WorkflowRuntimeError") and "nowhere_step" in unknown
    assert wrong.startswith("WorkflowRuntimeError")
    assert "finish" in wrong and "Item" in wrong
    assert stop.startswith("WorkflowRuntimeError") and "StopEvent" in stop
    assert stop_sub.startswith("WorkflowRuntimeError") and "Stopper" in stop_sub


@pytest.mark.parametrize("mode", ["unknown", "wrong"])
async def test_uncaught_invalid_targeted_send_is_a_step_failure(mode: str) -> None:
    handler = SendTargetFlow(timeout=5).run(send_mode=mode)
    events = await _drain(handler)
    assert isinstance(events[-1], WorkflowFailedEvent)
    assert events[-1].step_name == "start"
    with pytest.raises(WorkflowRuntimeError):
        await handler


async def test_handler_face_send_errors() -> None:
    handler = SendTargetFlow(timeout=5).run(send_mode="none")
    ctx = handler.ctx
    with pytest.raises(WorkflowRuntimeError, match="nowhere_step"):
        ctx.send_event(Item(n=1), step="nowhere_step")
    with pytest.raises(WorkflowRuntimeError) as info:
        ctx.send_event(Item(n=1), step="finish")
    assert "finish" in str(info.value) and "Item" in str(info.value)
    with pytest.raises(WorkflowRuntimeError, match="StopEvent"):
        ctx.send_event(StopEvent(result=1))
    with pytest.raises(WorkflowRuntimeError, match="Stopper"):
        await handler.send_event(Stopper())
    # A valid targeted send still works and ends the run.
    ctx.send_event(Other(tag="fine"), step="finish")
    result = await handler
    assert isinstance(result, Stopper)
    assert result.result == "fine"


async def test_targeted_send_to_collect_step_raises() -> None:
    handler = FanOutCollectFlow(timeout=5).run()
    with pytest.raises(WorkflowRuntimeError) as info:
        handler.ctx.send_event(Item(n=9), step="gather")
    msg = str(info.value)
    assert "gather" in msg and "Item" in msg
    assert "fan-out" in msg.lower() or "fan out" in msg.lower()
    assert await handler == [1, 2]


async def test_handler_send_after_run_ended_is_ignored_with_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    handler = SimpleFlow(timeout=5).run()
    await handler
    with caplog.at_level(logging.WARNING, logger="tickwork"):
        handler.ctx.send_event(Go())
    assert any(
        r.name.startswith("tickwork") and r.levelno == logging.WARNING for r in caplog.records
    )


# --------------------------------------------------------------------------- collect_events


async def test_collect_events_orders_as_expected_and_drops_unneeded() -> None:
    # Arrivals: Other(a), Item(1), Other(b) (not needed any more -> dropped), Item(2).
    sends = [("other", "a"), ("item", 1), ("other", "b"), ("item", 2)]
    result = await CollectFlow(timeout=5).run(sends=sends)
    assert result == [("Item", 1), ("Other", "a"), ("Item", 2)]


async def test_collect_events_matches_exact_types_only() -> None:
    # SubItem reaches the step (subclass mode) but never counts as an Item.
    sends = [("sub", 100), ("item", 1), ("other", "a"), ("sub", 101), ("item", 2)]
    result = await CollectFlow(timeout=5).run(sends=sends)
    assert result == [("Item", 1), ("Other", "a"), ("Item", 2)]


async def test_collect_events_incomplete_returns_none_and_run_idles() -> None:
    handler = CollectFlow(timeout=0.3).run(sends=[("item", 1), ("item", 2)])
    with pytest.raises(WorkflowTimeoutError):
        await handler


async def test_collect_events_buffer_ids_are_independent() -> None:
    result = await BufferIdFlow(timeout=5).run()
    assert result == {"items": [0, 1, 2], "mixed": ["Item", "Other"]}


async def test_collect_events_with_many_workers_counts_each_event_once() -> None:
    result = await ParallelCollectFlow(timeout=5).run()
    assert len(result) == 4
    assert all(len(batch) == 3 for batch in result)
    flat = sorted(n for batch in result for n in batch)
    assert flat == list(range(12))


async def test_collect_events_failed_invocation_keeps_buffer_for_retry() -> None:
    wf = RetryCollectFlow(timeout=5)
    assert await wf.run() == [1, 2]
    completing = [a for a in wf.attempts if a[1] is not None]
    assert completing == [(0, [1, 2]), (1, [1, 2])]


# --------------------------------------------------------------------------- wait_for_event


async def _answer_when_asked(handler: Any, *replies: Reply) -> list[Event]:
    events: list[Event] = []
    async for ev in handler.stream_events(expose_internal=True):
        events.append(ev)
        if isinstance(ev, Ask):
            for reply in replies:
                handler.ctx.send_event(reply)
    return events


async def test_wait_for_event_suspends_reruns_and_publishes_waiter_event_once() -> None:
    wf = WaitFlow(timeout=5)
    handler = wf.run()
    events = await _answer_when_asked(handler, Reply(key="k", text="bob"))
    assert await handler == "k:bob"
    asks = [e for e in events if isinstance(e, Ask)]
    assert len(asks) == 1
    assert asks[0].prompt == "name?"
    # The body ran once to register the waiter and once more after the reply.
    assert wf.body_runs == 2
    # The Reply resolved the waiter; it is not unhandled.
    assert not any(isinstance(e, UnhandledEvent) for e in events)


async def test_wait_for_event_requirements_filter_events() -> None:
    wf = WaitFlow(timeout=5)
    handler = wf.run(requirements={"key": "b"})
    events = await _answer_when_asked(
        handler, Reply(key="a", text="wrong"), Reply(key="b", text="right")
    )
    assert await handler == "b:right"
    unhandled = [e for e in events if isinstance(e, UnhandledEvent)]
    assert len(unhandled) == 1
    assert unhandled[0].event_type == "Reply"
    assert unhandled[0].qualified_name == f"{__name__}.Reply"
    assert len([e for e in events if isinstance(e, Ask)]) == 1


async def test_wait_for_event_requirements_match_dynamic_fields() -> None:
    wf = WaitFlow(timeout=5)
    handler = wf.run(requirements={"session": 7})
    events = await _answer_when_asked(
        handler, Reply(key="x", text="no", session=6), Reply(key="y", text="yes", session=7)
    )
    assert await handler == "y:yes"
    assert sum(isinstance(e, UnhandledEvent) for e in events) == 1


async def test_wait_for_event_timeout_raises_timeout_error_inside_step() -> None:
    result = await WaitTimeoutFlow(timeout=5).run()
    kind, name, message = result
    assert kind == "caught"
    assert name == "TimeoutError"
    assert "Reply" in message


async def test_wait_for_event_uncaught_timeout_fails_run_with_timeout_error() -> None:
    handler = WaitTimeoutFlow(timeout=5).run(reraise=True)
    events = await _drain(handler)
    assert isinstance(events[-1], WorkflowFailedEvent)
    assert events[-1].step_name == "ask"
    with pytest.raises(TimeoutError) as info:
        await handler
    assert type(info.value).__name__ != "WorkflowTimeoutError"
    assert "Reply" in str(info.value)


async def test_woken_step_does_not_receive_event_as_new_trigger() -> None:
    wf = WokenNotTriggeredFlow(timeout=5)
    handler = wf.run()
    events = await _answer_when_asked(handler, Reply(text="hello"))
    assert await handler == "waited:hello"
    assert sum(isinstance(e, Ask) for e in events) == 1
    assert wf.inputs == ["StartEvent", "StartEvent"]


async def test_one_event_resolves_waiters_in_all_steps() -> None:
    handler = TwoWaitersFlow(timeout=5).run()
    asks = 0
    async for ev in handler.stream_events():
        if isinstance(ev, Ask):
            asks += 1
            if asks == 2:
                handler.ctx.send_event(Reply(text="abc"))
    assert asks == 2
    assert await handler == (3, "abc")


# --------------------------------------------------------------------------- store


async def test_store_shared_between_steps_and_handler() -> None:
    wf = SharedStoreFlow(timeout=5)
    ctx = Context(wf)
    await ctx.store.set("seed", 5)
    handler = wf.run(ctx=ctx)
    with anyio.fail_after(2):
        while await handler.ctx.store.get("from_start", default=None) is None:
            await anyio.sleep(0.005)
    await handler.ctx.store.set("from_handler", 100)
    assert await handler == 110
    assert await handler.ctx.store.get("total") == 110
    state = await handler.ctx.store.get_state()
    assert isinstance(state, DictState)


async def test_typed_state_from_context_annotation() -> None:
    wf = TypedStateFlow(timeout=5)
    pre = Context(wf)
    assert pre.store.state_type is MyState
    await pre.store.set("count", 4)
    handler = wf.run(ctx=pre)
    assert await handler == "MyState"
    state = await handler.ctx.store.get_state()
    assert isinstance(state, MyState)
    assert state.count == 15
    assert state.names == ["finish"]


async def test_typed_state_picks_most_derived_type() -> None:
    handler = DerivedStateFlow(timeout=5).run()
    assert await handler == "MyChildState"
    assert handler.ctx.store.state_type is MyChildState


async def test_conflicting_state_types_raise_value_error() -> None:
    wf = ConflictingStateFlow(timeout=5)
    with pytest.raises(ValueError) as info:
        Context(wf)
    assert "MyState" in str(info.value) and "OtherState" in str(info.value)
    with pytest.raises(ValueError):
        wf.run()


# --------------------------------------------------------------------------- more waiter rules


class MultiWaitFlow(Workflow):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.body_runs = 0

    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        self.body_runs += 1
        if ev.get("shared"):
            # Same type, same requirements, no waiter_id: both calls share one waiter.
            first = await ctx.wait_for_event(Reply, waiter_event=Ask(prompt="1"), timeout=5)
            second = await ctx.wait_for_event(Reply, waiter_event=Ask(prompt="2"), timeout=5)
        else:
            first = await ctx.wait_for_event(
                Reply, waiter_event=Ask(prompt="1"), waiter_id="one", timeout=5
            )
            second = await ctx.wait_for_event(
                Reply, waiter_event=Ask(prompt="2"), waiter_id="two", timeout=5
            )
        return StopEvent(result=(first.text, second.text))


async def test_implicit_waiter_ids_are_shared_for_same_type() -> None:
    wf = MultiWaitFlow(timeout=5)
    handler = wf.run(shared=True)
    events = await _answer_when_asked(handler, Reply(text="only"))
    assert await handler == ("only", "only")
    assert [e.prompt for e in events if isinstance(e, Ask)] == ["1"]
    assert wf.body_runs == 2


async def test_distinct_waiter_ids_wait_separately_and_keep_resolved_events() -> None:
    wf = MultiWaitFlow(timeout=5)
    handler = wf.run()
    events: list[Event] = []
    async for ev in handler.stream_events(expose_internal=True):
        events.append(ev)
        if isinstance(ev, Ask):
            handler.ctx.send_event(Reply(text=f"answer-{ev.prompt}"))
    assert await handler == ("answer-1", "answer-2")
    # Each waiter_event is published once; the body ran once per registration plus once more.
    assert [e.prompt for e in events if isinstance(e, Ask)] == ["1", "2"]
    assert wf.body_runs == 3
    ask_states = [
        (e.step_state.value, e.output_event_name)
        for e in events
        if isinstance(e, StepStateChanged) and e.name == "ask"
    ]
    # Suspensions publish NOT_RUNNING with no output; every re-run publishes RUNNING again.
    assert ask_states == [
        ("running", None),
        ("not_running", None),
        ("running", None),
        ("not_running", None),
        ("running", None),
        ("not_running", str(StopEvent)),
    ]


# --------------------------------------------------------------------------- store across faces


class EditStateFlow(Workflow):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.in_edit = anyio.Event()
        self.release = anyio.Event()

    @step
    async def only(self, ctx: Context, ev: StartEvent) -> StopEvent:
        async with ctx.store.edit_state() as state:
            state["value"] = "edited"
            nested = await _acapture(lambda: ctx.store.set("value", "nested"))
            self.in_edit.set()
            await self.release.wait()
        return StopEvent(result=nested)


async def test_edit_state_is_isolated_and_serializes_writers_across_faces() -> None:
    wf = EditStateFlow(timeout=5)
    ctx = Context(wf)
    await ctx.store.set("value", "initial")
    handler = wf.run(ctx=ctx)
    with anyio.fail_after(2):
        await wf.in_edit.wait()
    # Readers see the committed state while the edit is open.
    assert await handler.ctx.store.get("value") == "initial"
    order: list[str] = []

    async def handler_write() -> None:
        await handler.ctx.store.set("value", "from handler")
        order.append("handler write done")

    async with anyio.create_task_group() as tg:
        tg.start_soon(handler_write)
        await anyio.sleep(0.05)
        # The handler's write waits for the step's writer lock.
        assert order == []
        assert await handler.ctx.store.get("value") == "initial"
        order.append("release")
        wf.release.set()
    nested = await handler
    assert order == ["release", "handler write done"]
    assert nested.startswith("RuntimeError")
    assert await handler.ctx.store.get("value") == "from handler"


async def test_typed_state_rejects_unrelated_state_type() -> None:
    handler = TypedStateFlow(timeout=5).run()
    await handler
    with pytest.raises(ValueError) as info:
        await handler.ctx.store.set_state(OtherState())
    assert "MyState" in str(info.value) and "OtherState" in str(info.value)
    await handler.ctx.store.set_state(MyChildState(count=3))
    assert (await handler.ctx.store.get_state()).count == 3
