"""Render a :class:`~tickwork.representation._drawing.WorkflowDrawing` as one HTML page.

The page is self-contained on purpose: it is opened from disk, attached to tickets and
viewed offline, so it references nothing outside itself.  The layout comes from
:mod:`tickwork.representation._layout`; this module turns it into SVG shapes and paths,
adds a legend and a details panel, and escapes every piece of user text (labels and
docstrings go through :func:`html.escape`; the details JSON escapes ``<``, ``>`` and
``&`` so no docstring can close the script element).

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

from tickwork.representation._drawing import DrawnEdge, EdgeKind, WorkflowDrawing
from tickwork.representation._layout import Layout, layered_layout
from tickwork.representation._routes import EdgeRoute, format_number, route_edge
from tickwork.representation.model import WorkflowGraphNode

__all__ = ["render_html"]

_CHAR_WIDTH = 7.8  # 13px monospace, so label widths are predictable
_MAX_LABEL = 40
_LABEL_CHAR_WIDTH = 6.6  # 11px sans-serif, a generous average
_CANVAS_PAD = 16.0

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
}

_LEGEND_NODES: tuple[tuple[str, str, str], ...] = (
    ("step", "step", "step"),
    ("event", "event", "event"),
    ("event start", "event", "start event"),
    ("event stop", "event", "stop event"),
    ("external", "external", "human (external_step)"),
    ("resource", "resource", "resource"),
    ("resource_config", "resource_config", "resource config"),
)

_LEGEND_EDGES: tuple[tuple[EdgeKind, str], ...] = (
    ("flow", "event flow"),
    ("fan_out", "fan-out: list[E]"),
    ("join", "join: stream collected by a list[E] step"),
    ("failure", "on failure: @catch_error route"),
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


def render_html(drawing: WorkflowDrawing, title: str | None = None) -> str:
    """The full HTML page for ``drawing`` (see the module docstring)."""
    boxes = {node.id: _box(node, drawing) for node in drawing.nodes}
    layout = layered_layout(
        [node.id for node in drawing.nodes],
        {node_id: (box.width, box.height) for node_id, box in boxes.items()},
        [(edge.source, edge.target) for edge in drawing.edges],
        drawing.start_ids,
    )
    page_title = title if title is not None else f"{drawing.graph.name} workflow"
    return _PAGE.format(
        title=html.escape(page_title),
        heading=html.escape(page_title),
        description=_description(drawing),
        summary=html.escape(_summary(drawing)),
        svg=_svg(drawing, boxes, layout),
        legend=_legend(),
        details_json=_script_json(_details(drawing)),
        style=_STYLE,
        script=_SCRIPT,
    )


# --- nodes -------------------------------------------------------------------------------


def _box(node: WorkflowGraphNode, drawing: WorkflowDrawing) -> _Box:
    text = node.truncated_label(_MAX_LABEL)
    text_width = len(text) * _CHAR_WIDTH
    shape = node.node_type if node.node_type in _SHAPE_PADDING else "generic"
    pad_x, height = _SHAPE_PADDING[shape]
    css = shape
    if node.id in drawing.start_ids:
        css = "event start"
    elif node.id in drawing.stop_ids:
        css = "event stop"
    return _Box(node, shape, css, max(text_width + pad_x, 72.0), height, text)


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
    return f"{head}\n{description}" if description else head


# --- edges -------------------------------------------------------------------------------


def _edge_svg(edge: DrawnEdge, route: EdgeRoute) -> tuple[str, str, float, float]:
    """The edge's path group, its label group (or ``""``), and the x range both cover."""
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
    width = len(edge.label) * _LABEL_CHAR_WIDTH + 10
    x, y = route.label_at
    left = {"start": x, "middle": x - width / 2, "end": x - width}[route.label_anchor]
    label = (
        f'<g class="edge-label {kind}" {ends}><rect x="{_n(left)}" y="{_n(y - 9)}" '
        f'width="{_n(width)}" height="18" rx="4" ry="4"/>'
        f'<text x="{_n(left + width / 2)}" y="{_n(y)}">{html.escape(edge.label)}</text></g>'
    )
    return path, label, min(route.low_x, left), max(route.high_x, left + width)


# --- the SVG -----------------------------------------------------------------------------


def _svg(drawing: WorkflowDrawing, boxes: dict[str, _Box], layout: Layout) -> str:
    sizes = {node_id: (box.width, box.height) for node_id, box in boxes.items()}
    paths: list[str] = []
    labels: list[str] = []
    left, right = 0.0, layout.width
    side_routed = 0
    for edge in drawing.edges:
        route = route_edge(edge.source, edge.target, layout, sizes, side_routed)
        span = layout.layers[edge.target] - layout.layers[edge.source]
        side_routed += 1 if span <= 0 or span > 1 else 0
        path, label, low_x, high_x = _edge_svg(edge, route)
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


