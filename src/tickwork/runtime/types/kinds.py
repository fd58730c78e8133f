"""Which kind of event a class is, answered by a dict lookup.

``isinstance(ev, StopEvent)`` goes through the metaclass of pydantic models whenever
``ev`` is not exactly a ``StopEvent``, and costs several dict lookups; the runtime asks
such questions a few times per event, so it asks these tables, keyed by the event's
class, instead.
"""

from __future__ import annotations

from tickwork.events import Event, InputRequiredEvent, InternalDispatchEvent, StopEvent

__all__ = ["IS_EVENT", "IS_INPUT_REQUIRED", "IS_INTERNAL", "IS_STOP", "SubclassTable"]

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
