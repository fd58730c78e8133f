"""The run's state store: typed or dict-like state shared by every step of a run.

Readers never wait: ``get()`` and ``get_state()`` read the committed state. Writers
(``set``, ``set_state``, ``clear``, ``edit_state``) take a FIFO writer lock and replace the
committed state with a new object built by path copying, so a reader or a checkpoint that
holds the old object keeps seeing it unchanged. ``edit_state()`` hands out an isolated
deep copy and commits it only when its block exits normally.

Public names follow §9 of the API contract. The path and patch helpers live in the private
modules ``_state_paths`` and ``_state_patch`` and are re-exported here.
"""

from __future__ import annotations

import json
import threading
import warnings
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from functools import partial
from typing import Any, Generic, Literal, Protocol, TypeVar

import anyio
import anyio.lowlevel
from pydantic import BaseModel
from typing_extensions import TypeVar as DefaultTypeVar

from tickwork.context._state_patch import (
    apply_state_patch,
    diff_trees,
    is_tree_dict,
    json_equal,
    pointer,
)
from tickwork.context._state_paths import (
    MAX_DEPTH,
    copy_state_for_edit,
    get_by_path,
    merge_state,
    set_by_path,
    set_by_path_copy,
)
from tickwork.context.serializers import BaseSerializer, JsonSerializer, PickleSerializer
from tickwork.events import DictLikeModel

__all__ = [
    "KNOWN_UNSERIALIZABLE_KEYS",
    "MAX_DEPTH",
    "DictState",
    "InMemorySerializedState",
    "InMemoryStateStore",
    "StateCheckpoint",
    "StateStore",
    "SyncStateStore",
    "UnserializableKeyWarning",
    "apply_state_patch",
    "copy_state_for_edit",
    "deserialize_state_from_dict",
    "get_by_path",
    "infer_state_type",
    "merge_state",
    "parse_in_memory_state",
    "set_by_path",
    "set_by_path_copy",
]

KNOWN_UNSERIALIZABLE_KEYS = ("memory",)
"""``DictState`` keys whose values are skipped (with a warning) when they fail to encode."""

_IN_MEMORY = "in_memory"
_SERIALIZED_MARKER = "__is_serialized"
_ABSENT: Any = object()
_T = TypeVar("_T")


class DictState(DictLikeModel):
    """The default state: a bag of dynamic fields (``DictState(_data={...})``)."""


MODEL_T = DefaultTypeVar("MODEL_T", bound=BaseModel, default=DictState)


class UnserializableKeyWarning(Warning):
    """A ``DictState`` key in ``KNOWN_UNSERIALIZABLE_KEYS`` was left out of a snapshot."""


# ---------------------------------------------------------------------------------------
# Serialized state section (§9.7)
# ---------------------------------------------------------------------------------------


class InMemorySerializedState(BaseModel):
    """The ``state`` section of a snapshot. The type names are informational only."""

    store_type: Literal["in_memory"] = "in_memory"
    state_type: str = DictState.__name__
    state_module: str = DictState.__module__
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


def _string_section(state: BaseModel, serializer: BaseSerializer) -> dict[str, Any]:
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
    """The value a :func:`_value_tree` tree stands for."""
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


class StateCheckpoint(Generic[MODEL_T]):
    """A reference to one committed state, taken without copying.

    Two checkpoints reference the same object exactly when no write happened in between
    (``a.state is b.state``). In-place mutation of objects obtained from ``store.get()``
    is invisible to :meth:`diff`.
    """

    __slots__ = ("_serializer", "_state")

    def __init__(self, state: MODEL_T, serializer: BaseSerializer | None = None) -> None:
        self._state = state
        self._serializer = serializer if serializer is not None else JsonSerializer()

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
        if type(new) is DictState and isinstance(old, DictState):
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


# ---------------------------------------------------------------------------------------
# The store (§9.1, §9.4 - §9.6)
# ---------------------------------------------------------------------------------------


