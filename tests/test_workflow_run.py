"""End-to-end tests of ``Workflow`` construction and ``Workflow.run()`` (api.md §6.1-§6.4, §6.7).

Every async test runs under asyncio and trio (see ``conftest.py``).
"""

from __future__ import annotations

import contextvars
import logging
import re
import string

import anyio
import pytest

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.errors import (
    ContextStateError,
    WorkflowConfigurationError,
    WorkflowRuntimeError,
    WorkflowValidationError,
)
from tickwork.workflow import WorkflowMeta

pytestmark = pytest.mark.anyio


# --------------------------------------------------------------------------- events


class Middle(Event):
    value: int


class Orphan(Event):
    pass


class TopicStart(StartEvent):
    topic: str
    count: int = 1


class SubTopicStart(TopicStart):
    pass


class OtherStart(StartEvent):
    pass


class ResultStop(StopEvent):
    answer: str


class OtherStop(StopEvent):
    pass


# --------------------------------------------------------------------------- workflows


class EchoFlow(Workflow):
    """Echoes the start event's dynamic fields back as the result."""

    @step
    async def only(self, ev: StartEvent) -> StopEvent:
        return StopEvent(result=dict(ev.items()))


class TwoStepFlow(Workflow):
    @step
    async def first(self, ev: StartEvent) -> Middle:
        return Middle(value=int(ev.get("n", 0)) + 1)

    @step
    async def second(self, ev: Middle) -> StopEvent:
        return StopEvent(result=ev.value * 10)


class TypedFlow(Workflow):
    @step
    async def begin(self, ev: TopicStart) -> ResultStop:
        return ResultStop(answer=f"{ev.topic}:{ev.count}")


class SlowFlow(Workflow):
    @step
    async def only(self, ev: StartEvent) -> StopEvent:
        await anyio.sleep(float(ev.get("delay", 0.3)))
        return StopEvent(result=ev.get("tag"))


class NoStartFlow(Workflow):
    @step
    async def only(self, ev: Middle) -> StopEvent:
        return StopEvent()


class TwoStartFlow(Workflow):
    @step
    async def a(self, ev: TopicStart) -> StopEvent:
        return StopEvent()

    @step
    async def b(self, ev: OtherStart) -> StopEvent:
        return StopEvent()


class NoStopFlow(Workflow):
    @step
    async def only(self, ev: StartEvent) -> Middle:
        return Middle(value=1)

    @step
    async def other(self, ev: Middle) -> None:
        return None


class TwoStopFlow(Workflow):
    @step
    async def a(self, ev: StartEvent) -> ResultStop | Middle:
        return Middle(value=1)

    @step
    async def b(self, ev: Middle) -> OtherStop:
        return OtherStop()


class EmptyFlow(Workflow):
    pass


class UnproducedFlow(Workflow):
    """``Orphan`` is consumed but never produced: validation must fail on run()."""

    @step
    async def begin(self, ev: StartEvent) -> StopEvent:
        return StopEvent(result="ok")

    @step
    async def orphan(self, ev: Orphan) -> StopEvent:
        return StopEvent()


# Free-function steps ---------------------------------------------------------------


