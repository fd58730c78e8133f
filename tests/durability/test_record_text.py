"""Records written as JSON text in one pass (``encode_tick_text``, ``tickwork.stores.encoded``):
the same characters ``json.dumps`` writes for ``encode_tick``'s dictionary, and a
SQLite journal storing them reads back as before."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork import Event, StartEvent, StopEvent, Workflow, step
from tickwork.errors import WorkflowRuntimeError
from tickwork.journal import SqliteJournal
from tickwork.runtime.types.results import Completed, Failed
from tickwork.runtime.types.ticks import (
    AddEvent,
    PublishEvent,
    SessionStart,
    StepResult,
    Tick,
    Wakeup,
)
from tickwork.serde.journal_codec import (
    certain_tick_text,
    encode_tick,
    encode_tick_text,
    records_model_text,
)
from tickwork.serde.serializers import JsonSerializer, PickleSerializer
from tickwork.stores.encoded import (
    DeferredTextRecord,
    TextOutcome,
    TextRecord,
    TextStreamItem,
    record_text,
)
from tickwork.stores.store import is_progress
from tickwork.types import JournalRecord

from .json_strategies import json_values


class Note(Event):
    text: str
    ratio: float = 0.5
    tags: dict[str, Any] = {}


ODD = Note(text='h\u00e9llo \u2603 "q"\n', ratio=float("inf"), tags={"a": [1, 2.5, None, True]})

COMMON: list[Tick] = [
    SessionStart(1.5, "run-\u00e9"),
    SessionStart(1796200986.2222223, "abc"),
    AddEvent(1.25, StartEvent(value=3)),
    AddEvent(1.25, ODD, "s", emission_key=("s", 2), source_step="src", recovery_counts={"a": 1}),
    StepResult(2.0, "third", "inv-2", Completed(StopEvent(result=8))),
    StepResult(2.0, "third", "inv-2", Completed(None, 3, (), ("w1", "w2"))),
    StepResult(2.0, "t", "inv-2", Completed([Note(text="a"), ODD], 3)),
    StepResult(2.0, "t", "inv-2", Completed([], 3)),
    StepResult(float("nan"), "th\u00e9", None, Completed(ODD, 1)),  # type: ignore[arg-type]
    PublishEvent(3.0, ODD, "inv-1"),
    PublishEvent(3.0, None, None),
]


@pytest.mark.parametrize("tick", COMMON, ids=lambda tick: type(tick).__name__)
def test_a_common_tick_is_written_as_json_dumps_writes_its_record(tick: Tick) -> None:
    assert encode_tick_text(tick) == json.dumps(encode_tick(tick, JsonSerializer()))


class Opaque:
    pass


@pytest.mark.parametrize(
    "tick",
    [
        Wakeup(1.0, "s"),
        StepResult(1.0, "s", "inv-0", Failed(ValueError("x"), None, 1.0)),
        StepResult(1.0, "s", "inv-0", Completed("not a model")),
        AddEvent(1.0, Note(text="x", payload=Opaque())),  # does not dump
    ],
)
def test_other_ticks_are_left_to_the_general_path(tick: Tick) -> None:
    assert encode_tick_text(tick) is None


def test_an_event_encoded_already_is_reused() -> None:
    stop = StopEvent(result=1)
    tick = StepResult(2.0, "s", "inv-0", Completed(stop))
    assert '"event": TEXT}' in (encode_tick_text(tick, {id(stop): (stop, "TEXT")}) or "")
    record = encode_tick(tick, JsonSerializer(), {id(stop): (stop, {"known": 1})})
    assert record["outcome"]["value"] == {"event": {"known": 1}}
    other = StopEvent(result=1)  # an equal event, not the one encoded
    assert '"TEXT"' not in (encode_tick_text(tick, {id(other): (other, "TEXT")}) or "")


def _known_texts(tick: Tick) -> dict[int, tuple[Any, Any]]:
    """The texts of the events ``tick`` carries, as a writer keeps them once written."""
    outcome = getattr(tick, "outcome", None)
    value = getattr(outcome, "value", getattr(tick, "event", None))
    events = value if isinstance(value, list) else [value]
    return {id(e): (e, f'"text of {id(e)}"') for e in events if isinstance(e, Event)}


@pytest.mark.parametrize("tick", COMMON, ids=lambda tick: type(tick).__name__)
def test_a_certain_text_is_the_text_written_now(tick: Tick) -> None:
    known = _known_texts(tick)
    write = certain_tick_text(tick, known)
    certain = isinstance(tick, SessionStart) or (
        isinstance(tick, StepResult) and isinstance(tick.outcome, Completed)
    )
    assert (write is not None) == certain
    if write is not None:
        assert write() == encode_tick_text(tick, known)


@pytest.mark.parametrize(
    "tick",
    [
        StepResult(2.0, "s", "inv-0", Completed(StopEvent(result=8))),  # its event not written
        StepResult(2.0, "s", "inv-0", Completed([StopEvent(result=8)])),
        StepResult(2.0, "s", "inv-0", Completed("not a model")),
        StepResult(1.0, "s", "inv-0", Failed(ValueError("x"), None, 1.0)),
        Wakeup(1.0, "s"),
    ],
)
def test_a_text_that_could_fail_is_not_certain(tick: Tick) -> None:
    assert certain_tick_text(tick, None) is None
    assert certain_tick_text(tick, {}) is None


def test_a_deferred_record_is_written_once_when_read() -> None:
    data = encode_tick(SessionStart(1.0, "r"))
    written: list[int] = []

    def write() -> str:
        written.append(1)
        return json.dumps(data)

    record = DeferredTextRecord(4, True, write)
    assert not is_progress([record]) and written == []
    assert is_progress([record, DeferredTextRecord(5, False, write)]) and written == []
    assert record.data == data and record.data is record.data
    assert record_text(record) == record.text == json.dumps(data) and written == [1]
    assert record.seq == 4 and isinstance(record, JournalRecord)


class Custom(JsonSerializer):
    def to_record(self, value: Any) -> Any:
        return self.serialize(value)


def test_only_plain_json_serializers_take_the_text_path() -> None:
    assert records_model_text(JsonSerializer())
    assert records_model_text(JsonSerializer(allowed_types=[Note]))
    assert not records_model_text(PickleSerializer())
    assert not records_model_text(Custom())


def test_text_values_read_as_the_plain_ones() -> None:
    data = encode_tick(SessionStart(1.0, "r"))
    record = TextRecord(4, json.dumps(data), True)
    assert record.data == data and record.data is record.data
    assert (record.seq, record.data) == (4, data) and record_text(record) == json.dumps(data)
    assert record_text(JournalRecord(4, data)) == json.dumps(data)
    assert not is_progress([record]) and is_progress([record, TextRecord(5, "{}", False)])
    assert TextStreamItem(7, '{"a": 1}').event == {"a": 1}
    outcome = TextOutcome("null")
    assert outcome.result is None and outcome.error is None


class Middle(Event):
    value: int


class Steps(Workflow):
    @step
    async def first(self, ev: StartEvent) -> Middle:
        return Middle(value=ev.value + 1)

    @step
    async def last(self, ev: Middle) -> StopEvent:
        return StopEvent(result={"v": ev.value, "name": "\u00e9"})


def _rows(path: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(query).fetchall()


@pytest.mark.anyio
@pytest.mark.parametrize("serializer", [JsonSerializer(), PickleSerializer(), Custom()])
async def test_a_sqlite_journal_stores_the_same_text_and_reads_it_back(
    tmp_path: Path, serializer: Any
) -> None:
    store = SqliteJournal(tmp_path / "runs.db")
    written: list[str] = []
    as_text: list[bool] = []
    deferred: list[bool] = []
    append = store.append

    def spy(run_id: str, records: Any, *args: Any, **kwargs: Any) -> Any:
        deferred.extend(type(r) is DeferredTextRecord for r in records)
        written.extend(record_text(r) for r in records)
        as_text.extend(isinstance(r, TextRecord) for r in records)
        for r in records:  # the dictionary a store or wrapper reads is still there
            assert json.dumps(r.data) == record_text(r)
        return append(run_id, records, *args, **kwargs)

    store.append = spy  # type: ignore[method-assign]
    try:
        workflow = Steps(journal=store, timeout=10, serializer=serializer)
        handler = workflow.run(run_id="r1", value=1)
        streamed = [ev async for ev in handler.stream_events()]
        assert await handler == {"v": 2, "name": "\u00e9"}
        assert isinstance(streamed[-1], StopEvent)
        entry = await store.get_run("r1")
        assert entry is not None and entry.outcome is not None
        stop = serializer.from_record(entry.outcome.result)
        assert stop.result == {"v": 2, "name": "\u00e9"}
        [(stream_text,)] = _rows(tmp_path / "runs.db", "SELECT event FROM stream")
        [(outcome_text,)] = _rows(tmp_path / "runs.db", "SELECT outcome_result FROM runs")
        assert stream_text == outcome_text and stream_text in written[-1]
        assert [json.loads(text)["type"] for text in written] == [
            "session_start",
            "add_event",
            "step_result",
            "step_result",
        ]
        # Only the plain JSON serializer's records are written in one pass.
        assert as_text == [type(serializer) is JsonSerializer] * 4
        # The last one, compacted away by the final snapshot, only if read (here).
        assert deferred == [False, False, False, type(serializer) is JsonSerializer]
    finally:
        store.close()


class Opaque2:
    pass


class Carrier(Event):
    pass


class Unjournalable(Workflow):
    @step
    async def first(self, ev: StartEvent) -> Carrier:
        return Carrier(payload=Opaque2())

    @step
    async def second(self, ev: Carrier) -> StopEvent:
        return StopEvent(result="never durable")


@pytest.mark.anyio
async def test_a_payload_sqlite_cannot_journal_still_fails_naming_it(tmp_path: Path) -> None:
    store = SqliteJournal(tmp_path / "runs.db")
    try:
        handler = Unjournalable(journal=store, timeout=5).run(run_id="opaque-run")
        with pytest.raises(WorkflowRuntimeError, match="StepResult tick carrying Carrier"):
            await handler
    finally:
        store.close()


# -- the property: any common tick, any JSON-able payload ------------------------------

_json_values = json_values(key_size=5, text_size=12, max_leaves=8)
_notes = st.builds(
    Note,
    text=st.text(max_size=12),
    ratio=st.floats(),
    tags=st.dictionaries(st.text(max_size=5), _json_values, max_size=3),
)
_names = st.text(max_size=8)
_stamps = st.floats(allow_nan=False, allow_infinity=False, min_value=0)
_values = st.none() | _notes | st.lists(_notes, max_size=3)
_ticks = st.one_of(
    st.builds(SessionStart, _stamps, _names),
    st.builds(
        AddEvent,
        _stamps,
        _notes,
        st.none() | _names,
        emission_key=st.none() | st.tuples(_names, st.integers(0, 9)),
        source_step=st.none() | _names,
        recovery_counts=st.dictionaries(_names, st.integers(0, 5), max_size=2),
    ),
    st.builds(
        StepResult,
        _stamps,
        _names,
        st.none() | _names,
        st.builds(
            Completed,
            _values,
            st.integers(0, 9),
            st.just(()),
            st.lists(_names, max_size=2).map(tuple),
        ),
    ),
    st.builds(PublishEvent, _stamps, st.none() | _notes, st.none() | _names),
)


@settings(max_examples=300, deadline=None)
@given(_ticks)
def test_any_common_tick_reads_back_as_its_dictionary_record(tick: Tick) -> None:
    """The one-pass text is exactly ``json.dumps`` of the dictionary record (so stored
    bytes and what readers decode cannot differ between the two paths)."""
    text = encode_tick_text(tick)
    assert text is not None
    assert text == json.dumps(encode_tick(tick, JsonSerializer()))
