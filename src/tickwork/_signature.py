"""Signature inference for step functions (api.md §5.5).

The types in a step's signature are its wiring: which events it accepts, which it may
return, whether it wants the ``Context``, resources, or a ``list[E]`` batch.  This module
turns a function into an ``InferredSignature`` in four small stages, each raising
``WorkflowValidationError`` naming the step and the parameter or annotation at fault:

1. ``decoration_namespace`` / ``resolve_annotations`` -- evaluate the annotations
   (postponed and string ones included) where the decorator was applied;
2. ``classify_parameters`` -- context, resource, collection, event or ignored;
3. ``combine_event_parameters`` -- one event parameter, a multi-slot join, or a
   ``list[E]`` collection;
4. ``flatten_return_annotation`` -- the declared return types.

It deliberately imports no ``Context``: the context parameter is recognised by class
name, which keeps this module below ``tickwork.context`` in the layering.
"""

from __future__ import annotations

import collections.abc
import inspect
import sys
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

from tickwork.collect import All, Collect, Take
from tickwork.errors import WorkflowValidationError
from tickwork.events import Event
from tickwork.resource.declarations import ResourceDefinition, resource_declaration

__all__ = [
    "InferredSignature",
    "ParameterClasses",
    "ReturnShape",
    "annotation_members",
    "classify_parameters",
    "combine_event_parameters",
    "decoration_namespace",
    "event_list_element_types",
    "flatten_return_annotation",
    "infer_signature",
    "is_free_qualname",
    "require_event_parameter",
    "resolve_annotations",
    "step_display_name",
]

NoneType: type = type(None)

# Frames of these modules are the decorator machinery, never the decoration site.
# ``tickwork.utils`` is listed so that its compatibility helpers resolve annotations where
# their caller stands, as the decorators do.
_MACHINERY_MODULES = frozenset({__name__, "tickwork.decorators", "tickwork.utils"})

_ASYNC_ITERATION_TYPES: tuple[Any, ...] = (
    collections.abc.AsyncIterator,
    collections.abc.AsyncIterable,
    collections.abc.AsyncGenerator,
)


@dataclass
class ParameterClasses:
    """What ``classify_parameters`` found, parameter by parameter."""

    context_parameter: str | None = None
    context_state_type: type[BaseModel] | None = None
    resources: list[ResourceDefinition] = field(default_factory=list)
    event_parameters: list[tuple[str, list[Any]]] = field(default_factory=list)
    collection_parameters: list[tuple[str, tuple[Any, ...], Collect]] = field(default_factory=list)


@dataclass(frozen=True)
class ReturnShape:
    """The flattened return annotation (api.md §5.5.4)."""

    return_types: list[Any]
    is_fan_out: bool
    bare_return_types: tuple[Any, ...]


@dataclass(frozen=True)
class InferredSignature:
    """Everything the signature says, in ``StepConfig`` terms (api.md §5.4)."""

    accepted_events: list[Any]
    event_name: str
    return_types: list[Any]
    context_parameter: str | None
    context_state_type: type[BaseModel] | None
    resources: list[ResourceDefinition]
    collect_params: list[tuple[str, Any]] | None
    is_fan_out: bool
    bare_return_types: tuple[Any, ...]
    collection_param: tuple[str, tuple[Any, ...]] | None
    collection_policy: Collect | None


def step_display_name(func: Callable[..., Any]) -> str:
    """``Class.method`` or the function name, without ``outer.<locals>.`` prefixes."""
    qualname = str(getattr(func, "__qualname__", None) or getattr(func, "__name__", func))
    return qualname.rsplit("<locals>.", 1)[-1]


def is_free_qualname(qualname: str) -> bool:
    """Whether ``qualname`` names a free function rather than a method.

    True with no dot (``f``) or with ``<locals>`` just before the last part
    (``test.<locals>.f``); ``Flow.f`` and ``test.<locals>.Flow.f`` are methods.
    """
    parts = qualname.split(".")
    return len(parts) == 1 or parts[-2] == "<locals>"


