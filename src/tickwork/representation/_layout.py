"""A small layered (Sugiyama-style) layout for drawing a workflow graph top-down.

The HTML drawing renders its SVG in Python, so that the page needs no script from the
network; this module decides where the boxes go.  It is pure geometry: node ids, sizes
and edges in, centre coordinates and layers out.

1. **Back edges** — a depth-first search from the start nodes (then from any node not yet
   visited, in node order) marks the edges that close a cycle (a retry loop, say).  They
   are drawn upwards and ignored by the next step.
2. **Layers** — longest path over the remaining acyclic edges, so every edge points down
   and a step sits below *all* of its inputs (a multi-slot join below both slots, the
   stop event at the bottom).  A node without inputs that is not a start node (the
   ``StepFailedEvent`` of a ``@catch_error`` handler) is then pulled down to sit just
   above its first successor instead of floating at the top.
3. **Order within a layer** — a few barycenter sweeps (each node moves towards the mean
   position of its neighbours in the adjacent layer), which removes most crossings of a
   workflow's mostly tree-shaped graph.  Ties keep the graph's node order, so the result
   is deterministic.
4. **Coordinates** — each layer is a row; rows are centred on the widest one.  The
   router may ask for more room in some gaps (``extra_gaps``) when the edges running
   there need more horizontal tracks than the gap holds.

Cost: O(sweeps x (nodes + edges) log nodes), negligible for graphs a human can read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Layout", "layered_layout"]

_SWEEPS = 4
_H_GAP = 36.0
_V_GAP = 64.0
_MARGIN = 32.0


@dataclass(frozen=True)
class Layout:
    """Where each node goes: its centre, its layer, and the size of the whole drawing.

    ``back_edges`` are the ``(source, target)`` pairs that close a cycle; they are the
    only edges whose target is not in a lower layer than their source.
    """

    centres: dict[str, tuple[float, float]]
    layers: dict[str, int]
    back_edges: frozenset[tuple[str, str]]
    width: float
    height: float


def layered_layout(
    node_ids: Sequence[str],
    sizes: Mapping[str, tuple[float, float]],
    edges: Iterable[tuple[str, str]],
    starts: Iterable[str],
    extra_gaps: Mapping[int, float] | None = None,
) -> Layout:
    """Lay ``node_ids`` out in rows (see the module docstring).

    ``sizes`` gives each node's ``(width, height)``; ``starts`` are the nodes the flow
    begins at (the start event).  Edges naming unknown nodes, and self-loops, are ignored.
    ``extra_gaps`` adds room below the row of a layer (``-1``: above the first row).
    """
    known = set(node_ids)
    usable = [(s, t) for s, t in edges if s in known and t in known and s != t]
    start_ids = [s for s in starts if s in known]
    back = _back_edges(node_ids, usable, start_ids)
    forward = [edge for edge in usable if edge not in back]
    layers = _longest_path_layers(node_ids, forward, set(start_ids))
    rows = _order_rows(node_ids, layers, usable)
    return _coordinates(rows, sizes, layers, frozenset(back), extra_gaps or {})


def _back_edges(
    node_ids: Sequence[str], edges: Sequence[tuple[str, str]], starts: Sequence[str]
) -> set[tuple[str, str]]:
    """The edges into a node that is still on the depth-first stack (iterative DFS)."""
    successors = _adjacency(edges)
    state: dict[str, int] = {}  # 1: on the stack, 2: finished
    back: set[tuple[str, str]] = set()
    for root in [*starts, *node_ids]:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(successors.get(root, ())))]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
            elif state.get(child) == 1:
                back.add((node, child))
            elif child not in state:
                state[child] = 1
                stack.append((child, iter(successors.get(child, ()))))
    return back


def _longest_path_layers(
    node_ids: Sequence[str], forward: Sequence[tuple[str, str]], starts: set[str]
) -> dict[str, int]:
    """Layer = length of the longest path from a source; sources that are not starts
    are then lowered to just above their nearest successor."""
    successors = _adjacency(forward)
    predecessors = _adjacency((t, s) for s, t in forward)
    order = _topological_order(node_ids, successors, predecessors)
    layers: dict[str, int] = {}
    for node in order:
        layers[node] = max((layers[p] + 1 for p in predecessors.get(node, ())), default=0)
    for node in reversed(order):
        below = [layers[s] for s in successors.get(node, ())]
        if node not in starts and not predecessors.get(node) and below:
            layers[node] = max(min(below) - 1, 0)
    return layers


def _topological_order(
    node_ids: Sequence[str],
    successors: Mapping[str, list[str]],
    predecessors: Mapping[str, list[str]],
) -> list[str]:
    """Kahn's algorithm, taking ready nodes in node order (the edges are acyclic)."""
    waiting = {node: len(predecessors.get(node, ())) for node in node_ids}
    ready = [node for node in node_ids if waiting[node] == 0]
    order: list[str] = []
    while ready:
        node = ready.pop(0)
        order.append(node)
        for nxt in successors.get(node, ()):
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                ready.append(nxt)
    return order


