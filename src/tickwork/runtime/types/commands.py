"""Commands: the effects the reducer asks the runner to carry out, in order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Union

from tickwork.events import WorkflowFailedEvent
from tickwork.runtime.types.state import Invocation

__all__ = [
    "CancelWorker",
    "Command",
    "CompleteRun",
    "FailWorkflow",
    "Halt",
    "PublishEvent",
    "PublishStepState",
    "ReportDropped",
    "RunWorker",
    "ScheduleIdleCheck",
    "ScheduleTimeout",
    "ScheduleWaiterTimeout",
    "ScheduleWakeup",
    "terminal_event",
]


@dataclass(slots=True)
class RunWorker:
    """Start an invocation of a step in a worker slot, and publish its RUNNING state.

    The record itself goes to the stream and stands for the ``StepStateChanged``
    (RUNNING) event, so dispatching a step costs one command, not two.
    """

    invocation: Invocation


@dataclass(slots=True)
class CancelWorker:
    """Cancel a running invocation; its result will be discarded."""

    invocation_id: str


@dataclass(slots=True)
class PublishEvent:
    """Append an event to the run's stream."""

    event: Any


@dataclass(slots=True)
class PublishStepState:
    """Append a ``StepStateChanged`` to the stream.

    Kept as a light record and turned into the pydantic event only when a consumer reads
    it, because most runs never look at internal events.
    """

    step: str
    state: Literal["preparing", "not_running"]
    worker_id: str
    input_type: type
    output_type: type | None = None
    has_output: bool = False
    event: Any = None


@dataclass(slots=True)
class ReportDropped:
    """Log that an event reached no step and no waiter, and was dropped (api.md §19.1).

    ``producer`` is the step that returned or sent it (``None``: the caller).
    """

    event_type: str
    producer: str | None


@dataclass(slots=True)
class CompleteRun:
    """The run ended with ``stop_event``: publish it last and deliver the result."""

    stop_event: Any


@dataclass(slots=True)
class FailWorkflow:
    """The run failed: publish ``WorkflowFailedEvent`` and raise ``exception``."""

    step_name: str
    exception: BaseException
    attempts: int | None = None
    elapsed_seconds: float | None = None


@dataclass(slots=True)
class Halt:
    """The run stopped without a result: a graceful cancel or a timeout."""

    reason: Literal["cancel", "timeout"]
    exception: BaseException
    terminal_event: Any


@dataclass(slots=True)
class ScheduleWakeup:
    """Deliver a ``Wakeup`` for ``step`` at ``due_at`` (a delayed retry)."""

    due_at: float
    step: str


@dataclass(slots=True)
class ScheduleTimeout:
    """Deliver a ``Timeout`` at ``due_at``."""

    due_at: float


@dataclass(slots=True)
class ScheduleWaiterTimeout:
    """Deliver a ``WaiterTimeout`` for a waiter at ``due_at``."""

    due_at: float
    step: str
    waiter_id: str


@dataclass(slots=True)
class ScheduleIdleCheck:
    """Deliver an ``IdleCheck`` once every pending input has been processed."""


Command = Union[
    RunWorker,
    CancelWorker,
    PublishEvent,
    PublishStepState,
    CompleteRun,
    FailWorkflow,
    Halt,
    ScheduleWakeup,
    ScheduleTimeout,
    ScheduleWaiterTimeout,
    ScheduleIdleCheck,
    ReportDropped,
]


def terminal_event(command: CompleteRun | FailWorkflow | Halt) -> Any:
    """The event a terminal command publishes last: the StopEvent, a
    ``WorkflowFailedEvent`` built from the failure, or the halt's terminal event."""
    if isinstance(command, CompleteRun):
        return command.stop_event
    if isinstance(command, Halt):
        return command.terminal_event
    return WorkflowFailedEvent(
        step_name=command.step_name,
        exception=command.exception,
        attempts=command.attempts,
        elapsed_seconds=command.elapsed_seconds,
    )
