"""PQueue, PMap and PList: behaviour, model-based tests, and persistence of old versions.

The model-based tests apply random operation sequences to a persistent container and to
a plain ``list``/``dict`` model side by side, keep *every* intermediate version, and at
the end check that each old version still holds exactly what the model held at that
point: an update must never change a version someone else still references.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork.runtime.types.persistent import PList, PMap, PQueue
from tickwork.runtime.types.slots import SlotPool

FAST = settings(max_examples=60, deadline=None)


class Colliding:
    """A key whose hash is chosen by the test, to force trie collisions and buckets."""

    __slots__ = ("h", "label")

    def __init__(self, label: int, h: int) -> None:
        self.label = label
        self.h = h

    def __hash__(self) -> int:
        return self.h

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Colliding) and other.label == self.label

    def __repr__(self) -> str:
        return f"Colliding({self.label}, h={self.h})"


# ------------------------------------------------------------------------------ PQueue


def test_pqueue_basics() -> None:
    q: PQueue[int] = PQueue()
    assert len(q) == 0 and not q and list(q) == []
    with pytest.raises(IndexError):
        q.popleft()
    with pytest.raises(IndexError):
        q.peek()
    q = PQueue.of([1, 2, 3]).appendleft(0).append(4)
    assert list(q) == [0, 1, 2, 3, 4] and len(q) == 5 and q
    assert q.peek() == 0
    head, rest = q.popleft()
    assert head == 0 and list(rest) == [1, 2, 3, 4]
    assert q == PQueue.of([0, 1, 2, 3, 4]) and q != rest and q != [0, 1, 2, 3, 4]


def test_pqueue_pop_first_skips_rejected_items_and_keeps_their_order() -> None:
    q = PQueue.of([1, 3, 4, 5, 6])
    item, rest = q.pop_first(lambda x: x % 2 == 0)
    assert item == 4 and list(rest) == [1, 3, 5, 6]
    item, same = q.pop_first(lambda x: x > 10)
    assert item is None and list(same) == [1, 3, 4, 5, 6]
    assert list(q) == [1, 3, 4, 5, 6]


def test_pqueue_old_versions_survive_pops_taken_twice() -> None:
    """Non-linear use: popping the same version twice gives the same answer."""
    q = PQueue.of(range(5))
    a = q.popleft()
    b = q.popleft()
    assert a[0] == b[0] == 0 and list(a[1]) == list(b[1]) == [1, 2, 3, 4]
    assert list(q) == [0, 1, 2, 3, 4]


_queue_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers()),
        st.tuples(st.just("appendleft"), st.integers()),
        st.tuples(st.just("extend"), st.lists(st.integers(), max_size=4)),
        st.tuples(st.just("extend_list"), st.lists(st.integers(), max_size=4)),
        st.tuples(st.just("popleft"), st.none()),
        st.tuples(st.just("pop_first"), st.integers(0, 3)),
        st.tuples(st.just("branch"), st.integers(0, 1000)),
    ),
    max_size=60,
)


@FAST
@given(_queue_ops)
def test_pqueue_matches_a_list_model_and_keeps_every_version(ops: list[tuple[str, Any]]) -> None:
    versions: list[tuple[PQueue[int], list[int]]] = [(PQueue(), [])]
    q, model = versions[0]
    for op, arg in ops:
        if op == "append":
            q, model = q.append(arg), [*model, arg]
        elif op == "appendleft":
            q, model = q.appendleft(arg), [arg, *model]
        elif op == "extend":
            q, model = q.extend(iter(arg)), [*model, *arg]
        elif op == "extend_list":  # a list into an empty queue becomes its front
            q, model = q.extend(list(arg)), [*model, *arg]
        elif op == "popleft":
            if not model:
                with pytest.raises(IndexError):
                    q.popleft()
                continue
            head, q = q.popleft()
            assert head == model[0]
            model = model[1:]
        elif op == "pop_first":
            item, q = q.pop_first(lambda x, m=arg: x % 4 == m)
            expected = next((x for x in model if x % 4 == arg), None)
            assert item == expected
            if expected is not None:
                model = list(model)
                model.remove(expected)
        else:  # continue from an older version (non-linear use)
            q, model = versions[arg % len(versions)]
        assert list(q) == model and len(q) == len(model) and bool(q) == bool(model)
        if model:
            assert q.peek() == model[0]
        versions.append((q, list(model)))
    for version, expected_items in versions:
        assert list(version) == expected_items and len(version) == len(expected_items)


# -------------------------------------------------------------------------------- PMap


def test_pmap_basics() -> None:
    m: PMap[str, int] = PMap()
    assert len(m) == 0 and not m and dict(m.items()) == {}
    assert m.get("x") is None and m.get("x", 7) == 7 and "x" not in m
    with pytest.raises(KeyError):
        m["x"]
    m2 = m.set("x", 1).set("y", 2).set("x", 3)
    assert dict(m2.items()) == {"x": 3, "y": 2} and len(m2) == 2 and m2
    assert m2["x"] == 3 and "y" in m2 and set(m2) == {"x", "y"}
    assert sorted(m2.values()) == [2, 3] and set(m2.keys()) == {"x", "y"}
    assert m2.delete("missing") is m2
    assert dict(m2.delete("x").items()) == {"y": 2}
    assert m2 == PMap.of([("y", 2), ("x", 3)]) and m2 != PMap.of([("y", 2)])
    assert m2 != {"x": 3, "y": 2}
    assert len(m) == 0  # the first version is untouched


def test_pmap_handles_full_hash_collisions() -> None:
    k1, k2, k3 = Colliding(1, 42), Colliding(2, 42), Colliding(3, 42)
    m = PMap.of([(k1, "a"), (k2, "b")])
    m3 = m.set(k3, "c")
    assert (m3[k1], m3[k2], m3[k3]) == ("a", "b", "c") and len(m3) == 3
    m4 = m3.delete(k2)
    assert k2 not in m4 and m4[k1] == "a" and m4[k3] == "c" and len(m4) == 2
    m5 = m4.delete(k1).delete(k3)
    assert len(m5) == 0 and dict(m5.items()) == {}
    assert len(m3) == 3 and m3[k2] == "b"  # old versions intact


def test_pmap_handles_partial_hash_collisions_and_negative_hashes() -> None:
    # same low 5 bits, then same low 10 bits, then differing only in the top bits
    keys = [Colliding(i, h) for i, h in enumerate([1, 33, 1 + 32 * 32, -1, -(2**62), 2**62])]
    m: PMap[Colliding, int] = PMap()
    for value, key in enumerate(keys):
        m = m.set(key, value)
    assert {k.label: v for k, v in m.items()} == {i: i for i in range(len(keys))}
    for key in keys:
        m = m.delete(key)
        assert key not in m
    assert len(m) == 0


_keys = st.one_of(
    st.integers(-50, 50),
    st.text(max_size=3),
    # equal keys must hash equally: the label picks the (colliding) hash
    st.integers(0, 20).map(lambda i: Colliding(i, [0, 1, 33, 2**40, -7][i % 5])),
)
_map_ops = st.lists(
    st.one_of(
        st.tuples(st.just("set"), _keys, st.integers()),
        st.tuples(st.just("delete"), _keys, st.none()),
        st.tuples(st.just("branch"), st.integers(0, 1000), st.none()),
    ),
    max_size=80,
)


@FAST
@given(_map_ops)
def test_pmap_matches_a_dict_model_and_keeps_every_version(
    ops: list[tuple[str, Any, Any]],
) -> None:
    versions: list[tuple[PMap[Any, int], dict[Any, int]]] = [(PMap(), {})]
    m, model = versions[0]
    for op, key, value in ops:
        if op == "set":
            m, model = m.set(key, value), {**model, key: value}
        elif op == "delete":
            m = m.delete(key)
            model = {k: v for k, v in model.items() if k != key}
        else:
            m, model = versions[key % len(versions)]
        assert len(m) == len(model) and bool(m) == bool(model)
        versions.append((m, dict(model)))
    for version, expected in versions:
        assert len(version) == len(expected)
        assert len(list(version.items())) == len(expected)
        for k, v in expected.items():
            assert k in version and version[k] == v and version.get(k) == v
        for k, v in version.items():
            assert expected[k] == v
        assert version == PMap.of(expected.items())


# ------------------------------------------------------------------------------- PList


def test_plist_basics() -> None:
    p: PList[int] = PList()
    assert len(p) == 0 and not p and p.to_list() == [] and list(p) == []
    p1 = p.append(1)
    p2 = p1.append(2)
    p2b = p1.append(3)  # branch from the same version
    assert p2.to_list() == [1, 2] and p2b.to_list() == [1, 3] and p1.to_list() == [1]
    assert PList.of([1, 2]) == p2 and p2 != p2b and p2 != [1, 2]
    assert len(p2) == 2 and p2


@FAST
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers()),
            st.tuples(st.just("branch"), st.integers(0, 1000)),
        ),
        max_size=60,
    )
)
def test_plist_matches_a_list_model_and_keeps_every_version(ops: list[tuple[str, int]]) -> None:
    versions: list[tuple[PList[int], list[int]]] = [(PList(), [])]
    p, model = versions[0]
    for op, arg in ops:
        if op == "append":
            p, model = p.append(arg), [*model, arg]
        else:
            p, model = versions[arg % len(versions)]
        versions.append((p, list(model)))
    for version, expected in versions:
        assert version.to_list() == expected and list(version) == expected
        assert len(version) == len(expected)


def test_the_shared_empty_mapping_is_an_immutable_empty_dict_lookalike() -> None:
    import pickle

    from tickwork.runtime.types.persistent import EMPTY_MAPPING

    shared, empty = EMPTY_MAPPING, dict[str, int]()
    assert shared == empty
    assert empty == shared  # dict.__eq__ defers to the mapping
    assert EMPTY_MAPPING != {"a": 1}
    assert not EMPTY_MAPPING and len(EMPTY_MAPPING) == 0 and list(EMPTY_MAPPING) == []
    assert EMPTY_MAPPING.get("a", 7) == 7 and "a" not in EMPTY_MAPPING
    assert dict(EMPTY_MAPPING) == {} and {**EMPTY_MAPPING, "a": 1} == {"a": 1}
    with pytest.raises(KeyError):
        EMPTY_MAPPING["a"]
    with pytest.raises(TypeError):
        EMPTY_MAPPING["a"] = 1  # type: ignore[index]
    assert hash(EMPTY_MAPPING) == hash(EMPTY_MAPPING)
    assert pickle.loads(pickle.dumps(EMPTY_MAPPING)) is EMPTY_MAPPING
    assert repr(EMPTY_MAPPING) == "{}"


def test_records_built_with_defaults_share_the_empty_containers() -> None:
    from tickwork.runtime.types.state import StepRunState, WorkItem

    first, second = StepRunState(), StepRunState()
    assert first.in_progress is second.in_progress and first.queue is second.queue
    assert first.join_counts is second.join_counts and first.join_counts == {}
    item = WorkItem("wi-0", "step", object())
    assert item.recovery_counts == {}
    assert item.recovery_counts is WorkItem("x", "y", 1).recovery_counts


# --------------------------------------------------------------------------- SlotPool

# True: acquire; an int: release the busy slot at that position (mod the busy count).
_slot_ops = st.lists(st.one_of(st.just(True), st.integers(0, 40)), max_size=120)


@FAST
@given(_slot_ops)
def test_slot_pool_takes_the_smallest_free_slot_and_keeps_every_version(
    ops: list[bool | int],
) -> None:
    """Shared pools (dense, one gap) included: no version changes once made."""
    pool = SlotPool()
    busy: set[int] = set()
    versions: list[tuple[SlotPool, set[int]]] = [(pool, set())]
    for op in ops:
        if op is True:
            slot, pool = pool.acquire()
            expected = min(set(range(len(busy) + 1)) - busy)
            assert slot == expected
            busy.add(slot)
        elif busy:
            slot = sorted(busy)[op % len(busy)]
            pool = pool.release(slot)
            busy.discard(slot)
        versions.append((pool, set(busy)))
    for version, taken in versions:
        assert version.busy == len(taken)
        assert version == SlotPool.with_busy(taken)
        assert version._taken() == taken


def test_the_shared_pools_know_what_release_gives() -> None:
    """``released[slot]`` (read by ``finish_invocation`` instead of calling ``release``)
    is what ``release(slot)`` gives, for every shared pool that carries it; a pool built
    otherwise carries none."""
    carried = 0
    for size in range(40):
        assert SlotPool.with_busy(range(size)).released is None  # built, not shared
        pool = SlotPool()
        for _ in range(size):  # slots 0..size-1 taken in order: the gapless pools
            _, pool = pool.acquire()
        if pool.released is None:
            continue
        carried += 1
        assert len(pool.released) == pool.busy == size
        for slot in range(size):
            assert pool.released[slot] is pool.release(slot)
            assert pool.released[slot] == SlotPool.with_busy(set(range(size)) - {slot})
    assert carried >= 15  # the small gapless pools are shared and carry it
