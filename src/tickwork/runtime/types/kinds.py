"""Which kind of event a class is, answered by a dict lookup.

``isinstance(ev, StopEvent)`` goes through the metaclass of pydantic models whenever
``ev`` is not exactly a ``StopEvent``, and costs several dict lookups; the runtime asks
such questions a few times per event, so it asks these tables, keyed by the event's
class, instead.
"""

from __future__ import annotations

from tickwork.events import Event, InputRequiredEvent, InternalDispatchEvent, StopEvent

__all__ = [
    "IS_EVENT",
    "IS_INPUT_REQUIRED",
    "IS_INTERNAL",
    "IS_STOP",
    "RETURNED",
    "RETURNED_EVENT",
    "RETURNED_INPUT_REQUIRED",
    "RETURNED_LIST",
    "RETURNED_NONE",
    "RETURNED_STOP",
    "ReturnedTable",
    "SubclassTable",
]

_MAX_CLASSES = 4096


class SubclassTable(dict[type, bool]):
    """Class -> whether it is a subclass of ``base``, computed when first asked.

    Bounded: it forgets everything past ``_MAX_CLASSES`` classes, so that a program
    making event classes on the fly does not keep them all alive through it.
    """

    __slots__ = ("base",)

    def __init__(self, base: type) -> None:
        super().__init__()
        self.base = base

    def __missing__(self, cls: type) -> bool:
        if len(self) >= _MAX_CLASSES:
            self.clear()
        answer = self[cls] = issubclass(cls, self.base)
        return answer


IS_EVENT = SubclassTable(Event)
"""``IS_EVENT[type(value)]``: ``value`` is an ``Event``."""
IS_STOP = SubclassTable(StopEvent)
"""``IS_STOP[type(value)]``: ``value`` is a ``StopEvent`` (it ends the run)."""
IS_INPUT_REQUIRED = SubclassTable(InputRequiredEvent)
"""``IS_INPUT_REQUIRED[type(value)]``: ``value`` asks a human for input."""
IS_INTERNAL = SubclassTable(InternalDispatchEvent)
"""``IS_INTERNAL[type(value)]``: ``value`` is one of the runtime's own events."""


RETURNED_EVENT = 0
"""A step returned one event that is none of the kinds below (the usual case)."""
RETURNED_LIST = 1
"""A step returned a ``list`` (or a subclass): a fan-out, or several events."""
RETURNED_STOP = 2
"""A step returned a ``StopEvent``: it ends the run."""
RETURNED_NONE = 3
"""A step returned ``None``: nothing to route."""
RETURNED_INPUT_REQUIRED = 4
"""A step returned an ``InputRequiredEvent``: it is published, then routed."""


class ReturnedTable(dict[type, int]):
    """Class of a step's return value -> its ``RETURNED_*`` kind, computed when first
    asked: one lookup per finished invocation instead of an ``isinstance`` and two
    ``SubclassTable`` lookups.  The kinds are tested in the order the reducer used to
    test them (a list, a stop, ``None``, an input request), so a class that is two of
    them gets the first.  Bounded as ``SubclassTable`` is.
    """

    __slots__ = ()

    def __missing__(self, cls: type) -> int:
        if len(self) >= _MAX_CLASSES:
            self.clear()
        if issubclass(cls, list):
            kind = RETURNED_LIST
        elif issubclass(cls, StopEvent):
            kind = RETURNED_STOP
        elif cls is type(None):
            kind = RETURNED_NONE
        elif issubclass(cls, InputRequiredEvent):
            kind = RETURNED_INPUT_REQUIRED
        else:
            kind = RETURNED_EVENT
        self[cls] = kind
        return kind


RETURNED = ReturnedTable()
"""``RETURNED[type(value)]``: the ``RETURNED_*`` kind of a step's return value."""
