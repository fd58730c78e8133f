"""End-to-end tests of ``WorkflowHandler`` (api.md §7, §25.3).

Every async test runs under asyncio and trio (see ``conftest.py``).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from pydantic import BaseModel, ValidationError

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.errors import (
    WorkflowCancelledByUser,
    WorkflowRuntimeError,
    WorkflowTimeoutError,
)
from tickwork.events import (
    InternalDispatchEvent,
    StepStateChanged,
    WorkflowCancelledEvent,
    WorkflowFailedEvent,
    WorkflowIdleEvent,
    WorkflowTimedOutEvent,
)
from tickwork.handler import WorkflowHandler

pytestmark = pytest.mark.anyio


# --------------------------------------------------------------------------- events


class Progress(Event):
    n: int


class Ping(Event):
    msg: str


class Answer(StopEvent):
    value: int


class BoomError(Exception):
    pass


async def eventually(predicate: Callable[[], bool], timeout: float = 1.0) -> bool:
    """Poll ``predicate``: cancelled invocations may finish unwinding after the outcome."""
    with anyio.move_on_after(timeout):
        while not predicate():
            await anyio.sleep(0.005)
    return predicate()


# --------------------------------------------------------------------------- workflows


class PlainFlow(Workflow):
    @step
    async def only(self, ctx: Context, ev: StartEvent) -> StopEvent:
        for i in range(int(ev.get("progress", 0))):
            ctx.write_event_to_stream(Progress(n=i))
        await anyio.sleep(float(ev.get("delay", 0)))
        return StopEvent(result=ev.get("result", "done"))


class SubclassStopFlow(Workflow):
    @step
    async def only(self, ev: StartEvent) -> Answer:
        return Answer(value=42)


class FailingFlow(Workflow):
    @step
    async def only(self, ev: StartEvent) -> StopEvent:
        await anyio.sleep(0.01)
        raise BoomError("kaboom")


class HangingFlow(Workflow):
    """Runs until cancelled; records cancellation in ``events``."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.started = anyio.Event()
        self.cancelled = False
        self.finished = False

    @step
    async def only(self, ctx: Context, ev: StartEvent) -> StopEvent:
        ctx.write_event_to_stream(Progress(n=0))
        self.started.set()
        try:
            await anyio.sleep(5)
        except BaseException:
            self.cancelled = True
            raise
        self.finished = True
        return StopEvent(result="late")


class PingFlow(Workflow):
    """Waits for an external ``Ping`` sent through the handler."""

    @step
    async def begin(self, ev: StartEvent) -> Ping | None:
        return None

    @step
    async def on_ping(self, ev: Ping) -> StopEvent:
        return StopEvent(result=f"got {ev.msg}")


# --------------------------------------------------------------------------- awaiting


async def test_await_returns_result_for_exact_stop_event() -> None:
    handler = PlainFlow(timeout=5).run(result={"k": [1, 2]})
    assert isinstance(handler, WorkflowHandler)
    assert await handler == {"k": [1, 2]}


async def test_await_returns_instance_for_stop_event_subclass() -> None:
    result = await SubclassStopFlow(timeout=5).run()
    assert isinstance(result, Answer)
    assert result.value == 42


async def test_await_returns_none_result() -> None:
    class NoneFlow(Workflow):
        @step
        async def only(self, ev: StartEvent) -> StopEvent:
            return StopEvent()

    assert await NoneFlow(timeout=5).run() is None


async def test_handler_can_be_awaited_many_times() -> None:
    handler = SubclassStopFlow(timeout=5).run()
    first = await handler
    second = await handler
    third = await handler
    assert first is second is third


async def test_handler_awaited_from_many_tasks() -> None:
    handler = PlainFlow(timeout=5).run(delay=0.05, result="shared")
    results: list[object] = []

    async def waiter() -> None:
        results.append(await handler)

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(waiter)
    assert results == ["shared"] * 4


async def test_failure_raises_same_exception_object_every_time() -> None:
    handler = FailingFlow(timeout=5).run()
    with pytest.raises(BoomError) as first:
        await handler
    with pytest.raises(BoomError) as second:
        await handler
    assert first.value is second.value
    assert str(first.value) == "kaboom"