def _legend() -> str:
    items: list[str] = []
    for css, shape, text in _LEGEND_NODES:
        swatch = _shape_svg(shape, (28.0, 14.0), 48.0, 24.0 if shape != "resource" else 26.0)
        items.append(
            f'<li><svg class="legend-swatch {css}" width="56" height="28" '
            f'viewBox="0 0 56 28">{swatch}</svg>{html.escape(text)}</li>'
        )
    for kind, text in _LEGEND_EDGES:
        items.append(
            f'<li><svg class="legend-swatch edge {kind}" width="56" height="28" '
            f'viewBox="0 0 56 28"><path class="line" d="M4,14 L50,14" '
            f'marker-end="url(#arrow-{kind})"/></svg>{html.escape(text)}</li>'
        )
    return f'<ul class="legend">{"".join(items)}</ul>'


# --- text --------------------------------------------------------------------------------


def _description(drawing: WorkflowDrawing) -> str:
    text = drawing.graph.description
    if not text:
        return ""
    first_paragraph = text.split("\n\n")[0]
    return f'<p class="description">{html.escape(first_paragraph)}</p>'


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


def _details(drawing: WorkflowDrawing) -> dict[str, dict[str, Any]]:
    """Per node id, the facts the details panel lists (label first)."""
    details: dict[str, dict[str, Any]] = {}
    for node in drawing.nodes:
        facts: dict[str, Any] = {"label": node.label, "kind": node.node_type}
        description = getattr(node, "description", None)
        if description:
            facts["description"] = description
        schema = getattr(node, "event_schema", None)
        if isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
            facts["fields"] = ", ".join(
                f"{name}: {_schema_type(spec)}" for name, spec in schema["properties"].items()
            )
        produced_by = getattr(node, "produced_by", None)
        if produced_by:
            facts["produced by"] = ", ".join(produced_by)
        for attribute in ("getter_name", "source_file", "source_line", "config_file"):
            value = getattr(node, attribute, None)
            if value is not None:
                facts[attribute.replace("_", " ")] = str(value)
        details[node.id] = facts
    return details


def _schema_type(spec: Any) -> str:
    if not isinstance(spec, dict):
        return "any"
    if "type" in spec:
        return str(spec["type"])
    options = spec.get("anyOf")
    if isinstance(options, list):
        return " | ".join(_schema_type(option) for option in options)
    return "object" if "$ref" in spec else "any"


def _script_json(data: Any) -> str:
    text = json.dumps(data, sort_keys=True)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


_n = format_number


def _points(points: Iterable[tuple[float, float]]) -> str:
    return " ".join(f"{_n(x)},{_n(y)}" for x, y in points)