def infer_signature(
    func: Callable[..., Any], namespace: Mapping[str, Any] | None = None
) -> InferredSignature:
    """Infer the step configuration of ``func`` from its signature (api.md §5.5).

    ``namespace`` holds the locals annotations are resolved against (see
    ``decoration_namespace``).  Raises ``WorkflowValidationError`` for every
    signature problem.  A step without any event parameter gets ``accepted_events=[]``
    and ``event_name=""``; callers decide how to report that (see
    ``require_event_parameter``).
    """
    name = step_display_name(func)
    if inspect.isasyncgenfunction(func):
        raise WorkflowValidationError(
            f"step {name!r} is an async generator function, which tickwork cannot run as a "
            "step; return list[E] to fan out, or emit events with ctx.send_event"
        )
    namespace = dict(namespace or {})
    hints = resolve_annotations(func, namespace)
    classes = classify_parameters(func, hints, namespace)
    accepted, event_name, collect_params = combine_event_parameters(name, classes)
    if "return" not in hints:
        raise WorkflowValidationError(
            f"step {name!r} has no return annotation; annotate what it returns, "
            "e.g. '-> StopEvent' or '-> None'"
        )
    shape = flatten_return_annotation(name, hints["return"])
    collection = classes.collection_parameters[0] if classes.collection_parameters else None
    return InferredSignature(
        accepted_events=accepted,
        event_name=event_name,
        return_types=shape.return_types,
        context_parameter=classes.context_parameter,
        context_state_type=classes.context_state_type,
        resources=classes.resources,
        collect_params=collect_params,
        is_fan_out=shape.is_fan_out,
        bare_return_types=shape.bare_return_types,
        collection_param=(collection[0], collection[1]) if collection else None,
        collection_policy=collection[2] if collection else None,
    )


def require_event_parameter(
    func: Callable[..., Any],
    accepted_events: list[Any],
    collection_param: tuple[str, tuple[Any, ...]] | None,
) -> None:
    """Reject a step that accepts nothing (api.md §5.5.3)."""
    if not accepted_events and collection_param is None:
        raise WorkflowValidationError(
            f"step {step_display_name(func)!r} has no event parameter: at least one "
            "parameter must be annotated with an Event type (or list[E] of Event types)"
        )


# --- 5.5.1 Resolving annotations ---------------------------------------------------------