class _FifoLock:
    """A writer lock that hands ownership to waiters strictly in arrival order.

    It is not tied to a task, so the blocking view can acquire it in one call from a worker
    thread and release it in another. Built on ``anyio.Event``: works on asyncio and trio.
    """

    __slots__ = ("_locked", "_waiters")

    def __init__(self) -> None:
        self._locked = False
        self._waiters: deque[anyio.Event] = deque()

    async def acquire(self) -> None:
        """Wait for the lock; a cancelled waiter gives up its place (or passes the lock on)."""
        if not self._locked:
            self._locked = True
            return
        ticket = anyio.Event()
        self._waiters.append(ticket)
        try:
            await ticket.wait()
        except BaseException:
            if ticket.is_set():
                self.release()
            else:
                self._waiters.remove(ticket)
            raise

    def release(self) -> None:
        """Hand the lock to the longest waiter, or unlock it."""
        if self._waiters:
            self._waiters.popleft().set()
        else:
            self._locked = False

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()


class StateStore(Protocol[MODEL_T]):
    """What a run's state store offers; ``InMemoryStateStore`` is the implementation."""

    @property
    def state_type(self) -> type[MODEL_T]:
        """The type of the current state."""
        ...

    async def get_state(self) -> MODEL_T:
        """A shallow copy of the committed state."""
        ...

    async def set_state(self, state: BaseModel) -> None:
        """Replace (or merge into) the committed state."""
        ...

    async def get(self, path: str, default: Any = ...) -> Any:
        """The live committed value at ``path``."""
        ...

    async def set(self, path: str, value: Any) -> None:
        """Commit ``value`` at ``path``."""
        ...

    async def clear(self) -> None:
        """Reset to the defaults of the current state type."""
        ...

    def edit_state(self) -> AbstractAsyncContextManager[MODEL_T]:
        """Lock, yield an isolated copy, commit it on normal exit."""
        ...

    def to_dict(self, serializer: BaseSerializer) -> dict[str, Any]:
        """The serialized state section."""
        ...

    @property
    def sync(self) -> SyncStateStore[MODEL_T]:
        """The blocking view for sync steps."""
        ...


