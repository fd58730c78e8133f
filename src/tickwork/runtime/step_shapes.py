"""A read-only view of step configurations, shared by the graph builder, checks and streams.

The representation layer reads ``func._step_config`` (api.md §5.4) structurally through
``StepConfigView``, so it depends on the field names only, never on
``tickwork.decorators``.  ``StepShape`` condenses one configuration into what the
static analyses need (what the step accepts, what it emits and at which level, who
handles its failures), computed once per step instead of re-deriving it in every check.
``discover_step_functions`` finds the steps of a workflow class in the first place.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast

from tickwork.collect import Collect
from tickwork.events import Event

__all__ = [
    "NONE_TYPE",
    "StepConfigView",
    "StepKind",
    "StepShape",
    "catch_error_owners",
    "config_of",
    "discover_step_functions",
    "event_classes",
    "matches",
    "shape_steps",
]

NONE_TYPE: type = type(None)

StepKind = Literal["ordinary", "join", "collect", "handler"]
"""``join``: multi-slot (several event parameters); ``collect``: a ``list[E]`` parameter."""


class StepConfigView(Protocol):
    """The ``StepConfig`` fields (api.md §5.4) the representation layer reads."""

    @property
    def accepted_events(self) -> Sequence[Any]: ...
    @property
    def event_name(self) -> str: ...
    @property
    def return_types(self) -> Sequence[Any]: ...
    @property
    def resources(self) -> Sequence[Any]: ...
    @property
    def skip_graph_checks(self) -> Sequence[str]: ...
    @property
    def collect_params(self) -> Sequence[tuple[str, Any]] | None: ...
    @property
    def is_fan_out(self) -> bool: ...
    @property
    def bare_return_types(self) -> tuple[Any, ...]: ...
    @property
    def collection_param(self) -> tuple[str, tuple[Any, ...]] | None: ...
    @property
    def collection_policy(self) -> Collect | None: ...
    @property
    def role(self) -> str: ...
    @property
    def catch_error_for_steps(self) -> Sequence[str] | None: ...
    @property
    def catch_error_max_recoveries(self) -> Any: ...
    @property
    def accept_event_subclasses(self) -> bool: ...


def config_of(func: Callable[..., Any]) -> StepConfigView:
    """The ``_step_config`` of a step function (``AttributeError`` if it has none)."""
    return cast(StepConfigView, func._step_config)  # type: ignore[attr-defined]


def event_classes(types: Iterable[Any]) -> tuple[type[Event], ...]:
    """The ``Event`` subclasses among ``types``, in order, each once."""
    found: dict[type[Event], None] = {}
    for candidate in types:
        if isinstance(candidate, type) and issubclass(candidate, Event):
            found.setdefault(candidate)
    return tuple(found)


def matches(produced: type, accepted: type, subclass_mode: bool) -> bool:
    """Whether an event of class ``produced`` is delivered to a parameter of ``accepted``."""
    return produced is accepted or (subclass_mode and issubclass(produced, accepted))


def catch_error_owners(configs: Mapping[str, StepConfigView]) -> dict[str, str]:
    """Map each step to the ``@catch_error`` handler that owns its failures (api.md §22.3).

    A scoped handler listing the step owns it (the first one, in step order, should the
    structure be invalid); otherwise the wildcard handler owns every non-handler step.
    """
    handlers = [name for name, cfg in configs.items() if cfg.role == "catch_error"]
    wildcard = next((h for h in handlers if configs[h].catch_error_for_steps is None), None)
    owners: dict[str, str] = {}
    for handler in handlers:
        for claimed in configs[handler].catch_error_for_steps or ():
            owners.setdefault(claimed, handler)
    if wildcard is not None:
        for name, cfg in configs.items():
            if cfg.role != "catch_error":
                owners.setdefault(name, wildcard)
    return owners


@dataclass(frozen=True)
class StepShape:
    """One step as the static analyses see it.

    ``accepted`` holds the event parameter types (the slot types of a join, the element
    types of a ``list[E]`` step).  ``outputs`` holds every declared ``Event`` return type;
    for a fan-out, ``elements`` are the list element types (they open a stream) and
    ``bare`` the types returned directly (they stay at the caller's level).
    """

    name: str
    kind: StepKind
    accepted: tuple[type[Event], ...]
    subclass_mode: bool
    outputs: tuple[type[Event], ...]
    is_fan_out: bool
    elements: tuple[type[Event], ...]
    bare: tuple[type[Event], ...]
    owner: str | None

    def accepts(self, event_type: type) -> bool:
        """Whether an event of class ``event_type`` is delivered to this step."""
        return any(matches(event_type, a, self.subclass_mode) for a in self.accepted)

    def accepts_any(self, event_types: Iterable[type]) -> bool:
        """Whether this step accepts at least one of ``event_types``."""
        return any(self.accepts(t) for t in event_types)

    def slots_filled_by(self, event_types: Iterable[type]) -> bool:
        """Whether every slot of this step accepts at least one of ``event_types``."""
        available = tuple(event_types)
        return all(
            any(matches(t, slot, self.subclass_mode) for t in available) for slot in self.accepted
        )


def shape_steps(steps: Mapping[str, Callable[..., Any]]) -> dict[str, StepShape]:
    """Build the ``StepShape`` of every step, in mapping order."""
    configs = {name: config_of(func) for name, func in steps.items()}
    owners = catch_error_owners(configs)
    return {name: _shape(name, cfg, owners.get(name)) for name, cfg in configs.items()}


def _shape(name: str, cfg: StepConfigView, owner: str | None) -> StepShape:
    outputs = event_classes(cfg.return_types)
    bare = event_classes(cfg.bare_return_types) if cfg.is_fan_out else ()
    return StepShape(
        name=name,
        kind=_kind(cfg),
        accepted=event_classes(cfg.accepted_events),
        subclass_mode=bool(cfg.accept_event_subclasses),
        outputs=outputs,
        is_fan_out=bool(cfg.is_fan_out),
        elements=_element_types(outputs, bare) if cfg.is_fan_out else (),
        bare=bare,
        owner=owner,
    )


def _kind(cfg: StepConfigView) -> StepKind:
    if cfg.role == "catch_error":
        return "handler"
    if cfg.collection_param is not None:
        return "collect"
    if cfg.collect_params is not None and len(cfg.collect_params) > 1:
        return "join"
    return "ordinary"


def _element_types(
    outputs: tuple[type[Event], ...], bare: tuple[type[Event], ...]
) -> tuple[type[Event], ...]:
    """The list element types of a fan-out return annotation.

    ``return_types`` is flattened and de-duplicated, so ``-> list[A] | A`` leaves ``A``
    only among the bare types; when no other type remains, the bare types are taken as
    elements too rather than declaring a fan-out with an empty stream.
    """
    elements = tuple(t for t in outputs if t not in bare)
    return elements or bare


def discover_step_functions(cls: type) -> dict[str, Callable[..., Any]]:
    """The steps of a workflow class, by name: method steps, then free-function steps.

    Method steps are the attributes of ``cls`` (inherited ones included, the most derived
    definition winning) whose value carries ``_step_config``, in ``dir()`` (name) order.
    Free-function steps come from ``cls``'s *own* ``_step_functions`` registry, in
    registration order; a base class's registry is not inherited (api.md §6.3).
    """
    steps: dict[str, Callable[..., Any]] = {}
    for name in dir(cls):
        if name.startswith("__"):
            continue
        value = inspect.getattr_static(cls, name, None)
        if callable(value) and getattr(value, "_step_config", None) is not None:
            steps[name] = value
    free_steps = vars(cls).get("_step_functions") or {}
    for name, func in free_steps.items():
        steps.setdefault(name, func)
    return steps
