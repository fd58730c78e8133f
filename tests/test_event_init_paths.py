"""``DictLikeModel.__init__`` takes a fast path when every keyword is a field (a validator
remembered per class, ``_FAST_INIT``) and the general path otherwise
(``_init_with_dynamic_fields``).  Both must build the same event: the same fields, fields
set, dynamic fields, private attributes and dumps, or the same validation error."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import core_schema

from tickwork import events
from tickwork.events import (
    DictLikeModel,
    Event,
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StepFailedEvent,
    StopEvent,
    WorkflowFailedEvent,
)


class Tick(Event):
    number: int


class Defaults(Event):
    name: str
    count: int = 0
    note: Optional[str] = None


class Factory(Event):
    numbers: list[int] = Field(default_factory=list)


class Aliased(Event):
    value: int = Field(default=0, alias="v")


class Validated(Event):
    x: int

    @field_validator("x")
    @classmethod
    def _double(cls, value: int) -> int:
        return value * 2


class ModelChecked(Event):
    low: int = 0
    high: int = 0

    @model_validator(mode="after")
    def _ordered(self) -> ModelChecked:
        if self.low > self.high:
            raise ValueError("low above high")
        return self


class WithPrivate(Event):
    x: int = 0
    _secret: str = PrivateAttr(default="hidden")


class Nested(Event):
    inner: Tick
    tags: dict[str, int] = {}


class FieldStop(StopEvent):
    foo: str = ""
    bar: int = 0


class Plain(DictLikeModel):
    a: int = 1


class Pair(Event):
    number: int
    name: str


class Filled(Event):
    """Every field required, but a validator of its own can fill one."""

    number: int

    @model_validator(mode="before")
    @classmethod
    def _fill(cls, data: Any) -> Any:
        if isinstance(data, dict) and "number" not in data:
            return {**data, "number": 0}
        return data


class OwnSchema(Event):
    """Every field required, but its schema (of its own making) can fill one."""

    number: int

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        def fill(data: Any) -> Any:
            if isinstance(data, dict) and "number" not in data:
                return {**data, "number": 0}
            return data

        return core_schema.no_info_before_validator_function(fill, handler(source))


CLASSES: list[type[DictLikeModel]] = [
    Event,
    StartEvent,
    StopEvent,
    InputRequiredEvent,
    HumanResponseEvent,
    Tick,
    Defaults,
    Factory,
    Aliased,
    Validated,
    ModelChecked,
    WithPrivate,
    Nested,
    FieldStop,
    Plain,
    Pair,
    Filled,
    OwnSchema,
    WorkflowFailedEvent,
    StepFailedEvent,
]

# Candidate keywords: each class's fields, with good and bad values, and keywords that
# are not fields (dynamic fields, an alias, private attributes, ``_data``).
VALUES: dict[str, list[Any]] = {
    "number": [1, "2", "x"],
    "name": ["n", 3],
    "count": [4, "many"],
    "note": [None, "a note"],
    "numbers": [[1, 2], "nope"],
    "v": [5],
    "value": [6, "six"],
    "x": [7, "seven"],
    "low": [1, 9],
    "high": [5],
    "inner": [{"number": 3}, Tick(number=4), {"number": "bad"}],
    "tags": [{"a": 1}],
    "foo": ["f"],
    "bar": [2, "b"],
    "a": [3],
    "step_name": ["work"],
    "exception": [ValueError("boom")],
    "topic": ["t"],
    "payload": [{"k": [1]}],
    "_data": [{"seed": 0}],
    "_secret": ["told"],
}
KEYWORDS = sorted(VALUES)


def _reference(cls: type[DictLikeModel], params: dict[str, Any]) -> DictLikeModel:
    """The event the general path builds."""
    event = cls.__new__(cls)
    DictLikeModel._init_with_dynamic_fields(event, dict(params))
    return event


def _build(build: Any) -> tuple[str, Any]:
    try:
        return "ok", build()
    except ValidationError as error:
        details = error.errors(include_url=False, include_context=False)
        return "invalid", (error.title, details, str(error))
    except (TypeError, ValueError) as error:  # a ``_data`` that is not a mapping
        return "raised", (type(error), str(error))


def _state(event: DictLikeModel) -> dict[str, Any]:
    return {
        "type": type(event),
        "dict": dict(event.__dict__),
        "fields_set": set(event.__pydantic_fields_set__),
        "extra": event.__pydantic_extra__,
        "private": event._normalized_private(),
        "dynamic": dict(event.to_dict()),
        "dump": event.model_dump(),
        "json": event.model_dump_json(),
    }


def _check_same(cls: type[DictLikeModel], params: dict[str, Any]) -> None:
    """``cls(**params)`` builds what the general path builds, or fails the same way."""
    fast = _build(lambda: cls(**params))
    general = _build(lambda: _reference(cls, params))
    assert fast[0] == general[0], (cls, params, fast, general)
    if fast[0] != "ok":
        assert fast[1] == general[1], (cls, params)
        return
    assert _state(fast[1]) == _state(general[1]), (cls, params)
    assert fast[1] == general[1]


def _keyword_sets(cls: type[DictLikeModel]) -> Iterator[dict[str, Any]]:
    fields = [name for name in KEYWORDS if name in cls.model_fields]
    others = ["topic", "_data", "v", "_secret"]
    for size in range(len(fields) + 1):
        for names in itertools.combinations(fields, size):
            for extra in ([], ["topic"], ["_data", "payload"], others):
                chosen = [*names, *extra]
                for values in itertools.islice(
                    itertools.product(*(VALUES[name] for name in chosen)), 6
                ):
                    yield dict(zip(chosen, values, strict=True))


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_fast_and_general_paths_build_the_same_events(cls: type[DictLikeModel]) -> None:
    count = 0
    for params in _keyword_sets(cls):
        _check_same(cls, params)
        count += 1
    assert count > 0


@settings(max_examples=200, deadline=None)
@given(
    cls=st.sampled_from(CLASSES),
    params=st.dictionaries(
        st.sampled_from(KEYWORDS),
        st.sampled_from([0, 1, "x", None, [1], {"number": 2}]),
        max_size=5,
    ),
)
def test_fast_and_general_paths_agree_on_any_keywords(
    cls: type[DictLikeModel], params: dict[str, Any]
) -> None:
    _check_same(cls, params)


@contextmanager
def _sabotaged(cls: type[DictLikeModel], entry: tuple[Any, frozenset[str], int]) -> Iterator[None]:
    saved = events._FAST_INIT.get(cls)
    events._FAST_INIT[cls] = entry
    try:
        yield
    finally:
        if saved is None:
            events._FAST_INIT.pop(cls, None)
        else:
            events._FAST_INIT[cls] = saved


def test_the_comparison_catches_a_fast_path_that_drops_dynamic_fields() -> None:
    Tick(number=0)
    validator = events._FAST_INIT[Tick][0]
    sabotage = (validator, frozenset({"number", "topic"}), -1)
    with _sabotaged(Tick, sabotage), pytest.raises(AssertionError):
        _check_same(Tick, {"number": 1, "topic": "t"})
    _check_same(Tick, {"number": 1, "topic": "t"})


def test_the_comparison_catches_a_fast_path_with_the_wrong_validator() -> None:
    class Text(Event):
        number: str

    Tick(number=0)
    sabotage = (Text.__pydantic_validator__, frozenset({"number"}), 1)
    # Dumping the mis-validated event warns (a str where Tick says int): expected here.
    with (
        _sabotaged(Tick, sabotage),
        pytest.raises(AssertionError),
        pytest.warns(UserWarning, match="serializer"),
    ):
        _check_same(Tick, {"number": "1"})
    _check_same(Tick, {"number": "1"})


def test_the_comparison_catches_a_fast_path_that_skips_the_names_check_wrongly() -> None:
    Filled(number=0)
    validator, names, _ = events._FAST_INIT[Filled]
    with _sabotaged(Filled, (validator, names, 1)), pytest.raises(AssertionError):
        _check_same(Filled, {"topic": "t"})
    _check_same(Filled, {"topic": "t"})


@pytest.mark.parametrize(
    ("cls", "count"),
    [
        (Event, 0),
        (StartEvent, 0),
        (Tick, 1),
        (Pair, 2),
        (Defaults, -1),
        (Aliased, -1),
        (Validated, -1),
        (Filled, -1),
        (OwnSchema, -1),
        (WithPrivate, -1),
        (Factory, -1),
    ],
)
def test_only_classes_whose_keywords_must_name_every_field_skip_the_names_check(
    cls: type[DictLikeModel], count: int
) -> None:
    cls.model_rebuild()  # built, if it was deferred
    assert events._fast_init_of(cls)[2] == count


def test_a_class_is_remembered_with_its_own_built_validator() -> None:
    class Late(Event, defer_build=True):
        x: int

    assert Late not in events._FAST_INIT
    assert Late(x=1).x == 1  # builds the validator on first use
    assert Late(x=2).x == 2
    validator, names, count = events._FAST_INIT[Late]
    assert validator is Late.__dict__["__pydantic_validator__"]
    assert (names, count) == ({"x"}, 1)


def test_model_rebuild_forgets_the_remembered_validator() -> None:
    class Rebuilt(Event):
        x: int

    Rebuilt(x=1)
    old = events._FAST_INIT[Rebuilt][0]
    assert Rebuilt.model_rebuild(force=True) is True
    assert Rebuilt not in events._FAST_INIT
    assert Rebuilt(x=2).x == 2
    assert events._FAST_INIT[Rebuilt][0] is Rebuilt.__dict__["__pydantic_validator__"]
    assert events._FAST_INIT[Rebuilt][0] is not old


def test_model_rebuild_resolves_names_where_it_is_called() -> None:
    class Later(Event):
        inner: Inner  # defined below: resolved by model_rebuild()

    class Inner(BaseModel):
        x: int

    assert Later.model_rebuild() is True
    assert Later(inner={"x": 1}).inner.x == 1
    assert Later(inner={"x": 2}, topic="t").topic == "t"
    with pytest.raises(ValidationError):
        Later(inner={"x": "not a number"})


def test_stop_event_result_and_dynamic_fields_on_either_path() -> None:
    plain = StopEvent(result=3)
    assert plain.result == 3 and plain.to_dict() == {}
    dynamic = StopEvent(result=4, topic="t")
    assert dynamic.result == 4 and dynamic.to_dict() == {"topic": "t"}
    fields = FieldStop(result=5, foo="f", bar="2")
    assert (fields.result, fields.foo, fields.bar) == (5, "f", 2)
    assert fields.model_dump() == {"foo": "f", "bar": 2, "result": 5}
