"""The JSON text of an event whose fields are plain JSON scalars, written without pydantic.

Snapshots write the text of every event a run holds, and for the events most runs pass
around (a few ``int``, ``str`` or ``bool`` fields) pydantic's serializer and the JSON
encoder cost most of it: pydantic calls back into ``DictLikeModel``'s wrap serializer
for every event.  For such a class the dump is the field values in declaration order,
which ``plain_fields`` decides once per class from the class's core schema (what
pydantic's serializer is built from), and confirms on the first event of the class
against what pydantic and the encoder write.  An event is written this way only when each
of its values has exactly a type its field allows and it has no dynamic fields; anything
else goes to pydantic.  The text is the one ``json.dumps`` writes for the dump (its
default separators, ASCII only): ``int.__repr__`` for an int, ``encode_basestring_ascii``
for a string, as the encoder itself does.
"""

from __future__ import annotations

from collections.abc import Callable
from json.encoder import encode_basestring_ascii
from typing import Any

from pydantic import BaseModel

from tickwork.events import DictLikeModel

__all__ = ["PLAIN_CLASSES", "PlainFields", "plain_fields", "plain_text", "plain_writer"]

PlainFields = tuple[tuple[str, str, dict[type, Callable[[Any], str]]], ...]
"""``(field name, its key's text and ": ", the writer of a value by exact type)`` per
field, in order."""

# The wrap serializer every tickwork event has: it adds the dynamic fields, if any.
_DUMP_WITH_DATA = DictLikeModel.__pydantic_decorators__.model_serializers["_dump_with_data"].func

_BOOLEANS = {True: "true", False: "false"}


def _null(value: None) -> str:
    return "null"


# Core schema type -> the exact Python type of a value it dumps unchanged in JSON mode,
# and how the encoder writes that value.
_INT_TEXT = int.__repr__

_SCALARS: dict[str, tuple[type, Callable[[Any], str]]] = {
    "int": (int, _INT_TEXT),
    "str": (str, encode_basestring_ascii),
    "bool": (bool, _BOOLEANS.__getitem__),
}

# The keys a model field's schema may have: none of them changes the dump
# (``serialization_alias``, ``serialization_exclude`` and the like would).
_FIELD_KEYS = frozenset({"type", "schema", "metadata", "validation_alias", "frozen"})

_MAX_CLASSES = 4096

PLAIN_CLASSES: dict[type, tuple[Any, PlainFields | None]] = {}
"""Class -> (its serializer when decided, its plain fields or ``None``)."""

_CANDIDATES: dict[type, tuple[Any, PlainFields]] = {}
"""Class -> (its serializer, its plain fields) for a class that looks plain but whose
events met so far had no plain values to check it on."""


def _writers(schema: dict[str, Any]) -> dict[type, Callable[[Any], str]] | None:
    """The writers of the values a field schema dumps unchanged, or ``None``."""
    if "serialization" in schema:
        return None
    kind = schema.get("type")
    if kind in _SCALARS:
        value_type, writer = _SCALARS[kind]
        return {value_type: writer}
    if kind == "default":
        return _writers(schema["schema"])
    if kind == "nullable":
        inner = _writers(schema["schema"])
        return None if inner is None else {**inner, type(None): _null}
    return None


def _schema_fields(cls: type[BaseModel]) -> PlainFields | None:
    """The plain fields of ``cls`` read from its core schema, or ``None``."""
    if not cls.__dict__.get("__pydantic_complete__", False):
        return None
    schema: Any = cls.__pydantic_core_schema__
    serialization = schema.get("serialization")
    if (
        schema.get("type") != "model"
        or schema.get("cls") is not cls
        or schema.get("root_model")
        or serialization is None
        or serialization.get("type") != "function-wrap"
        or serialization.get("function") is not _DUMP_WITH_DATA
        or schema.get("config", {}).get("extra_fields_behavior") == "allow"
    ):
        return None
    inner = schema.get("schema", {})
    if (
        inner.get("type") != "model-fields"
        or inner.get("computed_fields")
        or inner.get("extras_schema") is not None
        or inner.get("extra_behavior") == "allow"
    ):
        return None
    fields: list[tuple[str, str, dict[type, Callable[[Any], str]]]] = []
    for name, field in inner["fields"].items():
        if field.get("type") != "model-field" or not field.keys() <= _FIELD_KEYS:
            return None
        writers = _writers(field["schema"])
        if writers is None:
            return None
        fields.append((name, encode_basestring_ascii(name) + ": ", writers))
    return tuple(fields)


def plain_fields(model: BaseModel, pydantic_text: Callable[[BaseModel], str]) -> PlainFields | None:
    """The plain fields of ``model``'s class, or ``None`` if its events go to pydantic.

    Decided once per class (again after a ``model_rebuild()``): the first event of a
    class that looks plain and has plain values is written both ways (``pydantic_text``
    is the other way), and the class is plain only if the two texts are equal.  Until
    such an event comes, the class's events go to pydantic (``None``).
    """
    cls = type(model)
    serializer = cls.__pydantic_serializer__
    entry = PLAIN_CLASSES.get(cls)
    if entry is not None and entry[0] is serializer:
        return entry[1]
    candidate = _CANDIDATES.get(cls)
    if candidate is not None and candidate[0] is serializer:
        fields: PlainFields | None = candidate[1]
    else:
        fields = _schema_fields(cls)
    if fields is not None:
        text = plain_text(model, fields)
        if text is None:  # this event cannot tell: the next one will
            _remember(_CANDIDATES, cls, (serializer, fields))
            return None
        if text != pydantic_text(model):
            fields = None
    _CANDIDATES.pop(cls, None)
    _remember(PLAIN_CLASSES, cls, (serializer, fields))
    return fields


def _remember(table: dict[type, Any], cls: type, entry: Any) -> None:
    """``table[cls] = entry``, the table bounded: classes made on the fly must not pile
    up."""
    if len(table) >= _MAX_CLASSES:
        table.clear()
    table[cls] = entry


def plain_text(model: BaseModel, fields: PlainFields) -> str | None:
    """The JSON text of ``model``'s dump, or ``None`` if a value is not plain or it has
    dynamic fields."""
    private = model.__pydantic_private__
    if private and private.get("_data"):
        return None
    values = model.__dict__
    parts = []
    for name, key, writers in fields:
        value = values.get(name, writers)  # a missing value: not a plain one
        writer = writers.get(type(value))
        if writer is None:
            return None
        parts.append(key + writer(value))
    return "{" + ", ".join(parts) + "}"


def plain_writer(fields: PlainFields, head: str, tail: str) -> Callable[[Any], str | None]:
    """A function writing ``head + plain_text(model, fields) + tail`` (``None`` where
    ``plain_text`` is ``None``), for the many events of one class a snapshot writes.

    An event class with one field is the usual case: its writer has the text around the
    value made once (``head``, the brace and the key; the brace and ``tail``), so an event
    costs a lookup of its value, of the value's writer and two concatenations.
    """
    if len(fields) != 1:

        def write_fields(model: Any) -> str | None:
            text = plain_text(model, fields)
            return None if text is None else head + text + tail

        return write_fields
    ((name, key, writers),) = fields
    before, after = head + "{" + key, "}" + tail

    def write_field(model: Any) -> str | None:
        private = model.__pydantic_private__
        if private and private.get("_data"):
            return None
        value = model.__dict__.get(name, writers)  # a missing value: not a plain one
        writer = writers.get(type(value))
        if writer is _INT_TEXT:  # an int's text is its str(): written in one join
            return f"{before}{value}{after}"
        if writer is None:
            return None
        return before + writer(value) + after

    return write_field
