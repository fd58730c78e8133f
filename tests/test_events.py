"""Events against §4 of the API contract: dynamic fields, dumps, reprs, serializable fields."""

from __future__ import annotations

import copy
import json
import sys
import types
from datetime import datetime, timezone
from typing import Any

import pytest
from pydantic import BaseModel

from tickwork._serde_fields import active_resolver, resolve_by_import, using_resolver
from tickwork.events import (
    CollectionReleaseEvent,
    DictLikeModel,
    Event,
    EventType,
    HumanResponseEvent,
    IdleReleasedEvent,
    InputRequiredEvent,
    InternalDispatchEvent,
    SerializableEventType,
    SerializableOptionalEvent,
    SerializableOptionalException,
    StartEvent,
    StepFailedEvent,
    StepState,
    StepStateChanged,
    StopEvent,
    UnhandledEvent,
    UnreconstructedException,
    WorkflowCancelledEvent,
    WorkflowFailedEvent,
    WorkflowIdleEvent,
    WorkflowTimedOutEvent,
)
from tickwork.serde.serializers import JsonSerializer


class Task(Event):
    x: int


class Outer:
    class Nested(Event):
        value: str


class ResultStop(StopEvent):
    foo: str
    bar: int


class DoubledStop(StopEvent):
    def _get_result(self) -> Any:
        return self._result * 2


class AppError(Exception):
    """An importable exception that takes one message."""


class TwoArgError(Exception):
    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"{code}: {detail}")


class Carrier(BaseModel):
    event: SerializableOptionalEvent = None
    error: SerializableOptionalException = None


class TypeCarrier(BaseModel):
    event_type: SerializableEventType


def _failed(exc: BaseException) -> WorkflowFailedEvent:
    return WorkflowFailedEvent(step_name="work", exception=exc)


def _step_failed(input_event: Event, exc: BaseException) -> StepFailedEvent:
    return StepFailedEvent(
        step_name="work",
        input_event=input_event,
        exception=exc,
        attempts=2,
        elapsed_seconds=1.5,
        failed_at=datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
    )


# --- DictLikeModel (§4.1) ----------------------------------------------------------------


def test_init_splits_declared_private_and_dynamic_keywords() -> None:
    ev = Task(x=1, extra="y", _data={"seed": 0})
    assert ev.x == 1
    assert ev.to_dict() == {"seed": 0, "extra": "y"}
    assert "x" not in ev


def test_declared_field_is_validated() -> None:
    with pytest.raises(ValueError, match="x"):
        Task(x="not a number")


def test_dynamic_fields_are_attributes_and_items() -> None:
    ev = StartEvent(topic="t")
    ev.count = 3
    ev["flag"] = True
    assert ev.topic == "t"
    assert ev["count"] == 3
    assert ev.flag is True
    assert ev.get("missing") is None
    assert ev.get("missing", 7) == 7
    assert "topic" in ev and "missing" not in ev


def test_missing_attribute_error_names_class_and_attribute() -> None:
    with pytest.raises(AttributeError, match=r"StartEvent.*nope"):
        _ = StartEvent().nope


def test_mapping_api_covers_dynamic_fields_only() -> None:
    ev = Task(x=1, a=1, b=2)
    assert list(ev.keys()) == ["a", "b"]
    assert list(ev.values()) == [1, 2]
    assert list(ev.items()) == [("a", 1), ("b", 2)]
    assert len(ev) == 2
    assert list(iter(ev)) == ["a", "b"]


def test_to_dict_is_the_dynamic_dict_itself() -> None:
    ev = StartEvent(a=1)
    ev.to_dict()["b"] = 2
    assert ev.b == 2


def test_bool_is_always_true() -> None:
    assert bool(Event())
    assert bool(StartEvent())


def test_model_dump_examples_from_the_spec() -> None:
    assert StartEvent(topic="x", n=3).model_dump() == {"_data": {"topic": "x", "n": 3}}
    assert Task(x=1, extra="y").model_dump() == {"x": 1, "_data": {"extra": "y"}}
    assert Task(x=1).model_dump() == {"x": 1}


