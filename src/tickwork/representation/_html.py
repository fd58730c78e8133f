"""Render a ``WorkflowDrawing`` as one HTML page.

The page is self-contained on purpose: it is opened from disk, attached to tickets and
viewed offline, so it references nothing outside itself.  The layout comes from
``tickwork.representation._layout`` and the edge routes from
``tickwork.representation._routes``; this module turns them into SVG shapes and
paths, adds the legend of the kinds the drawing uses and a details panel, and escapes
every piece of user text (labels go through ``html.escape``, docstrings through the
escaping renderer of ``tickwork.representation._docstring``; the details JSON escapes
``<``, ``>`` and ``&`` so no docstring can close the script element).  The stylesheet,
script and page template live in ``tickwork.representation._page``.

Node groups carry ``class="node <kind>"``, ``data-node-id`` and ``data-node-type`` so
that tests (and users' own scripts) can find them in the DOM.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tickwork.representation._details import node_details
from tickwork.representation._docstring import plain_docstring, render_docstring
from tickwork.representation._drawing import DrawnEdge, EdgeKind, WorkflowDrawing
from tickwork.representation._layout import Layout, layered_layout
from tickwork.representation._page import PAGE, SCRIPT, STYLE
from tickwork.representation._routes import (
    EdgeRoute,
    Shape,
    format_number,
    ports_width,
    room_needed,
)
from tickwork.representation.model import WorkflowGraphNode

__all__ = ["Geometry", "geometry", "render_html"]

_CHAR_WIDTH = 7.8  # 13px monospace, so label widths are predictable
_MAX_LABEL = 40
_LABEL_CHAR_WIDTH = 6.6  # 11px sans-serif, a generous average
_CANVAS_PAD = 16.0
_ROOM_PASSES = 3

# Per shape: horizontal padding around the label, and the height.
_SHAPE_PADDING: dict[str, tuple[float, float]] = {
    "step": (28.0, 36.0),
    "event": (44.0, 38.0),
    "external": (48.0, 40.0),
    "resource": (32.0, 48.0),
    "resource_config": (48.0, 36.0),
    "generic": (28.0, 36.0),
}

_EDGE_COLOURS: dict[EdgeKind, str] = {
    "flow": "#5f6368",
    "fan_out": "#1a73e8",
    "resource": "#00838f",
    "join": "#8430ce",
    "failure": "#d93025",
    "wait": "#e8710a",
    "asks": "#e8710a",
}

_ROUTE_SHAPES: dict[str, Shape] = {"event": "ellipse", "external": "hexagon"}

_LEGEND_NODES: tuple[tuple[str, str, str], ...] = (
    ("step", "step", "step"),
    ("event", "event", "event"),
    ("event start", "event", "start event"),
    ("event stop", "event", "stop event"),
    ("external", "external", "human (external_step)"),
    ("resource", "resource", "resource"),
    ("resource_config", "resource_config", "resource config"),
    ("generic", "generic", "other node"),
)

_LEGEND_EDGES: tuple[tuple[EdgeKind, str], ...] = (
    ("flow", "event flow"),
    ("fan_out", "fan-out: list[E]"),
    ("join", "join: stream collected by a list[E] step"),
    ("failure", "on failure: @catch_error route"),
    ("wait", "waits for: wait_for_event in the step"),
    ("asks", "asks: the waiter_event question"),
    ("resource", "uses a resource"),
)


@dataclass(frozen=True)
class _Box:
    """A node as drawn: its shape kind, CSS classes, size and (possibly cut) label."""

    node: WorkflowGraphNode
    shape: str
    css: str
    width: float
    height: float
    text: str


@dataclass(frozen=True)
class Geometry:
    """Where everything goes: each node's box, the layout and each edge's route."""

    boxes: dict[str, _Box]
    layout: Layout
    routes: list[EdgeRoute]


def geometry(drawing: WorkflowDrawing) -> Geometry:
    """Size the nodes, lay them out and route the edges (``routes[i]`` is edge ``i``).

    A node with many edge ends on one side is widened so that each gets its own port.
    """
    ends: dict[tuple[str, str], int] = {}
    for edge in drawing.edges:
        if edge.source != edge.target:
            ends[(edge.source, "out")] = ends.get((edge.source, "out"), 0) + 1
            ends[(edge.target, "in")] = ends.get((edge.target, "in"), 0) + 1
    boxes = {
        node.id: _box(
            node, drawing, max(ends.get((node.id, "out"), 0), ends.get((node.id, "in"), 0))
        )
        for node in drawing.nodes
    }
    sizes = {node_id: (box.width, box.height) for node_id, box in boxes.items()}
    pairs = [(edge.source, edge.target) for edge in drawing.edges]
    shapes: dict[str, Shape] = {
        node_id: _ROUTE_SHAPES.get(box.shape, "box") for node_id, box in boxes.items()
    }
    widths = [_label_width(edge.label) for edge in drawing.edges]
    ids = [node.id for node in drawing.nodes]
    extra: dict[int, float] = {}
    # Room between rows is added only where the horizontal runs need more tracks; more
    # room changes no lane, so a second pass normally fits and a third always stops.
    for _ in range(_ROOM_PASSES):
        layout = layered_layout(ids, sizes, pairs, drawing.start_ids, extra)
        routes, room = room_needed(pairs, layout, sizes, shapes, widths)
        if not room:
            break
        for key, height in room.items():
            extra[key] = extra.get(key, 0.0) + height
    return Geometry(boxes, layout, routes)


def render_html(drawing: WorkflowDrawing, title: str | None = None) -> str:
    """The full HTML page for ``drawing`` (see the module docstring)."""
    page_title = title if title is not None else f"{drawing.graph.name} workflow"
    return PAGE.format(
        title=html.escape(page_title),
        heading=html.escape(page_title),
        description=_description(drawing),
        summary=html.escape(_summary(drawing)),
        svg=_svg(drawing, geometry(drawing)),
        legend=_legend(drawing),
        details_json=_script_json(node_details(drawing)),
        style=STYLE,
        script=SCRIPT,
    )


# --- nodes -------------------------------------------------------------------------------


def _box(node: WorkflowGraphNode, drawing: WorkflowDrawing, ports: int) -> _Box:
    """The node's box; ``ports`` (its most edge ends on one side) widens it if needed."""
    text = node.truncated_label(_MAX_LABEL)
    text_width = len(text) * _CHAR_WIDTH
    shape = _shape_of(node)
    pad_x, height = _SHAPE_PADDING[shape]
    css = _box_css(node, drawing)
    width = max(text_width + pad_x, 72.0, ports_width(ports))
    return _Box(node, shape, css, width, height, text)


