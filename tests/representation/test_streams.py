"""Static stream levels and ``list[E]`` bindings (api.md §21.1.2)."""

from __future__ import annotations

import dataclasses

import pytest

from tickwork.collect import Collect, Take
from tickwork.events import Event, HumanResponseEvent, StartEvent, StopEvent
from tickwork.runtime.stream_plan import (
    StreamBinding,
    StreamPlan,
    compute_stream_bindings,
)

from .stepkit import NoneType, collect, fan_out, handler, join, step, steps


class Item(Event):
    pass


class Result(Event):
    pass


class Skip(Event):
    pass


class Sub(Event):
    pass


class SubDone(Event):
    pass


class ItemDone(Event):
    pass


class Again(Event):
    pass


class Base(Event):
    pass


class Derived(Base):
    pass


class Answer(HumanResponseEvent):
    pass


class Go(StartEvent):
    pass


def _simple() -> StreamPlan:
    return compute_stream_bindings(
        steps(
            fan_out("split", [StartEvent], [Item]),
            step("work", [Item], [Result]),
            collect("gather", [Result], [StopEvent], param="results"),
        ),
        StartEvent,
    )


def test_simple_fan_out_level_and_binding() -> None:
    plan = _simple()
    assert plan.levels == {"split": frozenset({Item, Result})}
    assert plan.bindings_by_producer == {
        "split": (
            StreamBinding(
                binding_id="split->gather",
                producer="split",
                target="gather",
                element_types=(Result,),
                policy=Collect(),
            ),
        )
    }
    assert plan.top_level == frozenset({StartEvent, StopEvent})


def test_plan_and_bindings_are_frozen() -> None:
    plan = _simple()
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.levels = {}  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.bindings_by_producer["split"][0].target = "x"  # type: ignore[misc]


def test_binding_keeps_the_collect_policy() -> None:
    plan = compute_stream_bindings(
        steps(
            fan_out("split", [StartEvent], [Item]),
            collect("first_two", [Item], [StopEvent], policy=Collect(Take(2, cancel_rest=True))),
        )
    )
    (binding,) = plan.bindings_by_producer["split"]
    assert binding.policy == Collect(Take(2, cancel_rest=True))
    assert binding.element_types == (Item,)


def test_collected_element_types_are_the_targets() -> None:
    plan = compute_stream_bindings(
        steps(
            fan_out("split", [StartEvent], [Item]),
            step("work", [Item], [Result]),
            collect("mixed", [Result, Skip], [StopEvent]),
        )
    )
    (binding,) = plan.bindings_by_producer["split"]
    assert binding.element_types == (Result, Skip)


def test_two_joins_bound_to_one_producer_in_step_order() -> None:
    plan = compute_stream_bindings(
        steps(
            fan_out("split", [StartEvent], [Item]),
            step("work", [Item], [Result]),
            collect("b_join", [Result], [StopEvent]),
            collect("a_join", [Item], [NoneType]),
        )
    )
    assert [b.target for b in plan.bindings_by_producer["split"]] == ["b_join", "a_join"]
    assert [b.binding_id for b in plan.bindings_for_target("a_join")] == ["split->a_join"]
    assert plan.bindings_for_target("work") == ()


def test_producer_without_bindings_has_empty_entries() -> None:
    plan = compute_stream_bindings(
        steps(fan_out("split", [StartEvent], [Item]), step("work", [Item], [StopEvent]))
    )
    assert plan.bindings_by_producer == {"split": ()}
    assert plan.levels == {"split": frozenset({Item, StopEvent})}


def test_nested_fan_out_contributes_only_its_join_outputs() -> None:
    plan = compute_stream_bindings(
        steps(
            fan_out("outer", [StartEvent], [Item]),
            fan_out("inner", [Item], [Sub]),
            step("sub_work", [Sub], [SubDone]),
            collect("inner_join", [SubDone], [ItemDone]),
            collect("outer_join", [ItemDone], [StopEvent]),
        )
    )
    assert plan.levels == {
        "outer": frozenset({Item, ItemDone}),
        "inner": frozenset({Sub, SubDone}),
    }
    assert [b.target for b in plan.bindings_by_producer["outer"]] == ["outer_join"]
    assert [b.target for b in plan.bindings_by_producer["inner"]] == ["inner_join"]
    assert plan.top_level == frozenset({StartEvent, StopEvent})


def test_nested_fan_out_bare_returns_stay_at_the_parent_level() -> None:
    plan = compute_stream_bindings(
        steps(
            fan_out("outer", [StartEvent], [Item]),
            fan_out("inner", [Item], [Sub], bare=[Skip, NoneType]),
            collect("inner_join", [Sub], [NoneType]),
            collect("outer_join", [Skip], [StopEvent]),
        )
    )
    assert plan.levels["outer"] == frozenset({Item, Skip})
    assert plan.levels["inner"] == frozenset({Sub})
    assert [b.target for b in plan.bindings_by_producer["outer"]] == ["outer_join"]


