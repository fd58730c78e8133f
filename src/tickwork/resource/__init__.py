"""Resources: values a step (or another resource) declares and tickwork provides (api.md §14).

A step declares ``db: Annotated[Database, Resource(get_db)]`` or
``cfg: Annotated[Settings, ResourceConfig("settings.json")]``; the runtime resolves the
declarations right before every invocation through the workflow instance's
``ResourceManager`` and passes the values as keyword arguments.

Caching follows the identity of the declaration, never its name:

* ``Resource(f)`` is keyed by the factory object ``f`` and its caching mode
  ``(cache, scope)``, so two different lambdas never collide while repeated
  ``Resource(get_db)`` declarations share one value;
* ``ResourceConfig`` is keyed by (absolute file, selector, model class);
* a third-party ``ResourceDescriptor`` is keyed by its own identity.

Where a value lives depends on the declaration's mode:

* ``cache=True, scope="workflow"`` and every ``ResourceConfig``: in the manager itself,
  i.e. one value per Workflow instance, shared by all its runs;
* ``cache=True, scope="run"``: in a *run cache*, a plain ``dict`` the runtime creates for
  each run and drops when the run ends (see below). Without a run cache -- e.g. a direct
  ``manager.get()`` or ``validate(validate_resources=True)`` -- the value lives only as
  long as the current resolution scope, like a one-off run;
* ``cache=False``: in the memo of the current *resolution scope*, so all references to one
  factory within one invocation's resolution (nested dependencies included) share a value.

How the runtime uses this module
--------------------------------
For each invocation, in the invocation's task and right before the body::

    values = await manager.resolve_invocation(step_config.resources, run_cache=run_cache)
    # -> {"db": <Database>, "cfg": <Settings>}, keyed by parameter name

where ``run_cache`` is a ``dict`` created once per run (``{}``) and dropped when the run
ends.  This is shorthand for::

    with manager.resolution_scope(run_cache=run_cache):
        values = {d.name: await manager.get(d.resource) for d in step_config.resources}

``get(descriptor, run_cache=None)`` also accepts the run cache directly.  Nested scopes
inherit the run cache of the enclosing scope unless they pass their own.

Concurrency: concurrent resolutions of one cached key (in one thread) call the factory
once; the others wait for it with an anyio event, so this works on asyncio and trio.  A
factory that raises, or whose resolution is cancelled, caches nothing and a waiting
resolution then tries again itself.  Sync factories run on the event-loop thread, so
blocking I/O belongs in ``async`` factories.

Cycles (``get_a -> get_b -> get_a``) raise ``ValueError`` before any factory is called.
"""

from __future__ import annotations

from tickwork.resource.declarations import (
    Resource,
    ResourceConfig,
    ResourceDefinition,
    ResourceDescriptor,
    _Resource,
    _ResourceConfig,
)
from tickwork.resource.manager import ResourceManager

__all__ = [
    "Resource",
    "ResourceConfig",
    "ResourceDefinition",
    "ResourceDescriptor",
    "ResourceManager",
    "_Resource",
    "_ResourceConfig",
]