def _shape_of(node: WorkflowGraphNode) -> str:
    return node.node_type if node.node_type in _SHAPE_PADDING else "generic"


def _box_css(node: WorkflowGraphNode, drawing: WorkflowDrawing) -> str:
    """The node's CSS kind: its shape, with ``event start`` / ``event stop`` marked."""
    if node.id in drawing.start_ids:
        return "event start"
    if node.id in drawing.stop_ids:
        return "event stop"
    return _shape_of(node)


def _node_svg(box: _Box, centre: tuple[float, float]) -> str:
    node = box.node
    tooltip = html.escape(_tooltip(node))
    return (
        f'<g class="node {box.css}" data-node-id="{html.escape(node.id)}" '
        f'data-node-type="{html.escape(node.node_type)}" tabindex="0">'
        f"<title>{tooltip}</title>{_shape_svg(box.shape, centre, box.width, box.height)}"
        f'<text x="{_n(centre[0])}" y="{_n(centre[1] + _text_offset(box.shape))}">'
        f"{html.escape(box.text)}</text></g>"
    )


def _shape_svg(shape: str, centre: tuple[float, float], width: float, height: float) -> str:
    x, y = centre
    left, right, top, bottom = x - width / 2, x + width / 2, y - height / 2, y + height / 2
    if shape == "event":
        return (
            f'<ellipse class="shape" cx="{_n(x)}" cy="{_n(y)}" '
            f'rx="{_n(width / 2)}" ry="{_n(height / 2)}"/>'
        )
    if shape == "external":
        inset = height / 2
        points = [
            (left, y),
            (left + inset, top),
            (right - inset, top),
            (right, y),
            (right - inset, bottom),
            (left + inset, bottom),
        ]
        return f'<polygon class="shape" points="{_points(points)}"/>'
    if shape == "resource":
        cap = 6.0
        body = (
            f"M{_n(left)},{_n(top + cap)} "
            f"A{_n(width / 2)},{_n(cap)} 0 0 1 {_n(right)},{_n(top + cap)} "
            f"V{_n(bottom - cap)} "
            f"A{_n(width / 2)},{_n(cap)} 0 0 1 {_n(left)},{_n(bottom - cap)} Z"
        )
        rim = (
            f"M{_n(left)},{_n(top + cap)} "
            f"A{_n(width / 2)},{_n(cap)} 0 0 0 {_n(right)},{_n(top + cap)}"
        )
        return f'<path class="shape" d="{body}"/><path class="rim" d="{rim}"/>'
    if shape == "resource_config":
        skew = 12.0
        points = [(left + skew, top), (right, top), (right - skew, bottom), (left, bottom)]
        return f'<polygon class="shape" points="{_points(points)}"/>'
    return (
        f'<rect class="shape" x="{_n(left)}" y="{_n(top)}" width="{_n(width)}" '
        f'height="{_n(height)}" rx="6" ry="6"/>'
    )


