"""Fast copy-with-changes for the frozen records of the run state.

``dataclasses.replace`` introspects the class on every call and was the single largest
cost of a reducer tick.  ``evolve`` dispatches to a per-class function generated
once, which passes every field positionally to the constructor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["MISSING", "evolve", "new_record", "register_evolver"]

T = TypeVar("T")

_MISSING: Any = object()
MISSING: Any = _MISSING
"""The default of every parameter of an evolver: "keep this field"."""

new_record = object.__new__
"""``new_record(cls)``: an instance of the slotted record class ``cls`` with no field set.

The hottest constructions (a few per tick) build their record with it and a write per
field instead of ``cls(...)``: on CPython 3.11 a class call with a Python ``__init__``
costs about 900 machine instructions more than the writes themselves.  Such a site
writes every field of the record (the reducer's tests read every slot of what it
builds), and a new field must be written there too."""
_EVOLVERS: dict[type, Callable[..., Any]] = {}


def _make_evolver(cls: type) -> Callable[..., Any]:
    namespace: dict[str, Any] = {"_M": _MISSING, "_C": cls, "_N": new_record}
    if getattr(cls, "__evolve_by_writes__", False):
        # A record whose constructor takes other parameters than its fields gets its
        # copy built without the constructor: every field written (see new_record).
        names = [f.name for f in dataclasses.fields(cls)]
        params = ", ".join(f"{name}=_M" for name in names)
        writes = "".join(f"    n.{name} = o.{name} if {name} is _M else {name}\n" for name in names)
        source = f"def evolve(o, *, {params}):\n    n = _N(_C)\n{writes}    return n\n"
    else:
        # A record whose constructor takes other parameters than its fields may name
        # them, in order, in ``__evolve_fields__`` (each one readable as an attribute).
        names = getattr(cls, "__evolve_fields__", None) or [
            f.name for f in dataclasses.fields(cls) if f.init
        ]
        params = ", ".join(f"{name}=_M" for name in names)
        args = ", ".join(f"o.{name} if {name} is _M else {name}" for name in names)
        source = f"def evolve(o, *, {params}):\n    return _C({args})\n"
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


def register_evolver(cls: type, evolver: Callable[..., Any]) -> None:
    """Make ``evolve`` use ``evolver(obj, **changes)`` for records of ``cls`` (a record
    whose fields are not its constructor's parameters; its parameters default to
    ``MISSING``)."""
    _EVOLVERS[cls] = evolver