def test_model_validate_routes_data_back_into_dynamic_fields() -> None:
    original = Task(x=1, extra="y")
    restored = Task.model_validate(original.model_dump())
    assert restored == original
    assert restored.extra == "y"
    assert restored.model_dump() == original.model_dump()


def test_equality_covers_class_fields_and_dynamic_fields() -> None:
    assert StartEvent(a=1) == StartEvent(a=1)
    assert StartEvent(a=1) != StartEvent(a=2)
    assert Task(x=1) != Task(x=2)
    assert Event() != StartEvent()


def test_shallow_copy_gets_its_own_dynamic_dict() -> None:
    original = StartEvent(a=[1])
    clone = original.model_copy()
    clone.b = 2
    assert "b" not in original
    assert clone.a is original.a
    assert copy.copy(original).to_dict() is not original.to_dict()


def test_deep_copy_copies_dynamic_values() -> None:
    original = StartEvent(a=[1])
    clone = copy.deepcopy(original)
    clone.a.append(2)
    assert original.a == [1]


def test_dict_like_model_is_a_plain_base_for_other_models() -> None:
    class Bag(DictLikeModel):
        name: str = "bag"

    bag = Bag(k=1)
    assert bag.model_dump() == {"name": "bag", "_data": {"k": 1}}


# --- Event, StartEvent (§4.2) ------------------------------------------------------------


def test_event_repr_is_pydantics_default() -> None:
    assert repr(Task(x=1, extra="y")) == "Task(x=1)"


def test_start_event_has_no_declared_fields() -> None:
    assert StartEvent.model_fields == {}
    assert Event.model_fields == {}


# --- StopEvent (§4.3) --------------------------------------------------------------------


def test_stop_event_result_dump_and_validate() -> None:
    assert StopEvent(result="foo").model_dump() == {"result": "foo"}
    assert StopEvent().model_dump() == {}
    restored = StopEvent.model_validate({"result": 42, "_data": {"k": 1}})
    assert restored.result == 42
    assert restored.k == 1


def test_stop_event_subclass_dumps_its_fields() -> None:
    assert ResultStop(foo="foo", bar=42).model_dump() == {"foo": "foo", "bar": 42}


def test_stop_event_result_is_read_only() -> None:
    ev = StopEvent(result=1)
    with pytest.raises(AttributeError):
        ev.result = 2  # type: ignore[misc]
    assert ev.result == 1


def test_stop_event_result_goes_through_get_result() -> None:
    assert DoubledStop(result=4).result == 8


def test_stop_event_repr_and_str() -> None:
    assert repr(StopEvent(foo="foo", result=42)) == "StopEvent(foo='foo', result=42)"
    assert repr(WorkflowCancelledEvent()) == "WorkflowCancelledEvent()"
    assert str(StopEvent(result=5)) == "5"
    assert str(StopEvent()) == "None"


def test_stop_event_equality_includes_result() -> None:
    assert StopEvent(result=1) == StopEvent(result=1)
    assert StopEvent(result=1) != StopEvent(result=2)


# --- terminal events (§4.4) --------------------------------------------------------------


def test_terminal_events_are_stop_events() -> None:
    for cls in (
        WorkflowTimedOutEvent,
        WorkflowCancelledEvent,
        WorkflowFailedEvent,
        IdleReleasedEvent,
    ):
        assert issubclass(cls, StopEvent)


def test_timed_out_event_dump_and_repr() -> None:
    ev = WorkflowTimedOutEvent(timeout=2.5, active_steps=["a", "b"])
    assert ev.model_dump() == {"timeout": 2.5, "active_steps": ["a", "b"]}
    assert "timeout=2.5" in repr(ev)
    assert "active_steps=['a', 'b']" in repr(ev)


def test_cancelled_event_dumps_empty() -> None:
    assert WorkflowCancelledEvent().model_dump() == {}


