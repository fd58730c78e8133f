"""Ticks: the inputs of the reducer.

Each tick is a small immutable record stamped (``stamped_at``, wall-clock epoch seconds)
by the runner when it is created.  Everything time-dependent the reducer decides comes
from these stamps, so folding the same ticks always gives the same state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

from tickwork.runtime.types.persistent import EMPTY_MAPPING
from tickwork.runtime.types.results import StepOutcome
from tickwork.runtime.types.step_id import EmissionKey

__all__ = [
    "AddEvent",
    "CancelRun",
    "IdleCheck",
    "PublishEvent",
    "SessionStart",
    "StepResult",
    "Tick",
    "Timeout",
    "WaiterTimeout",
    "Wakeup",
]


@dataclass(slots=True)
class SessionStart:
    """A run starts or resumes in this process: rewind in-flight work, arm the timers."""

    stamped_at: float
    run_id: str
    start_event: Any = None


@dataclass(slots=True)
class AddEvent:
    """An event enters the run: from the caller, or sent by a step (``emission_key`` set)."""

    stamped_at: float
    event: Any
    target_step: str | None = None
    emission_key: EmissionKey | None = None
    source_step: str | None = None
    recovery_counts: Mapping[str, int] = EMPTY_MAPPING


@dataclass(slots=True)
class StepResult:
    """An invocation finished: its outcome, with any retry decision already taken."""

    stamped_at: float
    step: str
    invocation_id: str
    outcome: StepOutcome


@dataclass(slots=True)
class PublishEvent:
    """A step (or the caller) wrote an event to the run's stream."""

    stamped_at: float
    event: Any
    invocation_id: str | None = None


@dataclass(slots=True)
class CancelRun:
    """The caller asked for a graceful cancel."""

    stamped_at: float


@dataclass(slots=True)
class Timeout:
    """The run's alive-time timer fired."""

    stamped_at: float


@dataclass(slots=True)
class Wakeup:
    """A delayed retry of ``step`` is due."""

    stamped_at: float
    step: str


@dataclass(slots=True)
class WaiterTimeout:
    """The alive-time budget of waiter ``waiter_id`` of ``step`` may have run out."""

    stamped_at: float
    step: str
    waiter_id: str


@dataclass(slots=True)
class IdleCheck:
    """Every pending input was processed after the run became quiescent."""

    stamped_at: float


Tick = Union[
    SessionStart,
    AddEvent,
    StepResult,
    PublishEvent,
    CancelRun,
    Timeout,
    Wakeup,
    WaiterTimeout,
    IdleCheck,
]
