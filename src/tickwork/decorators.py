"""``@step`` and ``@catch_error``: turn functions into workflow steps (api.md §5).

Both decorators return the function itself with a ``StepConfig`` attached as
``func._step_config``.  Everything the configuration says comes from the signature
(see ``tickwork._signature``) and the decorator options, and every problem with
either raises ``WorkflowValidationError`` at decoration time, naming the step and the
parameter or option at fault, so a broken workflow never gets as far as a run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, overload, runtime_checkable

from pydantic import BaseModel

from tickwork._signature import (
    decoration_namespace,
    infer_signature,
    require_event_parameter,
    step_display_name,
)
from tickwork.collect import Collect
from tickwork.errors import WorkflowValidationError
from tickwork.events import StepFailedEvent
from tickwork.resource import ResourceDefinition

if TYPE_CHECKING:
    from tickwork.retry_policy import RetryPolicy

__all__ = [
    "CatchErrorHandler",
    "StepConfig",
    "StepFunction",
    "StepGraphCheck",
    "StepRole",
    "WorkflowGraphCheck",
    "catch_error",
    "make_step_function",
    "step",
]

WorkflowGraphCheck = Literal["reachability", "terminal_event", "dead_end"]
StepGraphCheck = Literal["reachability", "dead_end"]
StepRole = Literal["step", "catch_error"]

_STEP_GRAPH_CHECKS: tuple[StepGraphCheck, ...] = ("reachability", "dead_end")

_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass
class StepConfig:
    """The configuration of one step, attached to its function as ``_step_config``.

    ``accepted_events`` lists the types of the event parameter; for a multi-slot join the
    slot types in declaration order (``collect_params`` pairs them with their names); for
    a ``list[E]`` step the element types (``collection_param`` and ``collection_policy``
    describe the batch).  ``return_types`` is the flattened return annotation.
    """

    accepted_events: list[Any]
    event_name: str
    return_types: list[Any]
    context_parameter: str | None
    num_workers: int
    retry_policy: RetryPolicy | None
    resources: list[ResourceDefinition]
    context_state_type: type[BaseModel] | None = None
    skip_graph_checks: list[StepGraphCheck] = field(default_factory=list)
    collect_params: list[tuple[str, Any]] | None = None
    is_fan_out: bool = False
    bare_return_types: tuple[Any, ...] = ()
    collection_param: tuple[str, tuple[Any, ...]] | None = None
    collection_policy: Collect | None = None
    role: StepRole = "step"
    catch_error_for_steps: list[str] | None = None
    catch_error_max_recoveries: int = 1
    accept_event_subclasses: bool = False
    timeout: float | None = None


@dataclass(frozen=True)
class CatchErrorHandler:
    """A ``@catch_error`` handler as the workflow sees it."""

    step_name: str
    for_steps: list[str] | None
    max_recoveries: int


@runtime_checkable
class StepFunction(Protocol):
    """A callable that carries its step configuration."""

    _step_config: StepConfig

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the step body."""
        ...


# --- make_step_function ------------------------------------------------------------------


def make_step_function(
    func: _F,
    num_workers: int = 4,
    retry_policy: RetryPolicy | None = None,
    localns: Mapping[str, Any] | None = None,
    skip_graph_checks: Iterable[StepGraphCheck] | None = None,
    accept_event_subclasses: bool = False,
    timeout: float | None = None,
) -> _F:
    """Infer and validate ``func``'s configuration, attach it as ``_step_config``.

    The low-level builder behind ``@step`` and ``@catch_error``: it performs no
    free-function check and no registration.  ``localns`` adds names to the namespace
    annotations are resolved in (the decoration site's locals are always included).
    Raises ``WorkflowValidationError`` naming the step and the option or parameter.
    """
    config = _build_config(
        func,
        decoration_namespace(localns),
        num_workers=num_workers,
        retry_policy=retry_policy,
        skip_graph_checks=skip_graph_checks,
        accept_event_subclasses=accept_event_subclasses,
        timeout=timeout,
    )
    require_event_parameter(func, config.accepted_events, config.collection_param)
    return _attach(func, config)