def test_nested_levels_collapse_recursively_through_fan_out_joins() -> None:
    class A(Event):
        pass

    class B(Event):
        pass

    class C(Event):
        pass

    class CDone(Event):
        pass

    class ADone(Event):
        pass

    plan = compute_stream_bindings(
        steps(
            fan_out("outer", [StartEvent], [A]),
            fan_out("mid", [A], [B]),
            # a join that fans out again: its stream opens at the level of A
            fan_out("gather_b", [B], [C], collection_param=("bs", (B,)), collection_policy=None),
            step("c_work", [C], [CDone]),
            collect("gather_c", [CDone], [ADone]),
            collect("gather_a", [ADone], [StopEvent]),
        )
    )
    assert plan.levels["outer"] == frozenset({A, ADone})
    assert plan.levels["mid"] == frozenset({B})
    assert plan.levels["gather_b"] == frozenset({C, CDone})
    assert [b.target for b in plan.bindings_by_producer["mid"]] == ["gather_b"]
    assert [b.target for b in plan.bindings_by_producer["gather_b"]] == ["gather_c"]
    assert [b.target for b in plan.bindings_by_producer["outer"]] == ["gather_a"]
    assert plan.bindings_by_producer["mid"][0].policy == Collect()


def test_a_producer_reached_inside_its_own_stream_terminates() -> None:
    plan = compute_stream_bindings(
        steps(
            fan_out("split", [StartEvent, Again], [Item]),
            step("work", [Item], [Again, Result]),
            collect("gather", [Result], [StopEvent]),
        )
    )
    assert plan.levels["split"] == frozenset({Item, Again, Result, StopEvent})
    assert [b.target for b in plan.bindings_by_producer["split"]] == ["gather"]


def test_subclass_mode_join_binds_to_subclasses_at_the_level() -> None:
    def build(subclass_mode: bool) -> StreamPlan:
        return compute_stream_bindings(
            steps(
                fan_out("split", [StartEvent], [Derived]),
                collect("gather", [Base], [StopEvent], accept_event_subclasses=subclass_mode),
            )
        )

    assert [b.target for b in build(True).bindings_by_producer["split"]] == ["gather"]
    assert build(False).bindings_by_producer["split"] == ()


def test_subclass_mode_ordinary_step_is_entered_by_subclasses() -> None:
    plan = compute_stream_bindings(
        steps(
            fan_out("split", [StartEvent], [Derived]),
            step("work", [Base], [Result], accept_event_subclasses=True),
            step("exact", [Base], [Skip]),
        )
    )
    assert plan.levels["split"] == frozenset({Derived, Result})


def test_multi_slot_join_enters_a_level_only_when_every_slot_is_there() -> None:
    plan = compute_stream_bindings(
        steps(
            fan_out("split", [StartEvent], [Item]),
            step("work", [Item], [Result]),
            join("pair", [("item", Item), ("result", Result)], [ItemDone]),
            join("never", [("item", Item), ("skip", Skip)], [SubDone]),
            step("top", [StartEvent], [Skip]),
        )
    )
    assert plan.levels["split"] == frozenset({Item, Result, ItemDone})
    assert SubDone not in plan.top_level


def test_catch_error_owner_output_joins_the_failing_step_level() -> None:
    plan = compute_stream_bindings(
        steps(
            fan_out("split", [StartEvent], [Item]),
            step("work", [Item], [NoneType]),
            handler("recover", [Result], for_steps=["work"]),
            collect("gather", [Result], [StopEvent]),
        )
    )
    assert plan.levels["split"] == frozenset({Item, Result})
    assert [b.target for b in plan.bindings_by_producer["split"]] == ["gather"]


def test_wildcard_handler_output_joins_every_level_with_a_step() -> None:
    plan = compute_stream_bindings(
        steps(
            fan_out("split", [StartEvent], [Item]),
            step("work", [Item], [NoneType]),
            handler("recover", [Skip]),
        )
    )
    assert Skip in plan.levels["split"]
    assert Skip in plan.top_level


def test_list_steps_are_not_entered_by_top_level_events() -> None:
    plan = compute_stream_bindings(
        steps(
            step("send", [StartEvent], [Result, NoneType]),
            collect("gather", [Result], [StopEvent]),
        ),
        StartEvent,
    )
    assert plan.bindings_by_producer == {}
    assert plan.levels == {}
    assert plan.top_level == frozenset({StartEvent, Result})


def test_top_level_seeds() -> None:
    workflow = steps(
        step("begin", [Go], [NoneType]),
        step("answer", [Answer], [StopEvent]),
        step("other", [StartEvent], [Skip]),
    )
    assert compute_stream_bindings(workflow, Go).top_level == frozenset({Go, Answer, StopEvent})
    inferred = compute_stream_bindings(workflow).top_level
    assert inferred == frozenset({Go, StartEvent, Answer, StopEvent, Skip})


def test_fan_out_with_same_type_as_element_and_bare_return() -> None:
    plan = compute_stream_bindings(
        steps(
            fan_out("split", [StartEvent], [Item], bare=[Item]),
            collect("gather", [Item], [StopEvent]),
        )
    )
    assert plan.levels["split"] == frozenset({Item})
    assert Item in plan.top_level
