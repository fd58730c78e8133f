"""Stop conditions: when to give up (api.md §12.5)."""

from __future__ import annotations

from tickwork.retry_policy._base import (
    _StopConditionBase,
    _to_seconds,
    time_unit_type,
)

# --------------------------------------------------------------------------------------
# Stop conditions
# --------------------------------------------------------------------------------------


class stop_after_attempt(_StopConditionBase):
    """Stop once ``attempts >= max_attempt_number``: that many executions in total."""

    def __init__(self, max_attempt_number: int) -> None:
        self.max_attempt_number = max_attempt_number

    def __call__(self, attempts: int, elapsed: float, *, upcoming_sleep: float = 0.0) -> bool:
        return attempts >= self.max_attempt_number

    def __repr__(self) -> str:
        return f"stop_after_attempt({self.max_attempt_number!r})"


class stop_after_delay(_StopConditionBase):
    """Stop once ``elapsed >= max_delay``."""

    def __init__(self, max_delay: time_unit_type) -> None:
        self.max_delay = _to_seconds(max_delay, "max_delay")

    def __call__(self, attempts: int, elapsed: float, *, upcoming_sleep: float = 0.0) -> bool:
        return elapsed >= self.max_delay

    def __repr__(self) -> str:
        return f"stop_after_delay({self.max_delay!r})"


class stop_before_delay(_StopConditionBase):
    """Stop when the next attempt would start at or after ``max_delay``.

    That is ``elapsed + upcoming_sleep >= max_delay``.
    """

    def __init__(self, max_delay: time_unit_type) -> None:
        self.max_delay = _to_seconds(max_delay, "max_delay")

    def __call__(self, attempts: int, elapsed: float, *, upcoming_sleep: float = 0.0) -> bool:
        return elapsed + upcoming_sleep >= self.max_delay

    def __repr__(self) -> str:
        return f"stop_before_delay({self.max_delay!r})"


class stop_never(_StopConditionBase):
    """Never stop: retry for as long as the retry condition allows."""

    def __call__(self, attempts: int, elapsed: float, *, upcoming_sleep: float = 0.0) -> bool:
        return False

    def __repr__(self) -> str:
        return "stop_never()"