def _text_offset(shape: str) -> float:
    return 3.0 if shape == "resource" else 0.0


def _tooltip(node: WorkflowGraphNode) -> str:
    description = getattr(node, "description", None)
    head = f"{node.label} ({node.node_type})"
    return f"{head}\n{plain_docstring(description)}" if description else head


# --- edges -------------------------------------------------------------------------------


def _edge_svg(
    edge: DrawnEdge, route: EdgeRoute, placed: list[tuple[float, float, float, float]]
) -> tuple[str, str, float, float]:
    """The edge's path group, its label group (or ``""``), and the x range both cover.

    ``placed`` holds the boxes of the labels drawn so far; a label that would cover one
    moves down until it is free, and its box is added.
    """
    kind = html.escape(edge.kind)
    ends = (
        f'data-source="{html.escape(edge.source)}" data-target="{html.escape(edge.target)}" '
        f'data-edge-kind="{kind}"'
    )
    path = (
        f'<g class="edge {kind}" {ends}><path class="line" d="{route.path}" '
        f'marker-end="url(#arrow-{kind})"/></g>'
    )
    if not edge.label:
        return path, "", route.low_x, route.high_x
    width = _label_width(edge.label)
    x, y = route.label_at
    text = html.escape(edge.label)
    if route.label_rotated:
        # centred on its own vertical lane, read bottom to top
        placed.append((x - 9, y - width / 2, x + 9, y + width / 2))
        label = (
            f'<g class="edge-label {kind}" {ends}>'
            f'<g transform="rotate(-90 {_n(x)} {_n(y)})">'
            f'<rect x="{_n(x - width / 2)}" y="{_n(y - 9)}" width="{_n(width)}" height="18" '
            f'rx="4" ry="4"/><text x="{_n(x)}" y="{_n(y)}">{text}</text></g></g>'
        )
        return path, label, min(route.low_x, x - 9), max(route.high_x, x + 9)
    left = {"start": x, "middle": x - width / 2, "end": x - width}[route.label_anchor]
    y = _free_label_y(placed, left, y, width)
    label = (
        f'<g class="edge-label {kind}" {ends}><rect x="{_n(left)}" y="{_n(y - 9)}" '
        f'width="{_n(width)}" height="18" rx="4" ry="4"/>'
        f'<text x="{_n(left + width / 2)}" y="{_n(y)}">{text}</text></g>'
    )
    return path, label, min(route.low_x, left), max(route.high_x, left + width)


def _label_width(label: str | None) -> float:
    return len(label) * _LABEL_CHAR_WIDTH + 10 if label else 0.0


def _free_label_y(
    placed: list[tuple[float, float, float, float]], left: float, y: float, width: float
) -> float:
    """The first height from ``y`` down where a label box overlaps no placed one."""
    for _ in range(len(placed) + 1):
        box = (left, y - 9, left + width, y + 9)
        clash = next((p for p in placed if _overlaps(p, box)), None)
        if clash is None:
            break
        y = clash[3] + 10
    placed.append((left, y - 9, left + width, y + 9))
    return y


