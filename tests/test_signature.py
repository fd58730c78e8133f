"""Signature inference (api.md §5.5), written with postponed annotations.

This whole module uses ``from __future__ import annotations`` and defines most events
inside the test functions, so every annotation below is a string that must be resolved
against the decoration site's locals.
"""

from __future__ import annotations

import ast
import collections.abc
import importlib
import inspect
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Generic, Optional, TypeVar, Union

import pytest
from pydantic import BaseModel

from tickwork import _signature
from tickwork._signature import (
    NoneType,
    decoration_namespace,
    flatten_return_annotation,
    infer_signature,
    step_display_name,
)
from tickwork.collect import All, Collect, Take
from tickwork.decorators import StepConfig, make_step_function, step
from tickwork.errors import WorkflowValidationError
from tickwork.events import Event, StartEvent, StopEvent
from tickwork.resource import Resource, ResourceConfig, ResourceDefinition, ResourceManager

T = TypeVar("T")


class Context(Generic[T]):
    """Stand-in: the decorators recognise the context parameter by class name."""


class MyState(BaseModel):
    counter: int = 0


class Module(Event):
    """A module-level event, next to the ones defined inside tests."""


def config_of(func: Any) -> StepConfig:
    config = func._step_config
    assert isinstance(config, StepConfig)
    return config


def get_number() -> int:
    return 7


# ---------------------------------------------------------------------------------------
# 5.5.1 Resolving annotations
# ---------------------------------------------------------------------------------------


def test_events_defined_inside_the_test_function_resolve() -> None:
    class Local(Event):
        pass

    class Flow:
        @step
        async def first(self, ev: Local) -> StopEvent:
            return StopEvent()

    config = config_of(Flow.first)
    assert config.accepted_events == [Local]
    assert config.return_types == [StopEvent]


def test_enclosing_frames_of_the_decoration_site_are_searched() -> None:
    class Outer(Event):
        pass

    def build() -> Any:
        # ``Outer`` is not a free variable of ``build``: it is only in the test's frame.
        class Flow:
            @step
            async def handle(self, ev: Outer) -> StopEvent:
                return StopEvent()

        return Flow

    assert config_of(build().handle).accepted_events == [Outer]


def test_explicit_localns_resolves_names_invisible_at_the_site() -> None:
    class Visible(Event):
        pass

    async def handle(ev: Hidden) -> StopEvent:  # type: ignore[name-defined]  # noqa: F821
        return StopEvent()

    with pytest.raises(WorkflowValidationError, match="Hidden"):
        make_step_function(handle)
    assert make_step_function(handle, localns={"Hidden": Visible}) is handle
    assert config_of(handle).accepted_events == [Visible]


def test_unresolvable_name_names_function_and_missing_name() -> None:
    with pytest.raises(WorkflowValidationError) as info:

        class Flow:
            @step
            async def handle(self, ev: DoesNotExist) -> StopEvent:  # type: ignore[name-defined]  # noqa: F821
                return StopEvent()

    message = str(info.value)
    assert "Flow.handle" in message
    assert "DoesNotExist" in message
    assert "module scope" in message


def test_decoration_namespace_merges_site_locals_and_localns() -> None:
    marker = object()
    namespace = decoration_namespace({"extra": 1})
    assert namespace["marker"] is marker
    assert namespace["extra"] == 1


def test_decoration_namespace_explicit_localns_wins() -> None:
    value = "frame"  # noqa: F841 - read through the frame
    assert decoration_namespace({"value": "explicit"})["value"] == "explicit"


def test_step_display_name_drops_locals_prefixes() -> None:
    class Flow:
        def method(self) -> None: ...

    def free() -> None: ...

    assert step_display_name(Flow.method) == "Flow.method"
    assert step_display_name(free) == "free"
    assert step_display_name(get_number) == "get_number"


# ---------------------------------------------------------------------------------------
# 5.5.2 Classifying parameters
# ---------------------------------------------------------------------------------------


def test_context_parameter_and_state_type() -> None:
    class Flow:
        @step
        async def plain(self, ctx: Context, ev: StartEvent) -> StopEvent:  # type: ignore[type-arg]
            return StopEvent()

        @step
        async def typed(self, ev: StartEvent, ctx: Context[MyState]) -> StopEvent:
            return StopEvent()

    assert config_of(Flow.plain).context_parameter == "ctx"
    assert config_of(Flow.plain).context_state_type is None
    assert config_of(Flow.typed).context_parameter == "ctx"
    assert config_of(Flow.typed).context_state_type is MyState
    assert config_of(Flow.typed).event_name == "ev"


