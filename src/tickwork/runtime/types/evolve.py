"""Fast copy-with-changes for the frozen records of the run state.

``dataclasses.replace`` introspects the class on every call and was the single largest
cost of a reducer tick.  ``evolve`` dispatches to a per-class function generated
once, which passes every field positionally to the constructor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["evolve"]

T = TypeVar("T")

_MISSING: Any = object()
_EVOLVERS: dict[type, Callable[..., Any]] = {}


def _make_evolver(cls: type) -> Callable[..., Any]:
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    params = ", ".join(f"{name}=_M" for name in names)
    args = ", ".join(f"o.{name} if {name} is _M else {name}" for name in names)
    source = f"def evolve(o, *, {params}):\n    return _C({args})\n"
    namespace: dict[str, Any] = {"_M": _MISSING, "_C": cls}
    exec(source, namespace)
    evolver: Callable[..., Any] = namespace["evolve"]
    return evolver


def evolve(obj: T, **changes: Any) -> T:
    """A copy of the dataclass ``obj`` with ``changes`` applied (like ``replace``)."""
    cls = type(obj)
    evolver = _EVOLVERS.get(cls)
    if evolver is None:
        evolver = _EVOLVERS[cls] = _make_evolver(cls)
    result: T = evolver(obj, **changes)
    return result