def _build_config(
    func: Callable[..., Any],
    namespace: Mapping[str, Any],
    *,
    num_workers: Any,
    retry_policy: Any,
    skip_graph_checks: Any,
    accept_event_subclasses: Any,
    timeout: Any,
) -> StepConfig:
    """Validate the options, infer the signature and combine both into a ``StepConfig``."""
    name = _callable_name(func)
    options = _StepOptions(
        num_workers=_check_num_workers(name, num_workers),
        retry_policy=_check_retry_policy(name, retry_policy),
        skip_graph_checks=_check_skip_graph_checks(name, skip_graph_checks),
        accept_event_subclasses=_check_flag(
            name, "accept_event_subclasses", accept_event_subclasses
        ),
        timeout=_check_timeout(name, timeout),
    )
    signature = infer_signature(func, namespace)
    return StepConfig(
        accepted_events=signature.accepted_events,
        event_name=signature.event_name,
        return_types=signature.return_types,
        context_parameter=signature.context_parameter,
        num_workers=options.num_workers,
        retry_policy=options.retry_policy,
        resources=signature.resources,
        context_state_type=signature.context_state_type,
        skip_graph_checks=options.skip_graph_checks,
        collect_params=signature.collect_params,
        is_fan_out=signature.is_fan_out,
        bare_return_types=signature.bare_return_types,
        collection_param=signature.collection_param,
        collection_policy=signature.collection_policy,
        accept_event_subclasses=options.accept_event_subclasses,
        timeout=options.timeout,
    )


@dataclass(frozen=True)
class _StepOptions:
    """The validated decorator options."""

    num_workers: int
    retry_policy: RetryPolicy | None
    skip_graph_checks: list[StepGraphCheck]
    accept_event_subclasses: bool
    timeout: float | None


def _attach(func: _F, config: StepConfig) -> _F:
    try:
        func._step_config = config  # type: ignore[attr-defined]
    except (AttributeError, TypeError) as exc:
        raise WorkflowValidationError(
            f"cannot make {_callable_name(func)!r} a step: its step configuration cannot "
            "be attached to it; decorate a plain function or method"
        ) from exc
    return func


def _callable_name(func: Any) -> str:
    if not callable(func):
        raise WorkflowValidationError(
            f"steps must be functions or methods, got {func!r}; apply @step to a def"
        )
    return step_display_name(func)


# --- @step -------------------------------------------------------------------------------


@overload
def step(
    func: _F,
    *,
    workflow: type[Any] | None = None,
    num_workers: int = 4,
    retry_policy: RetryPolicy | None = None,
    skip_graph_checks: list[StepGraphCheck] | None = None,
    accept_event_subclasses: bool = False,
    timeout: float | None = None,
) -> _F: ...


@overload
def step(
    func: None = None,
    *,
    workflow: type[Any] | None = None,
    num_workers: int = 4,
    retry_policy: RetryPolicy | None = None,
    skip_graph_checks: list[StepGraphCheck] | None = None,
    accept_event_subclasses: bool = False,
    timeout: float | None = None,
) -> Callable[[_F], _F]: ...


def step(
    func: Callable[..., Any] | None = None,
    *,
    workflow: type[Any] | None = None,
    num_workers: int = 4,
    retry_policy: RetryPolicy | None = None,
    skip_graph_checks: list[StepGraphCheck] | None = None,
    accept_event_subclasses: bool = False,
    timeout: float | None = None,
) -> Any:
    """Make a function a workflow step; works bare (``@step``) or with options.

    A method (``Flow.f``) is discovered by its workflow class.  A free function is
    registered on ``workflow`` with ``workflow.add_step(func)`` when that option names a
    class; without it the function is only configured, and ``Cls.add_step(func)`` attaches
    it later.  Either way the signature is checked here, at decoration, exactly as for a
    method.  Returns the function itself.

    Options: ``num_workers`` (int > 0), ``retry_policy`` (``None`` never retries),
    ``skip_graph_checks`` (``"reachability"`` / ``"dead_end"``),
    ``accept_event_subclasses`` (``isinstance`` matching) and ``timeout`` (seconds per
    invocation, or ``None``).
    """

    def decorator(target: _F) -> _F:
        make_step_function(
            target,
            num_workers=num_workers,
            retry_policy=retry_policy,
            skip_graph_checks=skip_graph_checks,
            accept_event_subclasses=accept_event_subclasses,
            timeout=timeout,
        )
        if workflow is not None:
            workflow.add_step(target)
        return target

    if func is None:
        return decorator
    return decorator(func)


# --- @catch_error ------------------------------------------------------------------------