def test_context_without_a_model_argument_has_no_state_type() -> None:
    class Flow:
        @step
        async def anything(self, ctx: Context[Any], ev: StartEvent) -> StopEvent:
            return StopEvent()

        @step
        async def typevar(self, ctx: Context[T], ev: StartEvent) -> StopEvent:
            return StopEvent()

    assert config_of(Flow.anything).context_state_type is None
    assert config_of(Flow.typevar).context_state_type is None
    assert config_of(Flow.typevar).context_parameter == "ctx"


def test_the_real_context_class_is_detected() -> None:
    RealContext = getattr(importlib.import_module("tickwork.context"), "Context", None)
    if RealContext is None:
        pytest.skip("tickwork.context.Context does not exist yet")

    class Flow:
        @step
        async def handle(self, ctx: RealContext, ev: StartEvent) -> StopEvent:  # type: ignore[valid-type]
            return StopEvent()

    assert config_of(Flow.handle).context_parameter == "ctx"


def test_any_class_named_context_counts() -> None:
    class Context:  # a different class with the same name
        pass

    class Flow:
        @step
        async def handle(self, c: Context, ev: StartEvent) -> StopEvent:
            return StopEvent()

    assert config_of(Flow.handle).context_parameter == "c"


def test_two_context_parameters_are_rejected() -> None:
    with pytest.raises(WorkflowValidationError) as info:

        class Flow:
            @step
            async def handle(self, a: Context, b: Context, ev: StartEvent) -> StopEvent:  # type: ignore[type-arg]
                return StopEvent()

    message = str(info.value)
    assert "Flow.handle" in message
    assert "'a'" in message and "'b'" in message


def test_self_and_cls_are_skipped_by_name_and_varargs_ignored() -> None:
    async def free(cls: int, ev: StartEvent, *args: Any, **kwargs: Any) -> StopEvent:
        return StopEvent()

    make_step_function(free)
    assert config_of(free).accepted_events == [StartEvent]


def test_unions_and_optional_event_parameters() -> None:
    class A(Event):
        pass

    class B(Event):
        pass

    class Flow:
        @step
        async def union(self, ev: A | B) -> StopEvent:
            return StopEvent()

        @step
        async def typing_union(self, ev: Union[B, A, B]) -> StopEvent:
            return StopEvent()

        @step
        async def optional(self, ev: Optional[A]) -> StopEvent:
            return StopEvent()

        @step
        async def pipe_none(self, ev: A | None) -> StopEvent:
            return StopEvent()

    assert config_of(Flow.union).accepted_events == [A, B]
    assert config_of(Flow.typing_union).accepted_events == [B, A]
    assert config_of(Flow.optional).accepted_events == [A]
    assert config_of(Flow.pipe_none).accepted_events == [A]
    assert config_of(Flow.union).collect_params is None


def test_resource_parameters_become_definitions_in_order() -> None:
    class Settings(BaseModel):
        debug: bool = False

    config_declaration = ResourceConfig("settings.json")

    class Flow:
        @step
        async def handle(
            self,
            ev: StartEvent,
            number: Annotated[int, Resource(get_number)],
            settings: Annotated[Settings, config_declaration],
        ) -> StopEvent:
            return StopEvent()

    resources = config_of(Flow.handle).resources
    assert [r.name for r in resources] == ["number", "settings"]
    assert all(isinstance(r, ResourceDefinition) for r in resources)
    assert resources[0].type_annotation is int
    assert resources[0].resource.name == "get_number"
    assert resources[1].resource is config_declaration
    assert resources[1].type_annotation is Settings
    assert config_declaration.cls_factory is Settings