def _adjacency(edges: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    adjacency: dict[str, list[str]] = {}
    for source, target in edges:
        if source != target:
            adjacency.setdefault(source, []).append(target)
    return adjacency


def _order_rows(
    node_ids: Sequence[str], layers: Mapping[str, int], edges: Sequence[tuple[str, str]]
) -> list[list[str]]:
    depth = max(layers.values(), default=-1) + 1
    rows: list[list[str]] = [[] for _ in range(depth)]
    for node in node_ids:
        rows[layers[node]].append(node)
    neighbours = _adjacency([*edges, *((t, s) for s, t in edges)])
    for _ in range(_SWEEPS):
        for index in range(1, depth):
            rows[index] = _by_barycenter(rows[index], rows[index - 1], neighbours)
        for index in range(depth - 2, -1, -1):
            rows[index] = _by_barycenter(rows[index], rows[index + 1], neighbours)
    return rows


def _by_barycenter(
    row: list[str], reference: list[str], neighbours: Mapping[str, list[str]]
) -> list[str]:
    """``row`` sorted by the mean position of each node's neighbours in ``reference``.

    A node without neighbours there keeps its current position as its key, so unrelated
    nodes do not drift.
    """
    position = {node: index for index, node in enumerate(reference)}
    scale = len(reference) / max(len(row), 1)

    def key(item: tuple[int, str]) -> tuple[float, int]:
        index, node = item
        linked = [position[n] for n in neighbours.get(node, ()) if n in position]
        centre = sum(linked) / len(linked) if linked else index * scale
        return (centre, index)

    return [node for _, node in sorted(enumerate(row), key=key)]


def _coordinates(
    rows: Sequence[Sequence[str]],
    sizes: Mapping[str, tuple[float, float]],
    layers: Mapping[str, int],
    back_edges: frozenset[tuple[str, str]],
    extra_gaps: Mapping[int, float],
) -> Layout:
    row_widths = [sum(sizes[n][0] for n in row) + _H_GAP * max(len(row) - 1, 0) for row in rows]
    row_heights = [max((sizes[n][1] for n in row), default=0.0) for row in rows]
    inner_width = max(row_widths, default=0.0)
    centres: dict[str, tuple[float, float]] = {}
    top = _MARGIN + extra_gaps.get(-1, 0.0)
    for layer, (row, row_width, row_height) in enumerate(
        zip(rows, row_widths, row_heights, strict=True)
    ):
        x = _MARGIN + (inner_width - row_width) / 2
        for node in row:
            width = sizes[node][0]
            centres[node] = (x + width / 2, top + row_height / 2)
            x += width + _H_GAP
        top += row_height + _V_GAP + extra_gaps.get(layer, 0.0)
    height = top - _V_GAP + _MARGIN if rows else 2 * _MARGIN
    return Layout(
        centres=centres,
        layers=dict(layers),
        back_edges=back_edges,
        width=inner_width + 2 * _MARGIN,
        height=height,
    )
