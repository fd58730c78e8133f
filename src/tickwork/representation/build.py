"""Build the ``WorkflowGraph`` of a workflow (§16.2).

The graph is derived from the class-level step configurations only: the workflow is
neither instantiated nor validated, so even an invalid workflow can be drawn (which is
when a drawing helps most).  ``discover_step_functions``, the single definition of step
discovery (api.md §6.3) that the Workflow class reuses, lives in
``tickwork.runtime.step_shapes`` and is re-exported here.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from tickwork.events import Event, HumanResponseEvent, InputRequiredEvent, StopEvent
from tickwork.representation.model import (
    WorkflowEventNode,
    WorkflowExternalNode,
    WorkflowGraph,
    WorkflowGraphEdge,
    WorkflowGraphNode,
    WorkflowResourceConfigNode,
    WorkflowResourceNode,
    WorkflowStepNode,
)
from tickwork.runtime.step_shapes import (
    StepConfigView,
    config_of,
    discover_step_functions,
    event_classes,
)

__all__ = [
    "EXTERNAL_STEP_ID",
    "discover_step_functions",
    "event_node",
    "get_workflow_representation",
]

EXTERNAL_STEP_ID = "external_step"


def get_workflow_representation(workflow: Any) -> WorkflowGraph:
    """The static graph of a Workflow class or instance (api.md §16.2).

    Nodes: each step (in discovery order) followed by its accepted and returned event
    types, the ``external_step`` after the first returned ``InputRequiredEvent``, then its
    resources depth-first.  Edges: step → returned type, accepted type → step (expanded to
    subclasses for subclass-mode steps), ``InputRequiredEvent`` → ``external_step`` →
    ``HumanResponseEvent``, step → resource and resource → dependency.
    """
    cls = workflow if isinstance(workflow, type) else type(workflow)
    steps = discover_step_functions(cls)
    configs = {name: config_of(func) for name, func in steps.items()}
    builder = _GraphBuilder(configs, _stop_event_class(configs))
    for name, func in steps.items():
        builder.add_step(name, inspect.getdoc(func))
    builder.add_event_edges()
    return WorkflowGraph(
        name=cls.__name__,
        nodes=builder.nodes,
        edges=builder.edges,
        description=inspect.getdoc(cls),
    )


def _stop_event_class(configs: Mapping[str, StepConfigView]) -> type | None:
    """The workflow's stop type: the unique ``StopEvent`` subclass steps return, if any."""
    stops = event_classes(
        t for cfg in configs.values() for t in cfg.return_types if _is_subclass(t, StopEvent)
    )
    return stops[0] if len(stops) == 1 else None


def _is_subclass(candidate: Any, base: type) -> bool:
    return isinstance(candidate, type) and issubclass(candidate, base)


