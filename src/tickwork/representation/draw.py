"""Draw a workflow: Mermaid text, or a self-contained HTML page with an inline SVG.

``to_mermaid(MyFlow)`` gives a ``flowchart TD`` to paste into Markdown (GitHub, MkDocs
with a Mermaid plugin, the Mermaid live editor).  ``to_html(MyFlow)`` gives a page that
needs nothing else: the layout is computed in Python and drawn as inline SVG, with no
script or style fetched from the network, so it opens offline and can be attached to a
bug report.  ``draw_workflow(MyFlow, "flow.html")`` writes either, by file extension.

Both drawings show what ``get_workflow_representation``
returns (steps, events, the human ``external_step`` and resources) plus the routes the
runtime adds (see ``tickwork.representation._drawing``): fan-out edges (thick,
labelled ``list[E]``), join edges from a stream's producer to its ``list[E]`` step
(dotted, labelled ``join list[E]``), ``@catch_error`` routes (dashed, labelled
``on failure``) and ``wait_for_event`` calls found in a step's source (labelled
``waits for``, from the awaited type to the step, and ``asks``, from the step to its
``waiter_event`` question).  The workflow is neither instantiated nor validated, so an
invalid workflow can be drawn too.  The header shows the workflow class's own docstring
(never one inherited from ``Workflow``), its markup rendered.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from tickwork.representation._docstring import plain_docstring
from tickwork.representation._drawing import EdgeKind, WorkflowDrawing, drawing_of
from tickwork.representation._html import render_html
from tickwork.representation.model import WorkflowGraphNode

__all__ = ["draw_workflow", "to_html", "to_mermaid"]

_MERMAID_ARROWS: dict[EdgeKind, str] = {
    "flow": "-->",
    "fan_out": "==>",
    "resource": "-->",
    "join": "-.->",
    "failure": "-.->",
    "wait": "-.->",
    "asks": "-->",
}

_MERMAID_LINK_STYLES: dict[EdgeKind, str] = {
    "fan_out": "stroke:#1a73e8,stroke-width:3px",
    "resource": "stroke:#00838f,stroke-width:1px",
    "join": "stroke:#8430ce,stroke-width:2px,stroke-dasharray:2 4",
    "failure": "stroke:#d93025,stroke-width:1.5px,stroke-dasharray:6 4",
    "wait": "stroke:#e8710a,stroke-width:2px,stroke-dasharray:8 3 2 3",
    "asks": "stroke:#e8710a,stroke-width:1.5px",
}

_MERMAID_CLASSES: dict[str, str] = {
    "step": "fill:#e8f0fe,stroke:#3367d6,color:#0b1f44",
    "event": "fill:#fff7e0,stroke:#c98a00,color:#3d2a00",
    "start": "fill:#e6f4ea,stroke:#188038,color:#0d3318",
    "stop": "fill:#fce8e6,stroke:#c5221f,color:#4a0c0a",
    "external": "fill:#f3e8fd,stroke:#8430ce,color:#2d0f4a",
    "resource": "fill:#e0f7fa,stroke:#00838f,color:#003a40",
    "resource_config": "fill:#f1f8e9,stroke:#558b2f,color:#1e3310",
    "generic": "fill:#f1f3f4,stroke:#5f6368,stroke-dasharray:4 3",
}

_UNSAFE_ID_CHARS = re.compile(r"\W", flags=re.ASCII)

_DRAWERS = {".mmd": "mermaid", ".html": "html", ".htm": "html"}


def to_mermaid(workflow: Any) -> str:
    """A Mermaid ``flowchart TD`` of a Workflow class or instance.

    Node ids are the graph ids made Mermaid-safe and prefixed with their kind
    (``step_plan``, ``event_Draft``; ``external_step`` and resource ids already carry
    one), so a step named ``end`` cannot clash with Mermaid's keywords.  Shapes: steps are
    boxes, events stadiums, the external actor a hexagon, resources cylinders and configs
    parallelograms.  Fan-out edges are thick (``==>``) and labelled ``list[E]``; joins,
    ``@catch_error`` routes and waits are dotted (``-.->``) and labelled
    ``join list[E]``, ``on failure`` and ``waits for``; a wait's question is ``-->``
    labelled ``asks``; ``linkStyle`` lines colour them.
    """
    drawing = drawing_of(workflow)
    ids = _mermaid_ids(drawing.nodes)
    lines = ["flowchart TD"]
    lines += [f"    %% {text}" for text in _mermaid_header(drawing)]
    lines += [f"    {ids[node.id]}{_mermaid_shape(node)}" for node in drawing.nodes]
    styled: dict[EdgeKind, list[int]] = {}
    for index, edge in enumerate(drawing.edges):
        label = f'|"{_mermaid_text(edge.label)}"|' if edge.label else ""
        arrow = _MERMAID_ARROWS[edge.kind]
        lines.append(f"    {ids[edge.source]} {arrow}{label} {ids[edge.target]}")
        styled.setdefault(edge.kind, []).append(index)
    lines += [f"    classDef {name} {style}" for name, style in _MERMAID_CLASSES.items()]
    for css_class, members in _mermaid_class_members(drawing, ids).items():
        lines.append(f"    class {','.join(members)} {css_class}")
    for kind, style in _MERMAID_LINK_STYLES.items():
        if kind in styled:
            lines.append(f"    linkStyle {','.join(map(str, styled[kind]))} {style}")
    return "\n".join(lines) + "\n"


def to_html(workflow: Any, title: str | None = None) -> str:
    """A self-contained HTML page drawing a Workflow class or instance.

    The page loads nothing from the network: the graph is an inline SVG laid out in
    Python (layers from the start event, top-down), styled by an inline stylesheet, with
    a legend and a small inline script that highlights a clicked node's edges and shows
    its details.  Every node is an SVG group with ``class="node <kind>"`` and the
    attributes ``data-node-id`` (the graph node id) and ``data-node-type``; every edge has
    ``class="edge <kind>"`` with ``data-source``, ``data-target`` and ``data-edge-kind``.
    ``title`` defaults to the workflow's class name.
    """
    return render_html(drawing_of(workflow), title)


def draw_workflow(workflow: Any, path: str | os.PathLike[str]) -> None:
    """Write the drawing of ``workflow`` to ``path``: ``.mmd`` Mermaid or ``.html`` page.

    Raises ``ValueError`` naming the extension for any other suffix (nothing is written).
    The parent directory must exist.
    """
    target = Path(path)
    suffix = target.suffix.lower()
    drawer = _DRAWERS.get(suffix)
    if drawer is None:
        shown = repr(suffix) if suffix else "no extension"
        raise ValueError(
            f"cannot draw a workflow to {str(target)!r}: unknown file extension {shown}; "
            "use .mmd for Mermaid or .html for a self-contained page"
        )
    text = to_mermaid(workflow) if drawer == "mermaid" else to_html(workflow)
    target.write_text(text, encoding="utf-8")


def _mermaid_header(drawing: WorkflowDrawing) -> list[str]:
    header = [drawing.graph.name]
    summary = plain_docstring(drawing.description) if drawing.description else ""
    if summary:
        header.append(_mermaid_comment(summary))
    return header


def _mermaid_ids(nodes: list[WorkflowGraphNode]) -> dict[str, str]:
    """A unique Mermaid-safe id for every node id."""
    ids: dict[str, str] = {}
    taken: set[str] = set()
    for node in nodes:
        safe = _UNSAFE_ID_CHARS.sub("_", node.id)
        prefix = _UNSAFE_ID_CHARS.sub("_", node.node_type) + "_"
        candidate = safe if safe.startswith(prefix) else prefix + safe
        unique, suffix = candidate, 2
        while unique in taken:
            unique, suffix = f"{candidate}_{suffix}", suffix + 1
        taken.add(unique)
        ids[node.id] = unique
    return ids


def _mermaid_shape(node: WorkflowGraphNode) -> str:
    label = _mermaid_text(node.label)
    if node.node_type == "step":
        return f'["{label}"]'
    if node.node_type == "event":
        return f'(["{label}"])'
    if node.node_type == "external":
        return '{{"' + label + '"}}'
    if node.node_type == "resource":
        return f'[("{label}")]'
    if node.node_type == "resource_config":
        return f'[/"{label}"/]'
    return f'["{_mermaid_text(node.node_type)}: {label}"]'


def _mermaid_class_members(drawing: WorkflowDrawing, ids: dict[str, str]) -> dict[str, list[str]]:
    members: dict[str, list[str]] = {}
    for node in drawing.nodes:
        if node.id in drawing.start_ids:
            css_class = "start"
        elif node.id in drawing.stop_ids:
            css_class = "stop"
        elif node.node_type in _MERMAID_CLASSES:
            css_class = node.node_type
        else:
            css_class = "generic"
        members.setdefault(css_class, []).append(ids[node.id])
    return members


def _mermaid_text(text: str) -> str:
    """``text`` for a quoted Mermaid label: quotes and angle brackets as entity codes."""
    return (
        text.replace("#", "#35;")
        .replace('"', "#quot;")
        .replace("<", "#lt;")
        .replace(">", "#gt;")
        .replace("\n", " ")
    )


def _mermaid_comment(text: str) -> str:
    return " ".join(text.split())
