"""How the edges of a laid-out workflow graph run: SVG path data for each arrow.

Pure geometry on top of :class:`~tickwork.representation._layout.Layout`:

* an edge to the next layer is an S-curve from the bottom of its source to the top of
  its target;
* a longer downward edge is the same curve when nothing stands in its way, else it turns
  into the gap below its source, runs down a vertical **lane** beside the nodes it would
  cross, and turns back in the gap above its target;
* a back edge (closing a loop, so pointing up) takes a lane beside every node of the
  rows it spans, turning in the gaps below its source and above its target;
* a self-loop is a small loop on the right of its node.

Turns happen inside the gaps between rows, so a routed edge crosses other edges but never
a node.  Lanes go left or right, whichever is the shorter detour; ``side_index`` spreads
the lanes of different edges apart.  Labels sit at the middle of the curve, or beside
the lane, anchored away from the nodes it avoids.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from tickwork.representation._layout import Layout

__all__ = ["EdgeRoute", "format_number", "route_edge"]

_SIDE_GAP = 22.0  # clearance between a lane and the nodes it avoids
_SIDE_STEP = 12.0  # spacing between the lanes of different edges
_GAP_Y = 26.0  # how far below / above a node a routed edge turns
_CORNER_RADIUS = 10.0
_LABEL_GAP = 6.0

Point = tuple[float, float]
Anchor = Literal["start", "middle", "end"]


@dataclass(frozen=True)
class EdgeRoute:
    """An edge's SVG path data, where its label goes, and the x range it covers."""

    path: str
    label_at: Point
    label_anchor: Anchor
    low_x: float
    high_x: float


def route_edge(
    source: str,
    target: str,
    layout: Layout,
    sizes: Mapping[str, tuple[float, float]],
    side_index: int,
) -> EdgeRoute:
    """Route the edge ``source -> target`` (see the module docstring)."""
    (sx, sy), (tx, ty) = layout.centres[source], layout.centres[target]
    source_w, source_h = sizes[source]
    target_h = sizes[target][1]
    spread = _SIDE_STEP * side_index
    start, end = (sx, sy + source_h / 2), (tx, ty - target_h / 2)
    if source == target:
        right = sx + source_w / 2
        return _curve(
            (right, sy - 6), (right + 48, sy - 36), (right + 48, sy + 36), (right, sy + 6)
        )
    down = layout.layers[target] - layout.layers[source]
    if down <= 0:
        band = _nodes_between(layout, sizes, ty - 1, sy + 1)
        back_lane = _side_lane(band, start, end, spread)
        return _lane_route(start, end, back_lane, start[1] + _GAP_Y, end[1] - _GAP_Y)
    lane = _detour(layout, sizes, start, end, spread) if down > 1 else None
    if lane is None:
        bend = max(24.0, (end[1] - start[1]) / 2)
        return _curve(start, (start[0], start[1] + bend), (end[0], end[1] - bend), end)
    return _lane_route(start, end, lane, start[1] + _GAP_Y, end[1] - _GAP_Y)


def format_number(value: float) -> str:
    """A coordinate for SVG, rounded to one decimal without a trailing ``.0``."""
    rounded = round(value, 1)
    return str(int(rounded)) if rounded == int(rounded) else str(rounded)


def _lane_route(
    start: Point, end: Point, lane: float, turn_down: float, turn_up: float
) -> EdgeRoute:
    corners = [
        start,
        (start[0], turn_down),
        (lane, turn_down),
        (lane, turn_up),
        (end[0], turn_up),
        end,
    ]
    xs = [x for x, _ in corners]
    anchor: Anchor
    if lane >= max(start[0], end[0]):
        label_x, anchor = lane + _LABEL_GAP, "start"
    elif lane <= min(start[0], end[0]):
        label_x, anchor = lane - _LABEL_GAP, "end"
    else:
        label_x, anchor = lane, "middle"
    return EdgeRoute(
        path=_polyline(corners),
        label_at=(label_x, (turn_down + turn_up) / 2),
        label_anchor=anchor,
        low_x=min(xs),
        high_x=max(xs),
    )


