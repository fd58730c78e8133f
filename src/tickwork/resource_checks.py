"""Checks 8 and 9 of ``Workflow.validate()``: resource configs and resource factories.

Every problem is collected, and all are raised together as one
``WorkflowValidationError`` whose entries name the step, the parameter, the factory chain
for nested declarations and the config file, then the underlying error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import anyio

from tickwork.errors import WorkflowValidationError
from tickwork.resource import ResourceManager, _ResourceConfig

__all__ = ["validate_step_resources"]

_Declaration = tuple[str, str, tuple[str, ...], Any]  # step, parameter, chain, descriptor


def _declarations(steps: Mapping[str, Callable[..., Any]]) -> Iterator[_Declaration]:
    """Every resource declaration of every step, nested factory dependencies included."""

    def walk(
        step: str, param: str, chain: tuple[str, ...], descriptor: Any
    ) -> Iterator[_Declaration]:
        yield step, param, chain, descriptor
        try:
            dependencies = descriptor.get_dependencies()
        except Exception:
            return
        for _dep_param, dep, _annotation in dependencies:
            if dep.name in chain:
                continue
            yield from walk(step, param, (*chain, descriptor.name), dep)

    for step, fn in steps.items():
        for definition in fn._step_config.resources:  # type: ignore[attr-defined]
            yield from walk(step, definition.name, (), definition.resource)


def _where(step: str, param: str, chain: tuple[str, ...], descriptor: Any) -> str:
    via = f" via {' -> '.join(chain)}" if chain else ""
    if isinstance(descriptor, _ResourceConfig):
        return f"step '{step}', parameter '{param}'{via}, config file {descriptor.name}"
    return f"step '{step}', parameter '{param}'{via}, resource {descriptor.name}"


def _config_errors(steps: Mapping[str, Callable[..., Any]]) -> list[str]:
    errors: list[str] = []
    for step, param, chain, descriptor in _declarations(steps):
        if not isinstance(descriptor, _ResourceConfig):
            continue
        try:
            descriptor.call()
        except Exception as error:
            errors.append(f"{_where(step, param, chain, descriptor)}: {error}")
    return errors


async def _resolve_all(steps: Mapping[str, Callable[..., Any]]) -> list[str]:
    # A throwaway manager: values built here belong to a helper loop and must not be
    # cached in the workflow's own manager.
    manager = ResourceManager()
    errors: list[str] = []
    for step, fn in steps.items():
        for definition in fn._step_config.resources:  # type: ignore[attr-defined]
            try:
                with manager.resolution_scope(run_cache={}):
                    await manager.get(definition.resource)
            except Exception as error:
                where = _where(step, definition.name, (), definition.resource)
                errors.append(f"{where}: {error}")
    return errors


def _loop_running() -> bool:
    from tickwork.runtime.session import detect_backend  # the run machinery, on first use

    try:
        detect_backend()
    except RuntimeError:
        return False
    return True


def _factory_errors(steps: Mapping[str, Callable[..., Any]]) -> list[str]:
    if not _loop_running():
        return anyio.run(_resolve_all, steps)
    # A loop runs in this thread: resolve on a helper thread with its own loop.
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["errors"] = anyio.run(_resolve_all, steps)
        except BaseException as error:  # re-raised in the caller's thread
            box["raised"] = error

    thread = threading.Thread(target=target, name="tickwork-validate-resources")
    thread.start()
    thread.join()
    if "raised" in box:
        raise box["raised"]
    errors: list[str] = box["errors"]
    return errors


def validate_step_resources(
    steps: Mapping[str, Callable[..., Any]], *, configs: bool, factories: bool
) -> None:
    """Load every config (``configs``) and resolve every resource (``factories``)."""
    if configs:
        errors = _config_errors(steps)
        if errors:
            raise WorkflowValidationError(
                "resource config validation failed:\n" + "\n".join(f"- {e}" for e in errors)
            )
    if factories:
        errors = _factory_errors(steps)
        if errors:
            raise WorkflowValidationError(
                "resource validation failed:\n" + "\n".join(f"- {e}" for e in errors)
            )
