"""tickwork: an embeddable, event-driven workflow runtime driven by a pure reducer.

The event classes are imported with the package; ``Workflow``, ``Context``, ``step`` and
``catch_error`` on first use (PEP 562), together with the runtime they need, so that
``import tickwork`` stays cheap for code that only declares events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tickwork._lazy import lazy_exports
from tickwork._version import __version__ as __version__
from tickwork.events import (
    Event,
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
)

if TYPE_CHECKING:
    from tickwork.context.context import Context as Context
    from tickwork.decorators import catch_error as catch_error
    from tickwork.decorators import step as step
    from tickwork.workflow import Workflow as Workflow

__all__ = [
    "Context",
    "Event",
    "HumanResponseEvent",
    "InputRequiredEvent",
    "StartEvent",
    "StopEvent",
    "Workflow",
    "catch_error",
    "step",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "Context": "tickwork.context.context",
        "Workflow": "tickwork.workflow",
        "catch_error": "tickwork.decorators",
        "step": "tickwork.decorators",
    },
)[0]


def __dir__() -> list[str]:
    """The public names only: ``dir(tickwork)`` and completion do not offer the
    submodules imported above, nor ``annotations``."""
    return sorted([*__all__, "__version__"])
