"""An index of suspended waiters by what can resolve them.

An added event must find the waiters it resolves without scanning every parked waiter:
with thousands of runs' worth of branches parked on ``wait_for_event(Answer,
requirements={"id": ...})``, one answer must cost O(1), not O(parked).  Waiters are
bucketed by ``(awaited type, requirement keys, requirement values)``; an event looks up,
for each type in its MRO and each key set used with that type, the one bucket its own
attribute values select.  Unhashable requirement values go to a per-key-set bucket that
is matched one by one.  Every structure is persistent, so an update is O(log n).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

from tickwork.runtime.types.persistent import PMap

__all__ = ["WaiterIndex", "WaiterRef"]

WaiterRef = tuple[str, str]  # (step, waiter_id)
_Bucket = tuple[type, tuple[str, ...], Any]  # (type, keys, values or _UNHASHABLE)

_UNHASHABLE = "<unhashable>"


# Persistent maps are values, so the parts of an index that every run waiting for the
# same type without requirements would build alike are built once and shared: a run
# parked in ``wait_for_event`` keeps only what is its own.  Bounded caches: their keys
# are event classes, which must stay collectable when a program makes many.
_NO_KEYSETS: PMap[tuple[str, ...], int] = PMap()
_ONE_PLAIN = _NO_KEYSETS.set((), 1)
"""The key sets of a type with one waiter and no requirements."""


@lru_cache(maxsize=1024)
def _plain_bucket(event_type: type) -> _Bucket:
    return (event_type, (), ())


@lru_cache(maxsize=1024)
def _only_plain(event_type: type) -> PMap[type, PMap[tuple[str, ...], int]]:
    """The key sets of an index whose one waiter awaits ``event_type``, unconditionally."""
    only: PMap[type, PMap[tuple[str, ...], int]] = PMap()
    return only.set(event_type, _ONE_PLAIN)


def _bucket(event_type: type, requirements: Mapping[str, Any] | None) -> _Bucket:
    if not requirements:
        return _plain_bucket(event_type)
    keys = tuple(sorted(requirements))
    values = tuple(requirements[k] for k in keys)
    try:
        hash(values)
    except TypeError:
        return (event_type, keys, _UNHASHABLE)
    return (event_type, keys, values)


_Members = WaiterRef | PMap[WaiterRef, bool]
"""The waiters of a bucket: the ref alone when there is one (the common case, and a
parked run keeps its index), else a map of refs."""

_NO_MEMBERS: PMap[WaiterRef, bool] = PMap()


class WaiterIndex:
    """Waiters by bucket, plus the key sets in use per awaited type."""

    __slots__ = ("_buckets", "_keysets", "empty")

    def __init__(
        self,
        buckets: PMap[_Bucket, _Members] | None = None,
        keysets: PMap[type, PMap[tuple[str, ...], int]] | None = None,
    ) -> None:
        self._buckets: PMap[_Bucket, _Members] = buckets or PMap()
        self._keysets: PMap[type, PMap[tuple[str, ...], int]] = keysets or PMap()
        self.empty = not self._buckets
        """No waiter is indexed (a plain attribute: every routed event asks)."""

    def __bool__(self) -> bool:
        return not self.empty

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WaiterIndex):
            return NotImplemented
        return self._buckets == other._buckets

    def __hash__(self) -> int:  # pragma: no cover - indexes are not used as keys
        return hash(len(self._buckets))

    def __repr__(self) -> str:
        return f"WaiterIndex({dict(self._buckets.items())!r})"

    def add(
        self, event_type: type, requirements: Mapping[str, Any] | None, ref: WaiterRef
    ) -> WaiterIndex:
        """A new index that also holds ``ref``."""
        bucket = _bucket(event_type, requirements)
        members: _Members | None = self._buckets.get(bucket)
        if members is None:
            members = ref
        elif isinstance(members, PMap):
            if ref in members:
                return self
            members = members.set(ref, True)
        elif members == ref:
            return self
        else:
            members = _NO_MEMBERS.set(members, True).set(ref, True)
        buckets = self._buckets.set(bucket, members)
        keys = bucket[1]
        keysets: PMap[tuple[str, ...], int] | None = self._keysets.get(event_type)
        if keysets is not None:
            keysets = keysets.set(keys, keysets.get(keys, 0) + 1)
        elif keys:
            keysets = _NO_KEYSETS.set(keys, 1)
        elif self._keysets.size:
            keysets = _ONE_PLAIN
        else:
            return WaiterIndex(buckets, _only_plain(event_type))
        return WaiterIndex(buckets, self._keysets.set(event_type, keysets))

    def remove(
        self, event_type: type, requirements: Mapping[str, Any] | None, ref: WaiterRef
    ) -> WaiterIndex:
        """A new index without ``ref`` (the same index when it is absent)."""
        bucket = _bucket(event_type, requirements)
        members: _Members | None = self._buckets.get(bucket)
        if members is None:
            return self
        if isinstance(members, PMap):
            if ref not in members:
                return self
            rest = members.delete(ref)
            # Back to one member: the ref alone, so that equal indexes are equal.
            buckets = self._buckets.set(bucket, next(iter(rest.keys())) if rest.size == 1 else rest)
        elif members == ref:
            buckets = self._buckets.delete(bucket)
        else:
            return self
        keysets: PMap[tuple[str, ...], int] = self._keysets.get(event_type) or PMap()
        keys = bucket[1]
        left = keysets.get(keys, 1) - 1
        keysets = keysets.set(keys, left) if left > 0 else keysets.delete(keys)
        by_type = (
            self._keysets.set(event_type, keysets) if keysets else self._keysets.delete(event_type)
        )
        return WaiterIndex(buckets, by_type)

    def candidates(self, event: Any) -> Iterator[WaiterRef]:
        """The waiters ``event`` may resolve (callers still check each one)."""
        for etype in type(event).__mro__:
            keysets = self._keysets.get(etype)
            if not keysets:
                continue
            for keys in keysets:
                if not keys:
                    yield from self._members((etype, (), ()))
                    continue
                values = tuple(getattr(event, key, None) for key in keys)
                yield from self._members((etype, keys, values))
                yield from self._members((etype, keys, _UNHASHABLE))

    def _members(self, bucket: _Bucket) -> Iterator[WaiterRef]:
        try:
            members = self._buckets.get(bucket)
        except TypeError:  # the event's values are unhashable: no hashed bucket matches
            return
        if isinstance(members, PMap):
            yield from members.keys()
        elif members is not None:
            yield members
