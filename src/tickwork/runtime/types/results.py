"""What one step invocation hands back to the control loop.

A worker turns the step body's outcome into exactly one of these records; exceptions are
data here, never something that crashes the loop.  ``Suspend`` is the signal a step
body unwinds with when it must wait; it lives here, beside the request it carries, so
that code catching it needs nothing above the runtime's types.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Union

__all__ = [
    "CollectOp",
    "Completed",
    "Failed",
    "StepOutcome",
    "Suspend",
    "Suspended",
    "WaiterRequest",
    "WaitingForEvent",
]

CollectDecision = Literal["buffered", "dropped", "released"]


@dataclass(slots=True)
class CollectOp:
    """One ``ctx.collect_events`` call, as the invocation decided it from its view.

    ``needed_of_type`` (how many events of the event's type ``expected`` asks for) and
    ``expected_len`` let the reducer re-check a ``buffered``/``dropped`` decision against
    a buffer that changed meanwhile without re-running the step.
    """

    buffer_id: str
    event: Any
    decision: CollectDecision
    needed_of_type: int
    expected_len: int
    released_count: int = 0


@dataclass(slots=True)
class WaiterRequest:
    """A ``wait_for_event`` call that found no resolved event: register and suspend."""

    waiter_id: str
    event_type: type
    requirements: Mapping[str, Any] | None
    waiter_event: Any
    timeout: float | None
    has_requirements: bool = False


class Suspend(BaseException):
    """Unwinds a step body that must wait for an event (never seen by user code).

    A ``BaseException`` so that a step's ``except Exception`` cannot swallow it.
    """

    def __init__(self, request: WaiterRequest) -> None:
        super().__init__(request.waiter_id)
        self.request = request


WaitingForEvent = Suspend
"""Compatibility name of ``Suspend``, for code that re-raises the pause signal.

Such code (llama-index-core's agents, for one) catches ``Exception`` around a tool call
and re-raises the pause signal if it sees it; ``Suspend`` is not an ``Exception``, so it
passes through such handlers untouched either way.
"""


@dataclass(slots=True)
class Completed:
    """The body returned ``value`` (an event, a list for a fan-out, or ``None``)."""

    value: Any
    sends: int = 0
    collect_ops: tuple[CollectOp, ...] = ()
    deleted_waiters: tuple[str, ...] = ()


@dataclass(slots=True)
class Failed:
    """The body raised; ``retry_delay`` is the policy's decision (``None``: no retry)."""

    exception: BaseException
    retry_delay: float | None
    failed_at: float
    sends: int = 0
    deleted_waiters: tuple[str, ...] = ()


@dataclass(slots=True)
class Suspended:
    """The body awaited an event nobody has sent yet: register a waiter."""

    waiter: WaiterRequest
    sends: int = 0
    collect_ops: tuple[CollectOp, ...] = field(default=())
    deleted_waiters: tuple[str, ...] = ()


StepOutcome = Union[Completed, Failed, Suspended]
