"""How the edges of a laid-out workflow graph run: SVG path data for each arrow.

Pure geometry on top of ``Layout``:

* an edge to the next layer is an S-curve from the bottom of its source to the top of
  its target;
* a longer downward edge is the same curve when nothing stands in its way, else it turns
  into the gap below its source, runs down a vertical **lane** beside the nodes it would
  cross, and turns back in the gap above its target;
* a back edge (closing a loop, so pointing up) takes a lane beside every node of the
  rows it spans, turning in the gaps below its source and above its target;
* a self-loop is a small loop on the right of its node.

Turns happen inside the gaps between rows, so a routed edge crosses other edges but never
a node.  No two edges share a piece of line, so each one can be followed by eye:

* **ports**: the edges leaving a node's bottom (entering its top) get distinct points
  along it, ordered by where they head so that they do not cross at the node; the edge
  that runs straightest keeps the middle;
* **lanes**: a lane keeps clear of the nodes it passes and of every vertical line already
  placed over the same heights (other lanes, straight edges, the short drops from ports);
* **tracks**: the horizontal runs in a gap take distinct heights wherever their x ranges
  overlap; a gap that holds too few is reported (``room_needed``) so that the layout
  can be redone with more room there.

Every route also keeps the polyline it follows (``EdgeRoute.points``; a curve is
sampled), which is what the tests measure.  Labels sit at the middle of a curve, or
beside a lane, anchored away from the nodes it avoids.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from tickwork.representation._layout import Layout

__all__ = ["EdgeRoute", "format_number", "ports_width", "room_needed", "route_edges"]

_SIDE_GAP = 22.0  # clearance between a lane and the nodes it avoids
_SIDE_STEP = 12.0  # spacing between neighbouring vertical lines
_PORT_STEP = 14.0  # spacing between the ports along a node's side
_PORT_SPAN = 0.4  # ports stay within this fraction of the width either side of the middle
_TRACK_MARGIN = 10.0  # the first track's distance from the rows around a gap
_TRACK_STEP = 8.0  # spacing between the tracks of a gap
_CORNER_RADIUS = 8.0
_LABEL_GAP = 6.0
_LABEL_HALF_HEIGHT = 9.0
_CURVE_SAMPLES = 12

Point = tuple[float, float]
_Gap = tuple[int, float, float]  # (key, top, bottom): the room between two rows
Anchor = Literal["start", "middle", "end"]
Shape = Literal["box", "ellipse", "hexagon"]


@dataclass(frozen=True)
class EdgeRoute:
    """An edge's SVG path data, the polyline it follows, its label spot and x range.

    ``label_rotated`` labels run along a vertical lane (read bottom to top), centred on
    ``label_at``: they cover only their own line, so neighbouring lanes stay visible.
    """

    path: str
    points: tuple[Point, ...]
    label_at: Point
    label_anchor: Anchor
    low_x: float
    high_x: float
    label_rotated: bool = False

    def segments(self) -> list[tuple[Point, Point]]:
        """The straight pieces of ``points``, in order."""
        return list(zip(self.points, self.points[1:], strict=False))


def route_edges(
    edges: Sequence[tuple[str, str]],
    layout: Layout,
    sizes: Mapping[str, tuple[float, float]],
    shapes: Mapping[str, Shape] | None = None,
    label_widths: Sequence[float] | None = None,
) -> list[EdgeRoute]:
    """Route every ``(source, target)`` edge, in order (see the module docstring).

    ``shapes`` tells which nodes are ellipses or hexagons, so that ports sit on their
    outline; other nodes are boxes.  ``label_widths`` (one per edge, 0 for none) lets a
    lane keep clear of the labels beside the lanes inside it.  Cost: O(edges x placed
    lines), fine for a drawing.

    When a gap between rows holds too few tracks for the horizontal runs through it, the
    extra runs spill over the rows; ``room_needed`` says how much room to add.
    """
    return _routing(edges, layout, sizes, shapes, label_widths).routes


def room_needed(
    edges: Sequence[tuple[str, str]],
    layout: Layout,
    sizes: Mapping[str, tuple[float, float]],
    shapes: Mapping[str, Shape] | None = None,
    label_widths: Sequence[float] | None = None,
) -> tuple[list[EdgeRoute], dict[int, float]]:
    """The routes, and the room to add per gap (as ``layered_layout``'s ``extra_gaps``)
    so that every horizontal run gets a track of its own; empty when all fit."""
    routing = _routing(edges, layout, sizes, shapes, label_widths)
    return routing.routes, routing.room


@dataclass(frozen=True)
class _Routing:
    routes: list[EdgeRoute]
    room: dict[int, float]


def _routing(
    edges: Sequence[tuple[str, str]],
    layout: Layout,
    sizes: Mapping[str, tuple[float, float]],
    shapes: Mapping[str, Shape] | None,
    label_widths: Sequence[float] | None,
) -> _Routing:
    widths = list(label_widths) if label_widths is not None else [0.0] * len(edges)
    router = _Router(layout, sizes, shapes or {})
    routes = router.route(edges, widths)
    return _Routing(routes, dict(router.room))


def ports_width(ports: int) -> float:
    """The width a node needs so that ``ports`` edge ends on one side are fully spaced."""
    return (ports - 1) * _PORT_STEP / (2 * _PORT_SPAN) + _PORT_STEP if ports > 1 else 0.0


def format_number(value: float) -> str:
    """A coordinate for SVG, rounded to one decimal without a trailing ``.0``."""
    rounded = round(value, 1)
    return str(int(rounded)) if rounded == int(rounded) else str(rounded)


# --- planning ----------------------------------------------------------------------------


@dataclass
class _Plan:
    """How one edge runs, decided before any line is placed."""

    source: str
    target: str
    kind: Literal["self", "curve", "lane"]
    heading_out: float = 0.0  # the x it heads for when leaving its source
    heading_in: float = 0.0  # the x it comes from when entering its target
    side: int = 1  # the lane's side: -1 left, +1 right
    lane_base: float = 0.0  # the lane's x before clearing other lines
    band: list[tuple[float, float]] = field(default_factory=list)
    start: Point = (0.0, 0.0)
    end: Point = (0.0, 0.0)


@dataclass(frozen=True)
class _Line:
    """A placed axis-aligned line: fixed ``at`` (x or y) over ``low..high``."""

    at: float
    low: float
    high: float


class _Router:
    """Routes the edges of one layout, remembering every line it has placed.

    Order matters and is fixed: ports for every edge end, then curves (which cannot
    move), then the drops from the ports of lane edges, then the lanes themselves, the
    shortest first, each with its two horizontal runs.
    """

    def __init__(
        self,
        layout: Layout,
        sizes: Mapping[str, tuple[float, float]],
        shapes: Mapping[str, Shape],
    ) -> None:
        self.layout = layout
        self.sizes = sizes
        self.shapes = shapes
        self.row_extent = _row_extents(layout, sizes)
        self.verticals: list[_Line] = []
        self.horizontals: list[_Line] = []
        # label boxes (left, top, right, bottom) and the clearance a lane keeps from each
        self.label_boxes: list[tuple[float, float, float, float, float]] = []
        self.room: dict[int, float] = {}  # per gap key, the extra height its tracks need

    def route(
        self, edges: Sequence[tuple[str, str]], label_widths: Sequence[float]
    ) -> list[EdgeRoute]:
        plans = [self._plan(source, target) for source, target in edges]
        self._assign_ports(plans)
        routes: dict[int, EdgeRoute] = {}
        for index, plan in enumerate(plans):
            if plan.kind == "self":
                routes[index] = self._self_loop(plan.source)
            elif plan.kind == "curve":
                routes[index] = self._curve(plan)
        # The shortest lanes go first and so run innermost: a join inside a loop then
        # nests inside the loop's lane instead of crossing it.
        lanes = sorted(
            ((index, plan) for index, plan in enumerate(plans) if plan.kind == "lane"),
            key=lambda item: (self._span(item[1]), item[0]),
        )
        for _, plan in lanes:  # the drops from ports first, so that no lane runs on one
            below, above = self._gap_below(plan.source), self._gap_above(plan.target)
            self.verticals.append(_Line(plan.start[0], plan.start[1], below[2]))
            self.verticals.append(_Line(plan.end[0], above[1], plan.end[1]))
        for index, plan in lanes:
            routes[index] = self._lane_route(plan, label_widths[index])
        return [routes[index] for index in range(len(plans))]

    def _plan(self, source: str, target: str) -> _Plan:
        if source == target:
            return _Plan(source, target, "self")
        (sx, sy), (tx, ty) = self.layout.centres[source], self.layout.centres[target]
        down = self.layout.layers[target] - self.layout.layers[source]
        if down <= 0:
            band = self._nodes_between(ty - 1, sy + 1)
            left = min(x - w / 2 for x, w in band) - _SIDE_GAP
            right = max(x + w / 2 for x, w in band) + _SIDE_GAP
            lane = _cheaper(left, right, sx, tx)
            return self._lane_plan(source, target, band, lane, sx, tx)
        if down > 1:
            between = self._nodes_between(sy, ty)
            low, high = min(sx, tx), max(sx, tx)
            if any(_blocks(x, w, low - 10, high + 10) for x, w in between):
                right = _free_lane(between, high + _SIDE_GAP, +1)
                left = _free_lane(between, low - _SIDE_GAP, -1)
                lane = _cheaper(left, right, sx, tx)
                return self._lane_plan(source, target, between, lane, sx, tx)
        return _Plan(source, target, "curve", heading_out=tx, heading_in=sx)

    def _lane_plan(
        self,
        source: str,
        target: str,
        band: list[tuple[float, float]],
        lane: float,
        sx: float,
        tx: float,
    ) -> _Plan:
        return _Plan(
            source,
            target,
            "lane",
            heading_out=lane,
            heading_in=lane,
            side=1 if lane >= (sx + tx) / 2 else -1,
            lane_base=lane,
            band=band,
        )

    # --- ports ---------------------------------------------------------------------------

    def _assign_ports(self, plans: Sequence[_Plan]) -> None:
        """Give every edge end its own point on its node's bottom (out) or top (in)."""
        outs: dict[str, list[tuple[float, int]]] = {}
        ins: dict[str, list[tuple[float, int]]] = {}
        for index, plan in enumerate(plans):
            if plan.kind != "self":
                outs.setdefault(plan.source, []).append((plan.heading_out, index))
                ins.setdefault(plan.target, []).append((plan.heading_in, index))
        for node, ends in outs.items():
            for index, point in self._ports(node, ends, plans, +1).items():
                plans[index].start = point
        for node, ends in ins.items():
            for index, point in self._ports(node, ends, plans, -1).items():
                plans[index].end = point

    def _ports(
        self, node: str, ends: list[tuple[float, int]], plans: Sequence[_Plan], side: int
    ) -> dict[int, Point]:
        cx, cy = self.layout.centres[node]
        width, height = self.sizes[node]
        ordered = sorted(ends)
        curves = [i for i, (_, edge) in enumerate(ordered) if plans[edge].kind == "curve"]
        candidates = curves or list(range(len(ordered)))
        anchor = min(candidates, key=lambda i: (abs(ordered[i][0] - cx), i))
        reach = max(anchor, len(ordered) - 1 - anchor)
        if reach * _PORT_STEP <= _PORT_SPAN * width:
            offsets = [(i - anchor) * _PORT_STEP for i in range(len(ordered))]
        else:  # too many for one side of the middle: spread them evenly instead
            step = min(_PORT_STEP, 2 * _PORT_SPAN * width / max(len(ordered) - 1, 1))
            first = -step * (len(ordered) - 1) / 2
            offsets = [first + i * step for i in range(len(ordered))]
        shape = self.shapes.get(node, "box")
        return {
            edge: (cx + dx, cy + side * _half_height(shape, width, height, dx))
            for (_, edge), dx in zip(ordered, offsets, strict=True)
        }

    # --- curves --------------------------------------------------------------------------

    def _curve(self, plan: _Plan) -> EdgeRoute:
        start, end = plan.start, plan.end
        bend = max(24.0, (end[1] - start[1]) / 2)
        route = _curve(start, (start[0], start[1] + bend), (end[0], end[1] - bend), end)
        if abs(start[0] - end[0]) < 0.05:
            self.verticals.append(_Line(start[0], start[1], end[1]))
        return route

    def _self_loop(self, node: str) -> EdgeRoute:
        (x, y), (width, _) = self.layout.centres[node], self.sizes[node]
        right = x + width / 2
        return _curve((right, y - 6), (right + 48, y - 36), (right + 48, y + 36), (right, y + 6))

    # --- lanes ---------------------------------------------------------------------------

    def _lane_route(self, plan: _Plan, label_width: float) -> EdgeRoute:
        below, above = self._gap_below(plan.source), self._gap_above(plan.target)
        low, high = sorted((below[1], above[2]))
        lane = self._clear_lane(plan.lane_base, plan.side, plan.band, low, high)
        turn_down = self._track(below, plan.start[0], lane, from_top=True)
        turn_up = self._track(above, lane, plan.end[0], from_top=False)
        self.verticals.append(_Line(lane, min(turn_down, turn_up), max(turn_down, turn_up)))
        route = _lane_route(plan.start, plan.end, lane, turn_down, turn_up)
        if label_width <= 0:
            return route
        x, y = route.label_at
        if abs(turn_up - turn_down) >= label_width + 2 * _LABEL_GAP:
            # along the lane: it then hides no other line, and lanes stay close together
            self.label_boxes.append(
                (
                    lane - _LABEL_HALF_HEIGHT,
                    y - label_width / 2,
                    lane + _LABEL_HALF_HEIGHT,
                    y + label_width / 2,
                    _LABEL_HALF_HEIGHT + 2,
                )
            )
            return replace(route, label_at=(lane, y), label_anchor="middle", label_rotated=True)
        left = {"start": x, "middle": x - label_width / 2, "end": x - label_width}[
            route.label_anchor
        ]
        self.label_boxes.append(
            (left, y - _LABEL_HALF_HEIGHT, left + label_width, y + _LABEL_HALF_HEIGHT, _SIDE_STEP)
        )
        return route

    def _clear_lane(
        self, lane: float, side: int, band: Sequence[tuple[float, float]], low: float, high: float
    ) -> float:
        """Move ``lane`` outwards until it is clear of ``band``'s nodes, of every vertical
        line placed over ``low..high`` and of the labels beside those lines.  Each move
        passes one obstacle and never goes back, so this ends."""
        moved = True
        while moved:
            moved = False
            lane = _free_lane(band, lane, side)
            for line in self.verticals:
                if line.low < high and line.high > low and abs(line.at - lane) < _SIDE_STEP:
                    lane = line.at + side * _SIDE_STEP
                    moved = True
            for left, top, right, bottom, margin in self.label_boxes:
                if top < high and bottom > low and left - margin < lane < right + margin:
                    lane = right + margin if side > 0 else left - margin
                    moved = True
        return lane

    def _track(self, gap: _Gap, x1: float, x2: float, *, from_top: bool) -> float:
        """A height in ``gap`` where no placed horizontal run overlaps ``x1..x2``.

        The tracks are tried from the side the run comes from; when the gap holds none
        free, the run takes the next height past it and ``room`` records the lack.
        """
        key, top, bottom = gap
        fitting = max(int((bottom - top - 2 * _TRACK_MARGIN) // _TRACK_STEP) + 1, 1)
        low, high = min(x1, x2), max(x1, x2)
        for k in itertools.count():
            offset = _TRACK_MARGIN + k * _TRACK_STEP
            y = top + offset if from_top else bottom - offset
            if not any(
                abs(run.at - y) < _TRACK_STEP / 2 and run.low < high and run.high > low
                for run in self.horizontals
            ):
                break
        if k >= fitting:
            self.room[key] = max(self.room.get(key, 0.0), (k + 1 - fitting) * _TRACK_STEP)
        self.horizontals.append(_Line(y, low, high))
        return y

    def _span(self, plan: _Plan) -> int:
        return abs(self.layout.layers[plan.target] - self.layout.layers[plan.source])

    # --- rows and gaps -------------------------------------------------------------------

    def _gap_below(self, node: str) -> _Gap:
        """The gap under ``node``'s row, keyed by that row's layer."""
        layer = self.layout.layers[node]
        top = self.row_extent[layer][1]
        lower = [extent[0] for other, extent in self.row_extent.items() if other > layer]
        return layer, top, min(lower, default=self.layout.height)

    def _gap_above(self, node: str) -> _Gap:
        """The gap over ``node``'s row, keyed by the layer of the row above (-1: none)."""
        layer = self.layout.layers[node]
        bottom = self.row_extent[layer][0]
        upper = [other for other in self.row_extent if other < layer]
        if not upper:
            return -1, 0.0, bottom
        above = max(upper)
        return above, self.row_extent[above][1], bottom

    def _nodes_between(self, upper_y: float, lower_y: float) -> list[tuple[float, float]]:
        """``(centre x, width)`` of the nodes whose centres lie strictly between two heights."""
        return [
            (x, self.sizes[node][0])
            for node, (x, y) in self.layout.centres.items()
            if upper_y < y < lower_y
        ]


def _row_extents(
    layout: Layout, sizes: Mapping[str, tuple[float, float]]
) -> dict[int, tuple[float, float]]:
    """Per layer, the top and bottom of its tallest node."""
    extents: dict[int, tuple[float, float]] = {}
    for node, layer in layout.layers.items():
        y, half = layout.centres[node][1], sizes[node][1] / 2
        top, bottom = extents.get(layer, (y - half, y + half))
        extents[layer] = (min(top, y - half), max(bottom, y + half))
    return extents


def _half_height(shape: Shape, width: float, height: float, dx: float) -> float:
    """How far the outline of a node is above (or below) its centre, ``dx`` off the middle."""
    half_w, half_h = width / 2, height / 2
    if shape == "ellipse":
        return half_h * math.sqrt(max(0.0, 1 - (dx / half_w) ** 2))
    if shape == "hexagon":
        inset = half_h  # the slanted sides are as wide as half the height
        return half_h * min(1.0, max(0.0, (half_w - abs(dx)) / inset))
    return half_h


def _lane_route(
    start: Point, end: Point, lane: float, turn_down: float, turn_up: float
) -> EdgeRoute:
    corners = (
        start,
        (start[0], turn_down),
        (lane, turn_down),
        (lane, turn_up),
        (end[0], turn_up),
        end,
    )
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
        points=corners,
        label_at=(label_x, (turn_down + turn_up) / 2),
        label_anchor=anchor,
        low_x=min(xs),
        high_x=max(xs),
    )


def _cheaper(left: float, right: float, source_x: float, target_x: float) -> float:
    cost_left = abs(left - source_x) + abs(left - target_x)
    cost_right = abs(right - source_x) + abs(right - target_x)
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


def _curve(start: Point, c1: Point, c2: Point, end: Point) -> EdgeRoute:
    n = format_number
    path = (
        f"M{n(start[0])},{n(start[1])} C{n(c1[0])},{n(c1[1])} "
        f"{n(c2[0])},{n(c2[1])} {n(end[0])},{n(end[1])}"
    )
    if abs(start[0] - end[0]) < 0.05 and abs(c1[0] - start[0]) < 0.05:
        points: tuple[Point, ...] = (start, end)  # a straight vertical line
    else:
        points = tuple(
            _bezier(start, c1, c2, end, k / _CURVE_SAMPLES) for k in range(_CURVE_SAMPLES + 1)
        )
    xs = (start[0], c1[0], c2[0], end[0])
    middle = _bezier(start, c1, c2, end, 0.5)
    return EdgeRoute(path, points, middle, "middle", min(xs), max(xs))


def _bezier(p0: Point, p1: Point, p2: Point, p3: Point, t: float) -> Point:
    u = 1 - t
    a, b, c, d = u**3, 3 * u * u * t, 3 * u * t * t, t**3
    return (
        a * p0[0] + b * p1[0] + c * p2[0] + d * p3[0],
        a * p0[1] + b * p1[1] + c * p2[1] + d * p3[1],
    )


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