def test_resource_descriptors_receive_the_resolution_namespace() -> None:
    seen: dict[str, Any] = {}

    class Recording:
        name = "recording"
        cache = True

        async def resolve(self, manager: ResourceManager) -> Any:
            return None

        def set_type_annotation(self, type_annotation: Any) -> None:
            seen["type"] = type_annotation

        def set_localns(self, localns: Mapping[str, Any] | None) -> None:
            seen["localns"] = localns

        def get_dependencies(self) -> list[Any]:
            return []

    recording = Recording()
    local_marker = object()

    class Flow:
        @step
        async def handle(self, ev: StartEvent, r: Annotated[str, recording]) -> StopEvent:
            return StopEvent()

    assert seen["type"] is str
    assert seen["localns"]["local_marker"] is local_marker
    assert config_of(Flow.handle).resources[0].resource is recording


@pytest.mark.anyio
async def test_nested_factory_annotations_resolve_with_decoration_site_locals() -> None:
    class Connection:
        pass

    def connect() -> Connection:
        return Connection()

    def repository(conn: Annotated[Connection, Resource(connect)]) -> tuple[str, Connection]:
        return ("repo", conn)

    class Flow:
        @step
        async def handle(
            self, ev: StartEvent, repo: Annotated[tuple[str, Any], Resource(repository)]
        ) -> StopEvent:
            return StopEvent()

    definition = config_of(Flow.handle).resources[0]
    value = await ResourceManager().get(definition.resource)
    assert value[0] == "repo"
    assert isinstance(value[1], Connection)


def test_collection_parameters() -> None:
    class A(Event):
        pass

    class B(Event):
        pass

    class Flow:
        @step
        async def bare(self, events: list[A]) -> StopEvent:
            return StopEvent()

        @step
        async def mixed(self, events: list[A | B | A]) -> StopEvent:
            return StopEvent()

        @step
        async def optional(self, ctx: Context, events: list[A] | None) -> StopEvent:  # type: ignore[type-arg]
            return StopEvent()

        @step
        async def none_member(self, events: list[A | None]) -> StopEvent:
            return StopEvent()

        @step
        async def marked(self, events: Annotated[list[A], Collect()]) -> StopEvent:
            return StopEvent()

        @step
        async def take(self, events: Annotated[list[B], Collect(Take(3))]) -> StopEvent:
            return StopEvent()

        @step
        async def take_all(self, done: Annotated[list[A] | None, Collect(All())]) -> StopEvent:
            return StopEvent()

    bare = config_of(Flow.bare)
    assert bare.collection_param == ("events", (A,))
    assert bare.collection_policy == Collect()
    assert isinstance(bare.collection_policy.cardinality, All)
    assert bare.accepted_events == [A]
    assert bare.event_name == "events"
    assert bare.collect_params is None
    assert config_of(Flow.mixed).collection_param == ("events", (A, B))
    assert config_of(Flow.mixed).accepted_events == [A, B]
    assert config_of(Flow.optional).collection_param == ("events", (A,))
    assert config_of(Flow.optional).context_parameter == "ctx"
    assert config_of(Flow.none_member).collection_param == ("events", (A,))
    assert config_of(Flow.marked).collection_policy == Collect(All())
    assert config_of(Flow.take).collection_policy == Collect(Take(3))
    assert config_of(Flow.take_all).collection_param == ("done", (A,))


def test_list_of_non_events_is_not_a_collection() -> None:
    class Flow:
        @step
        async def handle(self, ev: StartEvent, numbers: list[int] = []) -> StopEvent:  # noqa: B006
            return StopEvent()

    config = config_of(Flow.handle)
    assert config.collection_param is None
    assert config.accepted_events == [StartEvent]


@pytest.mark.parametrize(
    "annotation",
    [
        "Annotated[list[int], Collect()]",
        "Annotated[Module, Collect()]",
        "Annotated[int, Collect()]",
    ],
)
def test_collect_marker_on_a_non_event_list_is_rejected(annotation: str) -> None:
    async def handle(ev: StartEvent, items: Any) -> StopEvent:
        return StopEvent()

    handle.__annotations__["items"] = annotation
    with pytest.raises(WorkflowValidationError) as info:
        make_step_function(handle)
    assert "handle" in str(info.value)
    assert "'items'" in str(info.value)
    assert "Collect" in str(info.value)


def test_collect_with_an_invalid_cardinality_is_rejected() -> None:
    bad = Collect("all")  # type: ignore[arg-type]

    with pytest.raises(WorkflowValidationError) as info:

        class Flow:
            @step
            async def join(self, events: Annotated[list[Module], bad]) -> StopEvent:
                return StopEvent()

    assert "Flow.join" in str(info.value)
    assert "'events'" in str(info.value)
    assert "All" in str(info.value) and "Take" in str(info.value)


