"""Worker slots of one step: the smallest free slot in O(log n), persistently.

A step has ``num_workers`` slots and a dispatched work item takes the smallest free one
(api.md §19.2).  Scanning the busy set for the first gap costs O(running), which a step
with thousands of workers pays on every dispatch; instead the pool keeps a high-water
mark (every slot at or above it has never been used) and a persistent leftist heap of
the freed slots below it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["SlotPool"]

# A leftist heap node: (rank, slot, left, right), or None for the empty heap.
_Heap = Any


def _rank(heap: _Heap) -> int:
    return 0 if heap is None else int(heap[0])


def _merge(a: _Heap, b: _Heap) -> _Heap:
    if a is None:
        return b
    if b is None:
        return a
    if b[1] < a[1]:
        a, b = b, a
    _, slot, left, right = a
    merged = _merge(right, b)
    if _rank(left) < _rank(merged):
        left, merged = merged, left
    return (_rank(merged) + 1, slot, left, merged)


class SlotPool:
    """The busy count, the high-water mark and the freed slots of one step."""

    __slots__ = ("_free", "_high", "acquired", "busy", "released")

    def __init__(self, busy: int = 0, high: int = 0, free: _Heap = None) -> None:
        self.busy = busy
        self._high = high
        self._free = free
        self.acquired: tuple[int, SlotPool] | None = None
        """What ``acquire()`` gives, when known without calling it (read-only): the
        shared pools below carry it, so that a busy step taking back the slot one of its
        workers freed (a fan-out's every tick) reads it instead of calling."""
        self.released: tuple[SlotPool, ...] | None = None
        """``released[slot]`` is what ``release(slot)`` gives, when known without calling
        it (read-only): the shared gapless pools below carry it, for each of their busy
        slots, so that a busy step freeing a slot (a fan-out's every tick) reads it."""

    @classmethod
    def with_busy(cls, slots: Iterable[int]) -> SlotPool:
        """A pool where exactly ``slots`` are taken."""
        taken = set(slots)
        high = max(taken) + 1 if taken else 0
        free: _Heap = None
        for slot in range(high):
            if slot not in taken:
                free = _merge(free, (1, slot, None, None))
        return cls(len(taken), high, free)

    def acquire(self) -> tuple[int, SlotPool]:
        """The smallest free slot and the pool with it taken."""
        free = self._free
        if free is not None:
            _, slot, left, right = free
            if left is None and right is None:  # the only freed slot
                busy = self.busy + 1
                high = self._high
                if busy == high and high < _DENSE_LIMIT:
                    # No gap left (a full step took back the slot one of its workers
                    # freed): the shared pool, as ``release`` gives.
                    return slot, _DENSE[high]
                return slot, SlotPool(busy, high, None)
            return slot, SlotPool(self.busy + 1, self._high, _merge(left, right))
        high = self._high
        if high + 1 < _DENSE_LIMIT:
            return high, _DENSE[high + 1]
        return high, SlotPool(self.busy + 1, high + 1, None)

    def release(self, slot: int) -> SlotPool:
        """The pool with ``slot`` free again."""
        if self._free is None:
            high = self._high
            if slot == high - 1:
                # The highest slot with no gap below: lowering the mark is the same pool.
                return _DENSE[slot] if slot < _DENSE_LIMIT else SlotPool(self.busy - 1, slot, None)
            if high < _DENSE_LIMIT:
                # A full small step frees one slot (a worker of a busy step finishes):
                # the shared pool with that one gap.
                return _ONE_GAP[high][slot]
        return SlotPool(self.busy - 1, self._high, _merge(self._free, (1, slot, None, None)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SlotPool):
            return NotImplemented
        return self.busy == other.busy and self._taken() == other._taken()

    def __hash__(self) -> int:  # pragma: no cover - pools are not used as keys
        return hash((self.busy, tuple(sorted(self._taken()))))

    def _taken(self) -> set[int]:
        """The busy slots (equal pools may differ in their mark and free heap)."""
        return set(range(self._high)) - set(self._free_list())

    def _free_list(self) -> list[int]:
        out: list[int] = []
        stack = [self._free]
        while stack:
            node = stack.pop()
            if node is not None:
                out.append(node[1])
                stack.extend((node[2], node[3]))
        return sorted(out)

    def __repr__(self) -> str:
        return f"SlotPool(busy={self.busy}, high={self._high}, free={self._free_list()})"


# Pools whose slots 0..n-1 are all taken (no gaps), shared: the common case of a step
# taking and freeing its highest slot allocates nothing.
_DENSE_LIMIT = 16
_DENSE = [SlotPool(n, n, None) for n in range(_DENSE_LIMIT)]
# Pools whose slots 0..high-1 are taken but one, ``_ONE_GAP[high][slot]``, shared: a full
# step (every worker busy, the usual state under a fan-out) frees one slot and takes it
# back, allocating nothing.
_ONE_GAP = [
    [SlotPool(high - 1, high, (1, slot, None, None)) for slot in range(high)]
    for high in range(_DENSE_LIMIT)
]
for _pools in (_DENSE, *_ONE_GAP):
    for _pool in _pools:
        _pool.acquired = _pool.acquire()  # each gives a shared pool, or a new one to keep
for _pool in _DENSE:  # each slot freed gives a shared pool (_DENSE or _ONE_GAP)
    _pool.released = tuple(_pool.release(slot) for slot in range(_pool.busy))
del _pools, _pool
