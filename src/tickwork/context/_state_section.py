"""Serialized state sections, checkpoints and their diffs (§9.2, §9.7, §9.8).

The public names here are re-exported by ``tickwork.context.state_store``, which is
their documented home (their ``__module__`` says so, and ``DictState`` snapshots record
``state_module = "tickwork.context.state_store"``).

Two encodings of a state section exist. The **string form** (``InMemoryStateStore.to_dict``)
stores each ``DictState`` value, or a typed state's envelope, as one serializer string.
The **tree form** (``StateCheckpoint.to_dict``) stores JSON trees instead, so that a JSON
Patch can address a single key or field and ``StateCheckpoint.diff`` can emit one.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any, Generic, Literal

from pydantic import BaseModel
from typing_extensions import TypeVar

from tickwork._lazy import built_on_first_use
from tickwork.context._dict_state import DictState
from tickwork.context._state_patch import diff_trees, is_tree_dict, json_equal, pointer
from tickwork.events import DictLikeModel
from tickwork.serde.serializers import (
    BaseSerializer,
    JsonSerializer,
    PickleSerializer,
    register_framework_types,
)

__all__ = [
    "KNOWN_UNSERIALIZABLE_KEYS",
    "MODEL_T",
    "DictState",
    "InMemorySerializedState",
    "StateCheckpoint",
    "UnserializableKeyWarning",
    "deserialize_state_from_dict",
    "parse_in_memory_state",
    "string_section",
]

_PUBLIC_MODULE = "tickwork.context.state_store"

KNOWN_UNSERIALIZABLE_KEYS = ("memory",)
"""``DictState`` keys whose values are skipped (with a warning) when they fail to encode."""

_IN_MEMORY = "in_memory"
_SERIALIZED_MARKER = "__is_serialized"
_ABSENT: Any = object()


register_framework_types(DictState)  # so that allow-listed serializers admit it

MODEL_T = TypeVar("MODEL_T", bound=BaseModel, default=DictState)


class UnserializableKeyWarning(Warning):
    """A ``DictState`` key in ``KNOWN_UNSERIALIZABLE_KEYS`` was left out of a snapshot."""


# ---------------------------------------------------------------------------------------
# Serialized state section (§9.7)
# ---------------------------------------------------------------------------------------


@built_on_first_use
class InMemorySerializedState(BaseModel, defer_build=True):
    """The ``state`` section of a snapshot. The type names are informational only."""

    store_type: Literal["in_memory"] = "in_memory"
    state_type: str = DictState.__name__
    # The module DictState was declared in before it moved to _dict_state: the value
    # this default has always had.
    state_module: str = "tickwork.context._state_section"
    state_data: Any = None


def parse_in_memory_state(data: dict[str, Any]) -> InMemorySerializedState:
    """Validate a state section; a missing ``store_type`` means ``"in_memory"``.

    Raises ``ValueError`` naming any other store type in quotes (e.g. ``'sql'``).
    ``state_data`` is kept verbatim.
    """
    if not isinstance(data, dict):
        raise ValueError(f"a state section must be a dict, got {type(data).__name__}")
    store_type = data.get("store_type", _IN_MEMORY)
    if store_type != _IN_MEMORY:
        raise ValueError(
            f"unsupported state store type {store_type!r}: tickwork only ships the "
            f"{_IN_MEMORY!r} store"
        )
    return InMemorySerializedState.model_validate({**data, "store_type": _IN_MEMORY})


def _section(state: BaseModel, state_data: Any) -> dict[str, Any]:
    cls = type(state)
    return {
        "store_type": _IN_MEMORY,
        "state_type": cls.__name__,
        "state_module": cls.__module__,
        "state_data": state_data,
    }


def _encode_dict_state(
    state: DictLikeModel, encode: Callable[[Any], Any], *, warn: bool
) -> dict[str, Any]:
    """``{key: encode(value)}`` over the dynamic fields, skipping known-unserializable keys.

    Raises ``ValueError`` naming the key for any other failure.
    """
    encoded: dict[str, Any] = {}
    for key, value in state._data.items():
        try:
            encoded[key] = encode(value)
        except Exception as err:
            if key in KNOWN_UNSERIALIZABLE_KEYS:
                if warn:
                    warnings.warn(
                        f"state key {key!r} ({type(value).__name__}) cannot be serialized "
                        "and is left out of the snapshot",
                        UnserializableKeyWarning,
                        stacklevel=4,
                    )
                continue
            raise ValueError(f"cannot serialize state key {key!r}: {err}") from err
    return encoded


def _serialize_model(state: BaseModel, serializer: BaseSerializer) -> str:
    try:
        return serializer.serialize(state)
    except Exception as err:
        raise ValueError(f"cannot serialize state of type {type(state).__name__}: {err}") from err


def string_section(state: BaseModel, serializer: BaseSerializer) -> dict[str, Any]:
    """The state section in string form (what ``InMemoryStateStore.to_dict`` writes)."""
    if type(state) is DictState:
        data = _encode_dict_state(state, serializer.serialize, warn=True)
        return _section(state, {"_data": data})
    return _section(state, _serialize_model(state, serializer))


def _is_json_family(serializer: BaseSerializer) -> bool:
    """Whether ``serializer.serialize`` output is tickwork's own JSON (or a pickle blob)."""
    return type(serializer) in (JsonSerializer, PickleSerializer)


