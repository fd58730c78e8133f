"""``get_workflow_representation`` (api.md §16.2) and step discovery (§6.3)."""

from __future__ import annotations

import hashlib
import inspect
import json
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from tickwork.decorators import step as real_step
from tickwork.events import (
    Event,
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
)
from tickwork.representation import (
    WorkflowEventNode,
    WorkflowExternalNode,
    WorkflowGraph,
    WorkflowResourceConfigNode,
    WorkflowResourceNode,
    WorkflowStepNode,
    get_workflow_representation,
)
from tickwork.representation.build import discover_step_functions
from tickwork.resource import Resource, ResourceConfig, ResourceDefinition

from .stepkit import NoneType, collect, fan_out, step, workflow_class


class Item(Event):
    pass


class Result(Event):
    value: int = 0


class Base(Event):
    pass


class Derived(Base):
    pass


class Deeper(Derived):
    pass


class Ask(InputRequiredEvent):
    question: str = ""


class Answer(HumanResponseEvent):
    pass


class Done(StopEvent):
    pass


def _edges(graph: WorkflowGraph) -> list[tuple[str, str, str | None]]:
    return [(e.source, e.target, e.label) for e in graph.edges]


def _ids(graph: WorkflowGraph) -> list[str]:
    return [n.id for n in graph.nodes]


def _node(graph: WorkflowGraph, node_id: str) -> Any:
    (node,) = [n for n in graph.nodes if n.id == node_id]
    return node


# --- discovery -------------------------------------------------------------------------


def test_discovery_method_steps_in_name_order_then_free_steps() -> None:
    b = step("b_step", [StartEvent], [StopEvent])
    a = step("a_step", [StartEvent], [StopEvent])
    free = step("free", [StartEvent], [StopEvent])
    cls = workflow_class("W", b, a, free=[free])
    assert list(discover_step_functions(cls)) == ["a_step", "b_step", "free"]
    assert discover_step_functions(cls)["free"] is free


def test_discovery_includes_inherited_steps_and_subclass_overrides() -> None:
    parent_a = step("a", [StartEvent], [Item])
    parent_b = step("b", [Item], [StopEvent])
    parent_free = step("parent_free", [StartEvent], [StopEvent])
    parent = workflow_class("Parent", parent_a, parent_b, free=[parent_free])
    child_b = step("b", [Item], [Done])
    child = workflow_class("Child", child_b, bases=(parent,))
    found = discover_step_functions(child)
    assert found == {"a": parent_a, "b": child_b}  # free steps are not inherited
    assert discover_step_functions(parent)["parent_free"] is parent_free


def test_discovery_drops_a_step_overridden_by_a_plain_attribute() -> None:
    parent = workflow_class("Parent", step("a", [StartEvent], [StopEvent]))

    class Child(parent):  # type: ignore[valid-type,misc]
        def a(self) -> None:
            pass

    assert discover_step_functions(Child) == {}


def test_discovery_ignores_non_step_attributes() -> None:
    class W:
        value = 3

        def helper(self) -> None:
            pass

        @real_step
        async def only(self, ev: StartEvent) -> StopEvent:
            return StopEvent()

    assert list(discover_step_functions(W)) == ["only"]


# --- nodes -----------------------------------------------------------------------------


class Linear:
    """A linear flow.

    With a second paragraph.
    """

    @real_step
    async def start(self, ev: StartEvent) -> Item:
        """Begin here."""
        return Item()

    @real_step
    async def middle(self, ev: Item) -> Result | None:
        return Result()

    @real_step
    async def finish(self, ev: Result) -> StopEvent:
        """End."""
        return StopEvent()


def test_name_description_and_step_nodes() -> None:
    graph = get_workflow_representation(Linear)
    assert graph.name == "Linear"
    assert graph.description == inspect.getdoc(Linear)
    # discovery order is name order: finish, middle, start
    assert _ids(graph) == ["finish", "Result", "StopEvent", "middle", "Item", "start", "StartEvent"]
    finish = _node(graph, "finish")
    assert isinstance(finish, WorkflowStepNode)
    assert (finish.label, finish.description) == ("finish", "End.")
    assert _node(graph, "middle").description is None


def test_event_nodes() -> None:
    graph = get_workflow_representation(Linear)
    result = _node(graph, "Result")
    assert isinstance(result, WorkflowEventNode)
    assert (result.id, result.label, result.event_type) == ("Result", "Result", "Result")
    assert result.event_types == ["Result"]
    assert result.event_schema == Result.model_json_schema()
    assert result.produced_by == ["middle"]
    assert _node(graph, "StartEvent").produced_by == []
    assert _node(graph, "StopEvent").event_types == ["StopEvent"]