@overload
def catch_error(func: _F, *, for_steps: list[str] | None = None, max_recoveries: int = 1) -> _F: ...


@overload
def catch_error(
    func: None = None, *, for_steps: list[str] | None = None, max_recoveries: int = 1
) -> Callable[[_F], _F]: ...


def catch_error(
    func: Callable[..., Any] | None = None,
    *,
    for_steps: list[str] | None = None,
    max_recoveries: int = 1,
) -> Any:
    """Make a function the handler of other steps' exhausted failures (api.md §5.2).

    The handler takes exactly one ``StepFailedEvent`` parameter (plus an optional
    ``Context`` and resources) and runs with ``num_workers=1`` and no retries.
    ``for_steps`` lists the steps it claims (``None``: every step not claimed by another
    handler); ``max_recoveries`` bounds how often it recovers one lineage.
    """

    def decorator(target: _F) -> _F:
        name = _callable_name(target)
        claimed = _check_for_steps(name, for_steps)
        recoveries = _check_max_recoveries(name, max_recoveries)
        config = _build_config(
            target,
            decoration_namespace(),
            num_workers=1,
            retry_policy=None,
            skip_graph_checks=None,
            accept_event_subclasses=False,
            timeout=None,
        )
        _check_handler_signature(name, config)
        config.role = "catch_error"
        config.catch_error_for_steps = claimed
        config.catch_error_max_recoveries = recoveries
        return _attach(target, config)

    if func is None:
        return decorator
    return decorator(func)


def _check_handler_signature(name: str, config: StepConfig) -> None:
    """A handler accepts exactly one ``StepFailedEvent`` and nothing else."""
    single_failed_event = (
        config.collection_param is None
        and config.collect_params is None
        and config.accepted_events == [StepFailedEvent]
    )
    if not single_failed_event:
        declared = ", ".join(getattr(t, "__name__", repr(t)) for t in config.accepted_events)
        raise WorkflowValidationError(
            f"@catch_error handler {name!r} must accept StepFailedEvent: declare exactly one "
            f"event parameter annotated StepFailedEvent (found: {declared or 'none'})"
        )


# --- Option checks -----------------------------------------------------------------------


def _check_num_workers(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise WorkflowValidationError(
            f"step {name!r}: num_workers must be an int > 0, got {value!r}"
        )
    return value


def _check_retry_policy(name: str, value: Any) -> RetryPolicy | None:
    if value is None:
        return None
    # Imported by the first step given a policy (or by the first run), not by ``import``.
    from tickwork.retry_policy import RetryPolicy

    if not (isinstance(value, RetryPolicy) and callable(value.next)):
        raise WorkflowValidationError(
            f"step {name!r}: retry_policy must be None or an object with a "
            f"next(elapsed_time, attempts, error) method, got {value!r}"
        )
    return value


def _check_skip_graph_checks(name: str, value: Any) -> list[StepGraphCheck]:
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise WorkflowValidationError(
            f"step {name!r}: skip_graph_checks must be a list of check names "
            f"({', '.join(_STEP_GRAPH_CHECKS)}), got {value!r}"
        )
    checks: list[StepGraphCheck] = []
    for item in value:
        if item not in _STEP_GRAPH_CHECKS:
            raise WorkflowValidationError(
                f"step {name!r}: skip_graph_checks has unknown check {item!r}; valid names "
                f"are {', '.join(_STEP_GRAPH_CHECKS)}"
            )
        if item not in checks:
            checks.append(item)
    return checks


def _check_flag(name: str, option: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise WorkflowValidationError(f"step {name!r}: {option} must be a bool, got {value!r}")
    return value


def _check_timeout(name: str, value: Any) -> float | None:
    if value is None:
        return None
    valid = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and value > 0
    )
    if not valid:
        raise WorkflowValidationError(
            f"step {name!r}: timeout must be None or a positive finite number of seconds, "
            f"got {value!r}"
        )
    return float(value)


def _check_for_steps(name: str, value: Any) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise WorkflowValidationError(
            f"@catch_error handler {name!r}: for_steps must be None or a list of step names "
            f"(str), got {value!r}"
        )
    return list(value)


def _check_max_recoveries(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkflowValidationError(
            f"@catch_error handler {name!r}: max_recoveries must be an int >= 1, got {value!r}"
        )
    return value
