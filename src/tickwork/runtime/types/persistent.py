"""Persistent (structurally shared) containers for the run state.

The reducer never mutates its input state, yet a tick must cost O(what it touches), not
O(size of the run).  Copying a 10,000-entry dict or list on every tick would make a
10,000-way fan-out quadratic, so the big parts of the state use these containers, whose
updates return a new version sharing everything that did not change:

* ``PQueue`` — a banker's deque made of two cons lists.  ``append``/``appendleft``
  are O(1); ``popleft`` is O(1) amortized when versions are used linearly (the reducer
  drops the old version), which is the reducer's access pattern.
* ``PMap`` — a pair for one entry, a plain dict copied on write (in C) for 2 to 8, and
  above that a hash array mapped trie (32-way, dict nodes) whose ``set``/``delete`` copy
  one path of at most ~7 small nodes, so they are O(log32 n).  The run's maps are small
  in practice: a step's in-flight map is bounded by its workers, and a fan-out of 10,000
  items never builds a trie (its queue is a ``PQueue``, its members a ``PList``).  A
  rerooting ("semi-persistent", Baker's trick) map would make a large map's linear
  updates one dict operation each (about 5x faster than the trie at 10,000 entries, in
  a prototype), but no measured scenario has a map that large, so the trie stays.
* ``PList`` — an append-only cons list with its length; ``to_list()`` is O(n) and is
  called once, when a buffer is released.
* ``EMPTY_MAPPING`` — the shared empty default of the records' plain mappings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar, cast

__all__ = ["EMPTY_MAPPING", "SMALL_MAP_SIZE", "PList", "PMap", "PQueue"]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")

# A cons list is either None (empty) or a pair (head, tail).
_Cons = tuple[Any, Any] | None

_new = object.__new__
"""``_new(cls)``: an instance of one of the containers below with no slot set.  The hot
updates (an append, a pop, a small map's set) build their result with it and a write per
slot rather than a class call, which costs about 550 machine instructions more (a
fan-out member's tick builds about eight containers); each such site writes every slot."""


def _cons_iter(cell: _Cons) -> Iterator[Any]:
    while cell is not None:
        yield cell[0]
        cell = cell[1]


def _cons_from_reversed(cell: _Cons) -> _Cons:
    out: _Cons = None
    while cell is not None:
        out = (cell[0], out)
        cell = cell[1]
    return out


class PQueue(Generic[T]):
    """An immutable FIFO queue with O(1) pushes at both ends."""

    __slots__ = ("_back", "_front", "size")

    def __init__(self, front: _Cons = None, back: _Cons = None, length: int = 0) -> None:
        self._front = front
        self._back = back
        self.size = length
        """The number of items (read-only); hot paths test it rather than ``bool(q)``."""

    @classmethod
    def of(cls, items: Iterable[T]) -> PQueue[T]:
        """A queue holding ``items`` in order."""
        q: PQueue[T] = cls()
        for item in items:
            q = q.append(item)
        return q

    def append(self, item: T) -> PQueue[T]:
        """A new queue with ``item`` at the back."""
        q: PQueue[T] = _new(PQueue)  # PQueue(...) without a class call, see _new
        q._front = self._front
        q._back = (item, self._back)
        q.size = self.size + 1
        return q

    def extend(self, items: Iterable[T]) -> PQueue[T]:
        """A new queue with ``items`` at the back, in order: ``append`` one by one,
        without the intermediate queues (a fan-out queues thousands at once)."""
        if not self.size and type(items) is list:
            # An empty queue gets the items as its front, in order: its first popleft
            # then has no back list to reverse (a fan-out queues thousands at once).
            front: _Cons = None
            for item in reversed(items):
                front = (item, front)
            return PQueue(front, None, len(items))
        back = self._back
        size = self.size
        for item in items:
            back = (item, back)
            size += 1
        return PQueue(self._front, back, size)

    def appendleft(self, item: T) -> PQueue[T]:
        """A new queue with ``item`` at the front."""
        q: PQueue[T] = _new(PQueue)
        q._front = (item, self._front)
        q._back = self._back
        q.size = self.size + 1
        return q

    def _normalized(self) -> PQueue[T]:
        if self._front is None and self._back is not None:
            return PQueue(_cons_from_reversed(self._back), None, self.size)
        return self

    def peek(self) -> T:
        """The front item; ``IndexError`` when empty."""
        q = self._normalized()
        if q._front is None:
            raise IndexError("peek from an empty PQueue")
        return cast(T, q._front[0])

    def popleft(self) -> tuple[T, PQueue[T]]:
        """The front item and the queue without it; ``IndexError`` when empty."""
        front = self._front
        if front is not None:  # _normalized() would return self: skip its frame
            q: PQueue[T] = _new(PQueue)
            q._front = front[1]
            q._back = self._back
            q.size = self.size - 1
            item: T = front[0]  # not cast(): a call per pop
            return item, q
        q = self._normalized()
        if q._front is None:
            raise IndexError("pop from an empty PQueue")
        return cast(T, q._front[0]), PQueue(q._front[1], q._back, q.size - 1)

    def pop_first(self, accept: Callable[[T], bool]) -> tuple[T | None, PQueue[T]]:
        """Remove and return the first item ``accept`` takes (``None`` if none does).

        Cost is O(number of items skipped), so callers keep rejected items rare (only
        delayed retries are ever skipped).
        """
        skipped: list[T] = []
        q: PQueue[T] = self
        while q.size:
            item, q = q.popleft()
            if accept(item):
                for back in reversed(skipped):
                    q = q.appendleft(back)
                return item, q
            skipped.append(item)
        return None, self

    def cells(self) -> tuple[Any, Any]:
        """The front and back cons cells: identities that let callers cache per version."""
        return self._front, self._back

    def to_list(self) -> list[T]:
        """The items in order (O(n))."""
        out: list[T] = []
        cell = self._front
        while cell is not None:
            out.append(cell[0])
            cell = cell[1]
        back: list[T] = []
        cell = self._back
        while cell is not None:
            back.append(cell[0])
            cell = cell[1]
        back.reverse()
        out.extend(back)
        return out

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def __iter__(self) -> Iterator[T]:
        yield from _cons_iter(self._front)
        yield from reversed(list(_cons_iter(self._back)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PQueue) and list(self) == list(other)

    def __hash__(self) -> int:  # pragma: no cover - queues are not used as keys
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"PQueue({list(self)!r})"


class PList(Generic[T]):
    """An immutable append-only sequence (a cons list kept newest-first)."""

    __slots__ = ("_cell", "_len")

    def __init__(self, cell: _Cons = None, length: int = 0) -> None:
        self._cell = cell
        self._len = length

    @classmethod
    def of(cls, items: Iterable[T]) -> PList[T]:
        """A list holding ``items`` in order."""
        out: PList[T] = cls()
        for item in items:
            out = out.append(item)
        return out

    def append(self, item: T) -> PList[T]:
        """A new list with ``item`` at the end (``streams.buffer_member`` spells it out:
        a change here must be made there too)."""
        out: PList[T] = _new(PList)  # PList(...) without a class call, see _new
        out._cell = (item, self._cell)
        out._len = self._len + 1
        return out

    def cell(self) -> Any:
        """The newest cons cell: an identity that lets callers cache per version."""
        return self._cell

    def to_list(self) -> list[T]:
        """The items, oldest first (O(n)).  A loop here, not ``list(_cons_iter(...))``:
        resuming a generator per item cost about 130 machine instructions more (a
        fan-out's join releases thousands)."""
        out: list[T] = []
        cell = self._cell
        while cell is not None:
            item, cell = cell
            out.append(item)
        out.reverse()
        return out

    def __iter__(self) -> Iterator[T]:
        return iter(self.to_list())

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PList) and self.to_list() == other.to_list()

    def __hash__(self) -> int:  # pragma: no cover
        return hash(tuple(self.to_list()))

    def __repr__(self) -> str:
        return f"PList({self.to_list()!r})"


_BITS = 5
_MASK = (1 << _BITS) - 1
_MAX_SHIFT = 64


class _Leaf:
    __slots__ = ("key", "value")

    def __init__(self, key: Any, value: Any) -> None:
        self.key = key
        self.value = value


class _Bucket:
    """Keys whose hashes agree on every bit: a plain dict, copied on write."""

    __slots__ = ("items",)

    def __init__(self, items: dict[Any, Any]) -> None:
        self.items = items


_Node = dict[int, Any]


def _get(node: Any, key: Any, h: int, shift: int, default: Any) -> Any:
    while True:
        if isinstance(node, dict):
            child = node.get((h >> shift) & _MASK)
            if child is None:
                return default
            node = child
            shift += _BITS
        elif isinstance(node, _Leaf):
            return node.value if node.key == key else default
        else:
            return cast(_Bucket, node).items.get(key, default)


def _set(node: Any, key: Any, value: Any, h: int, shift: int) -> tuple[Any, bool]:
    """Return (new node, whether a key was added)."""
    if isinstance(node, dict):
        idx = (h >> shift) & _MASK
        child = node.get(idx)
        new = dict(node)
        if child is None:
            new[idx] = _Leaf(key, value)
            return new, True
        new[idx], added = _set(child, key, value, h, shift + _BITS)
        return new, added
    if isinstance(node, _Leaf):
        if node.key == key:
            return _Leaf(key, value), False
        if shift >= _MAX_SHIFT:
            return _Bucket({node.key: node.value, key: value}), True
        split: _Node = {}
        split, _ = _set(split, node.key, node.value, hash(node.key), shift)
        return _set(split, key, value, h, shift)
    bucket = cast(_Bucket, node)
    added = key not in bucket.items
    items = dict(bucket.items)
    items[key] = value
    return _Bucket(items), added


def _delete(node: Any, key: Any, h: int, shift: int) -> tuple[Any, bool]:
    """Return (new node or None when emptied, whether a key was removed)."""
    if isinstance(node, dict):
        idx = (h >> shift) & _MASK
        child = node.get(idx)
        if child is None:
            return node, False
        new_child, removed = _delete(child, key, h, shift + _BITS)
        if not removed:
            return node, False
        new = dict(node)
        if new_child is None:
            del new[idx]
        else:
            new[idx] = new_child
        return (new or None), True
    if isinstance(node, _Leaf):
        return (None, True) if node.key == key else (node, False)
    bucket = cast(_Bucket, node)
    if key not in bucket.items:
        return node, False
    items = {k: v for k, v in bucket.items.items() if k != key}
    return (_Bucket(items) if items else None), True


def _walk(node: Any) -> Iterator[tuple[Any, Any]]:
    if isinstance(node, dict):
        for child in node.values():
            yield from _walk(child)
    elif isinstance(node, _Leaf):
        yield node.key, node.value
    elif isinstance(node, _Bucket):
        yield from node.items.items()


_MISSING: Any = object()
_SMALL = 8
SMALL_MAP_SIZE = _SMALL
"""The most entries a ``PMap`` keeps as a plain ``dict`` root (more make a trie)."""


class PMap(Generic[K, V]):
    """An immutable hash map with O(log32 n) ``set``/``delete``.

    The root's type tells the representation (one ``type()`` test per operation):

    * ``None``: no entry;
    * a ``(key, value)`` tuple: one entry (a parked run holds a few one-entry maps, and
      a pair is a fraction of a dict);
    * a plain ``dict``: 2 to ``_SMALL`` entries in insertion order, copied on write with
      ``dict.copy()`` (a C clone of the table: a copy and a lookup in C beat walking
      pairs in Python, and a plain dict copies several times faster than a subclass);
    * a one-element ``list`` holding the root node of a hash array mapped trie: larger
      maps.  It iterates in hash order, so callers that need a stable order (snapshots,
      commands) sort.

    Small maps are the common case (a step's in-flight invocations, its waiters, a
    run's streams).  Nothing ever mutates a root once it belongs to a map.
    """

    __slots__ = ("root", "size")

    def __init__(self, root: Any = None, length: int = 0) -> None:
        self.root = root
        """The representation (read-only, see above).  The reducer's hottest sites read a
        one-entry map's pair, or build one, themselves: a method call costs a frame."""
        self.size = length
        """The number of entries (read-only).  Hot paths test ``m.size`` rather than
        ``bool(m)``: an attribute read costs no Python call."""

    @classmethod
    def of(cls, items: Iterable[tuple[K, V]] = ()) -> PMap[K, V]:
        """A map holding ``items``."""
        out: PMap[K, V] = cls()
        for key, value in items:
            out = out.set(key, value)
        return out

    def get(self, key: K, default: Any = None) -> Any:
        """The value for ``key``, or ``default``."""
        root = self.root
        if root is None:
            return default
        kind = type(root)
        if kind is dict:
            return root.get(key, default)
        if kind is tuple:
            return root[1] if root[0] == key else default
        return _get(root[0], key, hash(key), 0, default)

    def __getitem__(self, key: K) -> V:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return cast(V, value)

    def __contains__(self, key: object) -> bool:
        return self.get(cast(K, key), _MISSING) is not _MISSING

    def set(self, key: K, value: V) -> PMap[K, V]:
        """A new map where ``key`` maps to ``value``."""
        root = self.root
        kind = type(root)
        new_root: Any
        if kind is dict:
            if key not in root and self.size >= _SMALL:
                return self._set_in_trie(key, value)
            new_root = root.copy()
            new_root[key] = value
            size = len(new_root)
        elif kind is tuple:
            if root[0] == key:
                new_root, size = (key, value), 1
            else:
                new_root, size = {root[0]: root[1], key: value}, 2
        elif root is None:
            new_root, size = (key, value), 1
        else:
            return self._set_in_trie(key, value)
        out: PMap[K, V] = _new(PMap)  # PMap(new_root, size) without a class call
        out.root = new_root
        out.size = size
        return out

    def _set_in_trie(self, key: K, value: V) -> PMap[K, V]:
        """``set`` for a trie, or for a full small map (which becomes one)."""
        root = self.root
        if type(root) is dict:
            trie: Any = {}
            for k, v in root.items():
                trie, _ = _set(trie, k, v, hash(k), 0)
            node = trie
        else:
            node = root[0]
        new_node, added = _set(node, key, value, hash(key), 0)
        return PMap([new_node], self.size + (1 if added else 0))

    def delete(self, key: K) -> PMap[K, V]:
        """A new map without ``key`` (the same map when it is absent)."""
        root = self.root
        kind = type(root)
        new_root: Any
        if kind is dict:
            if key not in root:
                return self
            if self.size == 2:
                for pair in root.items():
                    if pair[0] != key:
                        new_root = pair
            else:
                new_root = root.copy()
                del new_root[key]
            out: PMap[K, V] = _new(PMap)  # PMap(new_root, size) without a class call
            out.root = new_root
            out.size = self.size - 1
            return out
        if kind is tuple:
            return _EMPTY_MAP if root[0] == key else self
        if root is None:
            return self
        new_node, removed = _delete(root[0], key, hash(key), 0)
        if not removed:
            return self
        return PMap(None if new_node is None else [new_node], self.size - 1)

    def items(self) -> Iterator[tuple[K, V]]:
        """The ``(key, value)`` pairs (insertion order when small, else hash order)."""
        root = self.root
        kind = type(root)
        if kind is dict:
            return iter(root.items())
        if kind is tuple:
            return iter((root,))
        if root is None:
            return iter(())
        return _walk(root[0])

    def keys(self) -> Iterator[K]:
        """The keys, in the order of ``items``."""
        return (k for k, _ in self.items())

    def values(self) -> Iterator[V]:
        """The values, in the order of ``items``."""
        return (v for _, v in self.items())

    def __iter__(self) -> Iterator[K]:
        return self.keys()

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PMap) or len(other) != self.size:
            return False
        return all(other.get(k, _MISSING) == v for k, v in self.items())

    def __hash__(self) -> int:  # pragma: no cover
        return hash(frozenset(self.items()))

    def __repr__(self) -> str:
        return f"PMap({dict(self.items())!r})"


_EMPTY_MAP: PMap[Any, Any] = PMap()


class _EmptyMapping(Mapping[Any, Any]):
    """An immutable, hashable empty mapping: one instance is every record's empty default
    (a ``default_factory`` would cost a check per field in every constructor call, and
    the reducer builds a dozen records per tick).  Equal to ``{}``."""

    __slots__ = ()

    def __getitem__(self, key: Any) -> Any:
        raise KeyError(key)

    def get(self, key: Any, default: Any = None) -> Any:
        return default

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "{}"

    def __reduce__(self) -> str:
        return "EMPTY_MAPPING"  # pickles as the module's one instance


EMPTY_MAPPING: Mapping[Any, Any] = _EmptyMapping()