@dataclass
class _GraphBuilder:
    """Accumulates nodes (each id once) and edges (each ``(source, target, label)`` once)."""

    configs: Mapping[str, StepConfigView]
    stop_event_class: type | None
    nodes: list[WorkflowGraphNode] = field(default_factory=list)
    edges: list[WorkflowGraphEdge] = field(default_factory=list)
    event_classes_by_id: dict[str, type[Event]] = field(default_factory=dict)
    _node_ids: set[str] = field(default_factory=set)
    _edge_keys: set[tuple[str, str, str | None]] = field(default_factory=set)

    def add_node(self, node: WorkflowGraphNode) -> bool:
        """Append ``node`` unless its id exists; return whether it was added."""
        if node.id in self._node_ids:
            return False
        self._node_ids.add(node.id)
        self.nodes.append(node)
        return True

    def add_edge(self, source: str, target: str, label: str | None = None) -> None:
        """Append an edge between two existing nodes, once."""
        key = (source, target, label)
        if key in self._edge_keys or not {source, target} <= self._node_ids:
            return
        self._edge_keys.add(key)
        self.edges.append(WorkflowGraphEdge(source=source, target=target, label=label))

    def add_step(self, name: str, description: str | None) -> None:
        """Add a step node, its event nodes, the external node and its resources."""
        cfg = self.configs[name]
        self.add_node(WorkflowStepNode(id=name, label=name, description=description))
        for accepted in event_classes(cfg.accepted_events):
            if accepted is StopEvent and accepted is not self.stop_event_class:
                continue
            self._add_event(accepted)
        for returned in event_classes(cfg.return_types):
            self._add_event(returned)
            if issubclass(returned, InputRequiredEvent):
                self.add_node(WorkflowExternalNode(id=EXTERNAL_STEP_ID, label=EXTERNAL_STEP_ID))
            self.add_edge(name, returned.__name__)
        for definition in cfg.resources:
            self._add_resource(
                definition.resource, definition.type_annotation, name, definition.name
            )

    def _add_event(self, event_type: type[Event]) -> None:
        if event_type.__name__ in self._node_ids:
            return  # same-named classes collide into the first one's node (api.md §16.2)
        node = event_node(event_type, self.configs)
        if self.add_node(node):
            self.event_classes_by_id[node.id] = event_type

    def add_event_edges(self) -> None:
        """Edges into steps and around the external node, once every node exists."""
        for name, cfg in self.configs.items():
            for accepted in event_classes(cfg.accepted_events):
                for source in self._event_sources(accepted, cfg.accept_event_subclasses):
                    self.add_edge(source, name)
            for returned in event_classes(cfg.return_types):
                if issubclass(returned, InputRequiredEvent):
                    self.add_edge(returned.__name__, EXTERNAL_STEP_ID)
        for cfg in self.configs.values():
            for accepted in event_classes(cfg.accepted_events):
                if issubclass(accepted, HumanResponseEvent):
                    self.add_edge(EXTERNAL_STEP_ID, accepted.__name__)

    def _event_sources(self, accepted: type[Event], subclass_mode: bool) -> list[str]:
        """Event nodes delivered to a parameter of type ``accepted``."""
        sources = [accepted.__name__]
        if subclass_mode:
            sources += [
                node_id
                for node_id, event_type in self.event_classes_by_id.items()
                if event_type is not accepted
                and issubclass(event_type, accepted)
                and not issubclass(event_type, StopEvent)
            ]
        return sources

    def _add_resource(self, descriptor: Any, type_annotation: Any, parent: str, param: str) -> None:
        """Add ``descriptor``'s node and the edge ``parent → node`` labelled ``param``.

        A node seen for the first time is followed depth-first into its dependencies.

        Descriptors that are neither a ``Resource`` nor a ``ResourceConfig`` (third-party
        implementations of ``ResourceDescriptor``) are not drawn.
        """
        node = _resource_node(descriptor, type_annotation)
        if node is None:
            return
        is_new = self.add_node(node)
        self.add_edge(parent, node.id, param)
        if is_new:
            for dependency_param, dependency, dependency_type in _dependencies(descriptor):
                self._add_resource(dependency, dependency_type, node.id, dependency_param)


def event_node(event_type: type[Event], configs: Mapping[str, StepConfigView]) -> WorkflowEventNode:
    """The node of ``event_type``; ``produced_by`` lists the ``configs`` returning it."""
    return WorkflowEventNode(
        id=event_type.__name__,
        label=event_type.__name__,
        event_type=event_type.__name__,
        event_types=_event_type_names(event_type),
        event_schema=_json_schema(event_type),
        produced_by=[step for step, cfg in configs.items() if event_type in cfg.return_types],
    )


def _event_type_names(event_type: type[Event]) -> list[str]:
    """The class name followed by its ``Event``-subclass ancestors (MRO order, not Event)."""
    return [event_type.__name__] + [
        base.__name__
        for base in event_type.__mro__[1:]
        if issubclass(base, Event) and base is not Event
    ]