def _value_tree(serializer: BaseSerializer, value: Any) -> Any:
    """The tree form of one state value: plain dicts and lists are walked, leaves encoded.

    With tickwork's JSON serializers a leaf becomes its JSON tree; anything else (a pickle
    blob, another serializer's text) is kept as ``{"__is_serialized": true, "value": s}``.
    """
    if is_tree_dict(value):
        return {key: _value_tree(serializer, item) for key, item in value.items()}
    if type(value) is list:
        return [_value_tree(serializer, item) for item in value]
    json_family = _is_json_family(serializer)
    if json_family and (value is None or type(value) in (str, int, float, bool)):
        return value
    text = serializer.serialize(value)
    if json_family:
        try:
            return json.loads(text)
        except ValueError:
            pass
    return {_SERIALIZED_MARKER: True, "value": text}


def _decode_value_tree(serializer: BaseSerializer, tree: Any) -> Any:
    """The value a ``_value_tree`` tree stands for."""
    if type(tree) is dict:
        if tree.get(_SERIALIZED_MARKER) is True:
            return serializer.deserialize(str(tree.get("value")))
        if tree.get("__is_pydantic") is True or tree.get("__is_component") is True:
            return serializer.deserialize(json.dumps(tree))
        return {key: _decode_value_tree(serializer, item) for key, item in tree.items()}
    if type(tree) is list:
        return [_decode_value_tree(serializer, item) for item in tree]
    return tree


def _model_tree(state: BaseModel, serializer: BaseSerializer) -> dict[str, Any]:
    """A typed state's tree: the envelope's keys, or an opaque blob if not JSON."""
    text = _serialize_model(state, serializer)
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and parsed.get("__is_pydantic") is True:
        return {"_tree": "model", **parsed}
    return {"_tree": "opaque", "value": text}


def _tree_section(state: BaseModel, serializer: BaseSerializer) -> dict[str, Any]:
    """The state section in tree form (what ``StateCheckpoint.to_dict`` writes)."""
    if type(state) is DictState:
        encode = partial(_value_tree, serializer)
        data = _encode_dict_state(state, encode, warn=True)
        return _section(state, {"_tree": "dict", "_data": data})
    return _section(state, _model_tree(state, serializer))


def _require_model(value: Any, source: str) -> BaseModel:
    if not isinstance(value, BaseModel):
        raise ValueError(
            f"{source} decoded to a {type(value).__name__}, not a pydantic model state"
        )
    return value


def _decode_tree_form(state_data: dict[str, Any], serializer: BaseSerializer) -> BaseModel:
    kind = state_data.get("_tree")
    if kind == "dict":
        data = state_data.get("_data") or {}
        if not isinstance(data, dict):
            raise ValueError("state_data._data of a dict tree must be a dict")
        decoded = {key: _decode_value_tree(serializer, tree) for key, tree in data.items()}
        return DictState(_data=decoded)
    if kind == "model":
        envelope = {key: value for key, value in state_data.items() if key != "_tree"}
        return _require_model(serializer.deserialize(json.dumps(envelope)), "state_data")
    if kind == "opaque":
        blob = str(state_data.get("value"))
        return _require_model(serializer.deserialize(blob), "state_data")
    raise ValueError(f"unknown state tree kind {kind!r}; expected 'dict' or 'model'")


