"""Compatibility helpers: step discovery and signature inspection under the other library's names.

Code written for the ``workflows`` package (llama-index-core re-exports this module as
``llama_index.core.workflow.utils``) imports these names.  They are thin views over
tickwork's own machinery -- signature inference in ``tickwork._signature``, step
discovery in ``tickwork.representation.build`` -- so they report exactly what
``@step`` and ``Workflow`` see.  New code needs none of them: read ``func._step_config``
(a ``StepConfig``) or ``tickwork.representation`` instead.

Nothing inside tickwork imports this module; it sits on the user API layer.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from tickwork._signature import (
    InferredSignature,
    annotation_members,
    decoration_namespace,
    event_list_element_types,
    flatten_return_annotation,
    infer_signature,
    is_free_qualname,
    resolve_annotations,
    step_display_name,
)
from tickwork.decorators import StepConfig
from tickwork.errors import WorkflowValidationError
from tickwork.representation.build import discover_step_functions
from tickwork.resource import ResourceDefinition
from tickwork.workflow import Workflow

__all__ = [
    "BUSY_WAIT_DELAY",
    "StepSignatureSpec",
    "get_steps_from_class",
    "get_steps_from_instance",
    "inspect_signature",
    "is_free_function",
    "validate_step_signature",
]

BUSY_WAIT_DELAY: float = 0.01
"""Seconds between polls, kept for code that imports it.

tickwork never busy-waits (runs are woken by their events), so no part of tickwork reads it.
"""


@dataclass(frozen=True)
class StepSignatureSpec:
    """What a step function's signature declares, as ``inspect_signature`` reports it.

    ``accepted_events`` maps each event parameter to the event types it accepts: one entry
    for an ordinary step, one per slot for a multi-slot join, and the element types for a
    ``list[E]`` collection parameter.  ``return_types`` is the flattened return annotation
    (unions and ``list[...]`` opened, ``None`` as ``NoneType``).  ``name`` is the step name
    used in error messages.
    """

    accepted_events: dict[str, list[Any]]
    return_types: list[Any]
    context_parameter: str | None
    context_state_type: type[BaseModel] | None = None
    resources: list[ResourceDefinition] = field(default_factory=list)
    name: str = ""


def inspect_signature(fn: Callable[..., Any]) -> StepSignatureSpec:
    """Read the step signature of ``fn``, decorated with ``@step`` or not.

    A decorated function is described from its ``StepConfig`` (annotations were resolved
    when it was decorated).  Otherwise the annotations are resolved against the function's
    globals and the locals of the caller, as ``@step`` would.  Problems tickwork detects
    while reading -- an unresolvable annotation, a missing return annotation, a parameter
    that is neither an event, a Context nor a resource and has no default -- raise
    ``WorkflowValidationError`` here; a signature without any event parameter is reported
    by ``validate_step_signature``.
    """
    if not callable(fn):
        raise TypeError(f"inspect_signature() needs a function or method, got {fn!r}")
    name = step_display_name(fn)
    config = getattr(fn, "_step_config", None)
    if isinstance(config, StepConfig):
        return _spec(name, config)
    return _spec(name, infer_signature(fn, decoration_namespace()))


def _spec(name: str, source: StepConfig | InferredSignature) -> StepSignatureSpec:
    """The spec from a step's ``StepConfig`` or from a freshly inferred signature."""
    return StepSignatureSpec(
        accepted_events=_event_parameters(
            source.accepted_events, source.event_name, source.collect_params
        ),
        return_types=list(source.return_types),
        context_parameter=source.context_parameter,
        context_state_type=source.context_state_type,
        resources=list(source.resources),
        name=name,
    )


def _event_parameters(
    accepted: list[Any], event_name: str, collect_params: list[tuple[str, Any]] | None
) -> dict[str, list[Any]]:
    """Parameter name -> event types, from the ``StepConfig`` view of the same facts."""
    if collect_params:
        return {param: [slot_type] for param, slot_type in collect_params}
    if not event_name:
        return {}
    # An ordinary event parameter and a list[E] collection both keep their types here.
    return {event_name: list(accepted)}


