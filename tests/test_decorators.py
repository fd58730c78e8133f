"""``@step``, ``@catch_error``, ``make_step_function`` and ``StepConfig`` (api.md §5.1-5.4).

This module uses evaluated (not postponed) annotations; ``test_signature.py`` covers the
postponed ones.
"""

import dataclasses
from collections.abc import Callable
from typing import Annotated, Any, Generic, Literal, TypeVar, cast, get_args

import pytest

from tickwork.collect import Collect
from tickwork.decorators import (
    CatchErrorHandler,
    StepConfig,
    StepFunction,
    StepGraphCheck,
    StepRole,
    WorkflowGraphCheck,
    catch_error,
    make_step_function,
    step,
)
from tickwork.errors import WorkflowValidationError
from tickwork.events import Event, StartEvent, StepFailedEvent, StopEvent
from tickwork.resource import Resource
from tickwork.retry_policy import RetryPolicy

T = TypeVar("T")


class Context(Generic[T]):
    """Stand-in: the decorators recognise the context parameter by class name."""


class Middle(Event):
    pass


class SpecialFailure(StepFailedEvent):
    pass


class FakeWorkflow:
    """Records ``add_step`` calls like ``Workflow.add_step`` would."""

    added: list[Callable[..., Any]] = []

    @classmethod
    def add_step(cls, func: Callable[..., Any]) -> None:
        cls.added.append(func)


class FixedDelay:
    """A minimal retry policy: anything with a compatible ``next``."""

    def next(
        self, elapsed_time: float, attempts: int, error: Exception, *, seed: int | None = None
    ) -> float | None:
        return 1.0 if attempts < 3 else None


def get_value() -> int:
    return 1


async def module_level_free(ev: StartEvent) -> StopEvent:
    return StopEvent()


def config_of(func: Any) -> StepConfig:
    config = func._step_config
    assert isinstance(config, StepConfig)
    return config


@pytest.fixture(autouse=True)
def _reset_fake_workflow() -> None:
    FakeWorkflow.added = []


# ---------------------------------------------------------------------------------------
# StepConfig and related types (§5.4)
# ---------------------------------------------------------------------------------------


def test_step_config_fields_names_order_and_defaults() -> None:
    expected: list[tuple[str, Any]] = [
        ("accepted_events", dataclasses.MISSING),
        ("event_name", dataclasses.MISSING),
        ("return_types", dataclasses.MISSING),
        ("context_parameter", dataclasses.MISSING),
        ("num_workers", dataclasses.MISSING),
        ("retry_policy", dataclasses.MISSING),
        ("resources", dataclasses.MISSING),
        ("context_state_type", None),
        ("skip_graph_checks", []),
        ("collect_params", None),
        ("is_fan_out", False),
        ("bare_return_types", ()),
        ("collection_param", None),
        ("collection_policy", None),
        ("role", "step"),
        ("catch_error_for_steps", None),
        ("catch_error_max_recoveries", 1),
        ("accept_event_subclasses", False),
        ("timeout", None),
    ]
    fields = dataclasses.fields(StepConfig)
    assert [f.name for f in fields] == [name for name, _ in expected]
    for f, (_, default) in zip(fields, expected, strict=True):
        if f.default_factory is not dataclasses.MISSING:
            assert f.default_factory() == default
        else:
            assert f.default == default


def test_step_config_list_defaults_are_not_shared() -> None:
    first = StepConfig([StartEvent], "ev", [StopEvent], None, 1, None, [])
    second = StepConfig([StartEvent], "ev", [StopEvent], None, 1, None, [])
    first.skip_graph_checks.append("dead_end")
    assert second.skip_graph_checks == []