def test_failed_event_dumps_exception_as_type_and_message() -> None:
    ev = _failed(RuntimeError("Test failure"))
    expected = {"exception_type": "builtins.RuntimeError", "exception_message": "Test failure"}
    assert ev.model_dump()["exception"] == expected
    assert ev.model_dump(mode="json")["exception"] == expected
    assert ev.attempts is None and ev.elapsed_seconds is None
    assert "step_name='work'" in repr(ev)
    assert "Test failure" in repr(ev)


def test_failed_event_keeps_the_live_exception_in_process() -> None:
    exc = AppError("boom")
    assert _failed(exc).exception is exc


def test_failed_event_round_trips_through_a_serializer() -> None:
    serializer = JsonSerializer()
    restored = serializer.deserialize(serializer.serialize(_failed(AppError("boom"))))
    assert isinstance(restored, WorkflowFailedEvent)
    assert type(restored.exception) is AppError
    assert str(restored.exception) == "boom"


# --- HITL, failure and collection events (§4.5, §4.6) ------------------------------------


def test_hitl_events_carry_dynamic_payloads() -> None:
    assert InputRequiredEvent(prefix="name?").prefix == "name?"
    assert HumanResponseEvent(response="Ada").response == "Ada"
    assert InputRequiredEvent.model_fields == {} == HumanResponseEvent.model_fields


def test_step_failed_event_round_trip_restores_event_and_exception() -> None:
    original = _step_failed(Task(x=3, note="n"), AppError("bad input"))
    dumped = original.model_dump(mode="json")
    json.dumps(dumped)  # the JSON dump is plain JSON
    assert dumped["input_event"]["qualified_name"] == f"{__name__}.Task"
    restored = StepFailedEvent.model_validate(dumped)
    assert restored.input_event == Task(x=3, note="n")
    assert type(restored.exception) is AppError
    assert restored.failed_at == original.failed_at
    assert restored.failed_at.tzinfo is not None


def test_python_mode_dump_also_uses_envelopes() -> None:
    dumped = _step_failed(Task(x=1), ValueError("v")).model_dump()
    assert dumped["input_event"]["__is_pydantic"] is True
    assert dumped["exception"] == {
        "exception_type": "builtins.ValueError",
        "exception_message": "v",
    }


def test_collection_release_event_round_trip() -> None:
    ev = CollectionReleaseEvent(events=[Task(x=1), Outer.Nested(value="v")], stream_id="s1")
    restored = CollectionReleaseEvent.model_validate(ev.model_dump(mode="json"))
    assert restored.events == [Task(x=1), Outer.Nested(value="v")]
    assert restored.stream_id == "s1" and restored.binding_id == ""
    assert CollectionReleaseEvent().events == []


def test_envelopes_use_qualname_so_nested_classes_round_trip() -> None:
    dumped = Carrier(event=Outer.Nested(value="v")).model_dump()
    assert dumped["event"]["qualified_name"] == f"{__name__}.Outer.Nested"
    assert Carrier.model_validate(dumped).event == Outer.Nested(value="v")


# --- internal events and aliases (§4.7, §4.8) --------------------------------------------


def test_step_state_values() -> None:
    assert [s.value for s in StepState] == ["preparing", "running", "not_running"]


def test_internal_events_share_a_base() -> None:
    for cls in (StepStateChanged, WorkflowIdleEvent, UnhandledEvent):
        assert issubclass(cls, InternalDispatchEvent)
    changed = StepStateChanged(
        name="s", step_state=StepState.RUNNING, worker_id="0", input_event_name="Task"
    )
    assert changed.output_event_name is None
    unhandled = UnhandledEvent(event_type="Task", qualified_name="m.Task", idle=True)
    assert unhandled.step_name is None


def test_event_type_alias() -> None:
    assert EventType == type[Event]


# --- serializable fields (§4.9) ----------------------------------------------------------


def test_optional_serializable_fields_accept_none() -> None:
    carrier = Carrier()
    assert carrier.model_dump() == {"event": None, "error": None}
    assert Carrier.model_validate(carrier.model_dump()) == carrier


def test_serializable_event_type_round_trip() -> None:
    dumped = TypeCarrier(event_type=Outer.Nested).model_dump(mode="json")
    assert dumped["event_type"] == f"{__name__}.Outer.Nested"
    assert TypeCarrier.model_validate(dumped).event_type is Outer.Nested


