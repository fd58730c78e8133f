"""tickwork: an embeddable, event-driven workflow runtime driven by a pure reducer."""

from __future__ import annotations

from tickwork._version import __version__ as __version__
from tickwork.context.context import Context
from tickwork.decorators import catch_error, step
from tickwork.events import (
    Event,
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
)
from tickwork.workflow import Workflow

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


def __dir__() -> list[str]:
    """The public names only: ``dir(tickwork)`` and completion do not offer the
    submodules imported above, nor ``annotations``."""
    return sorted([*__all__, "__version__"])