def test_literal_aliases_and_catch_error_handler() -> None:
    assert set(get_args(WorkflowGraphCheck)) == {"reachability", "terminal_event", "dead_end"}
    assert set(get_args(StepGraphCheck)) == {"reachability", "dead_end"}
    assert set(get_args(StepRole)) == {"step", "catch_error"}
    handler = CatchErrorHandler(step_name="h", for_steps=["a"], max_recoveries=2)
    assert (handler.step_name, handler.for_steps, handler.max_recoveries) == ("h", ["a"], 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        handler.step_name = "other"  # type: ignore[misc]


def test_step_function_protocol() -> None:
    class Flow:
        @step
        async def handle(self, ev: StartEvent) -> StopEvent:
            return StopEvent()

    assert isinstance(Flow.handle, StepFunction)
    assert not isinstance(get_value, StepFunction)


# ---------------------------------------------------------------------------------------
# @step (§5.1)
# ---------------------------------------------------------------------------------------


def test_bare_and_called_forms_return_the_same_function() -> None:
    async def body(self: Any, ev: StartEvent) -> StopEvent:
        return StopEvent()

    body.__qualname__ = "Flow.body"
    assert step(body) is body
    assert config_of(body).num_workers == 4

    async def other(self: Any, ev: StartEvent) -> StopEvent:
        return StopEvent()

    other.__qualname__ = "Flow.other"
    assert step()(other) is other
    assert step(num_workers=2)(other) is other
    assert config_of(other).num_workers == 2


def test_default_configuration() -> None:
    class Flow:
        @step
        async def handle(self, ctx: Context[Any], ev: StartEvent) -> Middle | None:
            return None

    config = config_of(Flow.handle)
    assert config == StepConfig(
        accepted_events=[StartEvent],
        event_name="ev",
        return_types=[Middle, type(None)],
        context_parameter="ctx",
        num_workers=4,
        retry_policy=None,
        resources=[],
    )


def test_options_are_recorded() -> None:
    policy = FixedDelay()

    class Flow:
        @step(
            num_workers=3,
            retry_policy=policy,
            skip_graph_checks=["dead_end", "reachability", "dead_end"],
            accept_event_subclasses=True,
            timeout=2,
        )
        async def handle(self, ev: StartEvent) -> StopEvent:
            return StopEvent()

    config = config_of(Flow.handle)
    assert config.num_workers == 3
    assert config.retry_policy is policy
    assert config.skip_graph_checks == ["dead_end", "reachability"]
    assert config.accept_event_subclasses is True
    assert config.timeout == 2.0
    assert isinstance(config.timeout, float)
    assert config.role == "step"


def test_free_function_without_workflow_is_configured_not_registered() -> None:
    before = list(FakeWorkflow.added)
    assert step(module_level_free) is module_level_free
    assert config_of(module_level_free).accepted_events == [StartEvent]

    async def local_free(ev: Middle) -> StopEvent:
        return StopEvent()

    assert step(num_workers=1)(local_free) is local_free
    assert config_of(local_free).num_workers == 1
    assert config_of(local_free).accepted_events == [Middle]
    assert FakeWorkflow.added == before


async def _collect_and_event(batch: list[Middle], ev: StartEvent) -> StopEvent:
    return StopEvent()


async def _event_then_collect(ev: StartEvent, batch: Annotated[list[Middle], Collect()]) -> None:
    return None


async def _two_collections(first: list[Middle], second: list[StartEvent]) -> StopEvent:
    return StopEvent()


async def _no_event(ctx: Context[Any]) -> StopEvent:
    return StopEvent()


async def _unclassifiable(ev: StartEvent, limit: int) -> StopEvent:
    return StopEvent()


async def _no_return_annotation(ev: StartEvent):  # type: ignore[no-untyped-def]
    return StopEvent()


async def _streaming(ev: StartEvent) -> StopEvent:  # an async generator
    yield StopEvent()  # type: ignore[misc]


@pytest.mark.parametrize(
    ("func", "texts"),
    [
        (_collect_and_event, ["batch", "ev"]),
        (_event_then_collect, ["batch", "ev"]),
        (_two_collections, ["first", "second"]),
        (_no_event, ["no event parameter"]),
        (_unclassifiable, ["limit"]),
        (_no_return_annotation, ["return annotation"]),
        (_streaming, ["async generator"]),
    ],
    ids=lambda value: getattr(value, "__name__", "texts"),
)
@pytest.mark.parametrize("with_options", [False, True], ids=["bare", "options"])
def test_free_function_signature_errors_raise_at_decoration(
    func: Callable[..., Any], texts: list[str], with_options: bool
) -> None:
    """Without ``workflow=``, a free function's signature is checked as a method's is."""
    decorate = step(num_workers=2) if with_options else step
    with pytest.raises(WorkflowValidationError) as info:
        decorate(func)
    message = str(info.value)
    assert func.__name__ in message, message
    for text in texts:
        assert text in message, message
    assert not hasattr(func, "_step_config")


def test_free_function_is_registered_on_its_workflow() -> None:
    @step(workflow=FakeWorkflow, num_workers=2)
    async def free(ev: StartEvent) -> StopEvent:
        return StopEvent()

    assert FakeWorkflow.added == [free]
    assert config_of(free).num_workers == 2


def test_registration_happens_after_the_config_is_attached() -> None:
    seen: list[StepConfig] = []

    class Recording:
        @classmethod
        def add_step(cls, func: Callable[..., Any]) -> None:
            seen.append(func._step_config)  # type: ignore[attr-defined]

    @step(workflow=Recording)
    async def free(ev: StartEvent) -> StopEvent:
        return StopEvent()

    assert seen == [config_of(free)]


def test_methods_need_no_workflow() -> None:
    class Flow:
        @step
        async def handle(self, ev: StartEvent) -> StopEvent:
            return StopEvent()

    assert FakeWorkflow.added == []
    assert config_of(Flow.handle).accepted_events == [StartEvent]


@pytest.mark.parametrize("value", [0, -1, True, False, 1.5, "2", None])
def test_invalid_num_workers(value: Any) -> None:
    with pytest.raises(WorkflowValidationError) as info:

        class Flow:
            @step(num_workers=value)
            async def handle(self, ev: StartEvent) -> StopEvent:
                return StopEvent()

    assert "Flow.handle" in str(info.value)
    assert "num_workers" in str(info.value)


@pytest.mark.parametrize("value", [0, -1.0, True, float("inf"), float("nan"), "1"])
def test_invalid_timeout(value: Any) -> None:
    with pytest.raises(WorkflowValidationError) as info:

        class Flow:
            @step(timeout=value)
            async def handle(self, ev: StartEvent) -> StopEvent:
                return StopEvent()

    assert "Flow.handle" in str(info.value)
    assert "timeout" in str(info.value)


@pytest.mark.parametrize("value", [["terminal_event"], ["nope"], "reachability", 3])
def test_invalid_skip_graph_checks(value: Any) -> None:
    with pytest.raises(WorkflowValidationError) as info:

        class Flow:
            @step(skip_graph_checks=value)
            async def handle(self, ev: StartEvent) -> StopEvent:
                return StopEvent()

    message = str(info.value)
    assert "Flow.handle" in message
    assert "skip_graph_checks" in message
    assert "reachability" in message and "dead_end" in message


@pytest.mark.parametrize("value", [object(), 5, "policy"])
def test_invalid_retry_policy(value: Any) -> None:
    with pytest.raises(WorkflowValidationError) as info:

        class Flow:
            @step(retry_policy=value)
            async def handle(self, ev: StartEvent) -> StopEvent:
                return StopEvent()

    assert "Flow.handle" in str(info.value)
    assert "retry_policy" in str(info.value)


def test_retry_policy_protocol_is_runtime_checkable() -> None:
    assert isinstance(FixedDelay(), RetryPolicy)
    assert not isinstance(object(), RetryPolicy)


def test_invalid_accept_event_subclasses() -> None:
    with pytest.raises(WorkflowValidationError) as info:

        class Flow:
            @step(accept_event_subclasses=cast(bool, "yes"))
            async def handle(self, ev: StartEvent) -> StopEvent:
                return StopEvent()

    assert "Flow.handle" in str(info.value)
    assert "accept_event_subclasses" in str(info.value)


def test_signature_errors_raise_at_decoration_naming_the_step() -> None:
    with pytest.raises(WorkflowValidationError) as info:

        class Flow:
            @step
            async def handle(self, ev: StartEvent, extra: int) -> StopEvent:
                return StopEvent()

    assert "Flow.handle" in str(info.value)
    assert "'extra'" in str(info.value)


def test_non_callable_is_rejected() -> None:
    with pytest.raises(WorkflowValidationError, match="function"):
        step(workflow=FakeWorkflow)(42)  # type: ignore[type-var]


# ---------------------------------------------------------------------------------------
# make_step_function (§5.3)
# ---------------------------------------------------------------------------------------


def test_make_step_function_performs_no_free_check_and_no_registration() -> None:
    async def free(ev: StartEvent) -> StopEvent:
        return StopEvent()

    assert make_step_function(free, num_workers=2, timeout=1.5) is free
    config = config_of(free)
    assert (config.num_workers, config.timeout) == (2, 1.5)
    assert FakeWorkflow.added == []


def test_make_step_function_validates_options() -> None:
    async def free(ev: StartEvent) -> StopEvent:
        return StopEvent()

    with pytest.raises(WorkflowValidationError, match="num_workers"):
        make_step_function(free, num_workers=0)
    with pytest.raises(WorkflowValidationError, match="skip_graph_checks"):
        make_step_function(free, skip_graph_checks=["bogus"])  # type: ignore[list-item]
    assert not hasattr(free, "_step_config")


def test_make_step_function_localns() -> None:
    class Invisible(Event):
        pass

    async def free(ev: "Elsewhere") -> StopEvent:  # type: ignore[name-defined]  # noqa: F821
        return StopEvent()

    make_step_function(free, localns={"Elsewhere": Invisible})
    assert config_of(free).accepted_events == [Invisible]


def test_make_step_function_resources() -> None:
    async def free(ev: StartEvent, value: Annotated[int, Resource(get_value)]) -> StopEvent:
        return StopEvent()

    make_step_function(free)
    (definition,) = config_of(free).resources
    assert definition.name == "value"
    assert definition.type_annotation is int
    assert definition.resource.name == "get_value"


# ---------------------------------------------------------------------------------------
# @catch_error (§5.2)
# ---------------------------------------------------------------------------------------


def test_catch_error_bare() -> None:
    class Flow:
        @catch_error
        async def recover(self, ctx: Context[Any], failed: StepFailedEvent) -> StopEvent:
            return StopEvent()

    config = config_of(Flow.recover)
    assert config.role == "catch_error"
    assert config.num_workers == 1
    assert config.retry_policy is None
    assert config.accepted_events == [StepFailedEvent]
    assert config.event_name == "failed"
    assert config.context_parameter == "ctx"
    assert config.catch_error_for_steps is None
    assert config.catch_error_max_recoveries == 1


def test_catch_error_with_arguments_and_resources() -> None:
    steps = ["a", "b"]

    class Flow:
        @catch_error(for_steps=steps, max_recoveries=3)
        async def recover(
            self, failed: StepFailedEvent, value: Annotated[int, Resource(get_value)]
        ) -> Middle | None:
            return None

    config = config_of(Flow.recover)
    assert config.catch_error_for_steps == ["a", "b"]
    assert config.catch_error_for_steps is not steps
    assert config.catch_error_max_recoveries == 3
    assert [r.name for r in config.resources] == ["value"]
    assert config.return_types == [Middle, type(None)]


def test_catch_error_on_a_free_function_needs_no_workflow() -> None:
    @catch_error()
    async def recover(failed: StepFailedEvent) -> None:
        return None

    assert config_of(recover).role == "catch_error"
    assert FakeWorkflow.added == []


@pytest.mark.parametrize(
    "annotation",
    [
        StartEvent,
        SpecialFailure,
        StepFailedEvent | Middle,
        list[StepFailedEvent],
        Annotated[list[StepFailedEvent], Collect()],
    ],
)
def test_catch_error_must_accept_exactly_step_failed_event(annotation: Any) -> None:
    async def recover(failed: Any) -> None:
        return None

    recover.__annotations__["failed"] = annotation
    with pytest.raises(WorkflowValidationError) as info:
        catch_error(recover)
    assert "recover" in str(info.value)
    assert "StepFailedEvent" in str(info.value)


def test_catch_error_without_an_event_parameter() -> None:
    with pytest.raises(WorkflowValidationError) as info:

        class Flow:
            @catch_error
            async def recover(self, ctx: Context[Any]) -> None:
                return None

    assert "Flow.recover" in str(info.value)
    assert "StepFailedEvent" in str(info.value)


def test_catch_error_join_is_rejected() -> None:
    with pytest.raises(WorkflowValidationError, match="StepFailedEvent"):

        class Flow:
            @catch_error
            async def recover(self, a: StepFailedEvent, b: StepFailedEvent) -> None:
                return None


@pytest.mark.parametrize("value", [("a",), "a", ["a", 1], {"a"}])
def test_catch_error_for_steps_must_be_a_list_of_str(value: Any) -> None:
    with pytest.raises(WorkflowValidationError) as info:

        class Flow:
            @catch_error(for_steps=value)
            async def recover(self, failed: StepFailedEvent) -> None:
                return None

    assert "Flow.recover" in str(info.value)
    assert "for_steps" in str(info.value)


@pytest.mark.parametrize("value", [0, -1, True, 1.0, "2", None])
def test_catch_error_max_recoveries(value: Any) -> None:
    with pytest.raises(WorkflowValidationError) as info:

        class Flow:
            @catch_error(max_recoveries=value)
            async def recover(self, failed: StepFailedEvent) -> None:
                return None

    assert "Flow.recover" in str(info.value)
    assert "max_recoveries" in str(info.value)


def test_catch_error_signature_errors_still_apply() -> None:
    with pytest.raises(WorkflowValidationError) as info:

        class Flow:
            @catch_error
            async def recover(self, failed: StepFailedEvent, other: int) -> None:
                return None

    assert "Flow.recover" in str(info.value)
    assert "'other'" in str(info.value)


def test_role_literal_values() -> None:
    role: Literal["step", "catch_error"] = "step"
    assert role in get_args(StepRole)
