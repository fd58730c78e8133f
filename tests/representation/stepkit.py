"""Build step functions carrying a ``_step_config`` without the real decorator.

The representation layer reads configurations structurally (api.md §5.4), so these
fakes let its tests describe exact graphs: which types a step accepts and returns, fan-out
elements, joins, collect parameters and ``@catch_error`` handlers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tickwork.collect import Collect
from tickwork.events import StepFailedEvent

NoneType = type(None)


@dataclass
class FakeStepConfig:
    """The fields of ``StepConfig`` (api.md §5.4), with the same defaults."""

    accepted_events: list[Any]
    event_name: str
    return_types: list[Any]
    context_parameter: str | None = None
    num_workers: int = 4
    retry_policy: Any = None
    resources: list[Any] = field(default_factory=list)
    context_state_type: Any = None
    skip_graph_checks: list[str] = field(default_factory=list)
    collect_params: list[tuple[str, Any]] | None = None
    is_fan_out: bool = False
    bare_return_types: tuple[Any, ...] = ()
    collection_param: tuple[str, tuple[Any, ...]] | None = None
    collection_policy: Collect | None = None
    role: str = "step"
    catch_error_for_steps: list[str] | None = None
    catch_error_max_recoveries: Any = 1
    accept_event_subclasses: bool = False
    timeout: float | None = None


def _function(name: str, doc: str | None) -> Callable[..., Any]:
    def body(*args: Any, **kwargs: Any) -> Any:
        return None

    body.__name__ = name
    body.__qualname__ = name
    body.__doc__ = doc
    return body


def step(
    name: str,
    accepts: Sequence[Any],
    returns: Sequence[Any] = (NoneType,),
    *,
    doc: str | None = None,
    **overrides: Any,
) -> Callable[..., Any]:
    """An ordinary step accepting ``accepts`` and returning ``returns``."""
    func = _function(name, doc)
    config = FakeStepConfig(
        accepted_events=list(accepts), event_name="ev", return_types=list(returns)
    )
    for key, value in overrides.items():
        if not hasattr(config, key):
            raise TypeError(f"unknown StepConfig field {key}")
        setattr(config, key, value)
    func._step_config = config  # type: ignore[attr-defined]
    return func


def fan_out(
    name: str,
    accepts: Sequence[Any],
    elements: Sequence[Any],
    bare: Sequence[Any] = (),
    **overrides: Any,
) -> Callable[..., Any]:
    """A step annotated ``-> list[elements...] | bare...``."""
    returns = list(dict.fromkeys([*elements, *bare]))
    return step(
        name,
        accepts,
        returns,
        is_fan_out=True,
        bare_return_types=tuple(t for t in bare if t is not NoneType),
        **overrides,
    )


def collect(
    name: str,
    elements: Sequence[Any],
    returns: Sequence[Any],
    *,
    param: str = "events",
    policy: Collect | None = None,
    **overrides: Any,
) -> Callable[..., Any]:
    """A ``list[E]`` join step: ``async def name(self, events: list[E]) -> returns``."""
    return step(
        name,
        elements,
        returns,
        collection_param=(param, tuple(elements)),
        collection_policy=policy if policy is not None else Collect(),
        **overrides,
    )


def join(
    name: str, slots: Sequence[tuple[str, Any]], returns: Sequence[Any], **overrides: Any
) -> Callable[..., Any]:
    """A multi-slot join: one single-event parameter per ``(name, type)`` slot."""
    return step(
        name,
        [t for _, t in slots],
        returns,
        collect_params=list(slots),
        **overrides,
    )


def handler(
    name: str,
    returns: Sequence[Any] = (NoneType,),
    *,
    for_steps: list[str] | None = None,
    max_recoveries: Any = 1,
    **overrides: Any,
) -> Callable[..., Any]:
    """A ``@catch_error`` handler step."""
    return step(
        name,
        [StepFailedEvent],
        returns,
        role="catch_error",
        catch_error_for_steps=for_steps,
        catch_error_max_recoveries=max_recoveries,
        num_workers=1,
        **overrides,
    )


def steps(*funcs: Callable[..., Any]) -> dict[str, Callable[..., Any]]:
    """The ``{name: function}`` mapping the representation functions take."""
    return {func.__name__: func for func in funcs}


def workflow_class(
    name: str,
    *funcs: Callable[..., Any],
    free: Iterable[Callable[..., Any]] = (),
    bases: tuple[type, ...] = (),
    doc: str | None = None,
) -> type:
    """A class whose attributes are the given steps, with ``free`` steps registered."""
    namespace: dict[str, Any] = {func.__name__: func for func in funcs}
    namespace["_step_functions"] = {func.__name__: func for func in free}
    namespace["__doc__"] = doc
    return type(name, bases or (object,), namespace)
