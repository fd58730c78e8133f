"""tickwork: an embeddable, event-driven workflow runtime driven by a pure reducer."""

from __future__ import annotations

from tickwork.events import (
    Event,
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
)

__version__ = "0.1.0"

__all__ = [
    "Event",
    "HumanResponseEvent",
    "InputRequiredEvent",
    "StartEvent",
    "StopEvent",
]
