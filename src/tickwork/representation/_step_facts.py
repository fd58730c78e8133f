"""What the details panel says about a step: the configuration a reader looks for.

A step's behaviour is spread over its signature and its decorator options: the events it
takes and returns (and their fields), how many copies run at once, how it retries, how
long it may run, which resources it gets, who catches its failures, how a join collects,
and what it waits for.  ``step_facts`` gathers them as ``(term, value)`` pairs, each
value a short text or a tuple of texts (shown as a list), so the HTML renderer only has
to lay them out.

The configuration is read structurally, like everywhere in this package: options a
third-party configuration lacks (``num_workers``, ``retry_policy``, ``timeout``) are
simply not listed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_args

from tickwork.collect import Collect, Take
from tickwork.events import Event
from tickwork.representation._waits import WaitSite
from tickwork.retry_policy import (
    retry_always,
    retry_if_exception_type,
    retry_if_not_exception_type,
    retry_never,
    stop_after_attempt,
    stop_after_delay,
    stop_all,
    stop_any,
    stop_before_delay,
    stop_never,
    wait_exponential,
    wait_exponential_jitter,
    wait_fixed,
    wait_incrementing,
    wait_none,
    wait_random,
    wait_random_exponential,
)
from tickwork.runtime.step_shapes import StepConfigView, StepShape, matches

__all__ = [
    "Fact",
    "FactValue",
    "event_facts",
    "event_signature",
    "retry_summary",
    "step_facts",
    "type_text",
]

FactValue = str | tuple[str, ...]

_MAX_REPR = 120
_QUALIFIER = re.compile(r"\b(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_])")


@dataclass(frozen=True)
class Fact:
    """One line of the details panel: a term and its text (or list of texts)."""

    term: str
    value: FactValue


def step_facts(
    shape: StepShape,
    cfg: StepConfigView,
    shapes: Mapping[str, StepShape],
    waits: Sequence[WaitSite],
) -> tuple[Fact, ...]:
    """The facts about one step, in the order the panel lists them.

    ``shapes`` are every step's shapes (to say which steps a handler covers), ``waits``
    the step's ``wait_for_event`` calls found in its source.
    """
    facts = [Fact("role", _role(shape))] if _role(shape) else []
    facts.append(Fact("accepts", _accepted(shape, cfg)))
    facts.append(Fact("returns", _returned(shape) or ("nothing (None)",)))
    facts += _join_facts(shape, cfg)
    facts += _wait_facts(waits)
    facts += _option_facts(cfg)
    resources = tuple(_resource_text(definition) for definition in cfg.resources)
    if resources:
        facts.append(Fact("resources", resources))
    facts += _failure_facts(shape, cfg, shapes)
    return tuple(facts)


def event_facts(
    event_type: type[Event],
    shapes: Mapping[str, StepShape],
    waits: Mapping[str, Sequence[WaitSite]],
) -> tuple[Fact, ...]:
    """The facts about one event type: its fields, and the steps it reaches."""
    fields = tuple(
        f"{name}: {type_text(info.annotation)}" for name, info in event_type.model_fields.items()
    )
    facts = [Fact("fields", fields or ("no declared fields",))]
    accepted_by = tuple(name for name, shape in shapes.items() if shape.accepts(event_type))
    if accepted_by:
        facts.append(Fact("accepted by", accepted_by))
    awaited_by = tuple(
        name
        for name, sites in waits.items()
        if any(matches(event_type, site.event_type, shapes[name].subclass_mode) for site in sites)
    )
    if awaited_by:
        facts.append(Fact("awaited by (wait_for_event)", awaited_by))
    return tuple(facts)


# --- events ------------------------------------------------------------------------------


def event_signature(event_type: type[Event]) -> str:
    """``Draft(topic: str)``: the class name with its declared fields and their types."""
    fields = ", ".join(
        f"{name}: {type_text(info.annotation)}" for name, info in event_type.model_fields.items()
    )
    return f"{event_type.__name__}({fields})" if fields else event_type.__name__


def type_text(annotation: Any) -> str:
    """A type as a reader writes it: ``str``, ``list[int]``, ``int | None``, ``Any``."""
    if annotation is None or annotation is type(None):
        return "None"
    if isinstance(annotation, type) and not get_args(annotation):
        return annotation.__name__
    return _QUALIFIER.sub("", repr(annotation))


def _role(shape: StepShape) -> str:
    roles = {
        "handler": "@catch_error handler",
        "collect": "join: collects a fan-out's stream as a list",
        "join": "multi-slot join",
    }
    role = roles.get(shape.kind, "")
    if shape.is_fan_out:
        role = f"{role}; fan-out" if role else "fan-out: returns a list of events"
    return role


def _accepted(shape: StepShape, cfg: StepConfigView) -> tuple[str, ...]:
    suffix = " (and subclasses)" if shape.subclass_mode else ""
    if cfg.collection_param is not None:
        param, elements = cfg.collection_param
        inner = " | ".join(_signature_of(t) for t in elements)
        return (f"{param}: list[{inner}]{suffix}",)
    if cfg.collect_params is not None and len(cfg.collect_params) > 1:
        return tuple(f"{param}: {_signature_of(t)}{suffix}" for param, t in cfg.collect_params)
    return tuple(f"{cfg.event_name}: {event_signature(t)}{suffix}" for t in shape.accepted)


def _returned(shape: StepShape) -> tuple[str, ...]:
    return tuple(
        f"list[{event_signature(t)}]"
        if t in shape.elements and t not in shape.bare
        else event_signature(t)
        for t in shape.outputs
    )


def _signature_of(annotation: Any) -> str:
    if isinstance(annotation, type) and issubclass(annotation, Event):
        return event_signature(annotation)
    return type_text(annotation)


# --- joins and waits ---------------------------------------------------------------------


def _join_facts(shape: StepShape, cfg: StepConfigView) -> list[Fact]:
    if shape.kind == "collect":
        policy = cfg.collection_policy or Collect()
        return [Fact("collect mode", _collect_text(policy))]
    if shape.kind == "join" and cfg.collect_params:
        slots = ", ".join(f"{param}: {type_text(t)}" for param, t in cfg.collect_params)
        return [
            Fact(
                "join slots",
                f"{slots}; runs once every slot has an event, each slot taking the "
                "earliest unused one",
            )
        ]
    return []


def _collect_text(policy: Collect) -> str:
    cardinality = policy.cardinality
    if isinstance(cardinality, Take):
        text = (
            f"Take({cardinality.n}): runs once {cardinality.n} have arrived, with those "
            f"{cardinality.n} (or when the stream closes with fewer)"
        )
        if cardinality.cancel_rest:
            text += "; cancel_rest: the branches still queued or running are cancelled then"
        return text
    return "All: runs once, when the stream closes, with every member that arrived"


def _wait_facts(waits: Sequence[WaitSite]) -> list[Fact]:
    if not waits:
        return []
    facts = [
        Fact(
            "waits for (wait_for_event)",
            tuple(event_signature(site.event_type) for site in waits),
        )
    ]
    asked = tuple(dict.fromkeys(event_signature(s.asks) for s in waits if s.asks is not None))
    if asked:
        facts.append(Fact("asks (waiter_event)", asked))
    return facts


# --- options -----------------------------------------------------------------------------


def _option_facts(cfg: StepConfigView) -> list[Fact]:
    facts: list[Fact] = []
    workers = getattr(cfg, "num_workers", None)
    if isinstance(workers, int):
        facts.append(Fact("num_workers", str(workers)))
    if hasattr(cfg, "retry_policy"):
        facts.append(Fact("retry policy", retry_summary(getattr(cfg, "retry_policy", None))))
    if hasattr(cfg, "timeout"):
        timeout = getattr(cfg, "timeout", None)
        facts.append(Fact("timeout", "none" if timeout is None else _seconds(timeout)))
    return facts


def _resource_text(definition: Any) -> str:
    param = str(getattr(definition, "name", "?"))
    descriptor = getattr(definition, "resource", None)
    annotation = getattr(definition, "type_annotation", None)
    type_name = f": {type_text(annotation)}" if annotation is not None else ""
    factory = getattr(descriptor, "factory", None)
    if factory is not None:
        return f"{param}{type_name} from {getattr(factory, '__name__', type(factory).__name__)}()"
    if hasattr(descriptor, "path_selector"):
        # a ResourceConfig's name is the file as given, plus ".selector" when set
        return f"{param}{type_name} from config {getattr(descriptor, 'name', '?')}"
    return f"{param}{type_name}"


def _failure_facts(
    shape: StepShape, cfg: StepConfigView, shapes: Mapping[str, StepShape]
) -> list[Fact]:
    if shape.kind != "handler":
        owner = shape.owner
        return [Fact("failures go to", owner if owner else "not caught: a failure fails the run")]
    listed = cfg.catch_error_for_steps
    order = list(listed) if listed is not None else list(shapes)  # as written, if listed
    covered = tuple(name for name in order if name in shapes and shapes[name].owner == shape.name)
    scope = "the steps listed" if listed is not None else "every other step"
    return [
        Fact(f"catches failures of ({scope})", covered or ("none",)),
        Fact("max recoveries", str(cfg.catch_error_max_recoveries)),
    ]


# --- retry policies ----------------------------------------------------------------------


def retry_summary(policy: Any) -> str:
    """A readable summary of a retry policy: ``up to 3 attempts, 5 s apart, on any error``.

    tickwork's own building blocks are described in words; anything else shows its
    ``repr`` (cut to a readable length), or its class name when the repr is the default.
    """
    if policy is None:
        return "none"
    parts = (
        getattr(policy, "stop", None),
        getattr(policy, "wait", None),
        getattr(policy, "retry", _MISSING),
    )
    if parts[0] is None or parts[1] is None or parts[2] is _MISSING:
        return _repr(policy)
    stop, wait, retry = parts
    return f"{_stop_text(stop)}, {_wait_text(wait)}, {_retry_text(retry)}"


_MISSING = object()


def _stop_text(stop: Any) -> str:
    if isinstance(stop, stop_after_attempt):
        return f"up to {stop.max_attempt_number} attempts"
    if isinstance(stop, stop_after_delay | stop_before_delay):
        return f"for up to {_seconds(stop.max_delay)}"
    if isinstance(stop, stop_never):
        return "without limit"
    if isinstance(stop, stop_any):
        return " or ".join(_stop_text(s) for s in stop.stops)
    if isinstance(stop, stop_all):
        return " and ".join(_stop_text(s) for s in stop.stops)
    return f"stop: {_repr(stop)}"


def _wait_text(wait: Any) -> str:
    if isinstance(wait, wait_none) or (isinstance(wait, wait_fixed) and not wait.wait):
        return "retrying at once"
    if isinstance(wait, wait_fixed):
        return f"{_seconds(wait.wait)} apart"
    if isinstance(wait, wait_exponential):
        kind = "random exponential" if isinstance(wait, wait_random_exponential) else "exponential"
        return (
            f"{kind} backoff from {_seconds(wait.multiplier)} "
            f"(x{wait.exp_base:g}, at most {_seconds(wait.max)})"
        )
    if isinstance(wait, wait_exponential_jitter):
        return (
            f"exponential backoff from {_seconds(wait.initial)} with up to "
            f"{_seconds(wait.jitter)} jitter (at most {_seconds(wait.max)})"
        )
    if isinstance(wait, wait_random):
        return f"a random {wait.min:g}-{wait.max:g} s apart"
    if isinstance(wait, wait_incrementing):
        return (
            f"{_seconds(wait.start)} apart, +{_seconds(wait.increment)} each time "
            f"(at most {_seconds(wait.max)})"
        )
    return f"wait: {_repr(wait)}"


def _retry_text(retry: Any) -> str:
    if retry is None or isinstance(retry, retry_always):
        return "on any exception"
    if isinstance(retry, retry_never):
        return "never (no exception is retried)"
    if isinstance(retry, retry_if_not_exception_type):
        return "on any exception except " + _exception_names(retry.exception_types)
    if isinstance(retry, retry_if_exception_type):
        return "on " + _exception_names(retry.exception_types)
    return f"when {_repr(retry)}"


def _exception_names(types: Any) -> str:
    items = types if isinstance(types, tuple) else (types,)
    return ", ".join(getattr(t, "__name__", str(t)) for t in items)


def _seconds(value: Any) -> str:
    try:
        return f"{float(value):g} s"
    except (TypeError, ValueError):
        return str(value)


def _repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not break the drawing
        text = ""
    if not text or " at 0x" in text:
        return type(value).__name__
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 1] + "…"