def _overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


# --- the SVG -----------------------------------------------------------------------------


def _svg(drawing: WorkflowDrawing, drawn: Geometry) -> str:
    boxes, layout = drawn.boxes, drawn.layout
    paths: list[str] = []
    labels: list[str] = []
    placed: list[tuple[float, float, float, float]] = []
    left, right = 0.0, layout.width
    for edge, route in zip(drawing.edges, drawn.routes, strict=True):
        path, label, low_x, high_x = _edge_svg(edge, route, placed)
        paths.append(path)
        labels.append(label)
        left, right = min(left, low_x - _CANVAS_PAD), max(right, high_x + _CANVAS_PAD)
    nodes = [_node_svg(boxes[n.id], layout.centres[n.id]) for n in drawing.nodes]
    width, height = math.ceil(right - left), math.ceil(layout.height + 24)
    # Lanes routed left of the layout would fall off the canvas: shift everything right.
    shift = f' transform="translate({_n(-left)},0)"' if left < 0 else ""
    aria = html.escape(f"Workflow graph of {drawing.graph.name}")
    # Labels go last so that no node hides them; their white backing keeps nodes legible.
    return (
        f'<svg class="workflow" role="img" aria-label="{aria}" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">'
        f"<defs>{_markers(_EDGE_COLOURS.items())}</defs><g{shift}>"
        f'<g class="edges">{"".join(paths)}</g>'
        f'<g class="nodes">{"".join(nodes)}</g>'
        f'<g class="edge-labels">{"".join(labels)}</g></g></svg>'
    )


def _markers(colours: Iterable[tuple[EdgeKind, str]]) -> str:
    return "".join(
        f'<marker id="arrow-{kind}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="9" '
        f'markerHeight="9" markerUnits="userSpaceOnUse" orient="auto-start-reverse">'
        f'<path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
        for kind, colour in colours
    )


def _legend(drawing: WorkflowDrawing) -> str:
    """The legend of the node and edge kinds this drawing uses, and no others."""
    node_kinds = {_box_css(node, drawing) for node in drawing.nodes}
    edge_kinds = {edge.kind for edge in drawing.edges}
    items: list[str] = []
    for css, shape, text in _LEGEND_NODES:
        if css not in node_kinds:
            continue
        swatch = _shape_svg(shape, (28.0, 14.0), 48.0, 24.0 if shape != "resource" else 26.0)
        items.append(
            f'<li><svg class="legend-swatch {css}" width="56" height="28" '
            f'viewBox="0 0 56 28">{swatch}</svg>{html.escape(text)}</li>'
        )
    for kind, text in _LEGEND_EDGES:
        if kind not in edge_kinds:
            continue
        items.append(
            f'<li><svg class="legend-swatch edge {kind}" width="56" height="28" '
            f'viewBox="0 0 56 28"><path class="line" d="M4,14 L50,14" '
            f'marker-end="url(#arrow-{kind})"/></svg>{html.escape(text)}</li>'
        )
    return f'<ul class="legend">{"".join(items)}</ul>'


# --- text --------------------------------------------------------------------------------


def _description(drawing: WorkflowDrawing) -> str:
    """The workflow class's own docstring, rendered (nothing when it has none)."""
    if not drawing.description:
        return ""
    return f'<div class="description">{render_docstring(drawing.description)}</div>'


def _summary(drawing: WorkflowDrawing) -> str:
    counts: dict[str, int] = {}
    for node in drawing.nodes:
        counts[node.node_type] = counts.get(node.node_type, 0) + 1
    parts = [
        f"{counts[kind]} {kind}{'' if counts[kind] == 1 else 's'}"
        for kind in ("step", "event", "resource")
        if counts.get(kind)
    ]
    if counts.get("external"):
        parts.append("human in the loop")
    parts.append("click a node for details")
    return " · ".join(parts)


def _script_json(data: Any) -> str:
    text = json.dumps(data)  # insertion order: the panel lists facts in this order
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


_n = format_number


def _points(points: Iterable[tuple[float, float]]) -> str:
    return " ".join(f"{_n(x)},{_n(y)}" for x, y in points)
