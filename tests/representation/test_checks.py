"""Validation checks 3-7 of api.md §6.5 and the graph checks of §6.6."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import pytest

from tickwork.errors import WorkflowValidationError
from tickwork.events import (
    Event,
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StepFailedEvent,
    StopEvent,
)
from tickwork.representation.checks import (
    GraphFinding,
    _CheckGraph,
    check_catch_error_structure,
    check_collection_bindings,
    check_event_connectivity,
    check_graph,
    check_multi_slot_levels,
    find_graph_problems,
    validate_steps,
)
from tickwork.runtime.step_shapes import shape_steps
from tickwork.runtime.stream_plan import compute_stream_bindings

from .stepkit import NoneType, collect, fan_out, handler, join, step, steps


class Item(Event):
    pass


class Result(Event):
    pass


class Other(Event):
    pass


class Base(Event):
    pass


class Derived(Base):
    pass


class Ask(InputRequiredEvent):
    pass


class Answer(HumanResponseEvent):
    pass


class Done(StopEvent):
    pass


Steps = dict[str, Callable[..., Any]]


def _validate(workflow: Steps, skip: set[str] | None = None) -> bool:
    return validate_steps("tests.Flow", workflow, StartEvent, skip or set())


def _error(workflow: Steps, skip: set[str] | None = None) -> str:
    with pytest.raises(WorkflowValidationError) as info:
        _validate(workflow, skip)
    return str(info.value)


# --- validate_steps --------------------------------------------------------------------


def test_valid_linear_workflow_passes_without_hitl() -> None:
    workflow = steps(step("a", [StartEvent], [Item]), step("b", [Item], [StopEvent]))
    assert _validate(workflow) is False


def test_hitl_detected_from_returned_input_required_event() -> None:
    workflow = steps(
        step("ask", [StartEvent], [Ask]),
        step("answer", [Answer], [StopEvent]),
    )
    assert _validate(workflow) is True


def test_hitl_detected_from_accepted_human_response_only() -> None:
    workflow = steps(step("a", [StartEvent, Answer], [StopEvent]))
    assert _validate(workflow) is True


def test_groups_run_in_order_collection_before_connectivity() -> None:
    workflow = steps(
        step("a", [StartEvent], [Result, NoneType]),
        collect("gather", [Result], [StopEvent], param="results"),
        step("orphan", [Other], [StopEvent]),
    )
    message = _error(workflow)
    assert "'gather'" in message
    assert "never produced" not in message


def test_catch_error_structure_runs_before_graph_checks() -> None:
    workflow = steps(
        step("a", [StartEvent], [StopEvent]),
        step("unreached", [Item], [Item]),  # also a graph problem
        handler("h1", [NoneType]),
        handler("h2", [NoneType]),
    )
    # Item is both consumed and produced, so connectivity passes
    message = _error(workflow)
    assert "wildcard" in message
    assert "Graph validation failed" not in message


# --- check 3: collection bindings ------------------------------------------------------


def test_bound_collection_passes() -> None:
    workflow = steps(
        fan_out("split", [StartEvent], [Item]),
        step("work", [Item], [Result]),
        collect("gather", [Result], [StopEvent], param="results"),
    )
    assert _validate(workflow) is False


def test_collection_fed_only_by_sends_is_rejected() -> None:
    workflow = steps(
        step("send", [StartEvent], [Result, NoneType]),
        collect("gather", [Result], [StopEvent], param="results"),
    )
    with pytest.raises(WorkflowValidationError) as info:
        check_collection_bindings("tests.Flow", workflow, compute_stream_bindings(workflow))
    message = str(info.value)
    for expected in ("'gather'", "'results'", "Result", "fan-out", "ctx.collect_events"):
        assert expected in message


def test_collection_of_elements_from_another_stream_is_rejected() -> None:
    workflow = steps(
        fan_out("split", [StartEvent], [Item]),
        collect("gather", [Other], [StopEvent], param="others"),
        step("make_other", [Item], [Other]),
        step("top", [StartEvent], [Other]),
    )
    plan = compute_stream_bindings(workflow)
    check_collection_bindings("tests.Flow", workflow, plan)  # Other occurs in split's stream
    unbound = steps(
        step("top", [StartEvent], [Other, Item]),
        fan_out("split", [Item], [Result]),
        collect("gather", [Other], [StopEvent], param="others"),
    )
    with pytest.raises(WorkflowValidationError, match="'others'"):
        check_collection_bindings("tests.Flow", unbound, compute_stream_bindings(unbound))


# --- check 4: multi-slot joins ---------------------------------------------------------


def test_join_with_slots_at_the_top_level_passes() -> None:
    workflow = steps(
        step("a", [StartEvent], [Item]),
        step("b", [StartEvent], [Result]),
        join("pair", [("item", Item), ("result", Result)], [StopEvent]),
    )
    check_multi_slot_levels("tests.Flow", workflow, compute_stream_bindings(workflow))
    assert _validate(workflow) is False


def test_join_with_slots_in_one_stream_passes() -> None:
    workflow = steps(
        fan_out("split", [StartEvent], [Item]),
        step("work", [Item], [Result]),
        join("pair", [("item", Item), ("result", Result)], [Other]),
        collect("gather", [Other], [StopEvent]),
    )
    check_multi_slot_levels("tests.Flow", workflow, compute_stream_bindings(workflow))


def test_join_across_levels_is_rejected_naming_each_slot_level() -> None:
    workflow = steps(
        fan_out("split", [StartEvent], [Item]),
        step("side", [StartEvent], [Result]),
        join("pair", [("item", Item), ("result", Result)], [StopEvent]),
    )
    with pytest.raises(WorkflowValidationError) as info:
        check_multi_slot_levels("tests.Flow", workflow, compute_stream_bindings(workflow))
    message = str(info.value)
    assert "'pair'" in message
    assert "'item' (Item) is produced at the stream of 'split'" in message
    assert "'result' (Result) is produced at the top level" in message


def test_join_slot_produced_nowhere_is_left_to_connectivity() -> None:
    workflow = steps(
        step("a", [StartEvent], [Item]),
        join("pair", [("item", Item), ("other", Other)], [StopEvent]),
    )
    check_multi_slot_levels("tests.Flow", workflow, compute_stream_bindings(workflow))
    assert "consumed but never produced: Other" in _error(workflow)


def test_join_subclass_mode_slot_matches_produced_subclass() -> None:
    workflow = steps(
        fan_out("split", [StartEvent], [Item]),
        step("side", [Item], [Derived]),
        join(
            "pair",
            [("item", Item), ("base", Base)],
            [Result],
            accept_event_subclasses=True,
        ),
        collect("gather", [Result], [StopEvent]),
    )
    check_multi_slot_levels("tests.Flow", workflow, compute_stream_bindings(workflow))


# --- check 5: connectivity -------------------------------------------------------------


def test_step_accepting_a_stop_event_is_rejected() -> None:
    workflow = steps(step("a", [StartEvent], [Done]), step("after_stop", [Done], [NoneType]))
    with pytest.raises(WorkflowValidationError, match=r"'after_stop'.*StopEvent"):
        check_event_connectivity("tests.Flow", workflow, StartEvent)


def test_consumed_but_never_produced_lists_the_events() -> None:
    workflow = steps(
        step("a", [StartEvent], [StopEvent]),
        step("b", [Item], [StopEvent]),
        step("c", [Other, Item], [StopEvent]),
    )
    with pytest.raises(WorkflowValidationError) as info:
        check_event_connectivity("tests.Flow", workflow, StartEvent)
    assert "consumed but never produced: Item, Other" in str(info.value)


def test_never_produced_exemptions() -> None:
    workflow = steps(
        step("a", [StartEvent], [StopEvent]),
        step("answer", [Answer], [StopEvent]),
        step("ask_again", [Ask], [StopEvent]),
        handler("recover", [StopEvent]),
    )
    check_event_connectivity("tests.Flow", workflow, StartEvent)


def test_start_class_counts_as_produced() -> None:
    class Go(StartEvent):
        pass

    workflow = steps(step("a", [Go], [StopEvent]))
    check_event_connectivity("tests.Flow", workflow, Go)


def test_produced_but_never_consumed_lists_the_events() -> None:
    workflow = steps(
        step("a", [StartEvent], [Item, Other, StopEvent]),
        step("b", [StartEvent], [Result]),
    )
    with pytest.raises(WorkflowValidationError) as info:
        check_event_connectivity("tests.Flow", workflow, StartEvent)
    assert "produced but never consumed: Item, Other, Result" in str(info.value)


def test_never_consumed_exemptions() -> None:
    workflow = steps(step("a", [StartEvent], [Ask, Answer, Done, NoneType]))
    check_event_connectivity("tests.Flow", workflow, StartEvent)


def test_step_failed_event_produced_but_not_consumed_is_reported() -> None:
    workflow = steps(step("a", [StartEvent], [StepFailedEvent, StopEvent]))
    with pytest.raises(WorkflowValidationError, match="never consumed: StepFailedEvent"):
        check_event_connectivity("tests.Flow", workflow, StartEvent)


def test_subclass_mode_consumer_accepts_a_produced_subclass() -> None:
    workflow = steps(
        step("a", [StartEvent], [Derived]),
        step("b", [Base], [StopEvent], accept_event_subclasses=True),
    )
    check_event_connectivity("tests.Flow", workflow, StartEvent)


def test_exact_mode_consumer_does_not_accept_a_subclass() -> None:
    workflow = steps(
        step("a", [StartEvent], [Derived]),
        step("b", [Base], [StopEvent]),
    )
    with pytest.raises(WorkflowValidationError, match="consumed but never produced: Base"):
        check_event_connectivity("tests.Flow", workflow, StartEvent)


def test_exact_consumer_is_not_satisfied_by_another_steps_subclass_mode() -> None:
    workflow = steps(
        step("a", [StartEvent], [Derived]),
        step("loose", [Base], [StopEvent], accept_event_subclasses=True),
        step("strict", [Base], [StopEvent]),
    )
    with pytest.raises(WorkflowValidationError, match="consumed but never produced: Base"):
        check_event_connectivity("tests.Flow", workflow, StartEvent)


# --- check 6: @catch_error structure ---------------------------------------------------


def _base_steps() -> list[Callable[..., Any]]:
    return [step("a", [StartEvent], [Item]), step("b", [Item], [StopEvent])]


def test_valid_handlers_pass() -> None:
    check_catch_error_structure(
        steps(
            *_base_steps(),
            handler("wild", [StopEvent]),
            handler("scoped", [StopEvent], for_steps=["a"], max_recoveries=3),
        )
    )


def test_two_wildcard_handlers_are_rejected() -> None:
    workflow = steps(*_base_steps(), handler("h1"), handler("h2"))
    with pytest.raises(WorkflowValidationError) as info:
        check_catch_error_structure(workflow)
    message = str(info.value)
    assert "'h1'" in message and "'h2'" in message
    assert "only one wildcard handler is allowed" in message


def test_unknown_step_in_for_steps_is_rejected() -> None:
    workflow = steps(*_base_steps(), handler("h", for_steps=["a", "nope"]))
    with pytest.raises(WorkflowValidationError, match=r"'h'.*unknown step 'nope'"):
        check_catch_error_structure(workflow)


def test_handler_cannot_claim_another_handler() -> None:
    workflow = steps(
        *_base_steps(), handler("h1", for_steps=["a"]), handler("h2", for_steps=["h1"])
    )
    with pytest.raises(WorkflowValidationError) as info:
        check_catch_error_structure(workflow)
    message = str(info.value)
    assert "'h2'" in message and "'h1'" in message
    assert "handler steps cannot be claimed by a handler" in message


def test_step_claimed_twice_is_rejected() -> None:
    workflow = steps(
        *_base_steps(), handler("h1", for_steps=["a"]), handler("h2", for_steps=["a", "b"])
    )
    with pytest.raises(WorkflowValidationError) as info:
        check_catch_error_structure(workflow)
    message = str(info.value)
    assert "'a'" in message and "'h1'" in message and "'h2'" in message


def test_same_handler_listing_a_step_twice_is_not_a_double_claim() -> None:
    check_catch_error_structure(steps(*_base_steps(), handler("h", for_steps=["a", "a"])))


@pytest.mark.parametrize("bad", [0, -1, True, False, 1.0, "2", None])
def test_max_recoveries_must_be_a_positive_int(bad: Any) -> None:
    workflow = steps(*_base_steps(), handler("h", max_recoveries=bad))
    with pytest.raises(WorkflowValidationError, match=r"'h'.*max_recoveries"):
        check_catch_error_structure(workflow)


def test_structure_checked_by_validate_steps() -> None:
    workflow = steps(*_base_steps(), handler("h", [StopEvent], for_steps=["zzz"]))
    assert "unknown step 'zzz'" in _error(workflow)


# --- check 7: graph checks -------------------------------------------------------------


def _kinds(findings: list[GraphFinding]) -> list[str]:
    return [f.check for f in findings]


def test_unreachable_steps_are_listed_in_one_finding() -> None:
    workflow = steps(
        step("a", [StartEvent], [StopEvent]),
        step("loop1", [Item], [Other]),
        step("loop2", [Other], [Item, StopEvent]),
    )
    findings = find_graph_problems(workflow, StartEvent, set())
    assert _kinds(findings) == ["reachability"]
    assert "'loop1', 'loop2'" in findings[0].message
    assert "StartEvent" in findings[0].message


def test_graph_error_message_format() -> None:
    workflow = steps(
        step("a", [StartEvent], [StopEvent]),
        step("loop1", [Item], [Other]),
        step("loop2", [Other], [Item]),
    )
    message = _error(workflow)
    lines = message.splitlines()
    assert lines[0].startswith("Graph validation failed")
    assert "'tests.Flow'" in lines[0]
    assert lines[1].strip().startswith("[reachability]")
    assert lines[2].strip().startswith("hint:")
    assert lines[3].strip().startswith("[dead_end]") and "'loop1'" in lines[3]
    assert lines[4].strip().startswith("hint:")
    assert lines[5].strip().startswith("[dead_end]") and "'loop2'" in lines[5]
    assert lines[6].strip().startswith("hint:")
    assert len(lines) == 7


def test_step_level_reachability_skip() -> None:
    workflow = steps(
        step("a", [StartEvent], [StopEvent]),
        step("loop1", [Item], [Other], skip_graph_checks=["reachability"]),
        step("loop2", [Other], [Item, StopEvent]),
    )
    (finding,) = find_graph_problems(workflow, StartEvent, set())
    assert "'loop2'" in finding.message
    assert "'loop1'" not in finding.message


def test_workflow_level_skip_disables_a_check() -> None:
    workflow = steps(
        step("a", [StartEvent], [StopEvent]),
        step("loop1", [Item], [Other]),
        step("loop2", [Other], [Item]),
    )
    assert _kinds(find_graph_problems(workflow, StartEvent, {"reachability"})) == [
        "dead_end",
        "dead_end",
    ]
    assert find_graph_problems(workflow, StartEvent, {"reachability", "dead_end"}) == []
    assert _validate(workflow, {"reachability", "dead_end"}) is False


def test_human_response_events_seed_reachability() -> None:
    workflow = steps(
        step("a", [StartEvent], [StopEvent]),
        step("on_answer", [Answer], [StopEvent]),
    )
    assert find_graph_problems(workflow, StartEvent, set()) == []


def test_catch_error_handlers_seed_reachability() -> None:
    workflow = steps(
        step("a", [StartEvent], [StopEvent]),
        handler("recover", [Item]),
        step("after_recovery", [Item], [StopEvent]),
    )
    assert find_graph_problems(workflow, StartEvent, set()) == []
    assert _validate(workflow) is False


def test_terminal_event_reported_per_event() -> None:
    workflow = steps(step("a", [StartEvent], [Item, Other, StopEvent, Ask]))
    findings = find_graph_problems(workflow, StartEvent, set())
    assert _kinds(findings) == ["terminal_event", "terminal_event"]
    assert "Item" in findings[0].message and "Item" in findings[0].hint
    assert "Other" in findings[1].message
    assert find_graph_problems(workflow, StartEvent, {"terminal_event"}) == []


def test_terminal_event_for_a_human_response_nobody_consumes() -> None:
    workflow = steps(step("a", [StartEvent], [Answer, StopEvent]))
    check_event_connectivity("tests.Flow", workflow, StartEvent)  # exempt there
    message = _error(workflow)
    assert "[terminal_event]" in message and "Answer" in message


def test_dead_end_closed_loop() -> None:
    workflow = steps(
        step("a", [StartEvent], [Item]),
        step("b", [Item], [Other]),
        step("c", [Other], [Item]),
    )
    findings = find_graph_problems(workflow, StartEvent, set())
    assert _kinds(findings) == ["dead_end", "dead_end", "dead_end"]
    assert ["'a'" in f.message for f in findings] == [True, False, False]


def test_dead_end_step_level_skip() -> None:
    workflow = steps(
        step("a", [StartEvent], [Item], skip_graph_checks=["dead_end"]),
        step("b", [Item], [Other], skip_graph_checks=["dead_end", "reachability"]),
        step("c", [Other], [Item], skip_graph_checks=["dead_end"]),
    )
    assert find_graph_problems(workflow, StartEvent, set()) == []


def test_input_required_event_is_an_exit() -> None:
    workflow = steps(
        step("a", [StartEvent], [Item]),
        step("b", [Item], [Ask]),
        step("c", [Answer], [StopEvent]),
    )
    assert find_graph_problems(workflow, StartEvent, set()) == []


def test_steps_returning_only_none_are_not_dead_ends() -> None:
    workflow = steps(
        step("a", [StartEvent], [Item, StopEvent]),
        step("sink", [Item], [NoneType]),
    )
    assert find_graph_problems(workflow, StartEvent, set()) == []


def test_subclass_mode_edges_reach_subclass_consumers() -> None:
    workflow = steps(
        step("a", [StartEvent], [Derived]),
        step("b", [Base], [StopEvent], accept_event_subclasses=True),
    )
    assert find_graph_problems(workflow, StartEvent, set()) == []
    exact = steps(
        step("a", [StartEvent], [Derived]),
        step("b", [Base], [StopEvent]),
    )
    kinds = _kinds(find_graph_problems(exact, StartEvent, set()))
    assert kinds == ["reachability", "terminal_event", "dead_end"]


def test_stop_events_are_never_linked_through_subclass_expansion() -> None:
    workflow = steps(
        step("a", [StartEvent], [Done, Item]),
        step("catch_all", [Event], [NoneType], accept_event_subclasses=True),
    )
    graph = _CheckGraph.build(shape_steps(workflow))
    assert graph.successors[Done] == ()
    assert graph.successors[Item] == ("catch_all",)
    assert graph.successors[StartEvent] == ("a", "catch_all")
    assert graph.successors["a"] == (Done, Item)


def test_accepted_stop_event_is_linked_directly() -> None:
    workflow = steps(step("a", [StartEvent], [Done]), step("b", [Done], [NoneType]))
    graph = _CheckGraph.build(shape_steps(workflow))
    assert graph.successors[Done] == ("b",)


def test_check_graph_passes_silently_without_findings() -> None:
    workflow = steps(step("a", [StartEvent], [StopEvent]))
    check_graph("tests.Flow", workflow, StartEvent, set())


def test_single_finding_message_says_one_problem() -> None:
    unreached = steps(step("a", [StartEvent], [StopEvent]), step("z", [Item], [Item, StopEvent]))
    with pytest.raises(WorkflowValidationError) as info:
        check_graph("tests.Flow", unreached, StartEvent, set())
    assert "(1 problem)" in str(info.value).splitlines()[0]
    assert "'z'" in str(info.value)


# --- with the real decorators ----------------------------------------------------------


def test_validate_steps_on_real_decorated_steps() -> None:
    from tickwork.collect import Collect, Take
    from tickwork.decorators import catch_error
    from tickwork.decorators import step as real_step
    from tickwork.representation.build import discover_step_functions

    class Flow:
        @real_step
        async def split(self, ev: StartEvent) -> list[Item]:
            return [Item()]

        @real_step
        async def work(self, ev: Item) -> Result:
            return Result()

        @real_step
        async def gather(self, results: Annotated[list[Result], Collect(Take(2))]) -> StopEvent:
            return StopEvent()

        @catch_error(for_steps=["work"])
        async def recover(self, ev: StepFailedEvent) -> Result | None:
            return None

    found = discover_step_functions(Flow)
    assert list(found) == ["gather", "recover", "split", "work"]
    assert validate_steps("tests.Flow", found, StartEvent, set()) is False
    plan = compute_stream_bindings(found, StartEvent)
    (binding,) = plan.bindings_by_producer["split"]
    assert (binding.target, binding.element_types) == ("gather", (Result,))
    assert binding.policy == Collect(Take(2))

    class Broken:
        @real_step
        async def start(self, ev: StartEvent) -> Result | None:
            return None

        @real_step
        async def gather(self, results: list[Result]) -> StopEvent:
            return StopEvent()

    with pytest.raises(WorkflowValidationError, match="'results'"):
        validate_steps("tests.Broken", discover_step_functions(Broken), StartEvent, set())
