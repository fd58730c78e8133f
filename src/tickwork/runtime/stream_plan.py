"""Static stream levels and ``list[E]`` bindings of a workflow (api.md §21.1.2).

A step whose return annotation contains ``list[...]`` is a **fan-out producer**: returning
a list opens a stream.  Which ``list[E]`` joins collect that stream is decided here, once
per workflow configuration, from annotations alone.

API
---
``compute_stream_bindings(steps, start_event_class=None) -> StreamPlan``
    ``steps`` maps step names to step functions (objects carrying ``_step_config``).
    ``start_event_class`` seeds the top level; when ``None``, every accepted
    ``StartEvent`` subclass does.

``StreamPlan``
    ``levels[producer]``: the producer's **stream level**, the event types that can occur
    inside its stream (below).  ``bindings_by_producer[producer]``: the
    ``StreamBinding`` of each ``list[E]`` step bound to that producer, in step order
    (an empty tuple when none is).  Every fan-out step has an entry in both.
    ``top_level``: the event types that can occur outside any stream.
    ``bindings_for_target(step)``: the bindings that feed one ``list[E]`` step.

``StreamBinding(binding_id, producer, target, element_types, policy)``
    ``binding_id`` is ``"<producer>-><target>"``, stable across processes, so it can be
    stored in snapshots and in ``CollectionReleaseEvent.binding_id``.  ``element_types``
    are the types the target collects; ``policy`` is its ``Collect`` marker.

Stream level
------------
The level of producer ``P`` is the closure of ``P``'s list element types under the
steps that run inside the stream:

* an ordinary step accepting a type of the level adds its return types; a multi-slot join
  does so once each of its slots accepts a type of the level;
* a nested fan-out adds only what it emits at this level: its bare (non-list) return
  types, and the outputs of the ``list[E]`` steps bound to *its* stream (their output
  continues at the parent level), collapsed recursively through fan-out joins;
* a step's ``@catch_error`` owner runs in the failing item's scope, so reaching a step
  also reaches its owner's outputs;
* ``list[E]`` steps are never entered by a type directly: they fire on releases.

Every ``list[E]`` step that accepts a type of ``P``'s level is bound to ``P``.  Levels
and bindings depend on each other (a nested fan-out's contribution depends on its own
bindings), so they are computed together as a least fixed point, which also makes
recursive fan-outs (a stream that reaches its own producer again) terminate.

Cost: O(iterations x steps x types) per workflow class; it runs once per configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tickwork.collect import Collect
from tickwork.events import HumanResponseEvent, StartEvent
from tickwork.runtime.step_shapes import StepShape, config_of, shape_steps

__all__ = ["StreamBinding", "StreamPlan", "compute_stream_bindings"]


@dataclass(frozen=True)
class StreamBinding:
    """A ``list[E]`` step (``target``) collecting the streams of a fan-out ``producer``."""

    binding_id: str
    producer: str
    target: str
    element_types: tuple[type, ...]
    policy: Collect


@dataclass(frozen=True)
class StreamPlan:
    """The static stream levels and bindings of one workflow configuration."""

    bindings_by_producer: dict[str, tuple[StreamBinding, ...]] = field(hash=False)
    levels: dict[str, frozenset[type]] = field(hash=False)
    top_level: frozenset[type] = frozenset()

    def bindings_for_target(self, target: str) -> tuple[StreamBinding, ...]:
        """The bindings whose target is the ``list[E]`` step ``target``, in producer order."""
        return tuple(
            binding
            for bindings in self.bindings_by_producer.values()
            for binding in bindings
            if binding.target == target
        )


def compute_stream_bindings(
    steps: Mapping[str, Callable[..., Any]], start_event_class: type | None = None
) -> StreamPlan:
    """Compute every fan-out producer's stream level and bindings (see the module doc)."""
    shapes = shape_steps(steps)
    producers = [name for name, shape in shapes.items() if shape.is_fan_out]
    levels: dict[str, frozenset[type]] = {name: frozenset() for name in producers}
    while True:
        targets = {p: _bound_targets(levels[p], shapes) for p in producers}
        new_levels = {p: _closure(shapes[p].elements, shapes, targets) for p in producers}
        if new_levels == levels:
            break
        levels = new_levels
    bindings = {p: tuple(_binding(p, t, steps) for t in targets[p]) for p in producers}
    top_level = _closure(_top_level_seeds(shapes, start_event_class), shapes, targets)
    return StreamPlan(bindings_by_producer=bindings, levels=levels, top_level=top_level)


def _bound_targets(level: frozenset[type], shapes: Mapping[str, StepShape]) -> tuple[str, ...]:
    """The ``list[E]`` steps that accept at least one type of ``level``, in step order."""
    return tuple(
        name
        for name, shape in shapes.items()
        if shape.kind == "collect" and shape.accepts_any(level)
    )


def _binding(producer: str, target: str, steps: Mapping[str, Callable[..., Any]]) -> StreamBinding:
    cfg = config_of(steps[target])
    element_types = cfg.collection_param[1] if cfg.collection_param is not None else ()
    return StreamBinding(
        binding_id=f"{producer}->{target}",
        producer=producer,
        target=target,
        element_types=tuple(element_types),
        policy=cfg.collection_policy if cfg.collection_policy is not None else Collect(),
    )


def _top_level_seeds(shapes: Mapping[str, StepShape], start_event_class: type | None) -> set[type]:
    """What arrives from outside any stream: the start event and human responses."""
    accepted = {t for shape in shapes.values() for t in shape.accepted}
    seeds: set[type] = {t for t in accepted if issubclass(t, HumanResponseEvent)}
    if start_event_class is not None:
        seeds.add(start_event_class)
    else:
        seeds.update(t for t in accepted if issubclass(t, StartEvent))
    return seeds


def _closure(
    seeds: Iterable[type],
    shapes: Mapping[str, StepShape],
    targets: Mapping[str, tuple[str, ...]],
) -> frozenset[type]:
    """The event types that can occur at one level, starting from ``seeds``.

    ``targets`` gives the ``list[E]`` steps bound to each fan-out, whose outputs a nested
    fan-out contributes to this level.
    """
    level = _Level(set(seeds), shapes, targets)
    changed = True
    while changed:
        changed = False
        for name, shape in shapes.items():
            if name not in level.entered and level.is_triggered(shape):
                level.enter(name)
                changed = True
    return frozenset(level.types)


@dataclass
class _Level:
    """Accumulates the types of one level and the steps entered at it."""

    types: set[type]
    shapes: Mapping[str, StepShape]
    targets: Mapping[str, tuple[str, ...]]
    entered: set[str] = field(default_factory=set)

    def is_triggered(self, shape: StepShape) -> bool:
        """Whether the types gathered so far deliver a work item to ``shape`` here."""
        if shape.kind == "ordinary":
            return shape.accepts_any(self.types)
        if shape.kind == "join":
            return shape.slots_filled_by(self.types)
        return False  # list[E] steps fire on releases, handlers on failures

    def enter(self, name: str) -> None:
        """Record that ``name`` runs at this level and add what it emits here."""
        if name in self.entered:
            return
        self.entered.add(name)
        shape = self.shapes[name]
        if shape.is_fan_out:
            self.types.update(shape.bare)
            for target in self.targets.get(name, ()):
                self.enter(target)
        else:
            self.types.update(shape.outputs)
        if shape.owner is not None:
            self.enter(shape.owner)
