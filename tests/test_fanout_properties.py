"""Property test: random fan-out trees against the documented join semantics (api.md §21, §22).

Hypothesis draws a tree of nested fan-outs (depth 3, 0-4 branches per node), where

- an inner node either fans out to its children, returns ``None`` (a dead branch, no join
  fires for it) or returns ``[]`` (its joins fire with ``[]``); it may also fail once and
  be retried, which must not emit anything twice;
- a leaf either succeeds, returns ``None``, fails once and is retried, or keeps failing and
  is handed to a ``@catch_error`` handler that returns a replacement (``recovered``) or
  ``None`` (``dropped``).

The tree travels in the start event; the steps look up what to do. Every level has an
``All`` join; levels 3 and 1 also have a ``Take(k)`` join bound to the same stream. From
the tree alone the test computes, for every join, how many times it must fire and with
which members, and checks the run against that, plus exactly one terminal event.

(No ``from __future__ import annotations`` here: the ``Take(k)`` annotations below use
closure variables of the class factory.)
"""

import functools
from collections import Counter
from typing import Annotated, Any, Optional

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, catch_error, step
from tickwork.collect import Collect, Take
from tickwork.events import StepFailedEvent, WorkflowFailedEvent
from tickwork.retry_policy import retry_policy, stop_after_attempt, wait_fixed

Path = tuple[int, ...]
LeafValue = tuple[str, Path, str]

RETRY_ONCE = retry_policy(wait=wait_fixed(0), stop=stop_after_attempt(2))

# --------------------------------------------------------------------------- the tree

LEAF_KINDS = ["ok", "dead", "flaky", "recovered", "dropped"]
LEAF_OUTCOME = {"ok": "ok", "flaky": "retried", "recovered": "recovered"}


def branches(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Optional[list[Any]]]:
    """0-4 children, or (one time in five) ``None`` for a dead branch."""
    return st.tuples(st.integers(0, 4), st.lists(children, max_size=4)).map(
        lambda drawn: None if drawn[0] == 0 else drawn[1]
    )