async def test_failure_raises_in_every_concurrent_awaiter() -> None:
    handler = FailingFlow(timeout=5).run()
    errors: list[BaseException] = []

    async def waiter() -> None:
        try:
            await handler
        except BoomError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(waiter)
    assert len(errors) == 3
    assert errors[0] is errors[1] is errors[2]


async def test_stop_event_result_returns_terminal_event() -> None:
    handler = PlainFlow(timeout=5).run(result=7)
    ev = await handler.stop_event_result()
    assert type(ev) is StopEvent
    assert ev.result == 7
    sub = await SubclassStopFlow(timeout=5).run().stop_event_result()
    assert isinstance(sub, Answer)


async def test_stop_event_result_raises_like_await() -> None:
    handler = FailingFlow(timeout=5).run()
    with pytest.raises(BoomError):
        await handler.stop_event_result()
    with pytest.raises(BoomError):
        await handler


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_asyncio_interop_gather_wait_for_ensure_future() -> None:
    wf = PlainFlow(timeout=5)
    a, b = await asyncio.gather(wf.run(result="a"), wf.run(result="b"))
    assert (a, b) == ("a", "b")
    assert await asyncio.wait_for(wf.run(result="c"), 5) == "c"
    fut = asyncio.ensure_future(wf.run(result="d"))
    assert await fut == "d"


# ------------------------------------------------------------------- is_done / get_stop_event


async def test_is_done_and_get_stop_event_on_success() -> None:
    handler = PlainFlow(timeout=5).run(delay=0.05, result="r")
    assert handler.is_done() is False
    assert handler.get_stop_event() is None
    await handler
    assert handler.is_done() is True
    ev = handler.get_stop_event()
    assert type(ev) is StopEvent
    assert ev.result == "r"


async def test_get_stop_event_after_failure_is_failed_event() -> None:
    handler = FailingFlow(timeout=5).run()
    with pytest.raises(BoomError):
        await handler
    ev = handler.get_stop_event()
    assert isinstance(ev, WorkflowFailedEvent)
    assert ev.step_name == "only"
    assert isinstance(ev.exception, BoomError)


async def test_get_stop_event_after_timeout_is_timed_out_event() -> None:
    handler = PlainFlow(timeout=0.1).run(delay=2)
    with pytest.raises(WorkflowTimeoutError):
        await handler
    ev = handler.get_stop_event()
    assert isinstance(ev, WorkflowTimedOutEvent)
    assert ev.timeout == 0.1
    assert ev.active_steps == ["only"]


async def test_get_stop_event_set_before_cancel_run_returns() -> None:
    wf = HangingFlow(timeout=5)
    handler = wf.run()
    await wf.started.wait()
    await handler.cancel_run()
    assert isinstance(handler.get_stop_event(), WorkflowCancelledEvent)
    assert handler.is_done()
    with pytest.raises(WorkflowCancelledByUser):
        await handler
    assert await eventually(lambda: wf.cancelled)
    assert wf.finished is False


async def test_cancel_run_on_finished_run_does_nothing() -> None:
    handler = PlainFlow(timeout=5).run(result=1)
    assert await handler == 1
    await handler.cancel_run()
    assert await handler == 1
    assert type(handler.get_stop_event()) is StopEvent


async def test_cancel_run_never_raises_even_with_tiny_timeout() -> None:
    wf = HangingFlow(timeout=5)
    handler = wf.run()
    await wf.started.wait()
    await handler.cancel_run(timeout=0.0001)
    with pytest.raises(WorkflowCancelledByUser):
        await handler


async def test_cancel_run_on_failed_run_does_not_raise() -> None:
    handler = FailingFlow(timeout=5).run()
    with pytest.raises(BoomError):
        await handler
    await handler.cancel_run()
    assert isinstance(handler.get_stop_event(), WorkflowFailedEvent)


# --------------------------------------------------------------------------- send_event / str


async def test_handler_send_event_delivers_to_run() -> None:
    handler = PingFlow(timeout=5).run()
    await anyio.sleep(0.01)
    await handler.send_event(Ping(msg="hi"))
    assert await handler == "got hi"


