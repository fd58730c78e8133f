"""Helpers shared by the reducer tests: command summaries and structural fingerprints.

``fingerprint`` turns a run state (or any command/tick) into nested tuples of plain
values, so two states can be compared by *content* even when they hold different
exception objects or persistent containers with different internal shapes.  It is also
how the purity tests detect a reducer that mutated its input.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from tickwork.runtime.types.commands import (
    CancelWorker,
    CompleteRun,
    FailWorkflow,
    Halt,
    PublishEvent,
    PublishStepState,
    ReportDropped,
    RunWorker,
    ScheduleIdleCheck,
    ScheduleTimeout,
    ScheduleWaiterTimeout,
    ScheduleWakeup,
)
from tickwork.runtime.types.persistent import PList, PMap, PQueue
from tickwork.runtime.types.slots import SlotPool

__all__ = ["fingerprint", "summary"]


def _sorted(items: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(sorted(items, key=repr))


def fingerprint(obj: Any) -> Any:
    """A hashable-free, order-stable description of ``obj``'s content."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, type):
        return ("type", obj.__module__, obj.__qualname__)
    if isinstance(obj, enum.Enum):
        return ("enum", type(obj).__qualname__, obj.name)
    if isinstance(obj, BaseException):
        return ("exc", type(obj).__qualname__, tuple(repr(a) for a in obj.args))
    if isinstance(obj, datetime):
        return ("datetime", obj.isoformat())
    if isinstance(obj, PQueue):
        return ("PQueue", tuple(fingerprint(x) for x in obj))
    if isinstance(obj, PList):
        return ("PList", tuple(fingerprint(x) for x in obj))
    if isinstance(obj, PMap):
        return ("PMap", _sorted((fingerprint(k), fingerprint(v)) for k, v in obj.items()))
    if isinstance(obj, SlotPool):  # its content; ``acquired``/``released`` are caches
        return ("SlotPool", obj.busy, obj._high, fingerprint(obj._free))
    if isinstance(obj, BaseModel):
        private = obj.__pydantic_private__ or {}
        kept = {k: v for k, v in private.items() if v is not None and v != {}}
        return (
            "model",
            type(obj).__module__,
            type(obj).__qualname__,
            fingerprint(dict(obj.__dict__)),
            fingerprint(kept),
        )
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return (
            "record",
            type(obj).__qualname__,
            tuple(
                (f.name, fingerprint(getattr(obj, f.name)))
                for f in dataclasses.fields(obj)
                if f.compare
            ),
        )
    if isinstance(obj, Mapping):
        return ("map", _sorted((fingerprint(k), fingerprint(v)) for k, v in obj.items()))
    if isinstance(obj, (set, frozenset)):
        return ("set", _sorted(fingerprint(x) for x in obj))
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, tuple(fingerprint(x) for x in obj))
    attributes = _attributes(obj)
    if attributes is not None:  # a plain (slotted) value class of the state
        return ("object", type(obj).__qualname__, fingerprint(attributes))
    raise TypeError(f"cannot fingerprint {type(obj).__qualname__}")


def _attributes(obj: Any) -> dict[str, Any] | None:
    """The instance attributes of ``obj`` (``__slots__`` and ``__dict__``), if any."""
    names: list[str] = []
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        names.extend([slots] if isinstance(slots, str) else slots)
    skip = ("__dict__", "__weakref__")
    found = {n: getattr(obj, n) for n in names if n not in skip and hasattr(obj, n)}
    if hasattr(obj, "__dict__"):
        found.update(vars(obj))
    return found if (names or hasattr(obj, "__dict__")) else None


def summary(commands: Iterable[Any]) -> list[tuple[Any, ...]]:
    """Commands as short tuples that keep their type, order and the fields that matter.

    * ``PublishStepState`` -> ``(state, step, worker_id)``
    * ``RunWorker`` -> ``("running", step, worker_id)`` (the RUNNING state it publishes),
      then ``("run", step, work_item_id, worker_id)``
    * the others -> their tag and fields (exceptions of ``Halt`` by type).
    """
    out: list[tuple[Any, ...]] = []
    for c in commands:
        if isinstance(c, PublishStepState):
            out.append((c.state, c.step, c.worker_id))
        elif isinstance(c, RunWorker):
            inv = c.invocation
            # A RunWorker also publishes the RUNNING state: listed as its own entry.
            out.append(("running", inv.step, str(inv.worker_id)))
            out.append(("run", inv.step, inv.item.work_item_id, inv.worker_id))
        elif isinstance(c, CancelWorker):
            out.append(("cancel", c.invocation_id))
        elif isinstance(c, PublishEvent):
            out.append(("publish", c.event))
        elif isinstance(c, CompleteRun):
            out.append(("complete", c.stop_event))
        elif isinstance(c, FailWorkflow):
            out.append(("fail", c.step_name, c.exception, c.attempts, c.elapsed_seconds))
        elif isinstance(c, Halt):
            out.append(("halt", c.reason, type(c.exception), c.terminal_event))
        elif isinstance(c, ScheduleWakeup):
            out.append(("wakeup", c.due_at, c.step))
        elif isinstance(c, ScheduleTimeout):
            out.append(("timeout", c.due_at))
        elif isinstance(c, ScheduleWaiterTimeout):
            out.append(("waiter_timeout", c.due_at, c.step, c.waiter_id))
        elif isinstance(c, ScheduleIdleCheck):
            out.append(("idle_check",))
        elif isinstance(c, ReportDropped):
            out.append(("dropped", c.event_type, c.producer))
        else:  # pragma: no cover - a new command type must be added here
            raise AssertionError(f"unknown command {c!r}")
    return out
