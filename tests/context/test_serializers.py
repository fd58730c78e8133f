"""Serializers against §10.1, §10.2 and §4.9 of the API contract."""

from __future__ import annotations

import base64
import json
import pickle
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from pydantic import BaseModel

import tickwork.context as context_package
from tickwork._serde_fields import active_resolver, resolve_by_import
from tickwork.context.state_store import DictState
from tickwork.errors import StepTimeoutError
from tickwork.events import (
    StartEvent,
    StepFailedEvent,
    StopEvent,
    UnreconstructedException,
    WorkflowFailedEvent,
)
from tickwork.serde import serializers as serializers_module
from tickwork.serde.serializers import (
    BaseSerializer,
    JsonPickleSerializer,
    JsonSerializer,
    PickleSerializer,
    register_framework_types,
)


class Point(BaseModel):
    x: int
    y: int


class Box:
    class Inner(BaseModel):
        label: str


class Widget:
    """A LlamaIndex-style component: ``class_name`` plus a dict codec."""

    def __init__(self, size: int) -> None:
        self.size = size

    @classmethod
    def class_name(cls) -> str:
        return "Widget"

    def to_dict(self) -> dict[str, Any]:
        return {"size": self.size}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Widget:
        return cls(data["size"])


class Opaque:
    """Neither JSON nor a model; picklable because it lives at module level."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Opaque({self.value})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)


class Ping(StartEvent):
    n: int = 0


class ReportedError(Exception):
    pass


class MinimalSerializer(BaseSerializer):
    def serialize(self, value: Any) -> str:
        return repr(value)

    def deserialize(self, value: str) -> Any:
        return value


@pytest.fixture
def restore_framework_registry() -> Iterator[None]:
    saved = list(serializers_module._registered_framework_types)
    yield
    serializers_module._registered_framework_types[:] = saved
    serializers_module._framework_types_by_name = None


def _step_failed(input_event: Any, exc: BaseException) -> StepFailedEvent:
    return StepFailedEvent(
        step_name="s",
        input_event=input_event,
        exception=exc,
        attempts=1,
        elapsed_seconds=0.0,
        failed_at=datetime(2024, 1, 1, tzinfo=timezone.utc),
    )


# --- exports -----------------------------------------------------------------------------


def test_package_exports() -> None:
    assert set(context_package.__all__) >= {"BaseSerializer", "JsonSerializer", "PickleSerializer"}
    assert context_package.JsonSerializer is JsonSerializer
    assert JsonPickleSerializer is PickleSerializer
    assert issubclass(PickleSerializer, JsonSerializer)
    assert issubclass(JsonSerializer, BaseSerializer)


# --- BaseSerializer ----------------------------------------------------------------------


def test_base_serializer_is_abstract() -> None:
    with pytest.raises(TypeError):
        BaseSerializer()  # type: ignore[abstract]


def test_base_validation_context_is_a_no_op() -> None:
    with MinimalSerializer().validation_context():
        assert active_resolver() is resolve_by_import


def test_base_resolve_class_imports_and_explains_failures() -> None:
    serializer = MinimalSerializer()
    assert serializer.resolve_class(f"{__name__}.Box.Inner") is Box.Inner
    with pytest.raises(ValueError, match=r"nowhere\.Thing"):
        serializer.resolve_class("nowhere.Thing")


# --- JsonSerializer encoding -------------------------------------------------------------


@pytest.mark.parametrize("value", [None, True, 3, 2.5, "text", [1, "a"], {"k": {"n": [1, 2]}}])
def test_plain_json_values_round_trip(value: Any) -> None:
    serializer = JsonSerializer()
    text = serializer.serialize(value)
    assert json.loads(text) == value
    assert serializer.deserialize(text) == value


def test_model_envelope_format() -> None:
    text = JsonSerializer().serialize(Point(x=1, y=2))
    assert json.loads(text) == {
        "__is_pydantic": True,
        "value": {"x": 1, "y": 2},
        "qualified_name": f"{__name__}.Point",
    }


def test_models_inside_containers_round_trip_with_their_classes() -> None:
    serializer = JsonSerializer()
    value = {"points": [Point(x=1, y=2)], "event": StartEvent(topic="t"), "n": 1}
    restored = serializer.deserialize(serializer.serialize(value))
    assert restored == value
    assert type(restored["points"][0]) is Point
    assert restored["event"].topic == "t"


def test_nested_class_envelope_uses_qualname() -> None:
    serializer = JsonSerializer()
    text = serializer.serialize(Box.Inner(label="l"))
    assert json.loads(text)["qualified_name"] == f"{__name__}.Box.Inner"
    assert serializer.deserialize(text) == Box.Inner(label="l")


def test_component_envelope_format_and_round_trip() -> None:
    serializer = JsonSerializer()
    text = serializer.serialize({"w": Widget(3)})
    assert json.loads(text)["w"] == {
        "__is_component": True,
        "value": {"size": 3},
        "qualified_name": f"{__name__}.Widget",
    }
    restored = serializer.deserialize(text)["w"]
    assert isinstance(restored, Widget) and restored.size == 3


def test_tuples_encode_as_lists() -> None:
    serializer = JsonSerializer()
    assert serializer.deserialize(serializer.serialize((1, Point(x=0, y=0)))) == [
        1,
        Point(x=0, y=0),
    ]


def test_unencodable_value_error_names_type_and_shows_value() -> None:
    with pytest.raises(ValueError, match=r"Opaque.*Opaque\(7\)"):
        JsonSerializer().serialize({"k": [Opaque(7)]})


def test_unencodable_dynamic_field_raises_value_error() -> None:
    with pytest.raises(ValueError, match="StartEvent"):
        JsonSerializer().serialize(StartEvent(lock=threading.Lock()))


def test_cycles_raise_value_error() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(ValueError, match="list"):
        JsonSerializer().serialize(cyclic)


def test_deserialize_rejects_text_that_is_not_json() -> None:
    with pytest.raises(ValueError):
        JsonSerializer().deserialize("not json")


def test_envelope_naming_a_non_model_class_is_rejected() -> None:
    envelope = {"__is_pydantic": True, "value": {}, "qualified_name": f"{__name__}.Opaque"}
    with pytest.raises(ValueError, match="Opaque"):
        JsonSerializer().deserialize(json.dumps(envelope))


# --- class resolution and allow-lists ----------------------------------------------------


def test_without_allow_list_classes_resolve_by_import() -> None:
    serializer = JsonSerializer()
    assert serializer.allowed_types is None
    assert serializer.resolve_class(f"{__name__}.Point") is Point


def test_local_classes_need_allowed_types() -> None:
    class Local(BaseModel):
        v: int

    text = JsonSerializer().serialize(Local(v=1))
    with pytest.raises(ValueError, match="allowed_types"):
        JsonSerializer().deserialize(text)
    assert JsonSerializer(allowed_types=[Local]).deserialize(text) == Local(v=1)


def test_allowed_classes_resolve_by_qualname_and_by_name() -> None:
    serializer = JsonSerializer(allowed_types=[Box.Inner])
    assert serializer.resolve_class(f"{__name__}.Box.Inner") is Box.Inner
    assert serializer.resolve_class(f"{__name__}.Inner") is Box.Inner


def test_allowed_strings_resolve_by_import() -> None:
    serializer = JsonSerializer(allowed_types=[f"{__name__}.Point"])
    assert serializer.resolve_class(f"{__name__}.Point") is Point


def test_disallowed_class_error_names_it_and_suggests_allowed_types() -> None:
    serializer = JsonSerializer(allowed_types=[Point])
    text = JsonSerializer().serialize(Box.Inner(label="l"))
    with pytest.raises(ValueError, match=r"Box\.Inner.*allowed_types"):
        serializer.deserialize(text)


def test_empty_allow_list_admits_only_framework_types() -> None:
    serializer = JsonSerializer(allowed_types=[])
    assert serializer.resolve_class("tickwork.events.StopEvent") is StopEvent
    assert serializer.resolve_class("tickwork.events.UnreconstructedException") is (
        UnreconstructedException
    )
    assert serializer.resolve_class("tickwork.context.state_store.DictState") is DictState
    assert serializer.resolve_class("tickwork.errors.StepTimeoutError") is StepTimeoutError
    with pytest.raises(ValueError, match="Point"):
        serializer.resolve_class(f"{__name__}.Point")


def test_framework_events_round_trip_with_an_empty_allow_list() -> None:
    serializer = JsonSerializer(allowed_types=[])
    event = StopEvent(result={"a": [1, 2]})
    assert serializer.deserialize(serializer.serialize(event)) == event


@pytest.mark.usefixtures("restore_framework_registry")
def test_registered_framework_types_are_allowed_everywhere() -> None:
    existing = JsonSerializer(allowed_types=[])
    name = f"{__name__}.Point"
    with pytest.raises(ValueError):
        existing.resolve_class(name)
    register_framework_types(Point)
    register_framework_types(Point)
    assert existing.resolve_class(name) is Point
    assert serializers_module._registered_framework_types.count(Point) == 1


def test_register_framework_types_rejects_non_classes() -> None:
    with pytest.raises(TypeError):
        register_framework_types("tickwork.events.Event")  # type: ignore[arg-type]


def test_allowed_types_rejects_other_entries() -> None:
    with pytest.raises(TypeError, match="allowed_types"):
        JsonSerializer(allowed_types=[42])  # type: ignore[list-item]


def test_with_types_returns_self_without_allow_list() -> None:
    serializer = JsonSerializer()
    assert serializer.with_types(Point) is serializer


def test_with_types_returns_an_extended_copy() -> None:
    base = JsonSerializer(allowed_types=[Point])
    extended = base.with_types(Box.Inner)
    assert extended is not base
    assert extended.resolve_class(f"{__name__}.Box.Inner") is Box.Inner
    assert extended.resolve_class(f"{__name__}.Point") is Point
    with pytest.raises(ValueError):
        base.resolve_class(f"{__name__}.Box.Inner")
    assert base.allowed_types == (Point,)
    assert extended.allowed_types == (Point, Box.Inner)


def test_with_types_keeps_the_serializer_class() -> None:
    extended = PickleSerializer(allowed_types=[]).with_types(Point)
    assert type(extended) is PickleSerializer


# --- validation_context: nested envelope fields ------------------------------------------


def test_nested_event_fields_honour_the_allow_list() -> None:
    text = JsonSerializer().serialize(_step_failed(Ping(n=2), ValueError("v")))
    with pytest.raises(ValueError, match="Ping"):
        JsonSerializer(allowed_types=[]).deserialize(text)
    restored = JsonSerializer(allowed_types=[Ping]).deserialize(text)
    assert restored.input_event == Ping(n=2)


def test_nested_exceptions_outside_the_allow_list_are_unreconstructed() -> None:
    text = JsonSerializer().serialize(
        WorkflowFailedEvent(step_name="s", exception=ReportedError("r"))
    )
    restored = JsonSerializer(allowed_types=[]).deserialize(text)
    assert type(restored.exception) is UnreconstructedException
    assert restored.exception.original_type == f"{__name__}.ReportedError"
    allowed = JsonSerializer(allowed_types=[ReportedError]).deserialize(text)
    assert type(allowed.exception) is ReportedError


def test_validation_context_is_scoped_to_the_block() -> None:
    serializer = JsonSerializer(allowed_types=[])
    with serializer.validation_context():
        assert active_resolver() == serializer.resolve_class
    assert active_resolver() is resolve_by_import


# --- PickleSerializer --------------------------------------------------------------------


def test_pickle_serializer_writes_json_when_it_can() -> None:
    value = {"p": Point(x=1, y=2)}
    assert PickleSerializer().serialize(value) == JsonSerializer().serialize(value)


def test_pickle_serializer_falls_back_to_base64_pickle() -> None:
    serializer = PickleSerializer()
    value = {"o": Opaque(1), "s": {1, 2}}
    text = serializer.serialize(value)
    assert pickle.loads(base64.b64decode(text)) == value
    assert serializer.deserialize(text) == value


def test_pickle_serializer_reads_json() -> None:
    text = JsonSerializer().serialize([Point(x=1, y=2)])
    assert PickleSerializer().deserialize(text) == [Point(x=1, y=2)]


@pytest.mark.parametrize("value", ["1234", "true", 5])
def test_pickle_serializer_does_not_mistake_json_for_pickle(value: Any) -> None:
    serializer = PickleSerializer()
    assert serializer.deserialize(serializer.serialize(value)) == value


def test_pickle_serializer_error_when_nothing_works() -> None:
    with pytest.raises(ValueError, match="lock"):
        PickleSerializer().serialize(threading.Lock())


def test_pickle_serializer_reports_broken_pickles() -> None:
    broken = base64.b64encode(pickle.dumps(Opaque(1))[:-3]).decode()
    with pytest.raises(ValueError, match="unpickle"):
        PickleSerializer().deserialize(broken)