async def test_handler_send_event_targeted_to_unknown_step_raises() -> None:
    handler = PingFlow(timeout=5).run()
    with pytest.raises(WorkflowRuntimeError, match="no_such_step"):
        await handler.send_event(Ping(msg="x"), step="no_such_step")
    await handler.send_event(Ping(msg="y"), step="on_ping")
    assert await handler == "got y"


async def test_str_contains_name_run_id_and_terminal_repr() -> None:
    wf = PlainFlow(timeout=5, workflow_name="named-flow")
    handler = wf.run(result=5)
    before = str(handler)
    assert "named-flow" in before
    assert handler.run_id in before
    assert "None" in before
    await handler
    after = str(handler)
    assert "named-flow" in after
    assert handler.run_id in after
    assert repr(handler.get_stop_event()) in after


# --------------------------------------------------------------------------- hard abort


async def test_cancelling_the_awaiting_task_hard_aborts_the_run() -> None:
    wf = HangingFlow(timeout=5)
    handler = wf.run()
    await wf.started.wait()
    with anyio.move_on_after(0.05):
        await handler
    with anyio.fail_after(2):
        while not handler.is_done():
            await anyio.sleep(0.01)
    assert await eventually(lambda: wf.cancelled)
    assert wf.finished is False
    # Hard abort: no cancel event, no terminal event.
    assert handler.get_stop_event() is None
    seen: list[Event] = []
    with anyio.move_on_after(0.2):
        async for ev in handler.stream_events(expose_internal=True):
            seen.append(ev)
    assert any(isinstance(ev, Progress) for ev in seen)
    assert not any(isinstance(ev, StopEvent) for ev in seen)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_asyncio_wait_for_timeout_hard_aborts_the_run() -> None:
    wf = HangingFlow(timeout=5)
    handler = wf.run()
    await wf.started.wait()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(handler, 0.05)
    for _ in range(200):
        if handler.is_done():
            break
        await asyncio.sleep(0.01)
    assert handler.is_done()
    assert await eventually(lambda: wf.cancelled)
    assert handler.get_stop_event() is None
    with pytest.raises(asyncio.CancelledError):
        await handler


async def test_deprecated_cancel_is_hard_abort(anyio_backend: str) -> None:
    wf = HangingFlow(timeout=5)
    handler = wf.run()
    await wf.started.wait()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        handler.cancel()
    expected = asyncio.CancelledError if anyio_backend == "asyncio" else WorkflowCancelledByUser
    with anyio.fail_after(2):
        with pytest.raises(expected):
            await handler
    assert handler.get_stop_event() is None
    assert await eventually(lambda: wf.cancelled)
    # Hard abort publishes no cancel event.
    seen = []
    with anyio.move_on_after(0.2):
        async for ev in handler.stream_events(expose_internal=True):
            seen.append(ev)
    assert not any(isinstance(ev, WorkflowCancelledEvent) for ev in seen)


# --------------------------------------------------------------------------- stream_events


async def test_stream_events_hides_internal_by_default() -> None:
    handler = PlainFlow(timeout=5).run(progress=3, result="r")
    events = [ev async for ev in handler.stream_events()]
    assert [type(ev) for ev in events] == [Progress, Progress, Progress, StopEvent]
    assert [ev.n for ev in events[:3]] == [0, 1, 2]
    assert events[-1].result == "r"
    assert await handler == "r"


async def test_stream_events_expose_internal_shows_step_state_changes() -> None:
    handler = PlainFlow(timeout=5).run(progress=1)
    events = [ev async for ev in handler.stream_events(expose_internal=True)]
    assert isinstance(events[-1], StopEvent)
    internal = [ev for ev in events if isinstance(ev, InternalDispatchEvent)]
    assert internal, events
    states = [ev for ev in events if isinstance(ev, StepStateChanged)]
    assert [s.step_state.value for s in states] == ["running", "not_running"]
    # The write comes between RUNNING and NOT_RUNNING.
    kinds = [type(ev).__name__ for ev in events if not type(ev).__name__.startswith("Workflow")]
    assert kinds.index("Progress") > kinds.index("StepStateChanged")
    idx_progress = events.index(next(e for e in events if isinstance(e, Progress)))
    assert events.index(states[1]) > idx_progress


