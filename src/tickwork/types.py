"""Public type aliases and records: run results, journal records, replay results."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union

from tickwork.events import StopEvent

if TYPE_CHECKING:
    from tickwork.runtime.types.state import RunState

__all__ = ["ExitCommand", "JournalRecord", "ReplayResult", "RunResultT", "StopEventT"]

StopEventT = TypeVar("StopEventT", bound=StopEvent)
RunResultT = Union[StopEventT, Any]


@dataclass(frozen=True)
class JournalRecord:
    """One processed input of a journaled run: ``seq`` and its JSON-compatible data."""

    seq: int
    data: dict[str, Any]


@dataclass(frozen=True)
class ExitCommand:
    """How a replayed run ended: ``complete``, ``fail`` or ``halt`` (cancel/timeout)."""

    kind: Literal["complete", "fail", "halt"]
    result: StopEvent | None = None
    step_name: str | None = None
    exception: BaseException | None = None


@dataclass(frozen=True)
class ReplayResult:
    """The state after a replay and the exit command of the record that ended the run."""

    state: RunState
    exit_command: ExitCommand | None
