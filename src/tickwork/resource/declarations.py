"""Resource declarations: ``Resource(factory)``, ``ResourceConfig(file)``, and how a
step's annotations are read for them (api.md §14.1)."""

from __future__ import annotations

import copy
import functools
import inspect
import json
import os
import sys
from collections.abc import Callable, Hashable, Mapping
from typing import (
    Annotated,
    Any,
    Literal,
    Protocol,
    get_args,
    get_origin,
    get_type_hints,
    runtime_checkable,
)

from pydantic import BaseModel, ConfigDict

from tickwork._lazy import built_on_first_use

ResourceScope = Literal["workflow", "run"]

_SCOPES: tuple[ResourceScope, ...] = ("workflow", "run")
_CONFIG_CACHE_SIZE = 128


class _Identity:
    """A hashable handle comparing by object identity (and keeping the object alive)."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and other.obj is self.obj

    def __repr__(self) -> str:
        return f"_Identity({self.obj!r})"


class ResourceResolver(Protocol):
    """What a declaration needs to resolve its dependencies: the ``ResourceManager``
    (declared here so that declarations never import the manager)."""

    async def get(self, resource: ResourceDescriptor) -> Any:
        """The value of ``resource``, cached as its declaration says."""
        ...


@runtime_checkable
class ResourceDescriptor(Protocol):
    """What a resource declaration inside ``Annotated[T, ...]`` must provide.

    ``_Resource`` and ``_ResourceConfig`` implement it; third-party descriptors may too.
    ``scope`` is an optional attribute (``"workflow"`` when absent).
    """

    @property
    def name(self) -> str:
        """The name used by ``ResourceManager.set`` and in error messages."""
        ...

    @property
    def cache(self) -> bool:
        """Whether the value is cached (see the module docstring for the modes)."""
        ...

    async def resolve(self, manager: ResourceResolver) -> Any:
        """Produce a fresh value, resolving dependencies through ``manager``."""
        ...

    def set_type_annotation(self, type_annotation: Any) -> None:
        """Receive the ``T`` of the ``Annotated[T, ...]`` declaration."""
        ...

    def set_localns(self, localns: Mapping[str, Any] | None) -> None:
        """Receive the namespace the declaration was resolved in."""
        ...

    def get_dependencies(self) -> list[tuple[str, ResourceDescriptor, Any]]:
        """``(parameter, descriptor, annotated type)`` for each resource this one needs."""
        ...


@built_on_first_use
class ResourceDefinition(BaseModel):
    """One resource parameter of a step: ``name`` is the parameter name."""

    model_config = ConfigDict(arbitrary_types_allowed=True, defer_build=True)

    name: str
    resource: ResourceDescriptor
    type_annotation: Any


# --- Resource(factory) -------------------------------------------------------------------


class _Resource:
    """A value produced by calling ``factory``; see ``Resource``."""

    def __init__(
        self, factory: Callable[..., Any], cache: bool = True, scope: ResourceScope = "workflow"
    ) -> None:
        if not callable(factory):
            raise TypeError(f"Resource(factory): factory must be callable, got {factory!r}")
        if scope not in _SCOPES:
            raise ValueError(
                f"Resource({_factory_name(factory)}): unknown scope {scope!r}; "
                f"use 'workflow' or 'run'"
            )
        if scope == "run" and not cache:
            raise ValueError(
                f"Resource({_factory_name(factory)}): scope='run' caches one value per run, "
                "which contradicts cache=False; drop one of the two"
            )
        self.factory = factory
        self.cache = bool(cache)
        self.scope: ResourceScope = scope
        self.name = _factory_name(factory)
        self.type_annotation: Any = None
        self._localns: Mapping[str, Any] | None = None
        self._dependencies: list[tuple[str, ResourceDescriptor, Any]] | None = None

    def __repr__(self) -> str:
        return f"Resource({self.name}, cache={self.cache}, scope={self.scope!r})"

    def set_type_annotation(self, type_annotation: Any) -> None:
        """Remember the annotated type (used by drawings)."""
        self.type_annotation = type_annotation

    def set_localns(self, localns: Mapping[str, Any] | None) -> None:
        """Remember the declaration site's namespace for the factory's annotations."""
        self._localns = localns
        self._dependencies = None

    def get_dependencies(self) -> list[tuple[str, ResourceDescriptor, Any]]:
        """The resources the factory's parameters declare, in parameter order.

        Raises ``ValueError`` naming the factory and the parameter when a parameter is
        neither a resource nor has a default, or when an annotation cannot be resolved.
        """
        if self._dependencies is None:
            self._dependencies = _factory_dependencies(self.factory, self.name, self._localns)
        return list(self._dependencies)

    async def call(self, manager: ResourceResolver) -> Any:
        """Resolve the dependencies through ``manager`` and call the factory (no caching)."""
        kwargs = {
            param: await manager.get(descriptor) for param, descriptor, _ in self.get_dependencies()
        }
        value = self.factory(**kwargs)
        if inspect.isawaitable(value):
            value = await value
        return value

    async def resolve(self, manager: ResourceResolver) -> Any:
        """Same as ``call``; the manager decides about caching around it."""
        return await self.call(manager)

    def _cache_key(self) -> Hashable:
        return ("resource", _Identity(self.factory), self.cache, self.scope)


def Resource(
    factory: Callable[..., Any], cache: bool = True, *, scope: ResourceScope = "workflow"
) -> _Resource:
    """Declare a resource: ``Annotated[Database, Resource(get_db)]``.

    ``factory`` is a sync or async callable; its own parameters may be resources or
    configs (resolved recursively) and every other parameter needs a default.  ``scope``
    is ``"workflow"`` (one value per Workflow instance) or ``"run"`` (one per run);
    ``cache=False`` gives a new value per invocation.  An unknown scope, or
    ``scope="run"`` with ``cache=False``, raises ``ValueError``.

    Sync factories run on the event-loop thread: blocking I/O belongs in ``async``
    factories, or it stalls every run of the loop while it waits.
    """
    return _Resource(factory, cache, scope)


def _factory_name(factory: Any) -> str:
    qualname = getattr(factory, "__qualname__", None)
    return qualname if isinstance(qualname, str) else type(factory).__name__


# --- ResourceConfig(config_file) ---------------------------------------------------------


class _ResourceConfig:
    """A pydantic model loaded from (a section of) a JSON file; see ``ResourceConfig``."""

    cache = True
    scope: ResourceScope = "workflow"

    def __init__(
        self,
        config_file: str,
        path_selector: str | None = None,
        label: str | None = None,
        description: str | None = None,
    ) -> None:
        if not str(config_file).endswith(".json"):
            raise ValueError(
                f"ResourceConfig: config_file must be a .json file, got {config_file!r}"
            )
        self._given_path = str(config_file)
        self.path_selector = path_selector
        self.label = label
        self.description = description
        self.cls_factory: type[BaseModel] | None = None

    def __repr__(self) -> str:
        return f"ResourceConfig({self.name!r})"

    @property
    def config_file(self) -> str:
        """The absolute path of the file; ``FileNotFoundError`` when it does not exist."""
        absolute = os.path.abspath(self._given_path)
        if not os.path.isfile(absolute):
            raise FileNotFoundError(f"ResourceConfig file not found: {self._given_path}")
        return absolute

    @property
    def name(self) -> str:
        """The path as given, plus ``"." + path_selector`` when a selector is set."""
        if self.path_selector:
            return f"{self._given_path}.{self.path_selector}"
        return self._given_path

    def set_type_annotation(self, type_annotation: Any) -> None:
        """Use the annotated type as the model class when it is a ``BaseModel``."""
        if isinstance(type_annotation, type) and issubclass(type_annotation, BaseModel):
            self.cls_factory = type_annotation

    def set_localns(self, localns: Mapping[str, Any] | None) -> None:
        """Configs have no annotations to resolve."""

    def get_dependencies(self) -> list[tuple[str, ResourceDescriptor, Any]]:
        """Configs depend on nothing."""
        return []

    def load_data(self) -> Any:
        """The selected JSON data (a fresh copy; the file is read through the LRU cache)."""
        return copy.deepcopy(_load_config_section(self.config_file, self.path_selector))

    def call(self) -> BaseModel:
        """Load, select and validate the configuration.

        Raises ``FileNotFoundError`` for a missing file, ``ValueError`` when the selector
        does not lead to a dict or no model class is set, and pydantic's
        ``ValidationError`` when the data does not fit the model.
        """
        if self.cls_factory is None:
            raise ValueError(
                f"ResourceConfig({self.name!r}): cls_factory is not set; annotate the "
                "parameter as Annotated[Model, ResourceConfig(...)] with a BaseModel subclass"
            )
        data = _load_config_section(self.config_file, self.path_selector)
        return self.cls_factory.model_validate(data)

    async def resolve(self, manager: ResourceResolver) -> Any:
        """Same as ``call``."""
        return self.call()

    def _cache_key(self) -> Hashable:
        absolute = os.path.abspath(self._given_path)
        return ("config", absolute, self.path_selector, _Identity(self.cls_factory))


def ResourceConfig(
    config_file: str,
    path_selector: str | None = None,
    label: str | None = None,
    description: str | None = None,
) -> _ResourceConfig:
    """Declare a configuration: ``Annotated[Settings, ResourceConfig("settings.json")]``.

    ``path_selector`` (``"core.fs"``) selects a nested section.  A ``config_file`` that
    does not end in ``.json`` raises ``ValueError`` here; whether it exists is checked
    when the value is first loaded.  Loaded values are always cached per Workflow instance.
    """
    return _ResourceConfig(config_file, path_selector, label, description)


@functools.lru_cache(maxsize=_CONFIG_CACHE_SIZE)
def _load_config_section(absolute_path: str, path_selector: str | None) -> Any:
    """Read ``absolute_path`` and walk ``path_selector``; cached, so later edits are unseen."""
    with open(absolute_path, encoding="utf-8") as handle:
        try:
            data: Any = json.load(handle)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"ResourceConfig file {absolute_path} is not valid JSON: {exc}"
            ) from exc
    if not path_selector:
        return data
    segments = path_selector.split(".")
    for index, segment in enumerate(segments):
        found = data.get(segment, _MISSING) if isinstance(data, dict) else _MISSING
        if not isinstance(found, dict):
            what = f"no key {segment!r}" if found is _MISSING else type(found).__name__
            prefix = ".".join(segments[: index + 1])
            raise ValueError(
                f"ResourceConfig file {absolute_path}: path_selector {prefix!r} does not "
                f"lead to a dict (found {what})"
            )
        data = found
    return data


_MISSING: Any = object()


# --- Factory introspection ---------------------------------------------------------------


def _factory_dependencies(
    factory: Callable[..., Any], name: str, localns: Mapping[str, Any] | None
) -> list[tuple[str, ResourceDescriptor, Any]]:
    """Read the factory's parameters: resource declarations become dependencies."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # builtins and C callables without a signature
        return []
    hints = _factory_hints(factory, name, localns)
    dependencies: list[tuple[str, ResourceDescriptor, Any]] = []
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        declared = resource_declaration(hints.get(param.name))
        if declared is not None:
            type_annotation, descriptor = declared
            descriptor.set_type_annotation(type_annotation)
            descriptor.set_localns(localns)
            dependencies.append((param.name, descriptor, type_annotation))
        elif param.default is param.empty:
            raise ValueError(
                f"resource factory {name!r}: parameter {param.name!r} is not a resource "
                "(Annotated[T, Resource(...)] or Annotated[Model, ResourceConfig(...)]) and "
                "has no default, so tickwork cannot call the factory"
            )
    return dependencies