def deserialize_state_from_dict(
    data: dict[str, Any] | None, serializer: BaseSerializer
) -> BaseModel:
    """Decode a state section (string or tree form) by the shape of its ``state_data``.

    ``None`` (or no ``state_data``) gives an empty ``DictState``. The stored type names
    are never used to import anything: typed states are rebuilt from their envelopes
    through ``serializer``. Raises ``ValueError`` for any other shape, a non-in-memory
    store type, or a value the serializer cannot decode.
    """
    if data is None:
        return DictState()
    state_data = parse_in_memory_state(data).state_data
    if state_data is None:
        return DictState()
    if isinstance(state_data, dict):
        if "_tree" in state_data:
            return _decode_tree_form(state_data, serializer)
        if "_data" in state_data:
            return _decode_string_dict(state_data["_data"], serializer)
    if isinstance(state_data, str):
        return _require_model(serializer.deserialize(state_data), "state_data")
    raise ValueError(
        f"cannot decode state_data of type {type(state_data).__name__}: expected a string, "
        "a dict with '_data', or a tree with '_tree'"
    )


def _decode_string_dict(data: Any, serializer: BaseSerializer) -> DictState:
    if not isinstance(data, dict):
        raise ValueError(f"state_data._data must be a dict, got {type(data).__name__}")
    decoded: dict[str, Any] = {}
    for key, value in data.items():
        try:
            decoded[key] = serializer.deserialize(value) if isinstance(value, str) else value
        except Exception as err:
            raise ValueError(f"cannot decode state key {key!r}: {err}") from err
    return DictState(_data=decoded)


# ---------------------------------------------------------------------------------------
# Checkpoints and diffs (§9.8)
# ---------------------------------------------------------------------------------------


_DEFAULT_SERIALIZER = JsonSerializer()
"""The serializer of checkpoints taken without one: shared (a default ``JsonSerializer``
holds nothing that changes), not made per checkpoint (a journaled run takes one at each
commit, and keeps the last)."""


class StateCheckpoint(Generic[MODEL_T]):
    """A reference to one committed state, taken without copying.

    Two checkpoints reference the same object exactly when no write happened in between
    (``a.state is b.state``). In-place mutation of objects obtained from ``store.get()``
    is invisible to ``diff``.
    """

    __slots__ = ("_serializer", "_state")

    def __init__(self, state: MODEL_T, serializer: BaseSerializer | None = None) -> None:
        self._state = state
        self._serializer = serializer if serializer is not None else _DEFAULT_SERIALIZER

    @property
    def state(self) -> MODEL_T:
        """The referenced (committed) state model."""
        return self._state

    def to_dict(self) -> dict[str, Any]:
        """The state section in tree form, encoded with the store's serializer."""
        return _tree_section(self._state, self._serializer)

    def diff(self, since: StateCheckpoint[Any]) -> list[dict[str, Any]]:
        """A JSON Patch turning ``since.to_dict()`` into ``self.to_dict()``.

        Paths are rooted at the state section (``/state_data/_data/<key>``). Subtrees
        shared by identity are skipped without being walked, so the cost follows what
        changed. Returns ``[]`` when both reference the same object.
        """
        old, new = since._state, self._state
        if old is new:
            return []
        if type(old) is not type(new):
            return [{"op": "replace", "path": "", "value": self.to_dict()}]
        if type(new) is DictState and isinstance(new, DictState) and isinstance(old, DictState):
            return _diff_dict_state(old, new, self._serializer)
        return _diff_model_state(old, new, self._serializer)


def _try_tree(encode: Callable[[Any], Any], value: Any) -> Any:
    try:
        return encode(value)
    except Exception:
        return _ABSENT


def _diff_skippable_key(
    path: str, old_value: Any, new_value: Any, encode: Callable[[Any], Any]
) -> list[dict[str, Any]]:
    """Ops for a known-unserializable key, which to_dict leaves out when it fails."""
    old_tree = _ABSENT if old_value is _ABSENT else _try_tree(encode, old_value)
    new_tree = _ABSENT if new_value is _ABSENT else _try_tree(encode, new_value)
    if old_tree is _ABSENT and new_tree is _ABSENT:
        return []
    if new_tree is _ABSENT:
        return [{"op": "remove", "path": path}]
    if old_tree is _ABSENT:
        return [{"op": "add", "path": path, "value": new_tree}]
    if json_equal(old_tree, new_tree):
        return []
    return [{"op": "replace", "path": path, "value": new_tree}]