class FreeFlow(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> Middle:
        return Middle(value=2)


@step(workflow=FreeFlow)
async def free_finish(ev: Middle) -> StopEvent:
    return StopEvent(result=f"free:{ev.value}")


class FreeFlowChild(FreeFlow):
    """Free-function steps are not inherited (§6.3)."""


# --------------------------------------------------------------------------- constructor


@pytest.mark.parametrize(
    "bad", [0, 0.0, -1, -0.5, float("nan"), float("inf"), -float("inf"), True, False, "10", [1]]
)
def test_timeout_must_be_none_or_positive_finite_number(bad: object) -> None:
    with pytest.raises(WorkflowValidationError, match=r"Workflow\(timeout=.*positive finite"):
        EchoFlow(timeout=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("good", [None, 0.001, 1, 2.5])
def test_timeout_accepts_none_and_positive(good: float | None) -> None:
    assert EchoFlow(timeout=good)._timeout == good


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2"])
def test_num_concurrent_runs_must_be_positive_int(bad: object) -> None:
    with pytest.raises(WorkflowValidationError, match="num_concurrent_runs"):
        EchoFlow(num_concurrent_runs=bad)  # type: ignore[arg-type]


def test_num_concurrent_runs_accepts_positive_int_and_none() -> None:
    EchoFlow(num_concurrent_runs=1)
    EchoFlow(num_concurrent_runs=None)


def test_no_start_consumer_raises_configuration_error_naming_class() -> None:
    with pytest.raises(WorkflowConfigurationError, match="NoStartFlow") as info:
        NoStartFlow()
    assert "StartEvent" in str(info.value)


def test_two_start_classes_raise_naming_count_and_classes() -> None:
    with pytest.raises(WorkflowConfigurationError) as info:
        TwoStartFlow()
    msg = str(info.value)
    assert "TwoStartFlow" in msg
    assert "2" in msg
    assert "TopicStart" in msg and "OtherStart" in msg
    assert "its steps may accept only one of them" in msg


def test_no_stop_producer_raises_configuration_error() -> None:
    with pytest.raises(WorkflowConfigurationError) as info:
        NoStopFlow()
    assert "StopEvent" in str(info.value)


def test_two_stop_classes_raise_naming_count_and_classes() -> None:
    with pytest.raises(WorkflowConfigurationError) as info:
        TwoStopFlow()
    msg = str(info.value)
    assert "2" in msg
    assert "ResultStop" in msg and "OtherStop" in msg
    assert "its steps may return only one of them" in msg


@pytest.mark.parametrize("flow", ["TwoStartFlow", "TwoStopFlow", "NoStartFlow", "NoStopFlow"])
def test_start_and_stop_class_messages_are_grammatical(flow: str) -> None:
    with pytest.raises(WorkflowConfigurationError) as info:
        globals()[flow]()
    msg = str(info.value)
    for slip in ("may be accepts", "may be returns", "accepts by", "returns by"):
        assert slip not in msg, msg


def test_workflow_without_steps_cannot_be_constructed() -> None:
    with pytest.raises(WorkflowConfigurationError):
        EmptyFlow()


def test_unknown_skip_graph_checks_lists_unknown_and_valid_names() -> None:
    with pytest.raises(WorkflowValidationError) as info:
        EchoFlow(skip_graph_checks={"reachability", "bogus_check"})  # type: ignore[arg-type]
    msg = str(info.value)
    assert "bogus_check" in msg
    for valid in ("dead_end", "reachability", "terminal_event"):
        assert valid in msg


def test_foreign_runtime_raises_configuration_error_naming_parameter() -> None:
    with pytest.raises(WorkflowConfigurationError, match="runtime"):
        EchoFlow(runtime=object())


def test_start_and_stop_class_inference() -> None:
    wf = TypedFlow()
    assert wf.start_event_class is TopicStart
    assert wf.stop_event_class is ResultStop
    plain = TwoStepFlow()
    assert plain.start_event_class is StartEvent
    assert plain.stop_event_class is StopEvent
    assert set(plain.events) == {StartEvent, Middle, StopEvent}
    assert len(plain.events) == 3


def test_workflow_name_property() -> None:
    assert EchoFlow().workflow_name == f"{__name__}.EchoFlow"
    assert EchoFlow(workflow_name="custom").workflow_name == "custom"


def test_metaclass_is_public() -> None:
    assert isinstance(EchoFlow, WorkflowMeta)


# --------------------------------------------------------------------------- add_step / free steps


def test_free_function_step_is_registered_on_target_class() -> None:
    wf = FreeFlow()
    assert wf.stop_event_class is StopEvent
    registry = FreeFlow._step_functions
    values = list(registry.values()) if isinstance(registry, dict) else list(registry)
    assert free_finish in values
    assert "_step_functions" in FreeFlow.__dict__


async def test_free_function_step_runs() -> None:
    assert await FreeFlow(timeout=5).run() == "free:2"


def test_free_function_steps_are_not_inherited() -> None:
    # FreeFlowChild only has ``begin``, which does not return a StopEvent.
    with pytest.raises(WorkflowConfigurationError):
        FreeFlowChild()


async def test_free_function_without_workflow_argument_can_be_added_later() -> None:
    class Later(Workflow):
        @step
        async def begin(self, ev: StartEvent) -> Middle:
            return Middle(value=ev.get("n", 1))

    # ``lonely``'s qualname contains ``<locals>``: a free function, decorated with no
    # ``workflow=``.  It is configured at once and attached to a class afterwards.
    @step(num_workers=1)
    async def lonely(ev: Middle) -> StopEvent:
        return StopEvent(result=f"lonely:{ev.value}")

    assert lonely._step_config.num_workers == 1
    with pytest.raises(WorkflowConfigurationError):
        Later()  # nothing returns a StopEvent yet
    Later.add_step(lonely)
    assert await Later(timeout=5).run(n=3) == "lonely:3"


def test_free_function_signature_is_checked_without_workflow_argument() -> None:
    async def joined(batch: list[Middle], ev: StartEvent) -> StopEvent:
        return StopEvent()

    with pytest.raises(WorkflowValidationError) as info:
        step(joined)
    assert "joined" in str(info.value) and "batch" in str(info.value)


def test_add_step_requires_step_decorator() -> None:
    class Local(Workflow):
        @step
        async def begin(self, ev: StartEvent) -> StopEvent:
            return StopEvent()

    async def undecorated(ev: Middle) -> StopEvent:
        return StopEvent()

    with pytest.raises(WorkflowValidationError, match="undecorated") as info:
        Local.add_step(undecorated)
    assert "step" in str(info.value)


def test_add_step_rejects_name_taken_by_method_step() -> None:
    class Local(Workflow):
        @step
        async def begin(self, ev: StartEvent) -> StopEvent:
            return StopEvent()

    async def begin(ev: Middle) -> StopEvent:
        return StopEvent()

    from tickwork.decorators import make_step_function

    make_step_function(begin)
    with pytest.raises(WorkflowValidationError, match="begin"):
        Local.add_step(begin)


def test_add_step_rejects_duplicate_free_step() -> None:
    from tickwork.decorators import make_step_function

    class Local(Workflow):
        @step
        async def begin(self, ev: StartEvent) -> Middle:
            return Middle(value=1)

    async def finish(ev: Middle) -> StopEvent:
        return StopEvent()

    make_step_function(finish)
    Local.add_step(finish)

    async def finish_again(ev: Middle) -> StopEvent:  # same __name__ below
        return StopEvent()

    finish_again.__name__ = "finish"
    make_step_function(finish_again)
    with pytest.raises(WorkflowValidationError, match="finish"):
        Local.add_step(finish_again)


async def test_add_step_registers_and_runs() -> None:
    from tickwork.decorators import make_step_function

    class Local(Workflow):
        @step
        async def begin(self, ev: StartEvent) -> Middle:
            return Middle(value=7)

    async def finish(ev: Middle, ctx: Context) -> StopEvent:
        return StopEvent(result=(ev.value, ctx.run_id))

    make_step_function(finish)
    # Before registration the class has no StopEvent producer.
    with pytest.raises(WorkflowConfigurationError):
        Local()
    Local.add_step(finish)
    handler = Local(timeout=5).run()
    value, run_id = await handler
    assert value == 7
    assert run_id == handler.run_id


# --------------------------------------------------------------------------- run(): start event


async def test_start_event_built_from_kwargs() -> None:
    result = await EchoFlow(timeout=5).run(topic="x", n=3)
    assert result == {"topic": "x", "n": 3}


async def test_typed_start_event_built_from_kwargs_and_subclass_stop_returned() -> None:
    result = await TypedFlow(timeout=5).run(topic="hello", count=2)
    assert isinstance(result, ResultStop)
    assert result.answer == "hello:2"


async def test_unbuildable_start_event_raises_runtime_error_naming_class_and_kwargs() -> None:
    wf = TypedFlow(timeout=5)
    with pytest.raises(WorkflowRuntimeError) as info:
        wf.run(count="not-a-number-xyz")
    msg = str(info.value)
    assert "TopicStart" in msg
    assert "count" in msg


async def test_start_event_argument_is_used() -> None:
    result = await EchoFlow(timeout=5).run(start_event=StartEvent(a=1))
    assert result == {"a": 1}


async def test_typed_start_event_argument() -> None:
    result = await TypedFlow(timeout=5).run(start_event=TopicStart(topic="t", count=5))
    assert isinstance(result, ResultStop)
    assert result.answer == "t:5"


@pytest.mark.parametrize("bad", [Middle(value=1), {"topic": "x"}, "start", StopEvent()])
async def test_start_event_must_be_start_event_instance(bad: object) -> None:
    with pytest.raises(ValueError) as info:
        EchoFlow(timeout=5).run(start_event=bad)  # type: ignore[arg-type]
    msg = str(info.value)
    assert "start_event" in msg
    assert "StartEvent" in msg


async def test_start_event_with_extra_kwargs_logs_warning_listing_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="tickwork"):
        handler = EchoFlow(timeout=5).run(start_event=StartEvent(a=1), ignored_kw=2)
    result = await handler
    assert result == {"a": 1}
    records = [r for r in caplog.records if r.name.startswith("tickwork")]
    assert any("ignored_kw" in r.getMessage() for r in records), [r.getMessage() for r in records]
    assert all(r.levelno >= logging.WARNING for r in records if "ignored_kw" in r.getMessage())


async def test_unroutable_start_event_raises_at_once() -> None:
    wf = TypedFlow(timeout=5)
    with pytest.raises(WorkflowRuntimeError) as info:
        wf.run(start_event=StartEvent(topic="x"))
    msg = str(info.value)
    assert "StartEvent" in msg
    assert "TopicStart" in msg


async def test_unroutable_start_subclass_under_exact_matching() -> None:
    wf = TypedFlow(timeout=5)
    with pytest.raises(WorkflowRuntimeError) as info:
        wf.run(start_event=SubTopicStart(topic="x"))
    msg = str(info.value)
    assert "SubTopicStart" in msg
    assert "TopicStart" in msg


class SubclassStartFlow(Workflow):
    @step(accept_event_subclasses=True)
    async def begin(self, ev: TopicStart) -> StopEvent:
        return StopEvent(result=type(ev).__name__)


async def test_start_subclass_routable_in_subclass_mode() -> None:
    result = await SubclassStartFlow(timeout=5).run(start_event=SubTopicStart(topic="x"))
    assert result == "SubTopicStart"


async def test_validation_errors_raise_synchronously_from_run() -> None:
    wf = UnproducedFlow(timeout=5)
    with pytest.raises(WorkflowValidationError, match="Orphan"):
        wf.run()


async def test_disable_validation_skips_checks() -> None:
    assert await UnproducedFlow(timeout=5, disable_validation=True).run() == "ok"


# --------------------------------------------------------------------------- run(): run ids


async def test_default_run_id_is_ten_alphanumerics_and_unique() -> None:
    wf = EchoFlow(timeout=5)
    ids = []
    for _ in range(5):
        handler = wf.run()
        await handler
        ids.append(handler.run_id)
    allowed = set(string.ascii_letters + string.digits)
    for rid in ids:
        assert isinstance(rid, str)
        assert len(rid) == 10
        assert set(rid) <= allowed
    assert len(set(ids)) == len(ids)


async def test_explicit_run_id_is_used_and_not_passed_to_start_event() -> None:
    handler = EchoFlow(timeout=5).run(run_id="my-run-1", x=1)
    assert handler.run_id == "my-run-1"
    assert handler.ctx.run_id == "my-run-1"
    assert await handler == {"x": 1}


async def test_duplicate_live_run_id_raises_runtime_error_naming_id() -> None:
    wf = SlowFlow(timeout=5)
    first = wf.run(run_id="dup-live-id", delay=0.3)
    with pytest.raises(RuntimeError, match="dup-live-id"):
        SlowFlow(timeout=5).run(run_id="dup-live-id", delay=0)
    await first
    # Once the first run has ended the id is free again.
    again = wf.run(run_id="dup-live-id", delay=0, tag="second")
    assert await again == "second"


def test_run_without_event_loop_raises_runtime_error() -> None:
    wf = EchoFlow(timeout=5)
    with pytest.raises(RuntimeError) as info:
        wf.run()
    assert re.search(r"event loop", str(info.value), re.IGNORECASE)


def test_run_from_plain_thread_without_loop_raises() -> None:
    import threading

    errors: list[BaseException] = []

    def target() -> None:
        try:
            EchoFlow(timeout=5).run()
        except BaseException as exc:  # pragma: no branch
            errors.append(exc)

    t = threading.Thread(target=target)
    t.start()
    t.join()
    assert len(errors) == 1
    assert isinstance(errors[0], RuntimeError)


# A bad argument is reported as itself whether or not an event loop is running: the
# argument checks come before the loop check (each case: workflow, run() kwargs, error
# type, texts the message must contain).
BAD_RUN_ARGUMENTS = [
    pytest.param(
        EchoFlow, {"start_event": "not an event"}, ValueError, ["start_event", "str"], id="str"
    ),
    pytest.param(
        EchoFlow, {"start_event": StartEvent}, ValueError, ["start_event", "class"], id="class"
    ),
    pytest.param(
        EchoFlow,
        {"start_event": Middle(value=1), "extra": 1},
        ValueError,
        ["start_event", "Middle"],
        id="event-with-kwargs",
    ),
    pytest.param(EchoFlow, {"ctx": "a context"}, ValueError, ["ctx", "str"], id="ctx"),
    pytest.param(
        TypedFlow, {"count": "x"}, WorkflowRuntimeError, ["TopicStart", "count"], id="kwargs"
    ),
    pytest.param(
        TypedFlow,
        {"start_event": StartEvent(topic="x")},
        WorkflowRuntimeError,
        ["StartEvent", "TopicStart"],
        id="unroutable",
    ),
    pytest.param(UnproducedFlow, {}, WorkflowValidationError, ["Orphan"], id="invalid-workflow"),
]


@pytest.mark.parametrize(("flow", "arguments", "error", "texts"), BAD_RUN_ARGUMENTS)
def test_bad_run_arguments_are_reported_before_the_missing_loop(
    flow: type[Workflow], arguments: dict[str, object], error: type[Exception], texts: list[str]
) -> None:
    with pytest.raises(error) as info:
        flow(timeout=5).run(**arguments)  # type: ignore[arg-type]
    for text in texts:
        assert text in str(info.value), str(info.value)


@pytest.mark.parametrize(("flow", "arguments", "error", "texts"), BAD_RUN_ARGUMENTS)
async def test_bad_run_arguments_raise_the_same_inside_a_loop(
    flow: type[Workflow], arguments: dict[str, object], error: type[Exception], texts: list[str]
) -> None:
    with pytest.raises(error) as info:
        flow(timeout=5).run(**arguments)  # type: ignore[arg-type]
    for text in texts:
        assert text in str(info.value), str(info.value)


def test_context_from_a_failed_loopless_run_can_run_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    wf = EchoFlow(timeout=5)
    ctx = Context(wf)
    with (
        caplog.at_level(logging.WARNING, logger="tickwork"),
        pytest.raises(RuntimeError, match="event loop"),
    ):
        wf.run(ctx=ctx, start_event=StartEvent(a=1), ignored_kw=2)
    # Nothing happened: no run was bound to the context and no warning was logged.
    assert ctx.run_id is None
    assert not [r for r in caplog.records if r.name.startswith("tickwork")]

    async def main() -> object:
        return await wf.run(ctx=ctx, start_event=StartEvent(a=1))

    assert anyio.run(main) == {"a": 1}


# --------------------------------------------------------------------------- run(): sequencing


async def test_run_returns_before_run_progresses() -> None:
    handler = TwoStepFlow(timeout=5).run(n=4)
    assert not handler.is_done()
    assert await handler == 50
    assert handler.is_done()


async def test_context_passed_to_run_becomes_handler_ctx() -> None:
    wf = TwoStepFlow(timeout=5)
    ctx = Context(wf)
    handler = wf.run(ctx=ctx, n=1)
    assert handler.ctx is ctx
    assert await handler == 20


async def test_running_same_context_twice_concurrently_raises() -> None:
    wf = SlowFlow(timeout=5)
    ctx = Context(wf)
    handler = wf.run(ctx=ctx, delay=0.2)
    with pytest.raises(ContextStateError) as info:
        wf.run(ctx=ctx)
    assert "running" in str(info.value).lower()
    await handler


async def test_context_reuse_after_run_carries_store_over() -> None:
    class CounterFlow(Workflow):
        @step
        async def only(self, ctx: Context, ev: StartEvent) -> StopEvent:
            n = await ctx.store.get("n", default=0)
            await ctx.store.set("n", n + 1)
            return StopEvent(result=n + 1)

    wf = CounterFlow(timeout=5)
    ctx = Context(wf)
    assert await wf.run(ctx=ctx) == 1
    assert await wf.run(ctx=ctx) == 2
    assert await wf.run(ctx=ctx) == 3
    assert await ctx.store.get("n") == 3


async def test_distinct_runs_of_one_instance_run_concurrently() -> None:
    spans: list[tuple[float, float]] = []

    class SpanFlow(Workflow):
        @step
        async def only(self, ev: StartEvent) -> StopEvent:
            started = anyio.current_time()
            await anyio.sleep(0.2)
            spans.append((started, anyio.current_time()))
            return StopEvent(result=ev.get("tag"))

    wf = SpanFlow(timeout=5)
    handlers = [wf.run(tag=i) for i in range(3)]
    results = [await h for h in handlers]
    assert results == [0, 1, 2]
    # Every run started before any run ended: all three were inside their step at once.
    assert len(spans) == 3
    assert max(start for start, _ in spans) < min(end for _, end in spans)
    assert len({h.run_id for h in handlers}) == 3


def test_generated_run_ids_are_ten_letters_or_digits_and_spread_over_the_alphabet() -> None:
    from tickwork.workflow import _new_run_id

    ids = [_new_run_id() for _ in range(2000)]
    assert all(len(run_id) == 10 and run_id.isalnum() and run_id.isascii() for run_id in ids)
    assert len(set(ids)) == len(ids)
    assert len(set("".join(ids))) == 62  # every letter and digit shows up


# ------------------------------------------------------------------- run(): resume and caching


class ResumableFlow(Workflow):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.starts: list[dict[str, object]] = []

    @step
    async def only(self, ctx: Context, ev: StartEvent) -> StopEvent:
        self.starts.append(dict(ev.items()))
        if await ctx.store.get("go", default=False):
            return StopEvent(result=dict(ev.items()))
        await anyio.sleep(5)
        return StopEvent(result="never")


async def test_resumable_context_ignores_start_event_with_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    wf = ResumableFlow(timeout=5)
    handler = wf.run(tag="first")
    with anyio.fail_after(2):
        while not wf.starts:
            await anyio.sleep(0.005)
    await handler.cancel_run()
    ctx = handler.ctx
    await ctx.store.set("go", True)
    with caplog.at_level(logging.WARNING, logger="tickwork"):
        resumed = wf.run(ctx=ctx, start_event=StartEvent(tag="second"))
    # The interrupted invocation re-runs with its original trigger; no new start event.
    assert await resumed == {"tag": "first"}
    assert wf.starts == [{"tag": "first"}, {"tag": "first"}]
    assert any(
        r.name.startswith("tickwork") and r.levelno == logging.WARNING for r in caplog.records
    )


async def test_resumable_context_ignores_kwargs_with_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    wf = ResumableFlow(timeout=5)
    handler = wf.run(tag="first")
    with anyio.fail_after(2):
        while not wf.starts:
            await anyio.sleep(0.005)
    await handler.cancel_run()
    await handler.ctx.store.set("go", True)
    with caplog.at_level(logging.WARNING, logger="tickwork"):
        resumed = wf.run(ctx=handler.ctx, tag="second")
    assert await resumed == {"tag": "first"}
    assert any(
        r.name.startswith("tickwork") and r.levelno == logging.WARNING for r in caplog.records
    )


async def test_validation_rerun_after_step_registry_changes() -> None:
    from tickwork.decorators import make_step_function

    class Local(Workflow):
        @step
        async def begin(self, ev: StartEvent) -> StopEvent:
            return StopEvent(result="ok")

    wf = Local(timeout=5)
    assert await wf.run() == "ok"

    async def orphan_consumer(ev: Orphan) -> StopEvent:
        return StopEvent()

    make_step_function(orphan_consumer)
    Local.add_step(orphan_consumer)
    # The cached validation result is invalidated: the new step consumes an unproduced event.
    with pytest.raises(WorkflowValidationError, match="Orphan"):
        Local(timeout=5).run()


async def test_an_instance_sees_steps_added_to_its_class_after_it_ran() -> None:
    """The step table is cached per instance, until the class's registry changes."""
    from tickwork.decorators import make_step_function

    class Extended(Workflow):
        @step
        async def begin(self, ev: StartEvent) -> StopEvent:
            return StopEvent(result="ok")

    wf = Extended(timeout=5)
    assert await wf.run() == "ok"
    assert list(wf._get_steps()) == ["begin"]
    assert wf._get_steps() is wf._get_steps()  # cached between runs

    async def orphan_consumer(ev: Orphan) -> StopEvent:
        return StopEvent()

    make_step_function(orphan_consumer)
    Extended.add_step(orphan_consumer)
    assert list(wf._get_steps()) == ["begin", "orphan_consumer"]
    with pytest.raises(WorkflowValidationError, match="Orphan"):
        wf.run()


_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="unset")


class ContextVarFlow(Workflow):
    @step
    async def first(self, ctx: Context, ev: StartEvent) -> Middle:
        seen = _request_id.get()
        _request_id.set("changed-in-step")
        return Middle(value=1 if seen == "outer" else 0)

    @step
    async def second(self, ev: Middle) -> StopEvent:
        return StopEvent(result=(ev.value, _request_id.get()))


async def test_run_captures_caller_contextvars() -> None:
    token = _request_id.set("outer")
    try:
        handler = ContextVarFlow(timeout=5).run()
    finally:
        _request_id.reset(token)
    seen_in_first, seen_in_second = await handler
    assert seen_in_first == 1
    # A change made in one invocation does not leak into another.
    assert seen_in_second == "outer"
    assert _request_id.get() == "unset"
