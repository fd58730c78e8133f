"""The JSON-friendly model of a workflow's static graph (api.md §16.1, §16.3).

These are pydantic models so that a graph can be dumped, sent to a UI and validated back:
``WorkflowGraph.model_validate(graph.model_dump())`` restores every node's class, because
``WorkflowGraphNode`` chooses the node class from ``node_type``.  Unknown ``node_type``
values (extensions such as agents or tools) become ``WorkflowGenericNode`` instead of
failing, so a graph produced by a newer or extended producer still loads.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Discriminator, Field, Tag

__all__ = [
    "WorkflowEventNode",
    "WorkflowExternalNode",
    "WorkflowGenericNode",
    "WorkflowGraph",
    "WorkflowGraphEdge",
    "WorkflowGraphNode",
    "WorkflowNodeBase",
    "WorkflowResourceConfigNode",
    "WorkflowResourceNode",
    "WorkflowStepNode",
]


class WorkflowNodeBase(BaseModel):
    """What every node has: a graph-unique ``id`` and a human ``label``."""

    id: str
    label: str

    def truncated_label(self, max_length: int) -> str:
        """The label, cut to ``max_length`` characters with a trailing ``*`` when too long.

        ``"my_long_step_name"`` at 5 gives ``"my_l*"``; a label that fits is unchanged.
        """
        if len(self.label) <= max_length:
            return self.label
        return self.label[: max(max_length - 1, 0)] + "*"


class WorkflowStepNode(WorkflowNodeBase):
    """A step; ``description`` is its docstring."""

    node_type: Literal["step"] = "step"
    description: str | None = None


class WorkflowEventNode(WorkflowNodeBase):
    """An event class; ``event_types`` is its name followed by its Event ancestors."""

    node_type: Literal["event"] = "event"
    event_type: str
    event_types: list[str]
    event_schema: dict[str, Any] | None = None
    produced_by: list[str] = Field(default_factory=list)

    def is_subclass_of(self, *type_names: str) -> bool:
        """True if any of ``type_names`` is this event's class or one of its ancestors."""
        return any(name in self.event_types for name in type_names)


class WorkflowExternalNode(WorkflowNodeBase):
    """The outside world (the human answering an ``InputRequiredEvent``)."""

    node_type: Literal["external"] = "external"


class WorkflowResourceNode(WorkflowNodeBase):
    """A ``Resource(factory)`` a step (or another resource) depends on."""

    node_type: Literal["resource"] = "resource"
    type_name: str | None = None
    getter_name: str | None = None
    source_file: str | None = None
    source_line: int | None = None
    description: str | None = None


class WorkflowResourceConfigNode(WorkflowNodeBase):
    """A ``ResourceConfig(config_file, ...)`` a step (or a resource) depends on."""

    node_type: Literal["resource_config"] = "resource_config"
    type_name: str | None = None
    config_file: str | None = None
    path_selector: str | None = None
    config_schema: dict[str, Any] | None = None
    config_value: dict[str, Any] | None = None
    description: str | None = None


class WorkflowGenericNode(WorkflowNodeBase):
    """A node of any other kind (agents, tools...); ``node_type`` is free text."""

    node_type: str
    event_type: str | None = None
    event_types: list[str] | None = None

    def is_subclass_of(self, *type_names: str) -> bool:
        """True if any of ``type_names`` is in ``event_types`` (never when it is empty)."""
        if not self.event_types:
            return False
        return any(name in self.event_types for name in type_names)


_GENERIC_TAG = "__generic__"
_KNOWN_NODE_TYPES = frozenset({"step", "event", "external", "resource", "resource_config"})


def _node_tag(value: Any) -> str:
    """Pick the node class for ``value``: its known ``node_type``, else the generic class.

    A ``WorkflowGenericNode`` instance stays generic even if its free-text ``node_type``
    happens to be a known one, so validating an existing graph never changes node classes.
    """
    if isinstance(value, WorkflowGenericNode):
        return _GENERIC_TAG
    if isinstance(value, dict):
        node_type = value.get("node_type")
    else:
        node_type = getattr(value, "node_type", None)
    if isinstance(node_type, str) and node_type in _KNOWN_NODE_TYPES:
        return node_type
    return _GENERIC_TAG