async def test_stream_consumed_twice_raises() -> None:
    handler = PlainFlow(timeout=5).run(progress=2)
    events = [ev async for ev in handler.stream_events()]
    assert isinstance(events[-1], StopEvent)
    with pytest.raises(WorkflowRuntimeError) as info:
        async for _ in handler.stream_events():
            pass
    assert "consumed" in str(info.value).lower()


async def test_stream_late_consumer_gets_everything() -> None:
    handler = PlainFlow(timeout=5).run(progress=3, result="late")
    assert await handler == "late"
    events = [ev async for ev in handler.stream_events()]
    assert [type(ev) for ev in events] == [Progress, Progress, Progress, StopEvent]


async def test_stream_break_and_resume_continues_where_it_stopped() -> None:
    handler = PlainFlow(timeout=5).run(progress=4)
    first: list[Event] = []
    async for ev in handler.stream_events():
        first.append(ev)
        if len(first) == 2:
            break
    rest = [ev async for ev in handler.stream_events()]
    assert [ev.n for ev in first] == [0, 1]
    assert [type(ev) for ev in rest] == [Progress, Progress, StopEvent]
    assert [ev.n for ev in rest[:2]] == [2, 3]


async def test_stream_concurrent_readers_each_event_delivered_once() -> None:
    handler = PlainFlow(timeout=5).run(progress=20, delay=0.05)
    got: dict[int, list[Event]] = {0: [], 1: []}

    async def reader(idx: int) -> None:
        try:
            async for ev in handler.stream_events():
                got[idx].append(ev)
        except WorkflowRuntimeError:
            # The other reader consumed the terminal event first.
            pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader, 0)
        tg.start_soon(reader, 1)
    merged = got[0] + got[1]
    progress = sorted(ev.n for ev in merged if isinstance(ev, Progress))
    assert progress == list(range(20))
    assert sum(isinstance(ev, StopEvent) for ev in merged) == 1


class GatedFlow(Workflow):
    """Publishes ``count`` Progress events at once, after the test opens the gate."""

    gate: anyio.Event

    @step
    async def only(self, ctx: Context, ev: StartEvent) -> StopEvent:
        await self.gate.wait()
        for i in range(int(ev.get("count"))):
            ctx.write_event_to_stream(Progress(n=i))
        return StopEvent(result="gated")


async def test_two_concurrent_consumers_share_the_stream_and_both_end() -> None:
    """§25.3: concurrent readers are served one at a time and each event goes to one of
    them; the reader that did not get the terminal event ends too (neither hangs)."""
    workflow = GatedFlow(timeout=5)
    workflow.gate = anyio.Event()
    handler = workflow.run(count=20)
    received: list[tuple[int, Event]] = []
    finished: list[int] = []

    async def consume(reader: int) -> None:
        async for ev in handler.stream_events():
            received.append((reader, ev))
            await anyio.sleep(0.001)  # let the other reader take the next one
        finished.append(reader)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(consume, 0)
            tg.start_soon(consume, 1)
            await anyio.sleep(0.02)  # both readers wait for the first event
            workflow.gate.set()
    assert sorted(finished) == [0, 1]
    # The union, in the order handed out, is the whole stream; each event once.
    events = [ev for _, ev in received]
    assert [type(ev) for ev in events] == [Progress] * 20 + [StopEvent]
    assert [ev.n for ev in events[:20]] == list(range(20))
    by_reader = {r: [ev for who, ev in received if who == r] for r in (0, 1)}
    assert by_reader[0] and by_reader[1], "both readers were served"
    assert sum(isinstance(ev, StopEvent) for ev in events) == 1
    assert await handler == "gated"
    # A consumer that comes after the stream was consumed is told so.
    with pytest.raises(WorkflowRuntimeError, match="consumed"):
        async for _ in handler.stream_events():
            pass