def decoration_namespace(localns: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The locals visible where the decorator was applied, merged with ``localns``.

    The decoration site is the first frame outside the decorator machinery.  Its locals
    and those of the frames enclosing it in the same module (a class body inside a test
    function, the test function itself) are merged, innermost winning; module-level
    frames are left out because their names are the function's globals anyway.  Entries
    of ``localns`` win over frame locals.
    """
    namespace: dict[str, Any] = {}
    for frame_locals in reversed(list(_site_frame_locals())):
        namespace.update(frame_locals)
    if localns:
        namespace.update(localns)
    return namespace


def _site_frame_locals() -> Iterator[dict[str, Any]]:
    """The locals of the decoration site and its enclosing frames, innermost first."""
    frame = sys._getframe(1)
    try:
        while frame is not None and frame.f_globals.get("__name__") in _MACHINERY_MODULES:
            frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            return
        site_globals = frame.f_globals
        while (
            frame is not None
            and frame.f_globals is site_globals
            and frame.f_code.co_name != "<module>"
        ):
            yield dict(frame.f_locals)
            frame = frame.f_back  # type: ignore[assignment]
    finally:
        del frame


def resolve_annotations(func: Callable[..., Any], namespace: Mapping[str, Any]) -> dict[str, Any]:
    """``typing.get_type_hints(func, include_extras=True)`` with ``namespace`` as locals.

    An unresolvable name raises ``WorkflowValidationError`` naming the step and the name.
    """
    name = step_display_name(func)
    try:
        return typing.get_type_hints(func, localns=dict(namespace), include_extras=True)
    except NameError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        raise WorkflowValidationError(
            f"step {name!r}: cannot resolve the annotation name {missing!r}; names used in "
            "step annotations must be visible at module scope or where the decorator is "
            "applied"
        ) from exc
    except (AttributeError, TypeError, SyntaxError) as exc:
        raise WorkflowValidationError(
            f"step {name!r}: cannot evaluate its annotations: {exc}"
        ) from exc


# --- 5.5.2 Classifying parameters --------------------------------------------------------


def classify_parameters(
    func: Callable[..., Any], hints: Mapping[str, Any], namespace: Mapping[str, Any]
) -> ParameterClasses:
    """Sort the parameters of ``func`` into context, resources, collections and events.

    Parameters that fit none of them are ignored, but only when they have a default:
    otherwise the step could never be called, so ``WorkflowValidationError`` names them.
    """
    name = step_display_name(func)
    classes = ParameterClasses()
    for param in inspect.signature(func).parameters.values():
        if param.name in ("self", "cls") or param.kind in (
            param.VAR_POSITIONAL,
            param.VAR_KEYWORD,
        ):
            continue
        annotation = hints.get(param.name, inspect.Parameter.empty)
        if _classify_one(name, param.name, annotation, namespace, classes):
            continue
        if param.default is param.empty:
            raise WorkflowValidationError(
                f"step {name!r}: parameter {param.name!r} ({_describe(annotation)}) is not an "
                "Event, a Context, a resource or a list[Event] collection, and it has no "
                "default, so tickwork could never call the step; annotate it or give it a "
                "default"
            )
    return classes


def _classify_one(
    step: str,
    param: str,
    annotation: Any,
    namespace: Mapping[str, Any],
    classes: ParameterClasses,
) -> bool:
    """Record ``param`` in ``classes``; ``False`` when it is to be ignored."""
    if _is_context(annotation):
        _add_context(step, param, annotation, classes)
        return True
    resource = resource_declaration(annotation)
    if resource is not None:
        type_annotation, descriptor = resource
        descriptor.set_type_annotation(type_annotation)
        descriptor.set_localns(namespace)
        classes.resources.append(
            ResourceDefinition(name=param, resource=descriptor, type_annotation=type_annotation)
        )
        return True
    collection = _collection_declaration(step, param, annotation)
    if collection is not None:
        if classes.collection_parameters:
            raise WorkflowValidationError(
                f"step {step!r}: parameters {classes.collection_parameters[0][0]!r} and "
                f"{param!r} are both list[E] collections; a step may have only one"
            )
        classes.collection_parameters.append((param, *collection))
        return True
    event_types = _event_types(annotation)
    if event_types is not None:
        classes.event_parameters.append((param, event_types))
        return True
    return False


def _is_context(annotation: Any) -> bool:
    """``Context`` or ``Context[T]``, recognised by class name (compatibility)."""
    candidate = get_origin(annotation) or annotation
    return isinstance(candidate, type) and candidate.__name__ == "Context"


def _add_context(step: str, param: str, annotation: Any, classes: ParameterClasses) -> None:
    if classes.context_parameter is not None:
        raise WorkflowValidationError(
            f"step {step!r}: parameters {classes.context_parameter!r} and {param!r} are both "
            "Context parameters; a step may declare at most one"
        )
    classes.context_parameter = param
    # Only a model class is a state type: ``Context[Any]`` or a TypeVar says nothing.
    args = get_args(annotation)
    if args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        classes.context_state_type = args[0]


def _collection_declaration(
    step: str, param: str, annotation: Any
) -> tuple[tuple[Any, ...], Collect] | None:
    """``(element types, policy)`` for a ``list[E]`` parameter, else ``None``.

    With a ``Collect`` marker the annotation must be a list of ``Event`` subclasses and
    the cardinality an ``All`` or ``Take``; without one, a list of anything else is simply
    not a collection.
    """
    marker: Collect | None = None
    if get_origin(annotation) is Annotated:
        base, *metadata = get_args(annotation)
        marker = next((m for m in metadata if isinstance(m, Collect)), None)
        if marker is None:
            return None
        annotation = base
    elements = event_list_element_types(annotation)
    if marker is None:
        return (elements, Collect()) if elements else None
    if not elements:
        raise WorkflowValidationError(
            f"step {step!r}: parameter {param!r} carries a Collect marker but is annotated "
            f"{_describe(annotation)}; Collect only applies to list[E] where every E is an "
            "Event subclass"
        )
    if not isinstance(marker.cardinality, (All, Take)):
        raise WorkflowValidationError(
            f"step {step!r}: parameter {param!r} has Collect({marker.cardinality!r}); the "
            "cardinality must be an All() or Take(n) instance"
        )
    return elements, marker


def event_list_element_types(annotation: Any) -> tuple[Any, ...]:
    """Element types of ``list[E]`` / ``list[A | B]`` / ``list[E] | None`` if all are events.

    ``()`` for any other annotation, including a list of non-event types.
    """
    members = [m for m in _union_members(annotation) if m is not NoneType]
    if len(members) != 1 or get_origin(members[0]) is not list:
        return ()
    args = get_args(members[0])
    if len(args) != 1:
        return ()
    elements = _event_types(args[0])
    return tuple(elements) if elements else ()


def _event_types(annotation: Any) -> list[Any] | None:
    """The ``Event`` subclasses of ``A``, ``A | B`` or ``Optional[A]``; ``None`` otherwise."""
    members = _dedupe(m for m in _union_members(annotation) if m is not NoneType)
    if members and all(_is_event_class(m) for m in members):
        return members
    return None


def _is_event_class(candidate: Any) -> bool:
    return isinstance(candidate, type) and issubclass(candidate, Event)


# --- 5.5.3 Combining event parameters ----------------------------------------------------


def combine_event_parameters(
    step: str, classes: ParameterClasses
) -> tuple[list[Any], str, list[tuple[str, Any]] | None]:
    """``(accepted_events, event_name, collect_params)`` from the classified parameters."""
    events = classes.event_parameters
    if classes.collection_parameters:
        collection_name, elements, _ = classes.collection_parameters[0]
        if events:
            raise WorkflowValidationError(
                f"step {step!r}: the list[E] parameter {collection_name!r} cannot be combined "
                f"with the event parameter {events[0][0]!r}; a collect step takes its batch "
                "and no other event"
            )
        return list(elements), collection_name, None
    if not events:
        return [], "", None
    if len(events) == 1:
        param, types_ = events[0]
        return list(types_), param, None
    for param, types_ in events:
        if len(types_) != 1:
            raise WorkflowValidationError(
                f"step {step!r}: parameter {param!r} of a multi-slot join declares "
                f"{len(types_)} event types ({_describe_types(types_)}); each join slot "
                "must name exactly one Event type"
            )
    slots = [(param, types_[0]) for param, types_ in events]
    return [slot_type for _, slot_type in slots], slots[0][0], slots


# --- 5.5.4 Return annotations ------------------------------------------------------------


def flatten_return_annotation(step: str, annotation: Any) -> ReturnShape:
    """Flatten unions and ``list[...]`` in a return annotation, keeping ``NoneType`` once.

    Async iterator annotations raise ``WorkflowValidationError``: a step returns its
    events, it does not stream them.
    """
    members = _union_members(_strip_annotated(annotation))
    flat: list[Any] = []
    for member in members:
        _flatten_into(step, member, flat)
    is_fan_out = any(_is_list(m) for m in members)
    bare: tuple[Any, ...] = ()
    if is_fan_out:
        bare = tuple(_dedupe(m for m in members if not _is_list(m) and m is not NoneType))
    return ReturnShape(_dedupe(flat), is_fan_out, bare)


def _flatten_into(step: str, annotation: Any, flat: list[Any]) -> None:
    annotation = _strip_annotated(annotation)
    origin = get_origin(annotation)
    if annotation in _ASYNC_ITERATION_TYPES or origin in _ASYNC_ITERATION_TYPES:
        raise WorkflowValidationError(
            f"step {step!r} is annotated to return {_describe(annotation)}; steps cannot "
            "stream results: return list[E] to fan out, or emit events with ctx.send_event"
        )
    if _is_union(annotation):
        for member in get_args(annotation):
            _flatten_into(step, member, flat)
    elif _is_list(annotation):
        args = get_args(annotation)
        _flatten_into(step, args[0] if args else Any, flat)
    elif annotation is None:
        flat.append(NoneType)
    else:
        flat.append(annotation)


# --- Small type helpers ------------------------------------------------------------------


def _is_union(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType)


def _is_list(annotation: Any) -> bool:
    return annotation is list or get_origin(annotation) is list


def _strip_annotated(annotation: Any) -> Any:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def annotation_members(annotation: Any) -> list[Any]:
    """The members of a union annotation (``[annotation]`` otherwise), ``Annotated`` removed.

    ``None`` is given as ``NoneType``; nested unions are flattened, ``list[...]`` is not.
    """
    return _union_members(_strip_annotated(annotation))


def _union_members(annotation: Any) -> list[Any]:
    """The members of a (possibly nested) union, or ``[annotation]``."""
    if _is_union(annotation):
        members: list[Any] = []
        for member in get_args(annotation):
            members.extend(_union_members(member))
        return members
    return [NoneType if annotation is None else annotation]


def _dedupe(items: Any) -> list[Any]:
    """Keep the first occurrence of each item, in order (items may be unhashable)."""
    unique: list[Any] = []
    for item in items:
        if not any(item is seen or _safe_equal(item, seen) for seen in unique):
            unique.append(item)
    return unique


def _safe_equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return False


def _describe(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty:
        return "no annotation"
    if isinstance(annotation, type) and get_origin(annotation) is None:
        return annotation.__name__
    return repr(annotation).replace("typing.", "")


def _describe_types(types_: list[Any]) -> str:
    return " | ".join(_describe(t) for t in types_)