def _json_schema(model: type[BaseModel]) -> dict[str, Any] | None:
    """``model_json_schema()``, or ``None`` for a model pydantic cannot describe."""
    try:
        return model.model_json_schema()
    except Exception:  # arbitrary field types may have no JSON schema
        return None


def _dependencies(descriptor: Any) -> list[tuple[str, Any, Any]]:
    """``descriptor.get_dependencies()``, or nothing when they cannot be resolved.

    A factory whose annotations do not resolve is reported by validation (check 9); the
    drawing shows what it can.
    """
    get_dependencies = getattr(descriptor, "get_dependencies", None)
    if get_dependencies is None:
        return []
    try:
        return list(get_dependencies())
    except Exception:
        return []


def _resource_node(descriptor: Any, type_annotation: Any) -> WorkflowGraphNode | None:
    factory = getattr(descriptor, "factory", None) or getattr(descriptor, "_factory", None)
    if factory is not None:
        return _factory_node(descriptor, factory, type_annotation)
    if hasattr(descriptor, "path_selector") and hasattr(descriptor, "cls_factory"):
        return _config_node(descriptor, type_annotation)
    return None


def _factory_node(descriptor: Any, factory: Any, type_annotation: Any) -> WorkflowResourceNode:
    name = str(getattr(descriptor, "name", None) or _qualname(factory))
    source_file = _source_file(factory)
    getter_name = getattr(factory, "__name__", None) or type(factory).__name__
    type_name = _type_name(type_annotation)
    return WorkflowResourceNode(
        id="resource_" + _short_hash(f"{name}:{source_file}"),
        label=type_name or getter_name,
        type_name=type_name,
        getter_name=getter_name,
        source_file=source_file,
        source_line=_source_line(factory),
        description=inspect.getdoc(factory),
    )


def _config_node(descriptor: Any, type_annotation: Any) -> WorkflowResourceConfigNode:
    config_file = _config_file(descriptor)
    path_selector = getattr(descriptor, "path_selector", None)
    model = getattr(descriptor, "cls_factory", None) or (
        type_annotation if _is_subclass(type_annotation, BaseModel) else None
    )
    type_name = _type_name(model) or _type_name(type_annotation)
    return WorkflowResourceConfigNode(
        id="resource_config_" + _short_hash(f"{config_file}:{path_selector or ''}"),
        label=getattr(descriptor, "label", None) or type_name or config_file,
        type_name=type_name,
        config_file=config_file,
        path_selector=path_selector,
        config_schema=_json_schema(model) if model is not None else None,
        config_value=_config_value(descriptor),
        description=getattr(descriptor, "description", None),
    )


def _config_file(descriptor: Any) -> str:
    """The absolute config path, or the path as given when the file does not exist."""
    try:
        return str(descriptor.config_file)
    except OSError:
        name = str(getattr(descriptor, "name", ""))
        selector = getattr(descriptor, "path_selector", None)
        suffix = f".{selector}" if selector else ""
        return name[: -len(suffix)] if suffix and name.endswith(suffix) else name


def _config_value(descriptor: Any) -> dict[str, Any] | None:
    """The selected data of the config file, or ``None`` when it cannot be read."""
    load_data = getattr(descriptor, "load_data", None)
    if load_data is None:
        return None
    try:
        data = load_data()
    except Exception:  # a missing or invalid file is reported by validation (check 8)
        return None
    return data if isinstance(data, dict) else None


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _qualname(obj: Any) -> str:
    qualname = getattr(obj, "__qualname__", None)
    return qualname if isinstance(qualname, str) else type(obj).__name__


def _type_name(annotation: Any) -> str | None:
    if annotation is None:
        return None
    name = getattr(annotation, "__name__", None)
    return name if isinstance(name, str) else None


def _source_file(obj: Any) -> str:
    try:
        return inspect.getfile(obj)
    except (TypeError, OSError):
        return "unknown"


def _source_line(obj: Any) -> int | None:
    try:
        return inspect.getsourcelines(obj)[1]
    except (TypeError, OSError):
        return None
