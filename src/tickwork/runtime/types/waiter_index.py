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
from typing import Any

from tickwork.runtime.types.persistent import PMap

__all__ = ["WaiterIndex", "WaiterRef"]

WaiterRef = tuple[str, str]  # (step, waiter_id)
_Bucket = tuple[type, tuple[str, ...], Any]  # (type, keys, values or _UNHASHABLE)

_UNHASHABLE = "<unhashable>"


def _bucket(event_type: type, requirements: Mapping[str, Any] | None) -> _Bucket:
    if not requirements:
        return (event_type, (), ())
    keys = tuple(sorted(requirements))
    values = tuple(requirements[k] for k in keys)
    try:
        hash(values)
    except TypeError:
        return (event_type, keys, _UNHASHABLE)
    return (event_type, keys, values)


class WaiterIndex:
    """Waiters by bucket, plus the key sets in use per awaited type."""

    __slots__ = ("_buckets", "_keysets", "empty")

    def __init__(
        self,
        buckets: PMap[_Bucket, PMap[WaiterRef, bool]] | None = None,
        keysets: PMap[type, PMap[tuple[str, ...], int]] | None = None,
    ) -> None:
        self._buckets: PMap[_Bucket, PMap[WaiterRef, bool]] = buckets or PMap()
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
        members = self._buckets.get(bucket) or PMap()
        if ref in members:
            return self
        keysets: PMap[tuple[str, ...], int] = self._keysets.get(event_type) or PMap()
        keys = bucket[1]
        keysets = keysets.set(keys, keysets.get(keys, 0) + 1)
        return WaiterIndex(
            self._buckets.set(bucket, members.set(ref, True)),
            self._keysets.set(event_type, keysets),
        )

    def remove(
        self, event_type: type, requirements: Mapping[str, Any] | None, ref: WaiterRef
    ) -> WaiterIndex:
        """A new index without ``ref`` (the same index when it is absent)."""
        bucket = _bucket(event_type, requirements)
        members = self._buckets.get(bucket)
        if members is None or ref not in members:
            return self
        members = members.delete(ref)
        buckets = self._buckets.set(bucket, members) if members else self._buckets.delete(bucket)
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
        if members:
            yield from members.keys()
