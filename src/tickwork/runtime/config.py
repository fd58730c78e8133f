"""Building the reducer's immutable ``RunConfig`` from a workflow's step configs.

Computed once per workflow instance (and again only when the class's step registry
changes); every run of the instance shares it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import NoneType
from typing import Any

from tickwork.collect import Take
from tickwork.runtime.stream_plan import compute_stream_bindings
from tickwork.runtime.types.state import BindingSpec, RunConfig, StepSpec

__all__ = ["build_run_config", "step_spec"]


def _kind(config: Any) -> str:
    if config.collection_param is not None:
        return "collect"
    if config.collect_params:
        return "join"
    return "plain"


def step_spec(name: str, config: Any) -> StepSpec:
    """The reducer's view of one step's ``StepConfig``."""
    bare = tuple(t for t in config.bare_return_types if t is not NoneType)
    list_only: frozenset[type] = frozenset()
    if config.is_fan_out:
        list_only = frozenset(t for t in config.return_types if t is not NoneType and t not in bare)
    return StepSpec(
        name=name,
        accepted=tuple(config.accepted_events),
        subclass_mode=bool(config.accept_event_subclasses),
        num_workers=int(config.num_workers),
        kind=_kind(config),  # type: ignore[arg-type]
        slots=tuple(config.collect_params or ()),
        is_catch_error=config.role == "catch_error",
        max_recoveries=int(config.catch_error_max_recoveries),
        is_fan_out=bool(config.is_fan_out),
        bare_return_types=bare,
        list_only_types=list_only,
    )


def _catch_error_owners(steps: Mapping[str, Any]) -> dict[str, str]:
    """Which ``@catch_error`` handler owns each step (scoped first, then the wildcard)."""
    owners: dict[str, str] = {}
    wildcard: str | None = None
    handlers: set[str] = set()
    for name, config in steps.items():
        if config.role != "catch_error":
            continue
        handlers.add(name)
        if config.catch_error_for_steps is None:
            wildcard = name
        else:
            for claimed in config.catch_error_for_steps:
                owners[claimed] = name
    if wildcard is not None:
        for name in steps:
            if name not in handlers:
                owners.setdefault(name, wildcard)
    return owners


def _binding_specs(
    step_functions: Mapping[str, Callable[..., Any]], start_event_class: type | None
) -> dict[str, tuple[BindingSpec, ...]]:
    plan = compute_stream_bindings(step_functions, start_event_class)
    out: dict[str, tuple[BindingSpec, ...]] = {}
    for producer, bindings in plan.bindings_by_producer.items():
        specs = []
        for binding in bindings:
            target_cfg = step_functions[binding.target]._step_config  # type: ignore[attr-defined]
            cardinality = binding.policy.cardinality
            specs.append(
                BindingSpec(
                    binding_id=binding.binding_id,
                    producer=producer,
                    target=binding.target,
                    element_types=tuple(binding.element_types),
                    subclass_mode=bool(target_cfg.accept_event_subclasses),
                    take=cardinality.n if isinstance(cardinality, Take) else None,
                    cancel_rest=isinstance(cardinality, Take) and cardinality.cancel_rest,
                )
            )
        out[producer] = tuple(specs)
    return out


def build_run_config(
    workflow_name: str,
    step_functions: Mapping[str, Callable[..., Any]],
    timeout: float | None,
    start_event_class: type | None = None,
) -> RunConfig:
    """The immutable config shared by every run of a workflow instance."""
    configs = {name: fn._step_config for name, fn in step_functions.items()}  # type: ignore[attr-defined]
    bindings = _binding_specs(step_functions, start_event_class)
    return RunConfig(
        workflow_name=workflow_name,
        steps={name: step_spec(name, cfg) for name, cfg in configs.items()},
        timeout=timeout,
        catch_error_owner=_catch_error_owners(configs),
        bindings_by_producer=bindings,
        bindings_by_id={b.binding_id: b for specs in bindings.values() for b in specs},
    )
