"""The pydantic graph model (api.md §16.1) and ``filter_by_node_type`` (§16.3)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

import tickwork.representation as representation
from tickwork.representation import (
    WorkflowEventNode,
    WorkflowExternalNode,
    WorkflowGenericNode,
    WorkflowGraph,
    WorkflowGraphEdge,
    WorkflowGraphNode,
    WorkflowNodeBase,
    WorkflowResourceConfigNode,
    WorkflowResourceNode,
    WorkflowStepNode,
)


def test_exports_are_exactly_the_public_names() -> None:
    assert set(representation.__all__) == {
        "get_workflow_representation",
        "WorkflowNodeBase",
        "WorkflowStepNode",
        "WorkflowEventNode",
        "WorkflowExternalNode",
        "WorkflowResourceNode",
        "WorkflowResourceConfigNode",
        "WorkflowGenericNode",
        "WorkflowGraphNode",
        "WorkflowGraphEdge",
        "WorkflowGraph",
    }
    assert len(representation.__all__) == 11
    for name in representation.__all__:
        assert hasattr(representation, name)


# --- nodes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "max_length", "expected"),
    [
        ("my_long_step_name", 5, "my_l*"),
        ("short", 5, "short"),
        ("short", 6, "short"),
        ("sixsix", 5, "sixs*"),
        ("ab", 1, "*"),
    ],
)
def test_truncated_label(label: str, max_length: int, expected: str) -> None:
    assert WorkflowNodeBase(id="x", label=label).truncated_label(max_length) == expected


def test_truncated_label_is_available_on_every_node_class() -> None:
    node = WorkflowStepNode(id="my_long_step_name", label="my_long_step_name")
    assert node.truncated_label(5) == "my_l*"


def test_node_defaults() -> None:
    step = WorkflowStepNode(id="s", label="s")
    assert (step.node_type, step.description) == ("step", None)
    assert WorkflowExternalNode(id="e", label="e").node_type == "external"
    event = WorkflowEventNode(id="A", label="A", event_type="A", event_types=["A"])
    assert (event.node_type, event.event_schema, event.produced_by) == ("event", None, [])
    resource = WorkflowResourceNode(id="r", label="r")
    assert resource.node_type == "resource"
    assert resource.model_dump(exclude={"id", "label", "node_type"}) == dict.fromkeys(
        ["type_name", "getter_name", "source_file", "source_line", "description"]
    )
    config = WorkflowResourceConfigNode(id="c", label="c")
    assert config.node_type == "resource_config"
    assert config.model_dump(exclude={"id", "label", "node_type"}) == dict.fromkeys(
        [
            "type_name",
            "config_file",
            "path_selector",
            "config_schema",
            "config_value",
            "description",
        ]
    )
    edge = WorkflowGraphEdge(source="a", target="b")
    assert edge.label is None
    assert WorkflowGraph(name="g", nodes=[], edges=[]).description is None


def test_generic_node_requires_node_type() -> None:
    with pytest.raises(ValueError, match="node_type"):
        WorkflowGenericNode(id="g", label="g")  # type: ignore[call-arg]


def test_event_node_is_subclass_of() -> None:
    node = WorkflowEventNode(id="B", label="B", event_type="B", event_types=["B", "A"])
    assert node.is_subclass_of("A")
    assert node.is_subclass_of("Z", "B")
    assert not node.is_subclass_of("Z")
    assert not node.is_subclass_of()


def test_generic_node_is_subclass_of() -> None:
    assert not WorkflowGenericNode(id="g", label="g", node_type="tool").is_subclass_of("A")
    empty = WorkflowGenericNode(id="g", label="g", node_type="tool", event_types=[])
    assert not empty.is_subclass_of("A")
    typed = WorkflowGenericNode(id="g", label="g", node_type="tool", event_types=["X", "A"])
    assert typed.is_subclass_of("A")
    assert not typed.is_subclass_of("B")


# --- the discriminated union -----------------------------------------------------------

NODE_DICTS: list[tuple[dict[str, Any], type]] = [
    ({"id": "s", "label": "s", "node_type": "step"}, WorkflowStepNode),
    (
        {"id": "A", "label": "A", "node_type": "event", "event_type": "A", "event_types": ["A"]},
        WorkflowEventNode,
    ),
    ({"id": "x", "label": "x", "node_type": "external"}, WorkflowExternalNode),
    ({"id": "r", "label": "r", "node_type": "resource"}, WorkflowResourceNode),
    ({"id": "c", "label": "c", "node_type": "resource_config"}, WorkflowResourceConfigNode),
    ({"id": "a", "label": "a", "node_type": "agent"}, WorkflowGenericNode),
    ({"id": "t", "label": "t", "node_type": "generic", "event_type": "T"}, WorkflowGenericNode),
]


@pytest.mark.parametrize(("data", "cls"), NODE_DICTS)
def test_node_union_picks_class_by_node_type(data: dict[str, Any], cls: type) -> None:
    adapter: TypeAdapter[WorkflowGraphNode] = TypeAdapter(WorkflowGraphNode)
    node = adapter.validate_python(data)
    assert type(node) is cls
    assert node.node_type == data["node_type"]


def test_unknown_node_type_is_kept_on_the_generic_node() -> None:
    graph = WorkflowGraph.model_validate(
        {
            "name": "g",
            "nodes": [{"id": "t", "label": "tool", "node_type": "tool", "event_types": ["E"]}],
            "edges": [],
        }
    )
    (node,) = graph.nodes
    assert isinstance(node, WorkflowGenericNode)
    assert node.node_type == "tool"
    assert node.is_subclass_of("E")


def test_generic_instance_with_a_known_node_type_stays_generic() -> None:
    odd = WorkflowGenericNode(id="s", label="s", node_type="step")
    graph = WorkflowGraph(name="g", nodes=[odd], edges=[])
    assert type(graph.nodes[0]) is WorkflowGenericNode


def _sample_graph() -> WorkflowGraph:
    return WorkflowGraph(
        name="Flow",
        description="A flow.",
        nodes=[
            WorkflowStepNode(id="start", label="start", description="doc"),
            WorkflowEventNode(
                id="Ask",
                label="Ask",
                event_type="Ask",
                event_types=["Ask", "InputRequiredEvent"],
                event_schema={"type": "object"},
                produced_by=["start"],
            ),
            WorkflowExternalNode(id="external_step", label="external_step"),
            WorkflowResourceNode(id="resource_1", label="Db", source_line=3),
            WorkflowResourceConfigNode(id="resource_config_1", label="cfg", config_value={"a": 1}),
            WorkflowGenericNode(id="agent", label="agent", node_type="agent", event_types=["X"]),
        ],
        edges=[
            WorkflowGraphEdge(source="start", target="Ask"),
            WorkflowGraphEdge(source="start", target="resource_1", label="db"),
        ],
    )


def test_round_trip_restores_every_node_class() -> None:
    graph = _sample_graph()
    restored = WorkflowGraph.model_validate(graph.model_dump())
    assert restored == graph
    assert [type(n) for n in restored.nodes] == [type(n) for n in graph.nodes]


def test_json_round_trip() -> None:
    graph = _sample_graph()
    restored = WorkflowGraph.model_validate_json(graph.model_dump_json())
    assert restored == graph
    assert [type(n) for n in restored.nodes] == [type(n) for n in graph.nodes]


def test_dump_contains_node_type_and_subclass_fields() -> None:
    dumped = _sample_graph().model_dump()
    assert dumped["nodes"][1]["node_type"] == "event"
    assert dumped["nodes"][1]["produced_by"] == ["start"]
    assert dumped["nodes"][5] == {
        "id": "agent",
        "label": "agent",
        "node_type": "agent",
        "event_type": None,
        "event_types": ["X"],
    }


# --- filter_by_node_type ---------------------------------------------------------------


def _graph(nodes: list[tuple[str, str]], edges: list[tuple[str, str, str | None]]) -> WorkflowGraph:
    """Nodes as ``(id, node_type)`` (label = id upper-cased), edges as triples."""
    built: list[WorkflowGraphNode] = []
    for node_id, node_type in nodes:
        if node_type == "step":
            built.append(WorkflowStepNode(id=node_id, label=node_id.upper()))
        elif node_type == "event":
            built.append(
                WorkflowEventNode(
                    id=node_id, label=node_id.upper(), event_type=node_id, event_types=[node_id]
                )
            )
        else:
            built.append(
                WorkflowGenericNode(id=node_id, label=node_id.upper(), node_type=node_type)
            )
    return WorkflowGraph(
        name="g",
        description="d",
        nodes=built,
        edges=[WorkflowGraphEdge(source=s, target=t, label=lbl) for s, t, lbl in edges],
    )


def _edges(graph: WorkflowGraph) -> list[tuple[str, str, str | None]]:
    return [(e.source, e.target, e.label) for e in graph.edges]


def test_filter_reconnects_through_a_removed_node_with_its_label() -> None:
    graph = _graph(
        [("a", "step"), ("e", "event"), ("b", "step")],
        [("a", "e", None), ("e", "b", None)],
    )
    filtered = graph.filter_by_node_type("event")
    assert [n.id for n in filtered.nodes] == ["a", "b"]
    assert _edges(filtered) == [("a", "b", "E")]
    assert (filtered.name, filtered.description) == ("g", "d")


def test_filter_keeps_direct_edge_labels() -> None:
    graph = _graph(
        [("a", "step"), ("r", "resource"), ("e", "event")],
        [("a", "r", "db"), ("a", "e", None)],
    )
    assert _edges(graph.filter_by_node_type("event")) == [("a", "r", "db")]


def test_filter_label_is_the_first_removed_node_on_the_path() -> None:
    graph = _graph(
        [("a", "step"), ("x", "tool"), ("y", "tool"), ("b", "step")],
        [("a", "x", "edge-label"), ("x", "y", "inner"), ("y", "b", None)],
    )
    assert _edges(graph.filter_by_node_type("tool")) == [("a", "b", "X")]


def test_filter_walk_stops_at_remaining_nodes() -> None:
    graph = _graph(
        [("a", "step"), ("e", "event"), ("b", "step"), ("f", "event"), ("c", "step")],
        [("a", "e", None), ("e", "b", None), ("b", "f", None), ("f", "c", None)],
    )
    assert _edges(graph.filter_by_node_type("event")) == [("a", "b", "E"), ("b", "c", "F")]


def test_filter_follows_branches_in_edge_order() -> None:
    graph = _graph(
        [("a", "step"), ("e", "event"), ("b", "step"), ("c", "step")],
        [("a", "e", None), ("e", "c", None), ("e", "b", None)],
    )
    assert _edges(graph.filter_by_node_type("event")) == [("a", "c", "E"), ("a", "b", "E")]


def test_filter_deduplicates_by_source_and_target_keeping_the_first() -> None:
    graph = _graph(
        [("a", "step"), ("e", "event"), ("f", "event"), ("b", "step")],
        [("a", "e", None), ("a", "f", None), ("e", "b", None), ("f", "b", None)],
    )
    assert _edges(graph.filter_by_node_type("event")) == [("a", "b", "E")]


def test_filter_dedup_prefers_an_earlier_direct_edge() -> None:
    graph = _graph(
        [("a", "step"), ("b", "step"), ("e", "event")],
        [("a", "b", "direct"), ("a", "e", None), ("e", "b", None)],
    )
    assert _edges(graph.filter_by_node_type("event")) == [("a", "b", "direct")]


def test_filter_keeps_self_loops() -> None:
    graph = _graph([("a", "step"), ("e", "event")], [("a", "e", None), ("e", "a", None)])
    assert _edges(graph.filter_by_node_type("event")) == [("a", "a", "E")]


def test_filter_terminates_on_cycles_among_removed_nodes() -> None:
    graph = _graph(
        [("a", "step"), ("x", "tool"), ("y", "tool"), ("b", "step")],
        [("a", "x", None), ("x", "y", None), ("y", "x", None), ("y", "b", None)],
    )
    assert _edges(graph.filter_by_node_type("tool")) == [("a", "b", "X")]


def test_filter_drops_edges_out_of_unreached_removed_nodes() -> None:
    graph = _graph([("e", "event"), ("a", "step")], [("e", "a", None)])
    filtered = graph.filter_by_node_type("event")
    assert [n.id for n in filtered.nodes] == ["a"]
    assert filtered.edges == []


def test_filter_several_node_types_at_once() -> None:
    graph = _graph(
        [("a", "step"), ("e", "event"), ("x", "external"), ("h", "event"), ("b", "step")],
        [("a", "e", None), ("e", "x", None), ("x", "h", None), ("h", "b", None)],
    )
    filtered = graph.filter_by_node_type("event", "external")
    assert [n.id for n in filtered.nodes] == ["a", "b"]
    assert _edges(filtered) == [("a", "b", "E")]


def test_filter_follows_remaining_nodes_in_node_order() -> None:
    graph = _graph(
        [("b", "step"), ("e", "event"), ("a", "step")],
        [("a", "e", None), ("e", "b", None), ("b", "e", None), ("e", "a", None)],
    )
    assert _edges(graph.filter_by_node_type("event")) == [
        ("b", "b", "E"),
        ("b", "a", "E"),
        ("a", "b", "E"),
        ("a", "a", "E"),
    ]


def test_filter_without_matching_types_returns_the_graph_unchanged() -> None:
    graph = _graph([("a", "step"), ("e", "event")], [("a", "e", "l")])
    assert graph.filter_by_node_type("resource") is graph
    assert graph.filter_by_node_type() is graph


def test_filter_does_not_touch_the_original_graph() -> None:
    graph = _graph(
        [("a", "step"), ("e", "event"), ("b", "step")],
        [("a", "e", None), ("e", "b", None)],
    )
    before = graph.model_dump()
    filtered = graph.filter_by_node_type("event")
    filtered.nodes[0].label = "changed"
    assert graph.model_dump() == before


# --- filter_by_node_type properties ----------------------------------------------------

_NODE_TYPES = ("step", "event", "external")


@st.composite
def _random_graphs(draw: st.DrawFn) -> WorkflowGraph:
    size = draw(st.integers(min_value=1, max_value=8))
    kinds = draw(st.lists(st.sampled_from(_NODE_TYPES), min_size=size, max_size=size))
    pairs = st.tuples(st.integers(0, size - 1), st.integers(0, size - 1))
    edges = draw(st.lists(pairs, max_size=20))
    return _graph(
        [(f"n{i}", kind) for i, kind in enumerate(kinds)],
        [(f"n{s}", f"n{t}", None) for s, t in edges],
    )


def _reaches_through_removed(
    graph: WorkflowGraph, source: str, target: str, removed: set[str]
) -> bool:
    outgoing: dict[str, list[str]] = {}
    for edge in graph.edges:
        outgoing.setdefault(edge.source, []).append(edge.target)
    stack, seen = list(outgoing.get(source, [])), set()
    while stack:
        node = stack.pop()
        if node == target:
            return True
        if node in removed and node not in seen:
            seen.add(node)
            stack.extend(outgoing.get(node, []))
    return False


@given(_random_graphs(), st.sets(st.sampled_from(_NODE_TYPES), min_size=1))
def test_filter_properties(graph: WorkflowGraph, node_types: set[str]) -> None:
    removed = {n.id for n in graph.nodes if n.node_type in node_types}
    filtered = graph.filter_by_node_type(*node_types)
    if not removed:
        assert filtered is graph
        return
    kept = [n.id for n in graph.nodes if n.id not in removed]
    assert [n.id for n in filtered.nodes] == kept
    pairs = [(e.source, e.target) for e in filtered.edges]
    assert len(pairs) == len(set(pairs))
    expected = {
        (s, t) for s in kept for t in kept if _reaches_through_removed(graph, s, t, removed)
    }
    assert set(pairs) == expected
