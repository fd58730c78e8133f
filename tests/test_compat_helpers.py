"""The compatibility helpers: ``tickwork.utils``, ``tickwork.context.utils`` and
``WaitingForEvent`` (issue #10: names that llama-index-core re-exports)."""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any, Optional, Union

import pytest
from pydantic import BaseModel

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.context.utils import get_qualified_name, import_module_from_qualified_name
from tickwork.errors import WorkflowValidationError
from tickwork.events import HumanResponseEvent, InputRequiredEvent
from tickwork.runtime.step_scope import Suspend
from tickwork.runtime.types.results import WaitingForEvent
from tickwork.utils import (
    BUSY_WAIT_DELAY,
    StepSignatureSpec,
    _event_list_element_types,
    _flatten_return_annotation,
    _get_param_types,
    _get_return_types,
    get_steps_from_class,
    get_steps_from_instance,
    inspect_signature,
    is_free_function,
    validate_step_signature,
)


class A(Event):
    pass


class B(Event):
    pass


class C(Event):
    pass


class Counter(BaseModel):
    count: int = 0


class Outer:
    class Inner:
        pass


class Flow(Workflow):
    @step
    async def start(self, ctx: Context[Counter], ev: StartEvent) -> A | B:
        return A()

    @step
    async def join(self, a: A, b: B) -> StopEvent:
        return StopEvent()


@step(workflow=Flow)
async def extra(ev: C) -> None:
    return None


# --- tickwork.utils -----------------------------------------------------------------------


def test_busy_wait_delay_is_a_small_positive_number() -> None:
    assert isinstance(BUSY_WAIT_DELAY, float)
    assert 0 < BUSY_WAIT_DELAY < 1


def test_inspect_signature_of_a_decorated_step_reads_its_config() -> None:
    spec = inspect_signature(Flow.start)
    assert spec == StepSignatureSpec(
        accepted_events={"ev": [StartEvent]},
        return_types=[A, B],
        context_parameter="ctx",
        context_state_type=Counter,
        resources=[],
        name="Flow.start",
    )
    validate_step_signature(spec)


def test_inspect_signature_gives_each_join_slot_its_own_entry() -> None:
    spec = inspect_signature(Flow.join)
    assert spec.accepted_events == {"a": [A], "b": [B]}
    assert spec.return_types == [StopEvent]
    assert spec.context_parameter is None


def test_inspect_signature_of_a_plain_function_resolves_callers_locals() -> None:
    # Defined here, so the string annotations below name locals of this test only.
    class Local(Event):
        pass

    async def body(ctx: Context, ev: Local | A, batch_size: int = 3) -> list[B] | None:
        return None

    spec = inspect_signature(body)
    assert spec.accepted_events == {"ev": [Local, A]}
    assert spec.return_types == [B, type(None)]
    assert spec.context_parameter == "ctx"
    assert spec.name == "body"


def test_inspect_signature_reports_a_collection_parameter_by_name() -> None:
    async def gather(items: list[A | B]) -> StopEvent:
        return StopEvent()

    assert inspect_signature(gather).accepted_events == {"items": [A, B]}


def test_inspect_signature_raises_for_what_tickwork_rejects_while_reading() -> None:
    async def no_return(ev: A):  # type: ignore[no-untyped-def]
        return None

    with pytest.raises(WorkflowValidationError, match=r"'no_return' has no return annotation"):
        inspect_signature(no_return)
    with pytest.raises(TypeError, match="needs a function"):
        inspect_signature(42)  # type: ignore[arg-type]


def test_validate_step_signature_requires_an_event_parameter_and_a_return_type() -> None:
    def no_event(ctx: Context, retries: int = 1) -> None:
        return None

    spec = inspect_signature(no_event)
    assert spec.accepted_events == {}
    with pytest.raises(WorkflowValidationError, match=r"step 'no_event' has no event parameter"):
        validate_step_signature(spec)
    returns_nothing = StepSignatureSpec(
        accepted_events={"ev": [A]}, return_types=[], context_parameter=None
    )
    with pytest.raises(WorkflowValidationError, match="declares no return type"):
        validate_step_signature(returns_nothing)


def test_get_steps_from_class_lists_methods_then_free_functions() -> None:
    steps = get_steps_from_class(Flow)
    assert list(steps) == ["join", "start", "extra"]
    assert steps["start"] is Flow.__dict__["start"]
    assert steps["extra"] is extra
    # llama-index-core's drawing helpers pass an instance here: it stands for its class.
    assert get_steps_from_class(Flow()) == steps
    steps.clear()  # a copy: the class's own table is untouched
    assert get_steps_from_class(Flow)


def test_get_steps_from_instance_gives_the_callables_a_run_invokes() -> None:
    flow = Flow()
    steps = get_steps_from_instance(flow)
    assert list(steps) == ["join", "start", "extra"]
    assert steps["start"].__self__ is flow  # type: ignore[attr-defined]
    assert steps["extra"] is extra
    with pytest.raises(TypeError, match="use get_steps_from_class"):
        get_steps_from_instance(Flow)


