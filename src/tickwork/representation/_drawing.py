"""What a drawing shows: the workflow graph plus the runtime's routes that §16 leaves out.

:class:`~tickwork.representation.model.WorkflowGraph` is the JSON contract of §16.2 and
deliberately does not mark fan-outs, joins or failure routes (a ``list[A]`` return is an
ordinary edge to ``A``).  A drawing is for a human, who needs to see them, so
:func:`drawing_of` classifies every graph edge and adds two kinds of overlay edges:

* ``fan_out``: a fan-out step's edge to one of its list element types (``list[E]``);
* ``resource``: an edge to a resource or config node (labelled with the parameter);
* ``flow``: every other graph edge;
* ``join`` (added): a fan-out producer to each ``list[E]`` step bound to its stream, as
  computed by :func:`~tickwork.runtime.stream_plan.compute_stream_bindings`;
* ``failure`` (added): each step to the ``@catch_error`` handler that owns its failures.

Both renderers (Mermaid and HTML) draw from this one model, so they always agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from tickwork.collect import Take
from tickwork.representation.build import discover_step_functions, get_workflow_representation
from tickwork.representation.model import WorkflowGraph, WorkflowGraphNode
from tickwork.runtime.step_shapes import catch_error_owners, config_of, shape_steps
from tickwork.runtime.stream_plan import StreamBinding, compute_stream_bindings

__all__ = ["EDGE_KINDS", "DrawnEdge", "EdgeKind", "WorkflowDrawing", "drawing_of"]

EdgeKind = Literal["flow", "fan_out", "resource", "join", "failure"]
EDGE_KINDS: tuple[EdgeKind, ...] = ("flow", "fan_out", "resource", "join", "failure")

FAILURE_LABEL = "on failure"


@dataclass(frozen=True)
class DrawnEdge:
    """One arrow of the drawing."""

    source: str
    target: str
    label: str | None
    kind: EdgeKind


@dataclass(frozen=True)
class WorkflowDrawing:
    """A graph ready to draw: its nodes, classified edges and where the flow starts."""

    graph: WorkflowGraph
    edges: tuple[DrawnEdge, ...]
    start_ids: tuple[str, ...]
    stop_ids: tuple[str, ...]

    @property
    def nodes(self) -> list[WorkflowGraphNode]:
        """The graph's nodes, in graph order."""
        return self.graph.nodes


def drawing_of(workflow: Any) -> WorkflowDrawing:
    """Build the drawing of a Workflow class or instance (see the module docstring).

    Like :func:`get_workflow_representation`, it reads class-level annotations only: the
    workflow is neither instantiated nor validated, so an invalid workflow draws too.
    """
    graph = get_workflow_representation(workflow)
    cls = workflow if isinstance(workflow, type) else type(workflow)
    steps = discover_step_functions(cls)
    node_types = {node.id: node.node_type for node in graph.nodes}
    fan_out_elements = {
        name: {element.__name__ for element in shape.elements}
        for name, shape in shape_steps(steps).items()
        if shape.is_fan_out
    }
    edges = [
        _classified(edge.source, edge.target, edge.label, node_types, fan_out_elements)
        for edge in graph.edges
    ]
    start_class = None if isinstance(workflow, type) else workflow.start_event_class
    plan = compute_stream_bindings(steps, start_class)
    for bindings in plan.bindings_by_producer.values():
        edges.extend(
            DrawnEdge(b.producer, b.target, _join_label(b), "join")
            for b in bindings
            if b.producer in node_types and b.target in node_types
        )
    owners = catch_error_owners({name: config_of(func) for name, func in steps.items()})
    edges.extend(
        DrawnEdge(step_name, handler, FAILURE_LABEL, "failure")
        for step_name, handler in owners.items()
        if step_name in node_types and handler in node_types
    )
    events = [node for node in graph.nodes if node.node_type == "event"]
    return WorkflowDrawing(
        graph=graph,
        edges=tuple(edges),
        start_ids=tuple(n.id for n in events if _is_subclass_node(n, "StartEvent")),
        stop_ids=tuple(n.id for n in events if _is_subclass_node(n, "StopEvent")),
    )


def _classified(
    source: str,
    target: str,
    label: str | None,
    node_types: dict[str, str],
    fan_out_elements: dict[str, set[str]],
) -> DrawnEdge:
    if target in fan_out_elements.get(source, ()):
        return DrawnEdge(source, target, f"list[{target}]", "fan_out")
    if node_types.get(target) in ("resource", "resource_config"):
        return DrawnEdge(source, target, label, "resource")
    return DrawnEdge(source, target, label, "flow")


def _join_label(binding: StreamBinding) -> str:
    """``join list[A | B]``, with ``, take n`` for a ``Take(n)`` join."""
    elements = " | ".join(t.__name__ for t in binding.element_types)
    cardinality = binding.policy.cardinality
    take = f", take {cardinality.n}" if isinstance(cardinality, Take) else ""
    return f"join list[{elements}]{take}"


def _is_subclass_node(node: WorkflowGraphNode, type_name: str) -> bool:
    is_subclass_of = getattr(node, "is_subclass_of", None)
    return bool(is_subclass_of(type_name)) if is_subclass_of is not None else False