def test_edges_of_a_linear_flow() -> None:
    graph = get_workflow_representation(Linear)
    assert set(_edges(graph)) == {
        ("finish", "StopEvent", None),
        ("middle", "Result", None),
        ("start", "Item", None),
        ("Result", "finish", None),
        ("Item", "middle", None),
        ("StartEvent", "start", None),
    }
    assert len(graph.edges) == 6


def test_instance_gives_the_same_graph_without_instantiating() -> None:
    class NoInit(Linear):
        """Cannot be built."""

        def __init__(self) -> None:
            raise AssertionError("must not be instantiated")

    from_class = get_workflow_representation(NoInit)
    instance = object.__new__(NoInit)
    assert get_workflow_representation(instance) == from_class
    assert from_class.description == "Cannot be built."


def test_event_types_list_event_ancestors_in_mro_order() -> None:
    cls = workflow_class(
        "W",
        step("a", [StartEvent], [Deeper, Ask, Done]),
    )
    graph = get_workflow_representation(cls)
    assert _node(graph, "Deeper").event_types == ["Deeper", "Derived", "Base"]
    assert _node(graph, "Ask").event_types == ["Ask", "InputRequiredEvent"]
    assert _node(graph, "Done").event_types == ["Done", "StopEvent"]
    assert _node(graph, "Deeper").is_subclass_of("Base")
    assert not _node(graph, "Deeper").is_subclass_of("Event")


def test_produced_by_lists_steps_in_order_including_fan_outs() -> None:
    cls = workflow_class(
        "W",
        step("a", [StartEvent], [Item]),
        fan_out("b", [Item], [Result]),
        step("c", [StartEvent], [Result, NoneType]),
        collect("d", [Result], [StopEvent]),
    )
    graph = get_workflow_representation(cls)
    assert _node(graph, "Result").produced_by == ["b", "c"]
    assert ("b", "Result", None) in _edges(graph)
    assert "NoneType" not in _ids(graph)


def test_events_are_added_once_accepted_before_returned() -> None:
    cls = workflow_class(
        "W", step("a", [StartEvent, Item], [Item, Result]), step("b", [Result], [StopEvent])
    )
    graph = get_workflow_representation(cls)
    assert _ids(graph) == ["a", "StartEvent", "Item", "Result", "b", "StopEvent"]


def test_external_step_follows_the_first_returned_input_required_event() -> None:
    cls = workflow_class(
        "W",
        step("a_ask", [StartEvent], [Ask, NoneType]),
        step("b_answer", [Answer], [StopEvent]),
        step("c_ask_again", [Answer], [Ask]),
    )
    graph = get_workflow_representation(cls)
    assert _ids(graph) == [
        "a_ask",
        "StartEvent",
        "Ask",
        "external_step",
        "b_answer",
        "Answer",
        "StopEvent",
        "c_ask_again",
    ]
    external = _node(graph, "external_step")
    assert isinstance(external, WorkflowExternalNode)
    assert external.label == "external_step"
    edges = _edges(graph)
    assert edges.count(("Ask", "external_step", None)) == 1
    assert ("external_step", "Answer", None) in edges
    assert ("Answer", "b_answer", None) in edges


def test_no_external_step_without_input_required_events() -> None:
    cls = workflow_class("W", step("a", [StartEvent, Answer], [StopEvent]))
    graph = get_workflow_representation(cls)
    assert "external_step" not in _ids(graph)
    assert all(e.source != "external_step" for e in graph.edges)


def test_subclass_mode_expands_accepted_edges_but_never_to_stop_events() -> None:
    cls = workflow_class(
        "W",
        step("a", [StartEvent], [Derived, Deeper, Done, Item]),
        step("b", [Base], [NoneType], accept_event_subclasses=True),
        step("c", [Event], [NoneType], accept_event_subclasses=True),
        step("d", [Base], [NoneType]),
    )
    edges = _edges(get_workflow_representation(cls))
    assert [e for e in edges if e[1] == "b"] == [
        ("Base", "b", None),
        ("Derived", "b", None),
        ("Deeper", "b", None),
    ]
    assert [e[0] for e in edges if e[1] == "c"] == [
        "Event",
        "StartEvent",
        "Derived",
        "Deeper",
        "Item",
        "Base",
    ]
    assert [e for e in edges if e[1] == "d"] == [("Base", "d", None)]


def test_plain_stop_event_accepted_is_skipped_unless_it_is_the_stop_type() -> None:
    custom_stop = workflow_class(
        "W", step("a", [StartEvent], [Done]), step("b", [StopEvent], [NoneType])
    )
    graph = get_workflow_representation(custom_stop)
    assert "StopEvent" not in _ids(graph)
    assert all("StopEvent" not in (e.source, e.target) for e in graph.edges)
    plain_stop = workflow_class(
        "W", step("a", [StartEvent], [StopEvent]), step("b", [StopEvent], [NoneType])
    )
    graph = get_workflow_representation(plain_stop)
    assert _ids(graph) == ["a", "StartEvent", "StopEvent", "b"]
    assert ("StopEvent", "b", None) in _edges(graph)