def test_get_steps_from_instance_accepts_any_object_with_step_methods() -> None:
    class Holder:
        @step
        async def run(self, ev: A) -> None:
            return None

    holder = Holder()
    steps = get_steps_from_instance(holder)
    assert list(steps) == ["run"]
    assert steps["run"].__self__ is holder  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("qualname", "free"),
    [
        ("f", True),
        ("test.<locals>.f", True),
        ("Flow.f", False),
        ("test.<locals>.Flow.f", False),
    ],
)
def test_is_free_function_reads_the_qualified_name(qualname: str, free: bool) -> None:
    assert is_free_function(qualname) is free


def test_is_free_function_accepts_functions_and_rejects_empty_names() -> None:
    def local() -> None:
        pass

    assert is_free_function(local)
    assert not is_free_function(Flow.start)
    with pytest.raises(ValueError, match="non-empty"):
        is_free_function("")


def test_get_param_types_opens_unions_and_strips_metadata() -> None:
    def f(a, b: A, c, d, e) -> None:  # type: ignore[no-untyped-def]
        pass

    params = inspect.signature(f).parameters
    hints = {"c": Union[A, B], "d": Optional[A], "e": Annotated[A | C, "meta"]}
    assert _get_param_types(params["a"], hints) == [Any]
    assert _get_param_types(params["b"], {}) == ["A"]  # unresolved annotation kept as is
    assert _get_param_types(params["c"], hints) == [A, B]
    assert _get_param_types(params["d"], hints) == [A, type(None)]
    assert _get_param_types(params["e"], hints) == [A, C]


def test_get_return_types_flattens_unions_and_fan_outs() -> None:
    def fan_out(ev: A) -> A | list[B] | None:
        return None

    def unannotated(ev: A):  # type: ignore[no-untyped-def]
        return None

    assert _get_return_types(fan_out) == [A, B, type(None)]
    assert _get_return_types(unannotated) == []


def test_flatten_return_annotation() -> None:
    assert _flatten_return_annotation(Union[A, list[B | A], None]) == [A, B, type(None)]
    assert _flatten_return_annotation(None) == [type(None)]
    with pytest.raises(WorkflowValidationError, match=r"'streamer'.*cannot stream"):
        _flatten_return_annotation(AsyncIterator[A], step_name="streamer")


def test_event_list_element_types() -> None:
    assert _event_list_element_types(list[A | B]) == [A, B]
    assert _event_list_element_types(Optional[list[A]]) == [A]
    assert _event_list_element_types(list[int]) is None
    assert _event_list_element_types(A) is None


# --- tickwork.context.utils ---------------------------------------------------------------


def test_get_qualified_name_of_classes_and_instances() -> None:
    assert get_qualified_name(StopEvent) == "tickwork.events.StopEvent"
    assert get_qualified_name(StopEvent()) == "tickwork.events.StopEvent"
    assert get_qualified_name(Outer.Inner).endswith(".Outer.Inner")


@pytest.mark.parametrize("value", [StopEvent, Outer.Inner, Counter])
def test_qualified_names_import_back(value: type) -> None:
    assert import_module_from_qualified_name(get_qualified_name(value)) is value


def test_import_module_from_qualified_name_returns_any_object() -> None:
    assert import_module_from_qualified_name("json.dumps") is json.dumps
    assert import_module_from_qualified_name("json.decoder") is json.decoder


@pytest.mark.parametrize(
    ("name", "error", "message"),
    [
        (42, TypeError, "must be a str"),
        ("", ValueError, "is not a qualified name"),
        ("StopEvent", ValueError, "is not a qualified name"),
        ("tickwork..StopEvent", ValueError, "is not a qualified name"),
        ("tests.test_x.f.<locals>.Cls", ValueError, "defined inside a function"),
        ("no_such_package_here.Cls", ImportError, "no module named 'no_such_package_here'"),
        ("tickwork.events.NoSuchEvent", ImportError, "has no attribute 'NoSuchEvent'"),
    ],
)
def test_import_module_from_qualified_name_rejects_bad_names(
    name: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        import_module_from_qualified_name(name)


# --- WaitingForEvent -----------------------------------------------------------------------


def test_waiting_for_event_is_the_pause_signal() -> None:
    assert WaitingForEvent is Suspend
    # Not an Exception: a step's ``except Exception`` cannot swallow a pause.
    assert not issubclass(WaitingForEvent, Exception)


class RethrowingFlow(Workflow):
    """Catches ``Exception`` around the wait and re-raises the pause signal, as llama-index-core
    does around a tool call."""

    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        try:
            reply = await ctx.wait_for_event(
                HumanResponseEvent, waiter_event=InputRequiredEvent(prefix="name?")
            )
        except Exception as exc:  # pragma: no cover - only a broken pause gets here
            if isinstance(exc, WaitingForEvent):
                raise
            return StopEvent(result=f"swallowed {type(exc).__name__}")
        return StopEvent(result=f"hello {reply.response}")


@pytest.mark.anyio
async def test_a_step_that_rethrows_waiting_for_event_pauses_and_resumes() -> None:
    handler = RethrowingFlow(timeout=10).run()
    async for event in handler.stream_events():
        if isinstance(event, InputRequiredEvent):
            handler.ctx.send_event(HumanResponseEvent(response="ada"))
    assert await handler == "hello ada"
