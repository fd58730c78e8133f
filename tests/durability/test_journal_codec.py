"""Journal records (``tickwork.serde.journal_codec``): the two forms an event may take."""

from __future__ import annotations

import json

import pytest

from tickwork import Event
from tickwork.runtime.types.results import Completed
from tickwork.runtime.types.ticks import AddEvent, PublishEvent, StepResult
from tickwork.serde.journal_codec import decode_tick, encode_tick
from tickwork.serde.serializers import JsonSerializer, PickleSerializer


class Note(Event):
    text: str


def _round_trip(record: dict[str, object]) -> dict[str, object]:
    return json.loads(json.dumps(record))  # what a store does


def test_the_json_serializer_stores_envelopes_as_data_and_reads_them_back() -> None:
    tick = AddEvent(1.0, Note(text="hi", extra=1))
    record = encode_tick(tick)
    assert record["event"] == {
        "__is_pydantic": True,
        "value": {"text": "hi", "_data": {"extra": 1}},
        "qualified_name": f"{__name__}.Note",
    }
    back = decode_tick(_round_trip(record))
    assert isinstance(back, AddEvent) and back.event == tick.event


def test_records_with_serializer_text_still_read() -> None:
    text = JsonSerializer().serialize(Note(text="old"))
    record = _round_trip(encode_tick(StepResult(2.0, "s", "inv-0", Completed(Note(text="x")))))
    record["outcome"]["value"]["event"] = text  # type: ignore[index]  # the earlier form
    back = decode_tick(record)
    assert isinstance(back, StepResult) and back.outcome.value == Note(text="old")  # type: ignore[union-attr]


def test_a_pickle_serializer_keeps_writing_text() -> None:
    ser = PickleSerializer()
    record = encode_tick(PublishEvent(3.0, Note(text="p"), "inv-1"), ser)
    assert isinstance(record["event"], str)
    assert decode_tick(_round_trip(record), ser).event == Note(text="p")  # type: ignore[attr-defined]


@pytest.mark.parametrize("bad", [42, ["x"], {"value": {}}])
def test_an_event_that_is_neither_text_nor_an_envelope_is_rejected(bad: object) -> None:
    record = _round_trip(encode_tick(AddEvent(1.0, Note(text="hi"))))
    record["event"] = bad
    with pytest.raises(ValueError, match="serializer text or a model envelope"):
        decode_tick(record)