class InMemoryStateStore(Generic[MODEL_T]):
    """The state store of a run: committed state in memory, FIFO writer lock.

    Readers are lockless and see only committed state. Writers are serialized in arrival
    order and replace the committed object instead of mutating it, so checkpoints stay
    valid. Works under asyncio and trio.
    """

    def __init__(self, initial_state: MODEL_T) -> None:
        self._state: MODEL_T = initial_state
        self._writer_lock = _FifoLock()
        self._edit_task: int | None = None
        self._edit_thread: int | None = None
        self._serializer: BaseSerializer | None = None
        self._sync: SyncStateStore[MODEL_T] | None = None

    def _bind_serializer(self, serializer: BaseSerializer) -> None:
        """Use ``serializer`` for checkpoints (the Context binds the run's serializer)."""
        self._serializer = serializer

    @property
    def state_type(self) -> type[MODEL_T]:
        """The type of the current state."""
        return type(self._state)

    @property
    def sync(self) -> SyncStateStore[MODEL_T]:
        """The blocking view of this store, for sync steps running in worker threads."""
        if self._sync is None:
            self._sync = SyncStateStore(self)
        return self._sync

    async def get(self, path: str, default: Any = ...) -> Any:
        """The committed value at dotted ``path`` (lockless, read-committed).

        It is the live object: mutating it in place changes committed state without the
        lock and without any checkpoint noticing. Raises ``ValueError`` naming the path
        when it is missing and no default was given.
        """
        return get_by_path(self._state, path, default)

    async def get_state(self) -> MODEL_T:
        """A shallow copy (``model_copy()``) of the committed state; nested values are shared."""
        return self._state.model_copy()

    async def set(self, path: str, value: Any) -> None:
        """Commit ``value`` at dotted ``path``, copying only the containers on the path."""
        self._refuse_inside_edit("set")
        async with self._writer_lock:
            self._state = set_by_path_copy(self._state, path, value)

    async def set_state(self, state: BaseModel) -> None:
        """Replace the state with ``state``, or merge it into a derived current state.

        An instance of the current type (or a subclass) replaces the state. An instance
        of a base class of the current type is merged with ``merge_state``, so fields only
        the derived type has survive. Anything else raises ``ValueError``.
        """
        self._refuse_inside_edit("set_state")
        async with self._writer_lock:
            self._state = self._accept_state(state)

    def _accept_state(self, state: BaseModel) -> MODEL_T:
        current_type = type(self._state)
        if isinstance(state, current_type):
            return state
        if isinstance(state, BaseModel) and issubclass(current_type, type(state)):
            return merge_state(self._state, state)
        raise ValueError(
            f"set_state() expected a {current_type.__name__} (or a subclass or base of it), "
            f"got {type(state).__name__}"
        )

    async def clear(self) -> None:
        """Reset to the defaults of the current state type.

        Raises ``ValueError`` when the type cannot be built without arguments.
        """
        self._refuse_inside_edit("clear")
        async with self._writer_lock:
            self._state = _default_state(type(self._state))

    @asynccontextmanager
    async def edit_state(self) -> AsyncIterator[MODEL_T]:
        """Hold the writer lock and yield an isolated copy of the state.

        The copy is committed when the block exits normally and discarded when it
        raises; readers see the old state until then. Any writer on this store called
        from the task holding the edit raises ``RuntimeError``.
        """
        task = self._refuse_inside_edit("edit_state")
        async with self._writer_lock:
            self._edit_task = task
            try:
                draft = copy_state_for_edit(self._state)
                yield draft
                self._state = draft
            finally:
                self._edit_task = None

    def _refuse_inside_edit(self, operation: str) -> int:
        """The current task id; ``RuntimeError`` if that task holds this store's edit."""
        task = anyio.get_current_task().id
        if task == self._edit_task:
            raise _writer_inside_edit_error(operation)
        return task

    async def _begin_thread_edit(self, thread: int) -> MODEL_T:
        """Lock for a blocking ``edit_state`` held by worker thread ``thread``."""
        await self._writer_lock.acquire()
        try:
            draft = copy_state_for_edit(self._state)
        except BaseException:
            self._writer_lock.release()
            raise
        self._edit_thread = thread
        return draft

    async def _end_thread_edit(self, draft: MODEL_T | None) -> None:
        """Commit ``draft`` (unless ``None``) and release a blocking edit's lock."""
        if draft is not None:
            self._state = draft
        self._edit_thread = None
        self._writer_lock.release()

    def checkpoint(self) -> StateCheckpoint[MODEL_T]:
        """A reference to the committed state, taken without copying."""
        return StateCheckpoint(self._state, self._serializer)

    def to_dict(self, serializer: BaseSerializer) -> dict[str, Any]:
        """The state section in string form (§9.7).

        Raises ``ValueError`` naming the key (``DictState``) or the state type that cannot
        be encoded; known-unserializable keys are skipped with an
        ``UnserializableKeyWarning``.
        """
        return _string_section(self._state, serializer)

    @classmethod
    def from_dict(cls, data: dict[str, Any], serializer: BaseSerializer) -> InMemoryStateStore[Any]:
        """A store rebuilt from a state section in string or tree form.

        Raises ``ValueError`` naming the store type in quotes when it is not
        ``"in_memory"``, or when the state cannot be decoded.
        """
        state: Any = deserialize_state_from_dict(data, serializer)
        store: InMemoryStateStore[Any] = cls(state)
        store._bind_serializer(serializer)
        return store


def _writer_inside_edit_error(operation: str) -> RuntimeError:
    return RuntimeError(
        f"{operation}() was called on a state store while the same caller holds its "
        "edit_state(); this would deadlock. Mutate the state yielded by edit_state() "
        "instead"
    )


def _default_state(state_type: type[_T]) -> _T:
    try:
        return state_type()
    except Exception as err:
        raise ValueError(
            f"cannot reset state of type {state_type.__name__}: it must be constructible "
            f"with no arguments (give every field a default) ({err})"
        ) from err