def test_accepted_stop_event_subclass_is_kept() -> None:
    cls = workflow_class("W", step("a", [StartEvent], [StopEvent]), step("b", [Done], [NoneType]))
    graph = get_workflow_representation(cls)
    assert "Done" in _ids(graph)
    assert ("Done", "b", None) in _edges(graph)


def test_same_named_events_collide_into_one_node() -> None:
    def make() -> type[Event]:
        class Item(Event):  # same __name__ as the module-level Item
            pass

        return Item

    other_item = make()
    cls = workflow_class("W", step("a", [StartEvent], [Item]), step("b", [other_item], [StopEvent]))
    graph = get_workflow_representation(cls)
    assert _ids(graph).count("Item") == 1


def test_round_trip_of_a_built_graph() -> None:
    cls = workflow_class(
        "W",
        step("a_ask", [StartEvent], [Ask, NoneType]),
        step("b_answer", [Answer], [StopEvent]),
    )
    graph = get_workflow_representation(cls)
    restored = WorkflowGraph.model_validate(graph.model_dump())
    assert restored == graph
    assert [type(n) for n in restored.nodes] == [type(n) for n in graph.nodes]
    assert WorkflowGraph.model_validate_json(graph.model_dump_json()) == graph


def test_filtering_events_out_of_a_built_graph_links_steps() -> None:
    graph = get_workflow_representation(Linear).filter_by_node_type("event")
    assert _ids(graph) == ["finish", "middle", "start"]
    assert _edges(graph) == [("middle", "finish", "Result"), ("start", "middle", "Item")]


# --- resources -------------------------------------------------------------------------


class Settings(BaseModel):
    url: str
    retries: int = 1


class Connection:
    pass


class Database:
    pass


def get_connection() -> Connection:
    """Open a connection."""
    return Connection()


def get_database(conn: Annotated[Connection, Resource(get_connection)]) -> Database:
    """Wrap the connection."""
    return Database()


def _resource_id(factory: Any) -> str:
    key = f"{factory.__qualname__}:{inspect.getfile(factory)}"
    return "resource_" + hashlib.sha256(key.encode()).hexdigest()[:12]


def _config_id(path: str, selector: str | None) -> str:
    key = f"{path}:{selector or ''}"
    return "resource_config_" + hashlib.sha256(key.encode()).hexdigest()[:12]


def _with_resources(*definitions: ResourceDefinition) -> Any:
    return step("a", [StartEvent], [StopEvent], resources=list(definitions))


def test_resource_nodes_depth_first_with_labelled_edges() -> None:
    class W:
        @real_step
        async def work(
            self,
            ev: StartEvent,
            db: Annotated[Database, Resource(get_database)],
            conn: Annotated[Connection, Resource(get_connection)],
        ) -> StopEvent:
            return StopEvent()

    graph = get_workflow_representation(W)
    db_id, conn_id = _resource_id(get_database), _resource_id(get_connection)
    assert _ids(graph) == ["work", "StartEvent", "StopEvent", db_id, conn_id]
    db = _node(graph, db_id)
    assert isinstance(db, WorkflowResourceNode)
    assert db.label == "Database"
    assert db.type_name == "Database"
    assert db.getter_name == "get_database"
    assert db.source_file == inspect.getfile(get_database)
    assert db.source_line == inspect.getsourcelines(get_database)[1]
    assert db.description == "Wrap the connection."
    conn = _node(graph, conn_id)
    assert (conn.label, conn.description) == ("Connection", "Open a connection.")
    resource_edges = [e for e in _edges(graph) if e[1].startswith("resource_")]
    assert resource_edges == [
        ("work", db_id, "db"),
        (db_id, conn_id, "conn"),
        ("work", conn_id, "conn"),
    ]


def test_resource_dependency_edges_are_deduplicated_across_steps() -> None:
    db = ResourceDefinition(name="db", resource=Resource(get_database), type_annotation=Database)
    cls = workflow_class(
        "W",
        step("a", [StartEvent], [Item], resources=[db]),
        step("b", [Item], [StopEvent], resources=[db]),
    )
    graph = get_workflow_representation(cls)
    db_id, conn_id = _resource_id(get_database), _resource_id(get_connection)
    assert _edges(graph).count((db_id, conn_id, "conn")) == 1
    assert ("b", db_id, "db") in _edges(graph)
    assert _ids(graph).count(db_id) == 1