def node(children: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """An inner node: ``children`` is a list (possibly empty), or ``None`` for a dead branch."""
    return st.fixed_dictionaries({"flaky": st.booleans(), "children": branches(children)})


leaves = st.sampled_from(LEAF_KINDS)
level2 = node(leaves)
level1 = node(level2)
roots = st.fixed_dictionaries({"flaky": st.booleans(), "children": st.lists(level1, max_size=4)})


# --------------------------------------------------------------------------- events


class N1(Event):
    path: Any
    spec: Any


class N2(Event):
    path: Any
    spec: Any


class N3(Event):
    path: Any
    kind: str


class D3(Event):
    path: Any
    how: str


class D2(Event):
    value: Any


class D1(Event):
    value: Any


class RootAll(Event):
    value: Any


class RootTake(Event):
    value: Any


# --------------------------------------------------------------------------- the workflow


@functools.cache
def tree_flow(k3: int, k1: int) -> type[Workflow]:
    """A workflow class whose level-3 and level-1 ``Take`` joins take ``k3`` / ``k1``."""

    class TreeFlow(Workflow):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.fires: list[tuple[str, tuple[Any, ...]]] = []
            self.emissions: Counter[str] = Counter()

        def _maybe_fail(self, ctx: Context, spec: dict[str, Any], where: str) -> None:
            if spec["flaky"] and ctx.retry_info().retry_number == 0:
                raise RuntimeError(f"{where} fails once")

        @step(retry_policy=RETRY_ONCE)
        async def split0(self, ctx: Context, ev: StartEvent) -> list[N1]:
            self._maybe_fail(ctx, ev.tree, "root")
            self.emissions["split0"] += 1
            return [N1(path=(i,), spec=s) for i, s in enumerate(ev.tree["children"])]

        @step(retry_policy=RETRY_ONCE)
        async def split1(self, ctx: Context, ev: N1) -> Optional[list[N2]]:
            self._maybe_fail(ctx, ev.spec, f"node {ev.path}")
            if ev.spec["children"] is None:
                return None
            return [N2(path=(*ev.path, j), spec=s) for j, s in enumerate(ev.spec["children"])]

        @step(retry_policy=RETRY_ONCE)
        async def split2(self, ctx: Context, ev: N2) -> Optional[list[N3]]:
            self._maybe_fail(ctx, ev.spec, f"node {ev.path}")
            if ev.spec["children"] is None:
                return None
            return [N3(path=(*ev.path, k), kind=kind) for k, kind in enumerate(ev.spec["children"])]

        @step(num_workers=4, retry_policy=RETRY_ONCE)
        async def leaf(self, ctx: Context, ev: N3) -> Optional[D3]:
            if ev.kind == "dead":
                return None
            if ev.kind == "flaky" and ctx.retry_info().retry_number == 0:
                raise RuntimeError(f"leaf {ev.path} fails once")
            if ev.kind in ("recovered", "dropped"):
                raise RuntimeError(f"leaf {ev.path} always fails")
            return D3(path=ev.path, how=LEAF_OUTCOME[ev.kind])

        @catch_error(for_steps=["leaf"])
        async def recover(self, ev: StepFailedEvent) -> Optional[D3]:
            failed = ev.input_event
            assert isinstance(failed, N3) and ev.attempts == 2
            if failed.kind == "recovered":
                return D3(path=failed.path, how="recovered")
            return None

        @step
        async def join3(self, events: list[D3]) -> D2:
            value = tuple(sorted(("L", tuple(e.path), e.how) for e in events))
            self.fires.append(("join3", value))
            return D2(value=value)

        @step
        async def take3(self, events: Annotated[list[D3], Collect(Take(k3))]) -> None:
            self.fires.append(("take3", tuple(("L", tuple(e.path), e.how) for e in events)))

        @step
        async def join2(self, events: list[D2]) -> D1:
            value = tuple(sorted(e.value for e in events))
            self.fires.append(("join2", value))
            return D1(value=value)

        @step
        async def join1(self, events: list[D1]) -> RootAll:
            value = tuple(sorted(e.value for e in events))
            self.fires.append(("join1", value))
            return RootAll(value=value)

        @step
        async def take1(self, events: Annotated[list[D1], Collect(Take(k1))]) -> RootTake:
            value = tuple(e.value for e in events)
            self.fires.append(("take1", value))
            return RootTake(value=value)

        @step
        async def final(self, everything: RootAll, taken: RootTake) -> StopEvent:
            return StopEvent(result=(everything.value, taken.value))

    return TreeFlow


# --------------------------------------------------------------------------- expectations


def leaf_value(path: Path, kind: str) -> Optional[LeafValue]:
    how = LEAF_OUTCOME.get(kind)
    return None if how is None else ("L", path, how)


def level2_value(path: Path, spec: dict[str, Any]) -> Optional[tuple[Any, ...]]:
    """What join3 fires with for this node's stream, or ``None`` if it opens no stream."""
    if spec["children"] is None:
        return None
    values = (leaf_value((*path, k), kind) for k, kind in enumerate(spec["children"]))
    return tuple(sorted(v for v in values if v is not None))


def level1_value(path: Path, spec: dict[str, Any]) -> Optional[tuple[Any, ...]]:
    if spec["children"] is None:
        return None
    values = (level2_value((*path, j), s) for j, s in enumerate(spec["children"]))
    return tuple(sorted(v for v in values if v is not None))


def expected_fires(tree: dict[str, Any]) -> dict[str, Any]:
    level2_streams: list[tuple[Path, tuple[Any, ...]]] = []
    level1_streams: list[tuple[Any, ...]] = []
    for i, s1 in enumerate(tree["children"]):
        v1 = level1_value((i,), s1)
        if v1 is None:
            continue
        level1_streams.append(v1)
        for j, s2 in enumerate(s1["children"]):
            v2 = level2_value((i, j), s2)
            if v2 is not None:
                level2_streams.append(((i, j), v2))
    root = tuple(sorted(level1_streams))
    return {"level2": level2_streams, "level1": level1_streams, "root": root}


def check_take(fired: tuple[Any, ...], arrivals: tuple[Any, ...], k: int) -> None:
    """A Take(k) batch: min(k, arrivals) distinct members, all of them real arrivals."""
    assert len(fired) == min(k, len(arrivals)), (fired, arrivals, k)
    assert not Counter(fired) - Counter(arrivals), (fired, arrivals)


# --------------------------------------------------------------------------- the property


async def run_tree(tree: dict[str, Any], k3: int, k1: int) -> None:
    wf = tree_flow(k3, k1)(timeout=10)
    handler = wf.run(tree=tree)
    events = [ev async for ev in handler.stream_events(expose_internal=True)]
    terminal = [ev for ev in events if isinstance(ev, StopEvent)]
    assert len(terminal) == 1 and terminal[0] is events[-1], terminal
    assert not isinstance(terminal[0], WorkflowFailedEvent), terminal[0]
    everything, taken = await handler

    expected = expected_fires(tree)
    fires: dict[str, list[tuple[Any, ...]]] = {}
    for name, value in wf.fires:
        fires.setdefault(name, []).append(value)

    # The root fan-out emitted once, even when its first attempt failed.
    assert wf.emissions["split0"] == 1

    # All joins: exactly one firing per stream, with exactly the surviving members.
    assert Counter(fires.get("join3", [])) == Counter(v for _, v in expected["level2"])
    assert Counter(fires.get("join2", [])) == Counter(expected["level1"])
    assert fires["join1"] == [expected["root"]]
    assert everything == expected["root"]

    # Take(k3) on every level-3 stream: one firing each, a k3-subset of its members.
    takes = fires.get("take3", [])
    assert len(takes) == len(expected["level2"])
    by_node: dict[Path, tuple[Any, ...]] = {}
    empty = 0
    for fired in takes:
        if not fired:
            empty += 1
            continue
        parents = {member[1][:2] for member in fired}
        assert len(parents) == 1, f"a Take batch mixes streams: {fired}"
        (parent,) = parents
        assert parent not in by_node, f"Take fired twice for stream {parent}"
        by_node[parent] = fired
    for path, arrivals in expected["level2"]:
        if arrivals:
            check_take(by_node[path], arrivals, k3)
    assert empty == sum(1 for _, arrivals in expected["level2"] if not arrivals)

    # Take(k1) on the root stream.
    assert fires["take1"] == [taken]
    check_take(taken, tuple(expected["level1"]), k1)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(tree=roots, k3=st.integers(1, 3), k1=st.integers(1, 3))
def test_random_fan_out_trees_fire_every_join_as_documented(
    backend: str, tree: dict[str, Any], k3: int, k1: int
) -> None:
    anyio.run(run_tree, tree, k3, k1, backend=backend)
