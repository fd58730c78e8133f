"""The ``ResourceManager``: resolving and caching declared resources (api.md §14.2-14.3)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import (
    Any,
)

import anyio

from tickwork.resource.declarations import (
    ResourceDefinition,
    ResourceDescriptor,
    _Identity,
    _Resource,
    _ResourceConfig,
)

# --- ResourceManager ---------------------------------------------------------------------


@dataclass
class _ResolutionScope:
    """One resolution (normally one invocation): the memo for uncached values."""

    manager: ResourceManager
    memo: dict[Hashable, Any] = field(default_factory=dict)
    run_cache: dict[Any, Any] | None = None


@dataclass
class _PendingCreation:
    """A factory call in progress; concurrent resolutions of the same key wait on it."""

    done: anyio.Event


# Weakly: the scope lives as long as its ``resolution_scope`` block, and a factory that
# schedules a callback copies the contextvars, which must not keep the run's resources
# (the run cache) alive past the resolution (api.md §19.3).
_active_scope: ContextVar[weakref.ref[_ResolutionScope] | None] = ContextVar(
    "tickwork_resource_scope", default=None
)


def _current_scope() -> _ResolutionScope | None:
    """The resolution scope open in this task, if any."""
    ref = _active_scope.get()
    return ref() if ref is not None else None


# (manager id, cache key, resource name) of every resolution in progress in this task.
_resolution_chain: ContextVar[tuple[tuple[int, Hashable, str], ...]] = ContextVar(
    "tickwork_resource_chain", default=()
)


class ResourceManager:
    """Resolves and caches resources for one Workflow instance (api.md §14.3)."""

    def __init__(self) -> None:
        self.resources: dict[str, Any] = {}
        self._seeded: dict[str, Any] = {}
        self._workflow_cache: dict[Hashable, Any] = {}
        self._pending: dict[tuple[int, Hashable, int], _PendingCreation] = {}
        self._acyclic: set[Hashable] = set()

    async def set(self, name: str, val: Any) -> None:
        """Pre-seed ``val`` for every cached declaration named ``name``.

        ``name`` is a factory qualname or a config name; the factory is then never called.
        """
        self._seeded[name] = val
        self.resources[name] = val

    def get_all(self) -> dict[str, Any]:
        """The informational name -> value mapping (the ``resources`` dict itself)."""
        return self.resources

    @contextmanager
    def resolution_scope(self, run_cache: dict[Any, Any] | None = None) -> Iterator[None]:
        """Share one memo for uncached values across everything resolved inside.

        Nested scopes share the outermost scope's memo, which is dropped when the
        outermost scope exits.  ``run_cache`` is the per-run dict for ``scope="run"``
        values; a nested scope without one inherits the enclosing scope's.
        """
        outer = _current_scope()
        if outer is not None and outer.manager is self:
            scope = _ResolutionScope(
                self, outer.memo, run_cache if run_cache is not None else outer.run_cache
            )
        else:
            scope = _ResolutionScope(self, run_cache=run_cache)
        token = _active_scope.set(weakref.ref(scope))
        try:
            yield
        finally:
            _active_scope.reset(token)

    async def get(
        self, descriptor: ResourceDescriptor, run_cache: dict[Any, Any] | None = None
    ) -> Any:
        """Resolve one declaration under the caching rules.

        A resolution scope is opened if none is active; ``run_cache`` (see the module
        docstring) holds ``scope="run"`` values.  Raises ``ValueError`` for a cycle and
        whatever the factory (or config loading) raises.
        """
        with self.resolution_scope(run_cache):
            scope = _current_scope()
            assert scope is not None
            return await self._resolve(descriptor, scope)

    async def resolve_invocation(
        self, definitions: Iterable[ResourceDefinition], run_cache: dict[Any, Any] | None = None
    ) -> dict[str, Any]:
        """Resolve a step's resources for one invocation: parameter name -> value.

        Everything is resolved in one resolution scope, so uncached values are shared
        within the invocation and not beyond it.
        """
        values: dict[str, Any] = {}
        with self.resolution_scope(run_cache):
            for definition in definitions:
                values[definition.name] = await self.get(definition.resource)
        return values

    async def _resolve(self, descriptor: ResourceDescriptor, scope: _ResolutionScope) -> Any:
        name = descriptor.name
        if descriptor.cache and name in self._seeded:
            return self._seeded[name]
        key = _cache_key(descriptor)
        store = self._store_for(descriptor, scope)
        if key in store:
            return store[key]
        self._check_not_in_chain(key, name)
        self._check_acyclic(descriptor, key)
        token = _resolution_chain.set((*_resolution_chain.get(), (id(self), key, name)))
        try:
            return await self._create_once(descriptor, key, store)
        finally:
            _resolution_chain.reset(token)

    def _store_for(
        self, descriptor: ResourceDescriptor, scope: _ResolutionScope
    ) -> dict[Hashable, Any]:
        """The dict a value of this declaration lives in (see the module docstring)."""
        if not descriptor.cache:
            return scope.memo
        if getattr(descriptor, "scope", "workflow") == "run":
            return scope.run_cache if scope.run_cache is not None else scope.memo
        return self._workflow_cache

    async def _create_once(
        self, descriptor: ResourceDescriptor, key: Hashable, store: dict[Hashable, Any]
    ) -> Any:
        """Call the factory unless another resolution of ``key`` is already doing it."""
        pending_key = (id(store), key, threading.get_ident())
        while True:
            if key in store:
                return store[key]
            pending = self._pending.get(pending_key)
            if pending is None:
                break
            await pending.done.wait()
        pending = _PendingCreation(anyio.Event())
        self._pending[pending_key] = pending
        try:
            value = await descriptor.resolve(self)
            store[key] = value
            if store is self._workflow_cache:
                self.resources[descriptor.name] = value
            return value
        finally:
            del self._pending[pending_key]
            pending.done.set()

    def _check_not_in_chain(self, key: Hashable, name: str) -> None:
        """Catch cycles that only show up at resolution (third-party descriptors)."""
        chain = [(k, n) for owner, k, n in _resolution_chain.get() if owner == id(self)]
        keys = [k for k, _ in chain]
        if key in keys:
            names = [n for _, n in chain[keys.index(key) :]]
            raise ValueError(f"resource cycle detected: {' -> '.join([*names, name])}")

    def _check_acyclic(self, descriptor: ResourceDescriptor, key: Hashable) -> None:
        """Walk the declared dependencies once per key and reject cycles before any call.

        Checking up front (instead of only along the resolving task's chain) matters for
        concurrency: two tasks entering a cycle from different ends would otherwise wait
        for each other forever.
        """
        if key in self._acyclic:
            return
        visited: list[Hashable] = []
        self._walk_dependencies(descriptor, key, [], visited)
        self._acyclic.update(visited)

    def _walk_dependencies(
        self,
        descriptor: ResourceDescriptor,
        key: Hashable,
        path: list[tuple[Hashable, str]],
        visited: list[Hashable],
    ) -> None:
        path_keys = [k for k, _ in path]
        if key in path_keys:
            names = [n for _, n in path[path_keys.index(key) :]]
            raise ValueError(f"resource cycle detected: {' -> '.join([*names, descriptor.name])}")
        if key in self._acyclic or key in visited:
            return
        if descriptor.cache and descriptor.name in self._seeded:
            return
        get_dependencies = getattr(descriptor, "get_dependencies", None)
        dependencies = get_dependencies() if callable(get_dependencies) else []
        path.append((key, descriptor.name))
        for _, dependency, _ in dependencies:
            self._walk_dependencies(dependency, _cache_key(dependency), path, visited)
        path.pop()
        visited.append(key)


def _cache_key(descriptor: ResourceDescriptor) -> Hashable:
    """The declaration-identity key of a descriptor (see the module docstring)."""
    if isinstance(descriptor, (_Resource, _ResourceConfig)):
        return descriptor._cache_key()
    return ("descriptor", _Identity(descriptor))
