"""Snapshots write the events of a plain class from the parts ``model_text`` uses.

The first event of a class goes through ``model_text``; once that has decided the class
is plain, the snapshot cache keeps its parts (``plain_text_parts``) and writes the next
events of the class from them.  Every text must still be the serializer's.
"""

from __future__ import annotations

from typing import Any

import pytest

from tickwork import Event
from tickwork.serde import snapshot
from tickwork.serde.serializers import JsonSerializer, model_text
from tickwork.serde.snapshot import SnapshotCache, _Encoder

SER = JsonSerializer()


class Plain(Event):
    number: int
    label: str = ""
    flag: bool | None = None


def _encoder() -> tuple[_Encoder, SnapshotCache]:
    cache = SnapshotCache()
    return _Encoder(SER, cache), cache


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")  # the float below
def test_the_next_events_of_a_plain_class_are_written_from_its_parts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[Event] = []

    def counted(model: Any, tails: Any = None) -> str:
        calls.append(model)
        return model_text(model, tails)

    monkeypatch.setattr(snapshot, "model_text", counted)
    encoder, cache = _encoder()
    first = Plain(number=1)
    assert encoder.event(first) == SER.serialize(first)
    assert Plain in cache.plain and calls == [first]
    plain = [Plain(number=-5, label='é "q"\n', flag=True), Plain(number=10**30, flag=None)]
    for event in plain:  # from the kept parts
        assert encoder.event(event) == SER.serialize(event)
    assert calls == [first]
    others = [
        Plain(number=2, extra={"k": [1, 2]}),  # a dynamic field: not plain
        Plain.model_construct(number=1.5, label="x"),  # a value of another type
        Plain.model_construct(label="no number"),  # a missing value
    ]
    for event in others:  # through model_text
        assert encoder.event(event) == SER.serialize(event)
    assert calls == [first, *others]


def test_a_rebuilt_class_is_not_written_from_its_old_parts() -> None:
    class Rebuilt(Event):
        number: int

    encoder, cache = _encoder()
    assert encoder.event(Rebuilt(number=1)) == SER.serialize(Rebuilt(number=1))
    old = cache.plain[Rebuilt]
    Rebuilt.model_rebuild(force=True)
    assert Rebuilt.__pydantic_serializer__ is not old[0]
    assert encoder.event(Rebuilt(number=2)) == SER.serialize(Rebuilt(number=2))
    assert cache.plain[Rebuilt][0] is Rebuilt.__pydantic_serializer__


def test_classes_without_kept_parts() -> None:
    class Script(Event):
        n: int = 0

    class Listed(Event):
        tags: list[str] = []

    Script.__module__ = "__main__"  # its name follows the running script: no tail kept
    encoder, cache = _encoder()
    for event in [Script(n=1), Script(n=2), Listed(tags=["a"]), Listed()]:
        assert encoder.event(event) == SER.serialize(event)
    assert Script not in cache.plain and Listed not in cache.plain


def test_a_serializer_with_its_own_model_text_keeps_no_parts() -> None:
    class Tagged(JsonSerializer):
        def _model_envelope(self, model: Any) -> dict[str, Any]:
            return {**super()._model_envelope(model), "tag": 1}

    tagged, cache = Tagged(), SnapshotCache()
    encoder = _Encoder(tagged, cache)
    for event in [Plain(number=1), Plain(number=2)]:
        assert encoder.event(event) == tagged.serialize(event)
    assert cache.plain == {}


def test_a_list_of_events_takes_cached_texts_and_encodes_the_others() -> None:
    encoder, _ = _encoder()
    cached, fresh = Plain(number=1), Plain(number=2, label="new")
    encoder.event(cached)
    touched = encoder.touched
    events = [cached, fresh, None, cached, fresh]
    expected = [None if ev is None else SER.serialize(ev) for ev in events]
    assert encoder.events(events) == expected
    assert encoder.touched == touched + 4  # every event counts, as in event() (None not)
    assert {id(cached), id(fresh)} <= encoder.values.keys()