def test_serializable_event_validates_from_a_json_string() -> None:
    envelope = json.dumps(Carrier(event=Task(x=5)).model_dump()["event"])
    assert Carrier(event=envelope).event == Task(x=5)


def _reloaded_error(error: dict[str, str]) -> Any:
    return Carrier.model_validate({"error": error}).error


def test_builtin_exceptions_resolve_from_builtins() -> None:
    exc = _reloaded_error({"exception_type": "builtins.KeyError", "exception_message": "k"})
    assert type(exc) is KeyError


def test_unresolvable_exception_becomes_unreconstructed() -> None:
    exc = _reloaded_error({"exception_type": "nowhere.Missing", "exception_message": "m"})
    assert type(exc) is UnreconstructedException
    assert str(exc) == "m"
    assert exc.original_type == "nowhere.Missing"


def test_non_exception_classes_are_not_rebuilt() -> None:
    base_only = _reloaded_error(
        {"exception_type": "builtins.KeyboardInterrupt", "exception_message": "stop"}
    )
    not_an_error = _reloaded_error({"exception_type": f"{__name__}.Task", "exception_message": "x"})
    assert type(base_only) is UnreconstructedException
    assert type(not_an_error) is UnreconstructedException


def test_exception_whose_constructor_rejects_a_message_is_unreconstructed() -> None:
    exc = _reloaded_error(
        {"exception_type": f"{__name__}.TwoArgError", "exception_message": "1: x"}
    )
    assert type(exc) is UnreconstructedException
    assert exc.original_type == f"{__name__}.TwoArgError"


def test_unreconstructed_exception_dumps_its_original_type_without_wrapping() -> None:
    exc = UnreconstructedException("m", original_type="nowhere.Missing")
    dumped = Carrier(error=exc).model_dump()["error"]
    assert dumped == {"exception_type": "nowhere.Missing", "exception_message": "m"}


def test_exception_attributes_other_than_the_message_are_lost() -> None:
    exc = AppError("boom")
    exc.code = 7  # type: ignore[attr-defined]
    restored = Carrier.model_validate(Carrier(error=exc).model_dump()).error
    assert type(restored) is AppError
    assert not hasattr(restored, "code")


def test_exception_names_resolve_through_the_active_serializer() -> None:
    dumped = Carrier(error=AppError("boom")).model_dump()
    strict = JsonSerializer(allowed_types=[])
    with strict.validation_context():
        assert type(Carrier.model_validate(dumped).error) is UnreconstructedException
    with strict.with_types(AppError).validation_context():
        assert type(Carrier.model_validate(dumped).error) is AppError


def test_outside_any_serializer_names_resolve_by_import() -> None:
    assert active_resolver() is resolve_by_import
    with using_resolver(JsonSerializer(allowed_types=[]).resolve_class):
        assert active_resolver() is not resolve_by_import
    assert active_resolver() is resolve_by_import


def _module_with_reply(name: str) -> type:
    """A new module object registered as ``name``, defining a fresh ``Reply`` event."""
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(
        "from tickwork.events import Event\n\nclass Reply(Event):\n    text: str\n", module.__dict__
    )
    reply: type = module.Reply
    return reply


def test_a_class_redefined_in_a_new_module_object_resolves_to_the_new_class() -> None:
    """Names are re-resolved through ``sys.modules``: executing a module again (a docs
    example run twice, a reload) must not leave snapshots resolving to the old class."""
    name = "_tickwork_test_reexecuted_module"
    try:
        first = _module_with_reply(name)
        assert resolve_by_import(f"{name}.Reply") is first
        assert JsonSerializer().resolve_class(f"{name}.Reply") is first
        second = _module_with_reply(name)
        assert second is not first
        assert resolve_by_import(f"{name}.Reply") is second
        assert JsonSerializer().resolve_class(f"{name}.Reply") is second
        text = JsonSerializer().serialize(second(text="hi"))
        assert type(JsonSerializer().deserialize(text)) is second
    finally:
        sys.modules.pop(name, None)