async def test_a_consumer_that_stops_at_the_terminal_event_has_consumed_the_stream() -> None:
    handler = PlainFlow(timeout=5).run(progress=2)
    async for ev in handler.stream_events():
        if isinstance(ev, StopEvent):
            break  # the loop never asks for more after the terminal event
    with pytest.raises(WorkflowRuntimeError, match="consumed"):
        async for _ in handler.stream_events():
            pass


async def test_stream_terminal_event_for_failure_and_timeout() -> None:
    failed = FailingFlow(timeout=5).run()
    events = [ev async for ev in failed.stream_events()]
    assert isinstance(events[-1], WorkflowFailedEvent)
    with pytest.raises(BoomError):
        await failed

    timed = PlainFlow(timeout=0.1).run(delay=2, progress=1)
    events = [ev async for ev in timed.stream_events()]
    assert [type(ev) for ev in events] == [Progress, WorkflowTimedOutEvent]
    with pytest.raises(WorkflowTimeoutError):
        await timed


async def test_ctx_stream_events_includes_internal_and_stops_at_terminal() -> None:
    handler = PlainFlow(timeout=5).run(progress=1)
    events = [ev async for ev in handler.ctx.stream_events()]
    assert any(isinstance(ev, StepStateChanged) for ev in events)
    assert isinstance(events[-1], StopEvent)
    assert sum(isinstance(ev, StopEvent) for ev in events) == 1
    with pytest.raises(WorkflowRuntimeError) as info:
        handler.ctx.stream_events()
    assert "once" in str(info.value).lower() or "consumed" in str(info.value).lower()


async def test_streams_of_concurrent_runs_do_not_interfere() -> None:
    wf = PlainFlow(timeout=5)
    h1 = wf.run(progress=2, result="one", delay=0.02)
    h2 = wf.run(progress=3, result="two")
    e1 = [ev async for ev in h1.stream_events()]
    e2 = [ev async for ev in h2.stream_events()]
    assert [type(e) for e in e1] == [Progress, Progress, StopEvent]
    assert [type(e) for e in e2] == [Progress, Progress, Progress, StopEvent]
    assert e1[-1].result == "one" and e2[-1].result == "two"


# --------------------------------------------------------------------------- deprecated members


async def test_deprecated_members_behaviour() -> None:
    ok = PlainFlow(timeout=5).run(result=1)
    failed = FailingFlow(timeout=5).run()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert ok.done() is False
        assert ok.exception() is None
        await ok
        assert ok.done() is True
        assert ok.exception() is None
        assert ok.cancelled() is False
        with pytest.raises(BoomError):
            await failed
        assert isinstance(failed.exception(), BoomError)
        assert failed.cancelled() is False

        wf = HangingFlow(timeout=5)
        graceful = wf.run()
        await wf.started.wait()
        await graceful.cancel_run()
        assert graceful.cancelled() is True
        assert graceful.done() is True
        assert isinstance(graceful.exception(), WorkflowCancelledByUser)

        wf2 = HangingFlow(timeout=5)
        aborted = wf2.run()
        await wf2.started.wait()
        with anyio.move_on_after(0.02):
            await aborted
        with anyio.fail_after(2):
            while not aborted.is_done():
                await anyio.sleep(0.01)
        assert aborted.cancelled() is True
        assert aborted.done() is True

        timed = PlainFlow(timeout=0.05).run(delay=1)
        with pytest.raises(WorkflowTimeoutError):
            await timed
        assert isinstance(timed.exception(), WorkflowTimeoutError)
        assert timed.cancelled() is False


_DEPRECATION_SCRIPT = textwrap.dedent(
    """
    import sys, warnings
    import anyio
    from tickwork import StartEvent, StopEvent, Workflow, step

    class F(Workflow):
        @step
        async def only(self, ev: StartEvent) -> StopEvent:
            return StopEvent(result=1)

    async def main():
        h = F(timeout=5).run()
        await h
        h2 = F(timeout=5).run()
        await h2
        counts = {}
        for name in ("done", "exception", "cancelled", "cancel"):
            with warnings.catch_warnings(record=True) as rec:
                warnings.simplefilter("always")
                getattr(h, name)()
                getattr(h2, name)()
                getattr(h, name)()
            counts[name] = sum(issubclass(w.category, DeprecationWarning) for w in rec)
        print(counts)

    anyio.run(main, backend=sys.argv[1])
    """
)