WorkflowGraphNode = Annotated[
    Union[
        Annotated[WorkflowStepNode, Tag("step")],
        Annotated[WorkflowEventNode, Tag("event")],
        Annotated[WorkflowExternalNode, Tag("external")],
        Annotated[WorkflowResourceNode, Tag("resource")],
        Annotated[WorkflowResourceConfigNode, Tag("resource_config")],
        Annotated[WorkflowGenericNode, Tag(_GENERIC_TAG)],
    ],
    Discriminator(_node_tag),
]
"""Any graph node; validation picks the class from ``node_type`` (unknown → generic)."""


class WorkflowGraphEdge(BaseModel):
    """A directed edge; ``label`` names a parameter (resources) or a collapsed node."""

    source: str
    target: str
    label: str | None = None


class WorkflowGraph(BaseModel):
    """A workflow's static graph: steps, events, the external actor and resources."""

    name: str
    nodes: list[WorkflowGraphNode]
    edges: list[WorkflowGraphEdge]
    description: str | None = None

    def filter_by_node_type(self, *node_types: str) -> WorkflowGraph:
        """A new graph without the nodes of ``node_types``, their neighbours reconnected.

        For each remaining node (in node order) its outgoing edges are followed (in edge
        order); an edge into a removed node is followed onwards, without revisiting a node
        on that walk, until remaining nodes are reached.  A reconnected edge is labelled
        with the label of the first removed node on its path; a direct edge keeps its own
        label.  Edges are de-duplicated by ``(source, target)``, the first one kept.
        With nothing to remove, ``self`` is returned unchanged.
        """
        removed = {node.id for node in self.nodes if node.node_type in node_types}
        if not removed:
            return self
        labels = {node.id: node.label for node in self.nodes}
        outgoing: dict[str, list[WorkflowGraphEdge]] = {}
        for edge in self.edges:
            outgoing.setdefault(edge.source, []).append(edge)
        kept_nodes = [node.model_copy(deep=True) for node in self.nodes if node.id not in removed]
        new_edges: list[WorkflowGraphEdge] = []
        seen: set[tuple[str, str]] = set()
        for node in kept_nodes:
            for target, label in _reconnected_targets(node.id, outgoing, removed, labels):
                if (node.id, target) not in seen:
                    seen.add((node.id, target))
                    new_edges.append(WorkflowGraphEdge(source=node.id, target=target, label=label))
        return WorkflowGraph(
            name=self.name, nodes=kept_nodes, edges=new_edges, description=self.description
        )


def _reconnected_targets(
    source: str,
    outgoing: dict[str, list[WorkflowGraphEdge]],
    removed: set[str],
    labels: dict[str, str],
) -> list[tuple[str, str | None]]:
    """The remaining nodes ``source`` reaches, each with the label its new edge carries."""
    found: list[tuple[str, str | None]] = []
    for edge in outgoing.get(source, []):
        if edge.target in removed:
            first_label = labels.get(edge.target)
            found.extend(
                (target, first_label) for target in _walk_removed(edge.target, outgoing, removed)
            )
        else:
            found.append((edge.target, edge.label))
    return found


def _walk_removed(
    start: str, outgoing: dict[str, list[WorkflowGraphEdge]], removed: set[str]
) -> list[str]:
    """Remaining nodes reached from the removed node ``start`` through removed nodes only.

    Depth-first in edge order; each node is visited at most once on this walk, so cycles
    among removed nodes terminate.
    """
    reached: list[str] = []
    visited = {start}
    stack = [iter(outgoing.get(start, []))]
    while stack:
        edge = next(stack[-1], None)
        if edge is None:
            stack.pop()
            continue
        if edge.target in visited:
            continue
        visited.add(edge.target)
        if edge.target in removed:
            stack.append(iter(outgoing.get(edge.target, [])))
        else:
            reached.append(edge.target)
    return reached