def test_two_collection_parameters_are_rejected() -> None:
    class A(Event):
        pass

    with pytest.raises(WorkflowValidationError) as info:

        class Flow:
            @step
            async def join(self, first: list[A], second: list[A]) -> StopEvent:
                return StopEvent()

    assert "Flow.join" in str(info.value)
    assert "'first'" in str(info.value) and "'second'" in str(info.value)


@pytest.mark.parametrize(
    "annotation", [None, "int", "Annotated[Module, 'doc']", "Annotated[int, 'meta']", "Any"]
)
def test_unclassifiable_parameter_without_default_is_rejected(annotation: str | None) -> None:
    async def handle(ev: StartEvent, extra) -> StopEvent:  # type: ignore[no-untyped-def]
        return StopEvent()

    if annotation is not None:
        handle.__annotations__["extra"] = annotation
    with pytest.raises(WorkflowValidationError) as info:
        make_step_function(handle)
    assert "handle" in str(info.value)
    assert "'extra'" in str(info.value)
    assert "default" in str(info.value)


def test_unclassifiable_parameter_with_default_is_ignored() -> None:
    async def handle(  # type: ignore[no-untyped-def]
        ev: StartEvent,
        extra=1,
        *,
        flag: bool = False,
        meta: Annotated[int, "m"] = 0,
    ) -> StopEvent:
        return StopEvent()

    make_step_function(handle)
    config = config_of(handle)
    assert config.accepted_events == [StartEvent]
    assert config.resources == []


# ---------------------------------------------------------------------------------------
# 5.5.3 Combining event parameters
# ---------------------------------------------------------------------------------------


def test_multi_slot_join() -> None:
    class A(Event):
        pass

    class B(Event):
        pass

    class Flow:
        @step
        async def assemble(self, ctx: Context, b: B, a: A, again: A | None) -> StopEvent:  # type: ignore[type-arg]
            return StopEvent()

    config = config_of(Flow.assemble)
    assert config.collect_params == [("b", B), ("a", A), ("again", A)]
    assert config.accepted_events == [B, A, A]
    assert config.event_name == "b"
    assert config.collection_param is None


def test_join_slot_with_a_union_is_rejected() -> None:
    class A(Event):
        pass

    class B(Event):
        pass

    with pytest.raises(WorkflowValidationError) as info:

        class Flow:
            @step
            async def assemble(self, a: A, either: A | B) -> StopEvent:
                return StopEvent()

    message = str(info.value)
    assert "Flow.assemble" in message
    assert "'either'" in message
    assert "2" in message


def test_collection_with_an_event_parameter_is_rejected() -> None:
    class A(Event):
        pass

    with pytest.raises(WorkflowValidationError) as info:

        class Flow:
            @step
            async def join(self, ev: StartEvent, events: list[A]) -> StopEvent:
                return StopEvent()

    assert "Flow.join" in str(info.value)
    assert "'events'" in str(info.value) and "'ev'" in str(info.value)


def test_step_without_event_parameter_is_rejected() -> None:
    with pytest.raises(WorkflowValidationError) as info:

        class Flow:
            @step
            async def handle(self, ctx: Context) -> StopEvent:  # type: ignore[type-arg]
                return StopEvent()

    assert "Flow.handle" in str(info.value)
    assert "at least one parameter must be annotated with an Event" in str(info.value)


# ---------------------------------------------------------------------------------------
# 5.5.4 Return annotations
# ---------------------------------------------------------------------------------------


def test_return_annotation_is_required() -> None:
    with pytest.raises(WorkflowValidationError) as info:

        class Flow:
            @step
            async def handle(self, ev: StartEvent):  # type: ignore[no-untyped-def]
                return StopEvent()

    assert "Flow.handle" in str(info.value)
    assert "return annotation" in str(info.value)


