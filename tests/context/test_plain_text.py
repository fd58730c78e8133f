"""Events of plain classes are written without pydantic, as pydantic and the encoder would.

``model_text`` (the snapshot's event text) takes ``tickwork.serde.plain_text`` for the
classes whose fields are ``int``, ``str`` or ``bool`` (optionally ``None``); the reference
is ``JsonSerializer().serialize``, which always dumps through pydantic.
"""

from __future__ import annotations

import json
import warnings
from typing import Annotated, Any, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ConfigDict, Field, PlainSerializer, computed_field, field_serializer

from tickwork import Event, StopEvent
from tickwork.serde.plain_text import PLAIN_CLASSES, plain_fields, plain_text, plain_writer
from tickwork.serde.serializers import JsonSerializer, model_text

SER = JsonSerializer()


class Plain(Event):
    number: int
    text: str = ""
    flag: bool = False
    maybe: Optional[int] = None
    note: str | None = None


class NoFields(Event):
    pass


def _is_plain(cls: type) -> bool:
    entry = PLAIN_CLASSES.get(cls)
    return entry is not None and entry[1] is not None


@settings(max_examples=300, deadline=None)
@given(
    number=st.integers(min_value=-(2**70), max_value=2**70),
    text=st.text(),
    flag=st.booleans(),
    maybe=st.none() | st.integers(),
    note=st.none() | st.text(alphabet=st.characters(codec="utf-8")),
)
def test_a_plain_event_is_written_as_the_serializer_writes_it(
    number: int, text: str, flag: bool, maybe: int | None, note: str | None
) -> None:
    event = Plain(number=number, text=text, flag=flag, maybe=maybe, note=note)
    assert model_text(event, {}) == SER.serialize(event)
    assert _is_plain(Plain)


def test_an_event_without_fields_is_plain() -> None:
    assert model_text(NoFields(), {}) == SER.serialize(NoFields())
    assert _is_plain(NoFields)


class WithFloat(Event):
    ratio: float = 1.5


class Aliased(Event):
    number: int = Field(0, serialization_alias="n")


class Excluded(Event):
    number: int = Field(0, exclude=True)
    kept: int = 1


class FieldSerialized(Event):
    number: int = 0

    @field_serializer("number")
    def _double(self, value: int) -> int:
        return value * 2


class Computed(Event):
    number: int = 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def twice(self) -> int:
        return self.number * 2


class Annotated_(Event):
    number: Annotated[int, PlainSerializer(lambda v: str(v))] = 0


class Extra(Event):
    model_config = ConfigDict(extra="allow")
    number: int = 0


class Nested(Event):
    inner: Plain
    tags: list[str] = []


@pytest.mark.parametrize(
    "event",
    [
        WithFloat(ratio=float("inf")),
        Aliased(number=3),
        Excluded(number=3),
        FieldSerialized(number=3),
        Computed(number=3),
        Annotated_(number=3),
        Extra(number=3, other="x"),
        Nested(inner=Plain(number=1), tags=["a"]),
        StopEvent(result={"x": 1}),
    ],
    ids=lambda event: type(event).__name__,
)
def test_other_classes_go_to_pydantic(event: Event) -> None:
    assert model_text(event, {}) == SER.serialize(event)
    assert not _is_plain(type(event))


def test_an_event_with_dynamic_fields_or_odd_values_goes_to_pydantic() -> None:
    dynamic = Plain(number=1, extra={"k": [1, 2]})
    assert model_text(dynamic, {}) == SER.serialize(dynamic)
    assert '"_data"' in model_text(dynamic, {})
    assert _is_plain(Plain)  # the class stays plain: only this event is not
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic warns about the unexpected types
        for odd in (
            Plain.model_construct(number=True),
            Plain.model_construct(number=1.5),
            Plain.model_construct(number=1, text=b"bytes"),
        ):
            assert model_text(odd, {}) == SER.serialize(odd)


def test_a_class_is_plain_only_if_pydantic_writes_the_same_text() -> None:
    class Suspect(Event):
        number: int = 0

    def other_text(model: Any) -> str:
        return '{"number": "not the same"}'

    assert plain_fields(Suspect(number=1), other_text) is None
    assert not _is_plain(Suspect)
    assert model_text(Suspect(number=2), {}) == SER.serialize(Suspect(number=2))


def test_a_class_is_checked_on_its_first_event_with_plain_values() -> None:
    class Later(Event):
        number: int = 0

    def other_text(model: Any) -> str:
        return '{"number": "not the same"}'

    dynamic = Later(number=1, extra="x")
    assert plain_fields(dynamic, other_text) is None  # cannot tell yet: not decided
    assert Later not in PLAIN_CLASSES
    assert plain_fields(Later(number=2), other_text) is None  # checked now: not plain
    assert not _is_plain(Later)
    assert model_text(dynamic, {}) == SER.serialize(dynamic)


class One(Event):
    number: int


@pytest.mark.parametrize(
    "event",
    [
        One(number=7),
        One(number=-(2**70)),
        One(number=1, extra={"k": 1}),  # a dynamic field: None
        One.model_construct(number=True),  # a value of another type: None
        One.model_construct(),  # a missing value: None
        Plain(number=1, text='é "q"', flag=True, maybe=None, note="n"),
        Plain(number=1, extra={"k": 1}),
        Plain.model_construct(number=1.5),
        NoFields(),
    ],
    ids=lambda event: type(event).__name__,
)
def test_a_class_writer_writes_what_plain_text_does(event: Event) -> None:
    # One field takes the writer's own path, other counts the loop: both are plain_text.
    fields = plain_fields(type(event)(**_plain_values(event)), model_text_without_tail)
    assert fields is not None
    writer = plain_writer(fields, "<head>", "<tail>")
    value = plain_text(event, fields)
    expected = None if value is None else "<head>" + value + "<tail>"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert writer(event) == expected
    if isinstance(event, One) and event.__dict__.get("number") == 7:
        assert writer(event) == '<head>{"number": 7}<tail>'


def _plain_values(event: Event) -> dict[str, Any]:
    """Values of the event's class that are plain (to decide the class on)."""
    return {"number": 1} if not isinstance(event, NoFields) else {}


def model_text_without_tail(model: Any) -> str:
    """The text pydantic and the encoder write for ``model``'s dump."""
    return json.dumps(type(model).__pydantic_serializer__.to_python(model, mode="json"))
