"""Static workflow validation: checks 3 to 7 of api.md §6.5 and the graph checks of §6.6.

Every check is a pure function over the step functions (objects carrying
``_step_config``) and raises ``WorkflowValidationError`` with a
message naming the steps, parameters and events involved.  The Workflow class runs
checks 1, 2, 8 and 9 itself and calls ``validate_steps`` for the rest.

``check_catch_error_structure`` is public on its own because the runtime enforces
the ``@catch_error`` rules when a run is prepared, even with ``disable_validation``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass
from typing import Any

from tickwork.errors import WorkflowValidationError
from tickwork.events import (
    HumanResponseEvent,
    InputRequiredEvent,
    StepFailedEvent,
    StopEvent,
)
from tickwork.runtime.step_shapes import (
    StepConfigView,
    StepShape,
    config_of,
    event_classes,
    matches,
    shape_steps,
)
from tickwork.runtime.stream_plan import StreamPlan, compute_stream_bindings

__all__ = [
    "GraphFinding",
    "check_catch_error_structure",
    "check_collection_bindings",
    "check_event_connectivity",
    "check_graph",
    "check_multi_slot_levels",
    "find_graph_problems",
    "uses_human_in_the_loop",
    "validate_steps",
]

StepFunctions = Mapping[str, Callable[..., Any]]


def validate_steps(
    workflow_name: str,
    steps: StepFunctions,
    start_event_class: type,
    skip_graph_checks: Set[str],
) -> bool:
    """Run checks 3 to 7 of api.md §6.5 in order; the first failing group raises.

    Returns whether the workflow uses human-in-the-loop: some step returns an
    ``InputRequiredEvent`` subclass or accepts a ``HumanResponseEvent`` subclass.
    ``skip_graph_checks`` holds the workflow-level graph checks to disable entirely.
    """
    shapes = shape_steps(steps)
    plan = compute_stream_bindings(steps, start_event_class)
    check_collection_bindings(workflow_name, steps, plan)
    check_multi_slot_levels(workflow_name, steps, plan)
    check_event_connectivity(workflow_name, steps, start_event_class)
    check_catch_error_structure(steps)
    check_graph(workflow_name, steps, start_event_class, skip_graph_checks)
    return uses_human_in_the_loop(shapes.values())


def uses_human_in_the_loop(shapes: Iterable[StepShape]) -> bool:
    """Whether a step returns an ``InputRequiredEvent`` or accepts a ``HumanResponseEvent``."""
    return any(
        any(issubclass(t, InputRequiredEvent) for t in shape.outputs)
        or any(issubclass(t, HumanResponseEvent) for t in shape.accepted)
        for shape in shapes
    )


def _names(types: Iterable[type]) -> str:
    return ", ".join(t.__name__ for t in types)


# --- check 3: collection bindings -------------------------------------------------------


def check_collection_bindings(workflow_name: str, steps: StepFunctions, plan: StreamPlan) -> None:
    """Every ``list[E]`` parameter must be bound to at least one fan-out producer."""
    for name, func in steps.items():
        collection = config_of(func).collection_param
        if collection is None or plan.bindings_for_target(name):
            continue
        param, element_types = collection
        elements = _names(element_types)
        raise WorkflowValidationError(
            f"Workflow {workflow_name!r}: step {name!r} parameter {param!r} collects "
            f"list[{elements}], but no fan-out step's stream can produce {elements}. "
            f"A list[E] parameter only collects events emitted inside a fan-out stream: "
            f"a step must return list[...] whose elements lead to {elements} through "
            f"one-to-one steps. For events sent with ctx.send_event, accept a single event "
            f"and gather them with ctx.collect_events(ev, [...]) instead."
        )


# --- check 4: multi-slot joins ----------------------------------------------------------


def check_multi_slot_levels(workflow_name: str, steps: StepFunctions, plan: StreamPlan) -> None:
    """Every slot of a multi-slot join must be producible at one common stream level.

    A slot whose type is produced nowhere is left to the connectivity and graph checks,
    which report it more precisely.
    """
    levels = {"the top level": plan.top_level} | {
        f"the stream of {producer!r}": level for producer, level in plan.levels.items()
    }
    for name, func in steps.items():
        cfg = config_of(func)
        if cfg.collect_params is None or len(cfg.collect_params) < 2:
            continue
        subclass_mode = bool(cfg.accept_event_subclasses)
        where = {
            param: [
                label for label, level in levels.items() if _produces(level, slot, subclass_mode)
            ]
            for param, slot in cfg.collect_params
        }
        if not all(where.values()):
            continue
        if any(all(label in found for found in where.values()) for label in levels):
            continue
        raise WorkflowValidationError(_multi_slot_message(workflow_name, name, cfg, where))


def _produces(level: Iterable[type], slot: Any, subclass_mode: bool) -> bool:
    return any(t is slot or (subclass_mode and issubclass(t, slot)) for t in level)


def _multi_slot_message(
    workflow_name: str, step: str, cfg: StepConfigView, where: Mapping[str, list[str]]
) -> str:
    slots = "; ".join(
        f"{param!r} ({getattr(slot, '__name__', slot)}) is produced at {', '.join(where[param])}"
        for param, slot in cfg.collect_params or ()
    )
    return (
        f"Workflow {workflow_name!r}: multi-slot join step {step!r} has no stream level "
        f"where all of its slots can be produced: {slots}. A join pairs events by arrival "
        f"order within one level, so all slot types must be produced at the top level or "
        f"inside the same fan-out's stream; to gather the results of a fan-out, use a "
        f"list[E] parameter instead."
    )


# --- check 5: event connectivity --------------------------------------------------------


def check_event_connectivity(
    workflow_name: str, steps: StepFunctions, start_event_class: type
) -> None:
    """No step accepts a ``StopEvent``; every consumed type is produced and vice versa."""
    shapes = list(shape_steps(steps).values())
    stop_consumers = [s.name for s in shapes if any(issubclass(t, StopEvent) for t in s.accepted)]
    if stop_consumers:
        raise WorkflowValidationError(
            f"Workflow {workflow_name!r}: step(s) {', '.join(map(repr, stop_consumers))} "
            f"accept a StopEvent. A StopEvent ends the run and is never delivered to a "
            f"step; accept an ordinary Event subclass instead."
        )
    _check_consumed_are_produced(workflow_name, shapes, start_event_class)
    _check_produced_are_consumed(workflow_name, shapes)


_NEVER_PRODUCED_OK = (InputRequiredEvent, HumanResponseEvent, StopEvent, StepFailedEvent)
_NEVER_CONSUMED_OK = (InputRequiredEvent, HumanResponseEvent, StopEvent)


def _check_consumed_are_produced(
    workflow_name: str, shapes: list[StepShape], start_event_class: type
) -> None:
    produced = {start_event_class, *(t for s in shapes for t in s.outputs)}
    missing = event_classes(
        accepted
        for s in shapes
        for accepted in s.accepted
        if not issubclass(accepted, _NEVER_PRODUCED_OK)
        and not any(matches(p, accepted, s.subclass_mode) for p in produced)
    )
    if missing:
        raise WorkflowValidationError(
            f"Workflow {workflow_name!r}: events consumed but never produced: "
            f"{_names(missing)}. Return them from a step (annotate `-> Foo | None` for "
            f"events sent with ctx.send_event), or remove the steps that accept them."
        )


def _check_produced_are_consumed(workflow_name: str, shapes: list[StepShape]) -> None:
    unconsumed = [
        t
        for t in event_classes(t for s in shapes for t in s.outputs)
        if not issubclass(t, _NEVER_CONSUMED_OK) and not any(s.accepts(t) for s in shapes)
    ]
    if unconsumed:
        raise WorkflowValidationError(
            f"Workflow {workflow_name!r}: events produced but never consumed: "
            f"{_names(unconsumed)}. Add a step that accepts them, or remove them from the "
            f"return annotations."
        )


# --- check 6: @catch_error structure ----------------------------------------------------


def check_catch_error_structure(steps: StepFunctions) -> None:
    """Enforce the ``@catch_error`` rules of api.md §6.5 check 6.

    At most one wildcard handler; scoped handlers claim only known, non-handler steps;
    no step is claimed twice; ``max_recoveries`` is an ``int`` >= 1.
    """
    configs = {name: config_of(func) for name, func in steps.items()}
    handlers = [name for name, cfg in configs.items() if cfg.role == "catch_error"]
    wildcards = [h for h in handlers if configs[h].catch_error_for_steps is None]
    if len(wildcards) > 1:
        raise WorkflowValidationError(
            f"@catch_error handlers {', '.join(map(repr, wildcards))} are all wildcard "
            f"handlers (no for_steps); only one wildcard handler is allowed per workflow. "
            f"Pass for_steps=[...] to all but one of them."
        )
    _check_claims(configs, handlers)
    for handler in handlers:
        recoveries = configs[handler].catch_error_max_recoveries
        if isinstance(recoveries, bool) or not isinstance(recoveries, int) or recoveries < 1:
            raise WorkflowValidationError(
                f"@catch_error handler {handler!r}: max_recoveries must be an int >= 1, "
                f"got {recoveries!r}."
            )


def _check_claims(configs: Mapping[str, StepConfigView], handlers: list[str]) -> None:
    claimed_by: dict[str, str] = {}
    for handler in handlers:
        for claimed in configs[handler].catch_error_for_steps or ():
            if claimed not in configs:
                raise WorkflowValidationError(
                    f"@catch_error handler {handler!r} lists unknown step {claimed!r} in "
                    f"for_steps; known steps: {', '.join(map(repr, configs))}."
                )
            if configs[claimed].role == "catch_error":
                raise WorkflowValidationError(
                    f"@catch_error handler {handler!r} lists handler step {claimed!r} in "
                    f"for_steps; handler steps cannot be claimed by a handler."
                )
            previous = claimed_by.setdefault(claimed, handler)
            if previous != handler:
                raise WorkflowValidationError(
                    f"Step {claimed!r} is claimed by two @catch_error handlers, "
                    f"{previous!r} and {handler!r}; a step may have at most one scoped "
                    f"handler."
                )


# --- check 7: graph checks --------------------------------------------------------------


@dataclass(frozen=True)
class GraphFinding:
    """One graph-check problem: the check name, what is wrong, and how to fix it."""

    check: str
    message: str
    hint: str


def check_graph(
    workflow_name: str,
    steps: StepFunctions,
    start_event_class: type,
    skip_graph_checks: Set[str],
) -> None:
    """Raise one ``WorkflowValidationError`` listing every graph-check finding (§6.6)."""
    findings = find_graph_problems(steps, start_event_class, skip_graph_checks)
    if not findings:
        return
    entries = "\n".join(f"  [{f.check}] {f.message}\n    hint: {f.hint}" for f in findings)
    raise WorkflowValidationError(
        f"Graph validation failed for workflow {workflow_name!r} "
        f"({len(findings)} problem{'s' if len(findings) > 1 else ''}):\n{entries}"
    )


def find_graph_problems(
    steps: StepFunctions, start_event_class: type, skip_graph_checks: Set[str]
) -> list[GraphFinding]:
    """Every finding of the reachability, terminal_event and dead_end checks, in that order."""
    graph = _CheckGraph.build(shape_steps(steps))
    skips = {name: set(config_of(func).skip_graph_checks) for name, func in steps.items()}
    findings: list[GraphFinding] = []
    if "reachability" not in skip_graph_checks:
        findings += _reachability(graph, start_event_class, skips)
    if "terminal_event" not in skip_graph_checks:
        findings += _terminal_events(graph)
    if "dead_end" not in skip_graph_checks:
        findings += _dead_ends(graph, skips)
    return findings


@dataclass(frozen=True)
class _CheckGraph:
    """The §6.6 graph: step names and event classes, with step→event and event→step edges."""

    shapes: Mapping[str, StepShape]
    events: tuple[type, ...]
    successors: Mapping[str | type, tuple[str | type, ...]]

    @classmethod
    def build(cls, shapes: Mapping[str, StepShape]) -> _CheckGraph:
        events = event_classes(
            t for shape in shapes.values() for t in (*shape.accepted, *shape.outputs)
        )
        successors: dict[str | type, tuple[str | type, ...]] = {
            name: shape.outputs for name, shape in shapes.items()
        }
        for event in events:
            successors[event] = tuple(
                name for name, shape in shapes.items() if _links(event, shape)
            )
        return cls(shapes=shapes, events=events, successors=successors)

    def reachable_from(self, starts: Iterable[str | type]) -> set[str | type]:
        """Every node reached by following edges forward from ``starts`` (included)."""
        seen: set[str | type] = set()
        stack = [s for s in starts if s in self.successors]
        while stack:
            node = stack.pop()
            if node not in seen:
                seen.add(node)
                stack.extend(self.successors.get(node, ()))
        return seen


def _links(event: type, shape: StepShape) -> bool:
    """Whether the graph has an edge ``event → step`` (no StopEvent subclass expansion)."""
    if event in shape.accepted:
        return True
    return shape.subclass_mode and not issubclass(event, StopEvent) and shape.accepts(event)


def _reachability(
    graph: _CheckGraph, start_event_class: type, skips: Mapping[str, set[str]]
) -> list[GraphFinding]:
    starts: list[str | type] = [start_event_class]
    starts += [e for e in graph.events if issubclass(e, HumanResponseEvent)]
    starts += [n for n, s in graph.shapes.items() if s.kind == "handler"]
    reached = graph.reachable_from(starts)
    unreached = [
        name
        for name in graph.shapes
        if name not in reached and "reachability" not in skips.get(name, set())
    ]
    if not unreached:
        return []
    steps = ", ".join(map(repr, unreached))
    return [
        GraphFinding(
            check="reachability",
            message=f"step(s) {steps} can never run: no path leads to them from "
            f"{start_event_class.__name__}, a HumanResponseEvent or a @catch_error handler.",
            hint="return the event these steps accept from a reachable step (annotate "
            "`-> Foo | None` for events sent with ctx.send_event), remove the steps, or "
            'opt a step out with @step(skip_graph_checks=["reachability"]).',
        )
    ]


def _terminal_events(graph: _CheckGraph) -> list[GraphFinding]:
    return [
        GraphFinding(
            check="terminal_event",
            message=f"event {event.__name__} is produced but no step consumes it.",
            hint=f"add a step that accepts {event.__name__}, or stop returning it; only "
            f"StopEvent and InputRequiredEvent subclasses may end a path.",
        )
        for event in graph.events
        if not graph.successors.get(event)
        and not issubclass(event, (StopEvent, InputRequiredEvent))
    ]


def _dead_ends(graph: _CheckGraph, skips: Mapping[str, set[str]]) -> list[GraphFinding]:
    findings = []
    for name, shape in graph.shapes.items():
        if not shape.outputs or "dead_end" in skips.get(name, set()):
            continue
        reached = graph.reachable_from([name])
        if any(
            isinstance(node, type) and issubclass(node, (StopEvent, InputRequiredEvent))
            for node in reached
        ):
            continue
        findings.append(
            GraphFinding(
                check="dead_end",
                message=f"step {name!r} can never lead to a StopEvent or an "
                f"InputRequiredEvent (its events only reach: "
                f"{_reached_summary(name, reached)}).",
                hint="make a step on this path return a StopEvent (or an "
                "InputRequiredEvent), break the closed loop, or opt the step out with "
                '@step(skip_graph_checks=["dead_end"]).',
            )
        )
    return findings


def _reached_summary(origin: str, reached: set[str | type]) -> str:
    names = sorted(
        repr(node) if isinstance(node, str) else node.__name__ for node in reached if node != origin
    )
    return ", ".join(names) if names else "nothing"
