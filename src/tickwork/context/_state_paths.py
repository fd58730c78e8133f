"""Dotted paths into state models, and the copies the state store makes of them.

Public names are re-exported by ``tickwork.context.state_store``; see §9.3 of the API
contract. Everything here is a plain function over user objects: no locks, no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from tickwork.events import DictLikeModel

__all__ = [
    "MAX_DEPTH",
    "copy_state_for_edit",
    "get_by_path",
    "merge_state",
    "set_by_path",
    "set_by_path_copy",
]

MAX_DEPTH = 1000
"""The most segments a state path may have."""

ModelT = TypeVar("ModelT", bound=BaseModel)


class _Missing(Exception):
    """Internal signal: a path segment does not exist in its container."""


_ABSENT: Any = object()

# Values of these exact types are immutable, so an edit copy may share them.
_ATOMIC_TYPES: frozenset[type] = frozenset(
    {str, bytes, int, float, complex, bool, type(None), type(Ellipsis), range}
)


def _split_path(path: str) -> list[str]:
    """The segments of ``path``; ``ValueError`` when it is empty or deeper than MAX_DEPTH."""
    if not path:
        raise ValueError("a state path must not be empty; use get_state() for the whole state")
    segments = path.split(".")
    if len(segments) > MAX_DEPTH:
        raise ValueError(
            f"state path {path[:60]!r}... has {len(segments)} segments; the limit is "
            f"MAX_DEPTH = {MAX_DEPTH}"
        )
    return segments


def _list_index(segment: str, length: int) -> int:
    """``segment`` as an index into a sequence of ``length`` items, or ``_Missing``."""
    try:
        index = int(segment)
    except ValueError:
        raise _Missing from None
    if not -length <= index < length:
        raise _Missing
    return index


def _is_dynamic_key(model: BaseModel, segment: str) -> bool:
    """Whether ``segment`` names a dynamic field slot (neither declared nor private)."""
    if not isinstance(model, DictLikeModel):
        return False
    cls = type(model)
    return (
        segment not in cls.model_fields
        and segment not in cls.__private_attributes__
        and segment not in cls._manual_private
    )


def _child(container: Any, segment: str) -> Any:
    """One step down ``container``: dict key, list index, field, dynamic key, attribute.

    Dicts and other mappings are walked by key only, and so are ``DictLikeModel`` dynamic
    keys: a key named like a method (``items``, ``get``, ``copy``...) is missing until it
    is set, never the bound method. Attributes are reached on other objects only (and,
    on a ``DictLikeModel``, for properties its class defines). Raises ``_Missing`` when
    there is no such child.
    """
    if isinstance(container, dict):
        if segment in container:
            return container[segment]
        raise _Missing
    if isinstance(container, (list, tuple)):
        return container[_list_index(segment, len(container))]
    if isinstance(container, BaseModel):
        if segment in type(container).model_fields:
            return getattr(container, segment)
        if isinstance(container, DictLikeModel):
            return _dict_like_child(container, segment)
    elif isinstance(container, Mapping):
        if segment in container:
            return container[segment]
        raise _Missing
    try:
        return getattr(container, segment)
    except AttributeError:
        raise _Missing from None


def _dict_like_child(model: DictLikeModel, segment: str) -> Any:
    """``segment`` of a ``DictLikeModel`` that is not a declared field."""
    # Read ``_data`` without creating it: a read must not change the committed object.
    private = model.__pydantic_private__
    data = private.get("_data") if private else None
    if data and segment in data:
        return data[segment]
    if not _is_dynamic_key(model, segment):
        try:
            return getattr(model, segment)
        except AttributeError:
            raise _Missing from None
    # An unset dynamic key. Only a property a subclass defines (``StopEvent.result``)
    # stands in for it: the mapping and pydantic APIs are not values of the state.
    if isinstance(getattr(type(model), segment, None), property) and not hasattr(
        DictLikeModel, segment
    ):
        return getattr(model, segment)
    raise _Missing


def get_by_path(state: Any, path: str, default: Any = ...) -> Any:
    """The value at dotted ``path`` inside ``state`` (the live object, not a copy).

    Segments walk dict and mapping keys, list indexes, declared fields, ``DictLikeModel``
    dynamic keys and, on other objects, attributes. Dicts and dict-like states are
    walked by key only, so a key named like a method (``items``, ``keys``, ``get``...)
    that was never set is missing like any other.
    A missing segment returns ``default``, or raises ``ValueError`` naming the path when
    no default was given (``...`` means "no default").
    """
    segments = _split_path(path)
    current = state
    for depth, segment in enumerate(segments):
        try:
            current = _child(current, segment)
        except _Missing:
            if default is ...:
                parent = ".".join(segments[:depth]) or "the state"
                raise ValueError(
                    f"state path {path!r} not found: {parent} has no {segment!r}"
                ) from None
            return default
    return current


def _assign(container: Any, segment: str, value: Any, path: str) -> None:
    """Set ``segment`` of ``container`` in place; ``ValueError`` naming ``path`` if not."""
    if isinstance(container, dict):
        container[segment] = value
        return
    if isinstance(container, list):
        try:
            container[_list_index(segment, len(container))] = value
        except _Missing:
            raise ValueError(
                f"cannot set state path {path!r}: {segment!r} is not an index of a list "
                f"of {len(container)} items"
            ) from None
        return
    if isinstance(container, BaseModel) and _is_dynamic_key(container, segment):
        container._data[segment] = value  # type: ignore[attr-defined]
        return
    if isinstance(container, Mapping) and not isinstance(container, BaseModel):
        try:
            container[segment] = value  # type: ignore[index]
        except TypeError as err:
            raise ValueError(
                f"cannot set state path {path!r}: {type(container).__name__} is a read-only "
                f"mapping ({err})"
            ) from err
        return
    try:
        setattr(container, segment, value)
    except (AttributeError, TypeError, ValueError) as err:
        raise ValueError(
            f"cannot set state path {path!r}: {type(container).__name__} does not accept "
            f"{segment!r} ({err})"
        ) from err


def set_by_path(state: Any, path: str, value: Any) -> None:
    """Set the value at dotted ``path`` inside ``state``, in place.

    Missing intermediate containers are created as dicts. Raises ``ValueError`` for an
    empty path, a path of more than ``MAX_DEPTH`` segments, or a segment that cannot be
    set (a list index out of range, an unknown field of a strict model...).
    """
    segments = _split_path(path)
    current = state
    for segment in segments[:-1]:
        try:
            current = _child(current, segment)
        except _Missing:
            created: dict[str, Any] = {}
            _assign(current, segment, created, path)
            current = created
    _assign(current, segments[-1], value, path)


def _with_child(container: Any, segment: str, value: Any, path: str) -> Any:
    """A shallow copy of ``container`` whose ``segment`` is ``value``."""
    if type(container) is dict:
        clone_dict = dict(container)
        clone_dict[segment] = value
        return clone_dict
    if type(container) is tuple:
        try:
            index = _list_index(segment, len(container)) % len(container)
        except _Missing:
            raise ValueError(
                f"cannot set state path {path!r}: {segment!r} is not an index of a tuple "
                f"of {len(container)} items"
            ) from None
        return (*container[:index], value, *container[index + 1 :])
    if isinstance(container, BaseModel):
        return _model_with_child(container, segment, value, path)
    try:
        clone = copy.copy(container)
    except Exception:
        # It cannot be copied (a lock, a live handle...): write through it in place. The
        # caller sees ``container`` itself come back and stops copying there.
        clone = container
    _assign(clone, segment, value, path)
    return clone


def _model_with_child(model: BaseModel, segment: str, value: Any, path: str) -> BaseModel:
    """A shallow copy of ``model`` with ``segment`` set; the dynamic dict is copied only
    when the segment is a dynamic key (it is then on the path)."""
    if isinstance(model, DictLikeModel) and _is_dynamic_key(model, segment):
        # BaseModel.__copy__ (not the DictLikeModel override, which copies ``_data``) so
        # that ``_data`` is copied exactly once, here.
        dynamic_clone = BaseModel.__copy__(model)
        dynamic_clone._priv()["_data"] = {**model._data, segment: value}
        return dynamic_clone
    # A declared field is on the path, so ``_data`` is shared with the original.
    clone = BaseModel.__copy__(model)
    _assign(clone, segment, value, path)
    return clone


def set_by_path_copy(state: ModelT, path: str, value: Any) -> ModelT:
    """A new state with ``value`` at ``path``; ``state`` itself is not modified.

    Only the containers along the path are copied (shallowly); every other object is
    shared with ``state``. Cost: O(sum of the sizes of the containers on the path).

    The exception is an object on the path that cannot be copied (``copy.copy`` raises,
    as for a lock or a live handle, or hands back the object itself): it is written
    through in place, and ``state`` itself is returned, since every container above that
    object already holds it. That write is the only mutation and the last step, so when
    it fails ``state`` is untouched. Raises ``ValueError`` like ``set_by_path``.
    """
    segments = _split_path(path)
    chain: list[Any] = [state]
    current: Any = state
    for segment in segments[:-1]:
        if current is not _ABSENT:
            try:
                current = _child(current, segment)
            except _Missing:
                current = _ABSENT
        chain.append(current)
    replacement = value
    for depth in range(len(segments) - 1, -1, -1):
        parent = chain[depth]
        if parent is _ABSENT:
            replacement = {segments[depth]: replacement}
            continue
        replacement = _with_child(parent, segments[depth], replacement, path)
        if replacement is parent:
            # Written through in place, so nothing above it changes.
            return state
    result: ModelT = replacement
    return result


def merge_state(current_state: ModelT, incoming: BaseModel) -> ModelT:
    """A copy of ``current_state`` with every field declared on ``type(incoming)`` taken
    from ``incoming``.

    Fields that exist only on the current (derived) type keep their values. When both are
    ``DictLikeModel`` s, the dynamic fields are taken from ``incoming`` as well, since they
    are part of its content.
    """
    updates = {name: getattr(incoming, name) for name in type(incoming).model_fields}
    merged = current_state.model_copy(update=updates)
    if isinstance(incoming, DictLikeModel) and isinstance(merged, DictLikeModel):
        merged._data = dict(incoming._data)
    return merged


class _TrialMemo(dict[int, Any]):
    """A ``copy.deepcopy`` memo that can forget what one failed ``deepcopy`` call added.

    A deepcopy that fails halfway leaves half-built copies in its memo; later references
    to the same originals must not pick those up.
    """

    __slots__ = ("_added",)

    def __init__(self) -> None:
        super().__init__()
        self._added: list[int] | None = None

    def __setitem__(self, key: int, value: Any) -> None:
        if self._added is not None and key not in self:
            self._added.append(key)
        super().__setitem__(key, value)

    def deepcopy_or_share(self, original: Any) -> Any:
        """``copy.deepcopy(original)``, or ``original`` itself when that fails."""
        self._added = []
        try:
            return copy.deepcopy(original, self)
        except Exception:
            for key in self._added:
                self.pop(key, None)
            self._added = None
            self[id(original)] = original
            return original
        finally:
            self._added = None


# (container to fill, key in it, original value to copy into that slot)
_PendingSlot = tuple[Any, Any, Any]


def copy_state_for_edit(state: ModelT) -> ModelT:
    """An isolated deep copy of ``state`` for ``edit_state()``.

    Dicts, lists and pydantic models (declared fields, private attributes and extras) are
    copied by an iterative walk, so deep nesting cannot overflow the stack, and shared
    references and reference cycles are preserved. Other values go through
    ``copy.deepcopy``; values of ``Field(exclude=True)`` fields and values that fail to
    deep-copy are shared with ``state``. Cost: O(size of the state).
    """
    memo = _TrialMemo()
    root: list[Any] = [None]
    pending: list[_PendingSlot] = [(root, 0, state)]
    while pending:
        target, key, original = pending.pop()
        target[key] = _copy_node(original, memo, pending)
    result: ModelT = root[0]
    return result


def _copy_node(original: Any, memo: _TrialMemo, pending: list[_PendingSlot]) -> Any:
    """The copy of one value: a shell whose slots are queued on ``pending``, or a leaf."""
    if type(original) in _ATOMIC_TYPES:
        return original
    known = memo.get(id(original), _ABSENT)
    if known is not _ABSENT:
        return known
    if type(original) is dict:
        clone_dict = dict.fromkeys(original)
        memo[id(original)] = clone_dict
        pending.extend((clone_dict, key, value) for key, value in original.items())
        return clone_dict
    if type(original) is list:
        clone_list: list[Any] = [None] * len(original)
        memo[id(original)] = clone_list
        pending.extend((clone_list, index, value) for index, value in enumerate(original))
        return clone_list
    if isinstance(original, BaseModel):
        return _copy_model_shell(original, memo, pending)
    return memo.deepcopy_or_share(original)


def _copy_model_shell(
    original: BaseModel, memo: _TrialMemo, pending: list[_PendingSlot]
) -> BaseModel:
    """A shallow model copy registered in ``memo`` whose slots are queued for copying."""
    clone = BaseModel.__copy__(original)
    memo[id(original)] = clone
    fields = type(original).model_fields
    for name, value in original.__dict__.items():
        field = fields.get(name)
        if field is None or field.exclude is not True:
            pending.append((clone.__dict__, name, value))
    for slots in (clone.__pydantic_private__, clone.__pydantic_extra__):
        if slots:
            pending.extend((slots, name, value) for name, value in slots.items())
    return clone
