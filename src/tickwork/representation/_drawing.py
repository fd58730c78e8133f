"""What a drawing shows: the workflow graph plus the runtime's routes that §16 leaves out.

``WorkflowGraph`` is the JSON contract of §16.2 and
deliberately does not mark fan-outs, joins, failure routes or waits (a ``list[A]`` return
is an ordinary edge to ``A``).  A drawing is for a human, who needs to see them, so
``drawing_of`` classifies every graph edge and adds overlay edges:

* ``fan_out``: a fan-out step's edge to one of its list element types (``list[E]``);
* ``resource``: an edge to a resource or config node (labelled with the parameter);
* ``flow``: every other graph edge;
* ``join`` (added): a fan-out producer to each ``list[E]`` step bound to its stream, as
  computed by ``compute_stream_bindings``;
* ``failure`` (added): each step to the ``@catch_error`` handler that owns its failures;
* ``wait`` (added): an event type to a step whose body calls ``wait_for_event`` for it
  (found in the step's source, see ``tickwork.representation._waits``);
* ``asks`` (added): such a step to the ``InputRequiredEvent`` it passes as
  ``waiter_event``; that question is routed to the ``external_step`` (the human), which
  answers with the awaited type when that is a ``HumanResponseEvent``.

Event types that only a wait mentions, and the ``external_step`` a question needs, are
added as drawing nodes (``WorkflowDrawing.nodes``); the graph itself is unchanged.
The drawing also carries the workflow's *own* docstring and, per step and event, the facts
the details panel lists (``tickwork.representation._step_facts``).

Both renderers (Mermaid and HTML) draw from this one model, so they always agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tickwork.collect import Take
from tickwork.events import Event, HumanResponseEvent
from tickwork.representation._docstring import own_docstring
from tickwork.representation._step_facts import Fact, event_facts, step_facts
from tickwork.representation._waits import WaitSite, wait_sites
from tickwork.representation.build import (
    EXTERNAL_STEP_ID,
    discover_step_functions,
    event_node,
    get_workflow_representation,
)
from tickwork.representation.model import (
    WorkflowExternalNode,
    WorkflowGraph,
    WorkflowGraphNode,
)
from tickwork.runtime.step_shapes import (
    StepConfigView,
    StepShape,
    catch_error_owners,
    config_of,
    event_classes,
    matches,
    shape_steps,
)
from tickwork.runtime.stream_plan import StreamBinding, compute_stream_bindings

__all__ = ["EDGE_KINDS", "DrawnEdge", "EdgeKind", "WorkflowDrawing", "drawing_of"]

EdgeKind = Literal["flow", "fan_out", "resource", "join", "failure", "wait", "asks"]
EDGE_KINDS: tuple[EdgeKind, ...] = (
    "flow",
    "fan_out",
    "resource",
    "join",
    "failure",
    "wait",
    "asks",
)

FAILURE_LABEL = "on failure"
WAIT_LABEL = "waits for"
ASKS_LABEL = "asks"


@dataclass(frozen=True)
class DrawnEdge:
    """One arrow of the drawing."""

    source: str
    target: str
    label: str | None
    kind: EdgeKind


@dataclass(frozen=True)
class WorkflowDrawing:
    """A graph ready to draw: its nodes, classified edges and where the flow starts.

    ``extra_nodes`` are drawn after the graph's own (event types only a
    ``wait_for_event`` call mentions, the human a wait asks); ``description`` is the
    workflow class's own docstring; ``facts`` maps each step and event node to what the
    details panel lists about it.
    """

    graph: WorkflowGraph
    edges: tuple[DrawnEdge, ...]
    start_ids: tuple[str, ...]
    stop_ids: tuple[str, ...]
    extra_nodes: tuple[WorkflowGraphNode, ...] = ()
    description: str | None = None
    facts: Mapping[str, tuple[Fact, ...]] = field(default_factory=dict)

    @property
    def nodes(self) -> list[WorkflowGraphNode]:
        """The graph's nodes, in graph order, then the drawing's extra nodes."""
        return [*self.graph.nodes, *self.extra_nodes]


def drawing_of(workflow: Any) -> WorkflowDrawing:
    """Build the drawing of a Workflow class or instance (see the module docstring).

    Like ``get_workflow_representation``, it reads class-level annotations (and, for
    waits, the steps' source) only: the workflow is neither instantiated nor validated,
    so an invalid workflow draws too.
    """
    graph = get_workflow_representation(workflow)
    cls = workflow if isinstance(workflow, type) else type(workflow)
    steps = discover_step_functions(cls)
    configs = {name: config_of(func) for name, func in steps.items()}
    shapes = shape_steps(steps)
    node_types = {node.id: node.node_type for node in graph.nodes}
    fan_out_elements = {
        name: {element.__name__ for element in shape.elements}
        for name, shape in shapes.items()
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
    owners = catch_error_owners(configs)
    edges.extend(
        DrawnEdge(step_name, handler, FAILURE_LABEL, "failure")
        for step_name, handler in owners.items()
        if step_name in node_types and handler in node_types
    )
    waits = {name: wait_sites(func) for name, func in steps.items()}
    overlay = _WaitOverlay(graph, configs, shapes, edges)
    for name, sites in waits.items():
        for site in sites:
            overlay.add(name, site)
    nodes = [*graph.nodes, *overlay.extra_nodes]
    events = [node for node in nodes if node.node_type == "event"]
    return WorkflowDrawing(
        graph=graph,
        edges=tuple(overlay.edges),
        start_ids=tuple(n.id for n in events if _is_subclass_node(n, "StartEvent")),
        stop_ids=tuple(n.id for n in events if _is_subclass_node(n, "StopEvent")),
        extra_nodes=tuple(overlay.extra_nodes),
        description=own_docstring(cls),
        facts=_facts(nodes, configs, shapes, waits, overlay.events),
    )


class _WaitOverlay:
    """Adds the ``wait`` and ``asks`` edges, and the nodes they need, to a drawing."""

    def __init__(
        self,
        graph: WorkflowGraph,
        configs: Mapping[str, StepConfigView],
        shapes: Mapping[str, StepShape],
        edges: list[DrawnEdge],
    ) -> None:
        self.configs = configs
        self.shapes = shapes
        self.edges = edges
        self.extra_nodes: list[WorkflowGraphNode] = []
        self.node_ids = {node.id for node in graph.nodes}
        self.edge_keys = {(e.source, e.target, e.kind) for e in edges}
        self.events: dict[str, type[Event]] = {}
        for cfg in configs.values():
            for event_type in event_classes([*cfg.accepted_events, *cfg.return_types]):
                self.events.setdefault(event_type.__name__, event_type)

    def add(self, step_name: str, site: WaitSite) -> None:
        """Draw ``step_name`` waiting for ``site.event_type`` (and asking ``site.asks``)."""
        if step_name not in self.node_ids:
            return
        awaited = self._event(site.event_type)
        for source in self._answers(site.event_type, self.shapes[step_name].subclass_mode):
            self._edge(source, step_name, WAIT_LABEL, "wait")
        if site.asks is None:
            return
        asked = self._event(site.asks)
        self._edge(step_name, asked, ASKS_LABEL, "asks")
        if EXTERNAL_STEP_ID not in self.node_ids:
            self.node_ids.add(EXTERNAL_STEP_ID)
            self.extra_nodes.append(
                WorkflowExternalNode(id=EXTERNAL_STEP_ID, label=EXTERNAL_STEP_ID)
            )
        self._edge(asked, EXTERNAL_STEP_ID, None, "flow")
        if issubclass(site.event_type, HumanResponseEvent):
            self._edge(EXTERNAL_STEP_ID, awaited, None, "flow")

    def _event(self, event_type: type[Event]) -> str:
        """The node id of ``event_type``, adding a node when the graph has none."""
        node_id = event_type.__name__
        self.events.setdefault(node_id, event_type)
        if node_id not in self.node_ids:
            self.node_ids.add(node_id)
            self.extra_nodes.append(event_node(event_type, self.configs))
        return node_id

    def _answers(self, awaited: type[Event], subclass_mode: bool) -> list[str]:
        """The event nodes that resolve a wait for ``awaited`` (api.md §23.1 matching)."""
        return [
            node_id
            for node_id, event_type in self.events.items()
            if node_id in self.node_ids and matches(event_type, awaited, subclass_mode)
        ]

    def _edge(self, source: str, target: str, label: str | None, kind: EdgeKind) -> None:
        key = (source, target, kind)
        if key not in self.edge_keys:
            self.edge_keys.add(key)
            self.edges.append(DrawnEdge(source, target, label, kind))


def _facts(
    nodes: list[WorkflowGraphNode],
    configs: Mapping[str, StepConfigView],
    shapes: Mapping[str, StepShape],
    waits: Mapping[str, tuple[WaitSite, ...]],
    events: Mapping[str, type[Event]],
) -> dict[str, tuple[Fact, ...]]:
    """The details of every step node and of every event node whose class is known."""
    facts: dict[str, tuple[Fact, ...]] = {}
    for node in nodes:
        if node.node_type == "step" and node.id in configs:
            facts[node.id] = step_facts(shapes[node.id], configs[node.id], shapes, waits[node.id])
        elif node.node_type == "event" and node.id in events:
            facts[node.id] = event_facts(events[node.id], shapes, waits)
    return facts


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
