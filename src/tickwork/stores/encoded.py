"""Journal values handed to a store as their JSON text, already written.

A durable run encodes what it appends before it waits for its commit.  For a store
that writes JSON text (``takes_record_text = True``: the SQLite store), the writer
gives the common records, stream items and outcomes as that text, written in one pass
(``tickwork.serde.journal_codec.encode_tick_text``), instead of dictionaries the
store would dump: the text is exactly what ``json.dumps`` gives for the dictionary.
Each class here is the usual record class: its dictionary field is parsed from the
text on first read, so code that reads it (a wrapper around the store, a test) sees
what it always saw.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from tickwork.stores.records import RunOutcome, StreamItem
from tickwork.types import JournalRecord

__all__ = [
    "DeferredTextRecord",
    "TextOutcome",
    "TextRecord",
    "TextStreamItem",
    "TextValue",
    "record_text",
    "value_text",
]


class TextRecord(JournalRecord):
    """A ``JournalRecord`` given as its JSON ``text``; ``opens`` says whether it is the
    record a session opens with (``opens_session`` without parsing it)."""

    text: str
    opens: bool

    def __init__(self, seq: int, text: str, opens: bool) -> None:
        object.__setattr__(self, "seq", seq)
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "opens", opens)

    @property
    def data(self) -> dict[str, Any]:
        """The record's JSON data, parsed from ``text`` (once)."""
        parsed: dict[str, Any] = _parsed(self, "text")
        return parsed


class DeferredTextRecord(TextRecord):
    """A ``TextRecord`` whose ``text`` is written on first use, by ``write`` (which
    cannot fail): a record that its append's own snapshot compacts away (the last
    records of a finished run) is then never written at all by a store that knows it
    (the SQLite store), and read as usual by any other."""

    def __init__(self, seq: int, opens: bool, write: Callable[[], str]) -> None:
        object.__setattr__(self, "seq", seq)
        object.__setattr__(self, "opens", opens)
        object.__setattr__(self, "_write", write)

    @property
    def text(self) -> str:  # type: ignore[override]
        """The record's JSON text, written once."""
        cache = self.__dict__
        if "_text" not in cache:
            object.__setattr__(self, "_text", cache["_write"]())
        written: str = cache["_text"]
        return written

    @property
    def data(self) -> dict[str, Any]:
        """The record's JSON data, parsed from ``text`` (once)."""
        text = self.text
        cache = self.__dict__
        if "_parsed" not in cache:
            object.__setattr__(self, "_parsed", json.loads(text))
        parsed: dict[str, Any] = cache["_parsed"]
        return parsed


class TextStreamItem(StreamItem):
    """A ``StreamItem`` whose event record is given as its JSON ``text``."""

    text: str

    def __init__(self, seq: int, text: str) -> None:
        object.__setattr__(self, "seq", seq)
        object.__setattr__(self, "text", text)

    @property
    def event(self) -> Any:
        """The event's record, parsed from ``text`` (once)."""
        return _parsed(self, "text")


class TextOutcome(RunOutcome):
    """A ``RunOutcome`` of a completed run whose result record is given as its JSON
    ``result_text``."""

    result_text: str

    def __init__(self, result_text: str) -> None:
        object.__setattr__(self, "result_text", result_text)
        object.__setattr__(self, "error", None)

    @property
    def result(self) -> Any:
        """The result's record, parsed from ``result_text`` (once)."""
        return _parsed(self, "result_text")


class TextValue(dict):  # type: ignore[type-arg]
    """A JSON-compatible dictionary given with ``text``, the JSON text ``json.dumps``
    writes for it (a run's start event record: its text was written for its first
    journal record anyway)."""

    __slots__ = ("text",)

    def __init__(self, value: Mapping[str, Any], text: str) -> None:
        super().__init__(value)
        self.text = text


def _parsed(value: object, name: str) -> Any:
    """The JSON of ``value``'s text attribute ``name``, parsed on first use and kept
    (every read sees the same object, as with the plain classes)."""
    cache = value.__dict__
    if "_parsed" not in cache:
        object.__setattr__(value, "_parsed", json.loads(cache[name]))
    return cache["_parsed"]


def record_text(record: JournalRecord) -> str:
    """The JSON text of ``record``: its own when it has one, else ``json.dumps``."""
    if isinstance(record, TextRecord):  # a ``DeferredTextRecord`` writes it now
        return record.text
    return json.dumps(record.data)


def value_text(value: Any) -> str:
    """The JSON text of ``value``: its own for a ``TextValue``, else ``json.dumps``."""
    if type(value) is TextValue:
        return value.text
    return json.dumps(value)