def test_return_shapes() -> None:
    class A(Event):
        pass

    class B(Event):
        pass

    class Flow:
        @step
        async def nothing(self, ev: StartEvent) -> None:
            return None

        @step
        async def maybe(self, ev: StartEvent) -> A | None:
            return None

        @step
        async def fan_out(self, ev: StartEvent) -> list[A | B]:
            return []

        @step
        async def mixed(self, ev: StartEvent) -> list[A] | B | None:
            return None

        @step
        async def optional_list(self, ev: StartEvent) -> Optional[list[A]]:
            return None

        @step
        async def overlap(self, ev: StartEvent) -> list[A] | A:
            return A()

        @step
        async def nested(self, ev: StartEvent) -> list[list[A] | B] | StopEvent:
            return StopEvent()

    nothing = config_of(Flow.nothing)
    assert nothing.return_types == [NoneType]
    assert (nothing.is_fan_out, nothing.bare_return_types) == (False, ())
    assert config_of(Flow.maybe).return_types == [A, NoneType]
    assert config_of(Flow.maybe).is_fan_out is False
    fan_out = config_of(Flow.fan_out)
    assert (fan_out.return_types, fan_out.is_fan_out, fan_out.bare_return_types) == (
        [A, B],
        True,
        (),
    )
    mixed = config_of(Flow.mixed)
    assert mixed.return_types == [A, B, NoneType]
    assert (mixed.is_fan_out, mixed.bare_return_types) == (True, (B,))
    optional_list = config_of(Flow.optional_list)
    assert optional_list.return_types == [A, NoneType]
    assert (optional_list.is_fan_out, optional_list.bare_return_types) == (True, ())
    overlap = config_of(Flow.overlap)
    assert (overlap.return_types, overlap.bare_return_types) == ([A], (A,))
    nested = config_of(Flow.nested)
    assert nested.return_types == [A, B, StopEvent]
    assert (nested.is_fan_out, nested.bare_return_types) == (True, (StopEvent,))


def test_flatten_return_annotation_directly() -> None:
    class A(Event):
        pass

    shape = flatten_return_annotation("s", Union[list[A], None, A])
    assert shape.return_types == [A, NoneType]
    assert shape.is_fan_out is True
    assert shape.bare_return_types == (A,)
    assert flatten_return_annotation("s", None).return_types == [NoneType]
    assert flatten_return_annotation("s", Annotated[A, "x"]).return_types == [A]


@pytest.mark.parametrize(
    "annotation",
    [
        "AsyncIterator[Module]",
        "AsyncIterable[Module]",
        "AsyncGenerator[Module, None]",
        "collections.abc.AsyncIterator[Module]",
        "AsyncIterator",
        "Module | AsyncIterator[Module]",
    ],
)
def test_async_iterator_returns_are_rejected(annotation: str) -> None:
    async def handle(ev: StartEvent) -> Any:
        return None

    handle.__annotations__["return"] = annotation
    with pytest.raises(WorkflowValidationError) as info:
        make_step_function(
            handle,
            localns={
                "collections": collections,
                "AsyncIterable": AsyncIterable,
                "AsyncGenerator": AsyncGenerator,
            },
        )
    message = str(info.value)
    assert "handle" in message
    assert "list[E]" in message
    assert "ctx.send_event" in message


def test_async_generator_functions_are_rejected() -> None:
    with pytest.raises(WorkflowValidationError) as info:

        class Flow:
            @step
            async def handle(self, ev: StartEvent) -> AsyncIterator[Module]:
                yield Module()

    message = str(info.value)
    assert "Flow.handle" in message
    assert "list[E]" in message and "ctx.send_event" in message


def test_sync_steps_are_accepted() -> None:
    class Flow:
        @step
        def handle(self, ev: StartEvent) -> StopEvent:
            return StopEvent()

    assert config_of(Flow.handle).accepted_events == [StartEvent]


def test_infer_signature_without_events_leaves_the_verdict_to_the_caller() -> None:
    async def handle(ctx: Context) -> None:  # type: ignore[type-arg]
        return None

    inferred = infer_signature(handle, {"Context": Context})
    assert inferred.accepted_events == []
    assert inferred.event_name == ""
    assert inferred.context_parameter == "ctx"


def test_signature_modules_do_not_import_the_context_module() -> None:
    for module in (_signature, inspect.getmodule(StepConfig)):
        source = Path(inspect.getfile(module)).read_text()  # type: ignore[arg-type]
        imported = {
            node.module
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ImportFrom) and node.module
        } | {
            alias.name
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        assert not any(name.startswith("tickwork.context") for name in imported)
        assert not any(name.startswith("tickwork.workflow") for name in imported)