def _diff_dict_state(
    old: DictState, new: DictState, serializer: BaseSerializer
) -> list[dict[str, Any]]:
    old_data, new_data = old._data, new._data
    encode = partial(_value_tree, serializer)
    base = "/state_data/_data"
    ops: list[dict[str, Any]] = []
    for key in old_data.keys() - new_data.keys():
        if key in KNOWN_UNSERIALIZABLE_KEYS:
            ops.extend(_diff_skippable_key(pointer(base, key), old_data[key], _ABSENT, encode))
        else:
            ops.append({"op": "remove", "path": pointer(base, key)})
    for key, value in new_data.items():
        old_value = old_data.get(key, _ABSENT)
        if old_value is value:
            continue
        path = pointer(base, key)
        if key in KNOWN_UNSERIALIZABLE_KEYS:
            ops.extend(_diff_skippable_key(path, old_value, value, encode))
            continue
        try:
            if old_value is _ABSENT:
                ops.append({"op": "add", "path": path, "value": encode(value)})
            else:
                ops.extend(diff_trees(path, old_value, value, encode))
        except Exception as err:
            raise ValueError(f"cannot serialize state key {key!r}: {err}") from err
    return ops


def _field_diff_supported(old: BaseModel, new: BaseModel, serializer: BaseSerializer) -> bool:
    """Whether a typed state's envelope value is exactly its fields' JSON dumps."""
    serializers = type(new).__pydantic_decorators__.model_serializers
    return (
        type(serializer) is JsonSerializer
        and set(serializers) <= {"_dump_with_data"}
        and not old.__pydantic_extra__
        and not new.__pydantic_extra__
    )


def _same_entries(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return old is new or (old.keys() == new.keys() and all(old[k] is new[k] for k in old))


def _diff_model_state(
    old: BaseModel, new: BaseModel, serializer: BaseSerializer
) -> list[dict[str, Any]]:
    if not _field_diff_supported(old, new, serializer):
        new_tree = _model_tree(new, serializer)
        if json_equal(_model_tree(old, serializer), new_tree):
            return []
        return [{"op": "replace", "path": "/state_data", "value": new_tree}]
    cls = type(new)
    names = [
        name
        for name, field in cls.model_fields.items()
        if field.exclude is not True
        and old.__dict__.get(name, _ABSENT) is not new.__dict__.get(name, _ABSENT)
    ]
    data_changed = isinstance(old, DictLikeModel) and not _same_entries(
        old._data,
        new._data,  # type: ignore[attr-defined]
    )
    if not names and not data_changed:
        return []
    keys = [*names, *cls.model_computed_fields]
    if data_changed:
        keys.append("_data")
    old_part = _dump_fields(old, keys)
    new_part = _dump_fields(new, keys)
    ops: list[dict[str, Any]] = []
    for key in keys:
        path = pointer("/state_data/value", key)
        before, after = old_part.get(key, _ABSENT), new_part.get(key, _ABSENT)
        if after is _ABSENT and before is not _ABSENT:
            ops.append({"op": "remove", "path": path})
        elif before is _ABSENT and after is not _ABSENT:
            ops.append({"op": "add", "path": path, "value": after})
        elif after is not _ABSENT:
            ops.extend(diff_trees(path, before, after, _identity))
    return ops


def _identity(value: Any) -> Any:
    return value


def _dump_fields(state: BaseModel, keys: list[str]) -> dict[str, Any]:
    """The JSON dump of ``keys`` of ``state`` (``_data`` comes with every dump)."""
    try:
        dumped: dict[str, Any] = state.model_dump(mode="json", include=set(keys))
    except ValueError as err:
        raise ValueError(f"cannot serialize state of type {type(state).__name__}: {err}") from err
    return dumped


for _public in (DictState, UnserializableKeyWarning, InMemorySerializedState, StateCheckpoint):
    _public.__module__ = _PUBLIC_MODULE
del _public