def test_deprecated_members_warn_once_per_process(anyio_backend: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _DEPRECATION_SCRIPT, anyio_backend],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    expected = str({"done": 1, "exception": 1, "cancelled": 1, "cancel": 1})
    assert proc.stdout.strip() == expected, (proc.stdout, proc.stderr)


# ------------------------------------------------------------- the Context made on demand


class Counts(Workflow):
    @step
    async def count(self, ctx: Context, ev: StartEvent) -> StopEvent:
        await ctx.store.set("seen", ev.get("n"))
        return StopEvent(result="counted")


class Quiet(Workflow):
    @step
    async def only(self, ev: StartEvent) -> StopEvent:
        return StopEvent(result="quiet")


async def test_a_run_started_without_a_context_gets_its_handler_face_when_asked() -> None:
    handler = Counts().run(n=3)
    assert handler._ctx is None  # none until asked for: a live run holds no Context
    assert await handler == "counted"
    ctx = handler.ctx
    assert ctx is handler.ctx  # built once
    assert ctx._session is handler._session and ctx._step is None  # the handler face
    assert await ctx.store.get("seen") == 3  # the store the step wrote
    assert ctx.to_dict()["is_running"] is False


async def test_a_context_asked_for_while_the_run_is_live_sends_to_it() -> None:
    handler = PingFlow(timeout=5).run()
    with anyio.fail_after(5):
        async for event in handler.stream_events(expose_internal=True):
            if isinstance(event, WorkflowIdleEvent):
                break
        assert handler._ctx is None
        handler.ctx.send_event(Ping(msg="hello"))
        assert await handler == "got hello"


async def test_a_run_whose_steps_never_use_the_store_makes_none() -> None:
    handler = Quiet().run()
    assert await handler == "quiet"
    assert handler._session._store is None
    assert await handler.ctx.store.get("anything", default=None) is None  # made on demand
    assert handler._session._store is not None


async def test_a_run_started_with_a_context_keeps_it_and_its_store() -> None:
    ctx: Context[Any] = Context(Counts())
    await ctx.store.set("before", True)
    handler = ctx._workflow.run(ctx=ctx, n=5)
    assert handler.ctx is ctx
    assert await handler == "counted"
    assert await ctx.store.get("before") is True and await ctx.store.get("seen") == 5


class Lane(Event):
    lane: int


class TwoThreads(Workflow):
    """Two sync steps in worker threads that ask for the run's store first, together."""

    def __init__(self, met: threading.Barrier, seen: list[object]) -> None:
        super().__init__(timeout=10)
        self._met = met
        self._seen = seen

    @step
    async def split(self, ev: StartEvent) -> list[Lane]:
        return [Lane(lane=0), Lane(lane=1)]

    @step(num_workers=2)
    def use(self, ev: Lane) -> StopEvent | None:
        self._met.wait(timeout=5)  # both threads are here: now both ask at once
        # No Context parameter: the step's Context, and the run's store, are made here,
        # in the worker thread.
        self._seen.append(Context.get_step_context().store)
        return StopEvent(result="both") if len(self._seen) == 2 else None


async def test_two_threads_asking_first_for_the_store_get_the_same_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tickwork.workflow as workflow_module

    make = workflow_module._FRESH_STORE

    def slow_make(workflow: Any) -> Any:
        time.sleep(0.05)  # widen the window in which both threads find no store yet
        return make(workflow)

    monkeypatch.setattr(workflow_module, "_FRESH_STORE", slow_make)
    seen: list[object] = []
    handler = TwoThreads(threading.Barrier(2), seen).run()
    assert await handler == "both"
    assert len(seen) == 2 and seen[0] is seen[1] is handler._session._store


class Needs(BaseModel):
    required: int


class TypedState(Workflow):
    @step
    async def only(self, ctx: Context[Needs], ev: StartEvent) -> StopEvent:
        return StopEvent(result="typed")


async def test_a_typed_state_that_cannot_be_built_still_fails_the_start() -> None:
    with pytest.raises(ValidationError):
        TypedState().run()