def test_resource_label_falls_back_to_the_factory_name() -> None:
    definition = ResourceDefinition(
        name="conn", resource=Resource(get_connection), type_annotation=None
    )
    graph = get_workflow_representation(workflow_class("W", _with_resources(definition)))
    node = _node(graph, _resource_id(get_connection))
    assert (node.label, node.type_name, node.getter_name) == (
        "get_connection",
        None,
        "get_connection",
    )


def test_resource_config_node(tmp_path: Path) -> None:
    config_file = tmp_path / "settings.json"
    config_file.write_text(json.dumps({"core": {"db": {"url": "sqlite://", "retries": 3}}}))
    declaration = ResourceConfig(str(config_file), path_selector="core.db", description="DB")
    declaration.set_type_annotation(Settings)
    definition = ResourceDefinition(name="settings", resource=declaration, type_annotation=Settings)
    graph = get_workflow_representation(workflow_class("W", _with_resources(definition)))
    node_id = _config_id(str(config_file), "core.db")
    node = _node(graph, node_id)
    assert isinstance(node, WorkflowResourceConfigNode)
    assert node.label == "Settings"
    assert node.type_name == "Settings"
    assert node.config_file == str(config_file)
    assert node.path_selector == "core.db"
    assert node.config_schema == Settings.model_json_schema()
    assert node.config_value == {"url": "sqlite://", "retries": 3}
    assert node.description == "DB"
    assert ("a", node_id, "settings") in _edges(graph)


def test_resource_config_label_precedence_and_missing_file(tmp_path: Path) -> None:
    labelled = ResourceConfig(str(tmp_path / "missing.json"), label="My settings")
    labelled.set_type_annotation(Settings)
    unlabelled = ResourceConfig(str(tmp_path / "bare.json"))
    definitions = [
        ResourceDefinition(name="s", resource=labelled, type_annotation=Settings),
        ResourceDefinition(name="b", resource=unlabelled, type_annotation=dict),
    ]
    graph = get_workflow_representation(workflow_class("W", _with_resources(*definitions)))
    missing = _node(graph, _config_id(str(tmp_path / "missing.json"), None))
    assert missing.label == "My settings"
    assert missing.config_value is None
    bare = _node(graph, _config_id(str(tmp_path / "bare.json"), None))
    assert bare.label == "dict"
    assert bare.config_schema is None


def test_resource_configs_deduplicated_by_file_and_selector(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"url": "x"}))
    first = ResourceConfig(str(path))
    second = ResourceConfig(str(path))
    other = ResourceConfig(str(path), path_selector="nested")
    definitions = [
        ResourceDefinition(name=n, resource=r, type_annotation=Settings)
        for n, r in (("one", first), ("two", second), ("three", other))
    ]
    graph = get_workflow_representation(workflow_class("W", _with_resources(*definitions)))
    config_nodes = [n for n in graph.nodes if n.node_type == "resource_config"]
    assert [n.id for n in config_nodes] == [
        _config_id(str(path), None),
        _config_id(str(path), "nested"),
    ]
    assert ("a", _config_id(str(path), None), "two") in _edges(graph)


def test_unknown_descriptors_are_not_drawn() -> None:
    class Custom:
        name = "custom"
        cache = True

        def get_dependencies(self) -> list[Any]:
            return []

    definition = ResourceDefinition.model_construct(
        name="c",
        resource=Custom(),  # type: ignore[arg-type]  # deliberately not a full descriptor
        type_annotation=int,
    )
    graph = get_workflow_representation(workflow_class("W", _with_resources(definition)))
    assert _ids(graph) == ["a", "StartEvent", "StopEvent"]


def test_resource_with_unresolvable_dependencies_is_drawn_alone() -> None:
    def broken(x):  # type: ignore[no-untyped-def]  # no default, not a resource
        return 1

    definition = ResourceDefinition(name="r", resource=Resource(broken), type_annotation=int)
    graph = get_workflow_representation(workflow_class("W", _with_resources(definition)))
    assert [n.node_type for n in graph.nodes] == ["step", "event", "event", "resource"]


@pytest.mark.parametrize("as_instance", [False, True])
def test_representation_of_a_fan_out_workflow_with_real_decorators(as_instance: bool) -> None:
    class FanOut:
        @real_step
        async def split(self, ev: StartEvent) -> list[Item]:
            return [Item()]

        @real_step
        async def work(self, ev: Item) -> Result:
            return Result()

        @real_step
        async def zgather(self, results: list[Result]) -> StopEvent:
            return StopEvent()

    graph = get_workflow_representation(FanOut() if as_instance else FanOut)
    assert _ids(graph) == ["split", "StartEvent", "Item", "work", "Result", "zgather", "StopEvent"]
    assert _edges(graph) == [
        ("split", "Item", None),
        ("work", "Result", None),
        ("zgather", "StopEvent", None),
        ("StartEvent", "split", None),
        ("Item", "work", None),
        ("Result", "zgather", None),
    ]