_STYLE = """
:root { color-scheme: light; }
body { margin: 0; background: #f8f9fa; color: #202124;
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
header { padding: 20px 24px 4px; }
h1 { margin: 0 0 4px; font-size: 22px; font-weight: 600; }
p.description { margin: 4px 0; max-width: 70ch; color: #3c4043; white-space: pre-line; }
p.summary { margin: 4px 0 0; color: #5f6368; font-size: 13px; }
main { display: flex; gap: 20px; padding: 12px 24px 24px; align-items: flex-start; }
.canvas { flex: 0 1 auto; overflow: auto; background: #fff; border: 1px solid #dadce0;
  border-radius: 8px; }
aside { flex: 0 0 280px; display: flex; flex-direction: column; gap: 16px; }
aside section { background: #fff; border: 1px solid #dadce0; border-radius: 8px;
  padding: 12px 14px; }
aside h2 { margin: 0 0 8px; font-size: 14px; }
ul.legend { list-style: none; margin: 0; padding: 0; font-size: 13px; }
ul.legend li { display: flex; align-items: center; gap: 8px; margin: 2px 0; }
.legend-swatch { flex: none; }
#details dl { margin: 0; font-size: 13px; }
#details dt { font-weight: 600; margin-top: 6px; }
#details dd { margin: 0; white-space: pre-wrap; word-break: break-word; }
#details p.hint { margin: 0; color: #5f6368; font-size: 13px; }
svg.workflow { display: block; }
.node { cursor: pointer; }
.node text { font: 13px ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono",
  monospace; text-anchor: middle; dominant-baseline: central; fill: #202124;
  pointer-events: none; }
.node .shape { stroke-width: 1.5; }
.node.step .shape { fill: #e8f0fe; stroke: #3367d6; }
.node.event .shape { fill: #fff7e0; stroke: #c98a00; }
.node.event.start .shape { fill: #e6f4ea; stroke: #188038; }
.node.event.stop .shape { fill: #fce8e6; stroke: #c5221f; }
.node.external .shape { fill: #f3e8fd; stroke: #8430ce; }
.node.resource .shape { fill: #e0f7fa; stroke: #00838f; }
.node.resource .rim, .legend-swatch.resource .rim { fill: none; stroke: #00838f;
  stroke-width: 1.5; }
.node.resource_config .shape { fill: #f1f8e9; stroke: #558b2f; }
.node.generic .shape { fill: #f1f3f4; stroke: #5f6368; stroke-dasharray: 4 3; }
.legend-swatch.step .shape { fill: #e8f0fe; stroke: #3367d6; }
.legend-swatch.event .shape { fill: #fff7e0; stroke: #c98a00; }
.legend-swatch.event.start .shape { fill: #e6f4ea; stroke: #188038; }
.legend-swatch.event.stop .shape { fill: #fce8e6; stroke: #c5221f; }
.legend-swatch.external .shape { fill: #f3e8fd; stroke: #8430ce; }
.legend-swatch.resource .shape { fill: #e0f7fa; stroke: #00838f; }
.legend-swatch.resource_config .shape { fill: #f1f8e9; stroke: #558b2f; }
.node.selected .shape { stroke-width: 3; }
.node:focus { outline: none; }
.node:focus .shape { stroke-width: 3; }
.edge .line { fill: none; stroke-width: 1.5; }
.edge.flow .line { stroke: #5f6368; }
.edge.fan_out .line { stroke: #1a73e8; stroke-width: 3; }
.edge.resource .line { stroke: #00838f; stroke-width: 1.2; }
.edge.join .line { stroke: #8430ce; stroke-width: 2; stroke-dasharray: 2 4; }
.edge.failure .line { stroke: #d93025; stroke-dasharray: 6 4; }
.edge-label rect { fill: #fff; fill-opacity: 0.92; stroke: none; }
.edge-label text { font: 11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  text-anchor: middle; dominant-baseline: central; }
.edge-label.fan_out text { fill: #1a73e8; }
.edge-label.join text { fill: #8430ce; }
.edge-label.failure text { fill: #d93025; }
.edge-label.resource text { fill: #00838f; }
.edge-label { pointer-events: none; }
.dim { opacity: 0.18; }
footer { padding: 0 24px 16px; color: #80868b; font-size: 12px; }
"""

_SCRIPT = """
(function () {
  "use strict";
  var details = JSON.parse(document.getElementById("tickwork-node-details").textContent);
  var svg = document.querySelector("svg.workflow");
  var panel = document.getElementById("details-body");
  function show(id) {
    panel.textContent = "";
    if (id === null) {
      var hint = document.createElement("p");
      hint.className = "hint";
      hint.textContent = "Click a node to see its details and highlight its edges.";
      panel.appendChild(hint);
      return;
    }
    var list = document.createElement("dl");
    var facts = details[id] || {};
    Object.keys(facts).forEach(function (key) {
      var term = document.createElement("dt");
      term.textContent = key;
      var value = document.createElement("dd");
      value.textContent = String(facts[key]);
      list.appendChild(term);
      list.appendChild(value);
    });
    panel.appendChild(list);
  }
  function select(id) {
    var linked = {};
    if (id !== null) { linked[id] = true; }
    svg.querySelectorAll(".edge, .edge-label").forEach(function (edge) {
      var on = id !== null && (edge.dataset.source === id || edge.dataset.target === id);
      if (on) { linked[edge.dataset.source] = true; linked[edge.dataset.target] = true; }
      edge.classList.toggle("dim", id !== null && !on);
    });
    svg.querySelectorAll(".node").forEach(function (node) {
      node.classList.toggle("dim", id !== null && !linked[node.dataset.nodeId]);
      node.classList.toggle("selected", node.dataset.nodeId === id);
    });
    show(id);
  }
  svg.addEventListener("click", function (event) {
    var node = event.target.closest(".node");
    select(node ? node.dataset.nodeId : null);
  });
  svg.addEventListener("keydown", function (event) {
    var node = event.target.closest(".node");
    if (node && (event.key === "Enter" || event.key === " ")) {
      event.preventDefault();
      select(node.dataset.nodeId);
    }
  });
  show(null);
})();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="tickwork">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
<header>
<h1>{heading}</h1>
{description}
<p class="summary">{summary}</p>
</header>
<main>
<div class="canvas">{svg}</div>
<aside>
<section id="details"><h2>Details</h2><div id="details-body"></div></section>
<section><h2>Legend</h2>{legend}</section>
</aside>
</main>
<footer>Drawn by tickwork. This page is self-contained: it loads nothing from the network.</footer>
<script type="application/json" id="tickwork-node-details">{details_json}</script>
<script>{script}</script>
</body>
</html>
"""