class SyncStateStore(Generic[MODEL_T]):
    """The blocking view of a state store (``store.sync``), for sync (``def``) steps.

    Each call runs the async operation on the run's event loop and blocks the calling
    worker thread until it is done. Calling it from the event-loop thread, or from a
    thread that anyio did not start for a step, raises ``RuntimeError``.
    """

    def __init__(self, store: InMemoryStateStore[MODEL_T]) -> None:
        self._store = store

    def _run(self, func: Callable[..., Awaitable[_T]], *args: Any) -> _T:
        try:
            anyio.lowlevel.current_token()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "store.sync was called from the event-loop thread, where blocking would "
                "freeze the loop; use the async store API (await ctx.store...) instead"
            )
        reached_loop = False

        async def on_loop() -> _T:
            nonlocal reached_loop
            reached_loop = True
            return await func(*args)

        try:
            return anyio.from_thread.run(on_loop)
        except RuntimeError as err:
            if reached_loop:
                raise
            raise RuntimeError(
                "store.sync cannot reach the run's event loop from this thread; it only "
                "works inside a sync step's worker thread"
            ) from err

    def _refuse_inside_edit(self, operation: str) -> None:
        if self._store._edit_thread == threading.get_ident():
            raise _writer_inside_edit_error(operation)

    def get(self, path: str, default: Any = ...) -> Any:
        """Blocking :meth:`InMemoryStateStore.get`."""
        return self._run(self._store.get, path, default)

    def set(self, path: str, value: Any) -> None:
        """Blocking :meth:`InMemoryStateStore.set`."""
        self._refuse_inside_edit("set")
        self._run(self._store.set, path, value)

    def get_state(self) -> MODEL_T:
        """Blocking :meth:`InMemoryStateStore.get_state`."""
        return self._run(self._store.get_state)

    def set_state(self, state: BaseModel) -> None:
        """Blocking :meth:`InMemoryStateStore.set_state`."""
        self._refuse_inside_edit("set_state")
        self._run(self._store.set_state, state)

    def clear(self) -> None:
        """Blocking :meth:`InMemoryStateStore.clear`."""
        self._refuse_inside_edit("clear")
        self._run(self._store.clear)

    @contextmanager
    def edit_state(self) -> Iterator[MODEL_T]:
        """Blocking :meth:`InMemoryStateStore.edit_state`, as a plain context manager."""
        self._refuse_inside_edit("edit_state")
        draft = self._run(self._store._begin_thread_edit, threading.get_ident())
        try:
            yield draft
        except BaseException:
            self._run(self._store._end_thread_edit, None)
            raise
        self._run(self._store._end_thread_edit, draft)


# ---------------------------------------------------------------------------------------
# State type inference (§9.2)
# ---------------------------------------------------------------------------------------


def infer_state_type(workflow: Any) -> type[BaseModel]:
    """The run state type: the most-derived ``T`` among the steps' ``Context[T]``.

    ``workflow`` is a workflow (its ``_get_steps()`` step functions are read) or a plain
    iterable of state types. Returns ``DictState`` when there are none; raises
    ``ValueError`` naming the conflicting types when they do not form a single
    inheritance chain.
    """
    get_steps = getattr(workflow, "_get_steps", None)
    if get_steps is None:
        return _most_derived_state_type(workflow)
    declared: list[type[BaseModel]] = []
    for step_function in get_steps().values():
        config = getattr(step_function, "_step_config", None)
        state_type = getattr(config, "context_state_type", None)
        if state_type is not None:
            declared.append(state_type)
    return _most_derived_state_type(declared)


def _most_derived_state_type(types: Iterable[type[BaseModel]]) -> type[BaseModel]:
    """The one type in ``types`` that subclasses all the others (``DictState`` if empty).

    Raises ``ValueError`` naming two types neither of which subclasses the other.
    """
    most_derived: type[BaseModel] | None = None
    for candidate in types:
        if most_derived is None or issubclass(candidate, most_derived):
            most_derived = candidate
        elif not issubclass(most_derived, candidate):
            raise ValueError(
                f"the Context[...] state types {most_derived.__name__} and "
                f"{candidate.__name__} do not form a single inheritance chain; annotate "
                "every step with the same state type or with types that subclass each other"
            )
    return most_derived if most_derived is not None else DictState