def _factory_hints(
    factory: Callable[..., Any], name: str, localns: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The factory's resolved annotations.

    Names resolve against the factory's module globals first, then against the
    declaration site's locals: a local name never shadows a module-level one.
    """
    target = _annotated_callable(factory)
    module_globals = _module_globals(target)
    namespace = {**(localns or {}), **module_globals}
    try:
        return get_type_hints(
            target, globalns=module_globals, localns=namespace, include_extras=True
        )
    except NameError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        raise ValueError(
            f"resource factory {name!r}: cannot resolve the annotation name {missing!r}; "
            "it must be visible at the factory's module scope or where the resource is declared"
        ) from exc
    except TypeError:  # objects get_type_hints does not support: no usable annotations
        return {}


def _annotated_callable(factory: Callable[..., Any]) -> Any:
    """The object whose annotations describe the factory's call parameters."""
    if isinstance(factory, functools.partial):
        return _annotated_callable(factory.func)
    if isinstance(factory, type):
        constructor: Any = factory
        return constructor.__init__
    if inspect.isfunction(factory) or inspect.ismethod(factory):
        return factory
    call = getattr(type(factory), "__call__", None)  # noqa: B004 - the class attribute
    return call if call is not None else factory


def _module_globals(target: Any) -> dict[str, Any]:
    function = inspect.unwrap(getattr(target, "__func__", target))
    found = getattr(function, "__globals__", None)
    if isinstance(found, dict):
        return found
    module = sys.modules.get(getattr(target, "__module__", "") or "")
    return dict(vars(module)) if module is not None else {}


def resource_declaration(annotation: Any) -> tuple[Any, ResourceDescriptor] | None:
    """``(T, descriptor)`` for ``Annotated[T, descriptor, ...]``, else ``None``."""
    if get_origin(annotation) is not Annotated:
        return None
    base, *metadata = get_args(annotation)
    for item in metadata:
        if isinstance(item, ResourceDescriptor):
            return base, item
    return None