def _side_lane(
    band: Sequence[tuple[float, float]], start: Point, end: Point, spread: float
) -> float:
    """A lane left or right of every node in ``band``, whichever is the shorter detour."""
    right = max(x + w / 2 for x, w in band) + _SIDE_GAP + spread
    left = min(x - w / 2 for x, w in band) - _SIDE_GAP - spread
    return _cheaper(left, right, start, end)


def _detour(
    layout: Layout,
    sizes: Mapping[str, tuple[float, float]],
    start: Point,
    end: Point,
    spread: float,
) -> float | None:
    """The x of a lane avoiding the nodes between two rows, or ``None`` if none is in the way."""
    between = _nodes_between(layout, sizes, start[1], end[1])
    low, high = min(start[0], end[0]), max(start[0], end[0])
    if not any(_blocks(x, w, low - 10, high + 10) for x, w in between):
        return None
    right = _free_lane(between, high + _SIDE_GAP + spread, +1)
    left = _free_lane(between, low - _SIDE_GAP - spread, -1)
    return _cheaper(left, right, start, end)


def _cheaper(left: float, right: float, start: Point, end: Point) -> float:
    cost_left = abs(left - start[0]) + abs(left - end[0])
    cost_right = abs(right - start[0]) + abs(right - end[0])
    return left if cost_left < cost_right else right


def _free_lane(nodes: Sequence[tuple[float, float]], lane: float, direction: int) -> float:
    """Move ``lane`` in ``direction`` until it crosses none of ``nodes``.

    Each move jumps past one node and the lane only moves one way, so a node can block
    it at most once: this ends after at most ``len(nodes)`` moves.
    """
    moved = True
    while moved:
        moved = False
        for x, w in nodes:
            if _blocks(x, w, lane - _SIDE_GAP / 2, lane + _SIDE_GAP / 2):
                lane = x + direction * (w / 2 + _SIDE_GAP)
                moved = True
    return lane


def _blocks(x: float, width: float, low: float, high: float) -> bool:
    """Whether a node centred at ``x`` overlaps the horizontal band ``[low, high]``."""
    return x + width / 2 > low and x - width / 2 < high


def _nodes_between(
    layout: Layout, sizes: Mapping[str, tuple[float, float]], upper_y: float, lower_y: float
) -> list[tuple[float, float]]:
    """``(centre x, width)`` of the nodes whose centres lie strictly between two heights."""
    return [
        (x, sizes[node_id][0])
        for node_id, (x, y) in layout.centres.items()
        if upper_y < y < lower_y
    ]


def _curve(start: Point, c1: Point, c2: Point, end: Point) -> EdgeRoute:
    n = format_number
    path = (
        f"M{n(start[0])},{n(start[1])} C{n(c1[0])},{n(c1[1])} "
        f"{n(c2[0])},{n(c2[1])} {n(end[0])},{n(end[1])}"
    )
    xs = (start[0], c1[0], c2[0], end[0])
    middle = (
        (start[0] + 3 * c1[0] + 3 * c2[0] + end[0]) / 8,
        (start[1] + 3 * c1[1] + 3 * c2[1] + end[1]) / 8,
    )
    return EdgeRoute(path, middle, "middle", min(xs), max(xs))


def _polyline(points: Sequence[Point]) -> str:
    """Path data through ``points`` with rounded corners."""
    n = format_number
    parts = [f"M{n(points[0][0])},{n(points[0][1])}"]
    for previous, corner, following in zip(points, points[1:], points[2:], strict=False):
        radius = min(
            _CORNER_RADIUS, _distance(previous, corner) / 2, _distance(corner, following) / 2
        )
        entry = _towards(corner, previous, radius)
        leave = _towards(corner, following, radius)
        parts.append(
            f"L{n(entry[0])},{n(entry[1])} "
            f"Q{n(corner[0])},{n(corner[1])} {n(leave[0])},{n(leave[1])}"
        )
    parts.append(f"L{n(points[-1][0])},{n(points[-1][1])}")
    return " ".join(parts)


def _distance(a: Point, b: Point) -> float:
    return math.hypot(b[0] - a[0], b[1] - a[1])


def _towards(origin: Point, target: Point, length: float) -> Point:
    span = _distance(origin, target)
    if span == 0:
        return origin
    scale = length / span
    return (
        origin[0] + (target[0] - origin[0]) * scale,
        origin[1] + (target[1] - origin[1]) * scale,
    )