def validate_step_signature(spec: StepSignatureSpec) -> None:
    """Raise ``WorkflowValidationError`` unless ``spec`` describes a runnable step.

    A step needs at least one event parameter and a return annotation; everything else
    tickwork checks when the signature is read (see ``inspect_signature``).
    """
    step = repr(spec.name) if spec.name else "with this signature"
    if not spec.accepted_events:
        raise WorkflowValidationError(
            f"step {step} has no event parameter: annotate at least one parameter with an "
            "Event type (or list[E] of Event types)"
        )
    if not spec.return_types:
        raise WorkflowValidationError(
            f"step {step} declares no return type; annotate what it returns, e.g. "
            "'-> StopEvent' or '-> None'"
        )


def get_steps_from_class(cls: Any) -> dict[str, Callable[..., Any]]:
    """The steps of a workflow class, by name, as unbound functions.

    Method steps come first (inherited ones included), then the free-function steps
    registered with ``@step(workflow=cls)``.  An instance is accepted too and stands for
    its class.  Returns a new dict; an empty one when the class has no steps.
    """
    return dict(discover_step_functions(cls if isinstance(cls, type) else type(cls)))


def get_steps_from_instance(workflow: Any) -> dict[str, Callable[..., Any]]:
    """The steps of a workflow instance, by name: bound methods and free-function steps.

    These are the callables a run of ``workflow`` invokes.  Raises ``TypeError`` for a
    class (use ``get_steps_from_class``).  Returns a new dict.
    """
    if isinstance(workflow, type):
        raise TypeError(
            f"get_steps_from_instance() needs a workflow instance, got the class "
            f"{workflow.__name__}; use get_steps_from_class() for classes"
        )
    if isinstance(workflow, Workflow):
        return dict(workflow._get_steps())
    cls = type(workflow)
    free_steps = vars(cls).get("_step_functions") or {}
    return {
        name: func if name in free_steps else getattr(workflow, name)
        for name, func in discover_step_functions(cls).items()
    }


def is_free_function(qualname: str | Callable[..., Any]) -> bool:
    """Whether a qualified name (or a function's ``__qualname__``) names a free function.

    ``f`` and ``test.<locals>.f`` are free functions; ``Flow.f`` and
    ``test.<locals>.Flow.f`` are methods.  Raises ``ValueError`` for an empty name.
    """
    name = qualname if isinstance(qualname, str) else getattr(qualname, "__qualname__", "")
    if not name:
        raise ValueError(
            f"is_free_function() needs a non-empty qualified name or a function, got {qualname!r}"
        )
    return is_free_qualname(str(name))


def _get_param_types(param: inspect.Parameter, type_hints: Mapping[str, Any]) -> list[Any]:
    """The types ``param`` is annotated with: the members of a union, else the annotation.

    The annotation is taken from ``type_hints`` (resolved hints, e.g. from
    ``typing.get_type_hints``) and falls back to ``param.annotation``.  ``Annotated``
    metadata is dropped, ``None`` is given as ``NoneType`` and an unannotated parameter
    gives ``[Any]``.
    """
    annotation = type_hints.get(param.name, param.annotation)
    if annotation is inspect.Parameter.empty:
        return [Any]
    return annotation_members(annotation)


def _get_return_types(func: Callable[..., Any]) -> list[Any]:
    """The flattened return annotation of ``func``; ``[]`` when it has none.

    Resolved like ``inspect_signature`` (globals plus the caller's locals); a
    ``list[E]`` fan-out contributes ``E``.  An unresolvable annotation raises
    ``WorkflowValidationError``.
    """
    hints = resolve_annotations(func, decoration_namespace())
    if "return" not in hints:
        return []
    return flatten_return_annotation(step_display_name(func), hints["return"]).return_types


def _flatten_return_annotation(annotation: Any, step_name: str = "<annotation>") -> list[Any]:
    """Flatten a return annotation as steps see it: unions and ``list[...]`` opened.

    Duplicates are dropped and ``None`` is given as ``NoneType``; an async iterator
    raises ``WorkflowValidationError`` naming ``step_name``.
    """
    return flatten_return_annotation(step_name, annotation).return_types


def _event_list_element_types(annotation: Any) -> list[Any] | None:
    """The event types of a ``list[E]`` / ``list[A | B]`` collection annotation.

    ``None`` when ``annotation`` is not a list whose elements are all ``Event`` types.
    """
    elements = event_list_element_types(annotation)
    return list(elements) if elements else None
