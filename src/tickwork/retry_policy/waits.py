"""Wait strategies: the delay before the next attempt (api.md §12.4).

``n`` is the retry index, from 0.
"""

from __future__ import annotations

import math

from tickwork.retry_policy._base import (
    _check_number,
    _exponential,
    _to_seconds,
    _uniform,
    _WaitStrategyBase,
    time_unit_type,
)

# --------------------------------------------------------------------------------------
# Wait strategies (``n`` is the retry index, from 0)
# --------------------------------------------------------------------------------------


class wait_fixed(_WaitStrategyBase):
    """Always ``wait`` seconds."""

    def __init__(self, wait: time_unit_type) -> None:
        self.wait = _to_seconds(wait, "wait")
        if not 0 <= self.wait < math.inf:
            raise ValueError(
                f"wait_fixed(wait={wait!r}): wait must be a finite number of seconds >= 0"
            )

    def __call__(self, attempts: int, *, seed: int | None = None) -> float:
        return self.wait

    def __repr__(self) -> str:
        return f"wait_fixed({self.wait!r})"


class wait_none(_WaitStrategyBase):
    """No delay: retry at once."""

    def __call__(self, attempts: int, *, seed: int | None = None) -> float:
        return 0.0

    def __repr__(self) -> str:
        return "wait_none()"


class wait_exponential(_WaitStrategyBase):
    """``max(max(0, min), min(multiplier * exp_base**n, max))``.

    With the defaults: 1, 2, 4, 8, ... seconds, capped at 60.
    """

    def __init__(
        self,
        multiplier: int | float = 1.0,
        exp_base: int | float = 2.0,
        max: time_unit_type = 60.0,
        min: time_unit_type = 0.0,
    ) -> None:
        self.multiplier = _check_number(multiplier, "multiplier")
        self.exp_base = _check_number(exp_base, "exp_base")
        self.max = _to_seconds(max, "max")
        self.min = _to_seconds(min, "min")

    def __call__(self, attempts: int, *, seed: int | None = None) -> float:
        # ``max`` and ``min`` are the builtins here; the bounds are read through ``self``.
        delay = _exponential(self.multiplier, self.exp_base, attempts)
        return max(max(0.0, self.min), min(delay, self.max))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(multiplier={self.multiplier!r}, "
            f"exp_base={self.exp_base!r}, max={self.max!r}, min={self.min!r})"
        )


class wait_incrementing(_WaitStrategyBase):
    """``max(0, min(start + increment * n, max))``."""

    def __init__(
        self,
        start: time_unit_type = 0.0,
        increment: time_unit_type = 100.0,
        max: time_unit_type = math.inf,
    ) -> None:
        self.start = _to_seconds(start, "start")
        self.increment = _to_seconds(increment, "increment")
        self.max = _to_seconds(max, "max")

    def __call__(self, attempts: int, *, seed: int | None = None) -> float:
        return max(0.0, min(self.start + self.increment * attempts, self.max))

    def __repr__(self) -> str:
        return (
            f"wait_incrementing(start={self.start!r}, increment={self.increment!r}, "
            f"max={self.max!r})"
        )


class wait_random(_WaitStrategyBase):
    """A uniform draw in ``[min, max]``."""

    def __init__(self, min: time_unit_type = 0.0, max: time_unit_type = 1.0) -> None:
        self.min = _to_seconds(min, "min")
        self.max = _to_seconds(max, "max")

    def __call__(self, attempts: int, *, seed: int | None = None) -> float:
        return _uniform(self.min, self.max, seed)

    def __repr__(self) -> str:
        return f"wait_random(min={self.min!r}, max={self.max!r})"


class wait_exponential_jitter(_WaitStrategyBase):
    """``min(min(initial * exp_base**n, max) + U(0, jitter), max)``: never above ``max``.

    Like tenacity's, the result is also never below 0, even for a negative ``initial``.
    """

    def __init__(
        self,
        initial: float = 1.0,
        exp_base: float = 2.0,
        max: float = 60.0,
        jitter: float = 1.0,
    ) -> None:
        self.initial = _check_number(initial, "initial")
        self.exp_base = _check_number(exp_base, "exp_base")
        self.max = float(_check_number(max, "max"))
        self.jitter = float(_check_number(jitter, "jitter"))

    def __call__(self, attempts: int, *, seed: int | None = None) -> float:
        jitter = _uniform(0.0, self.jitter, seed)
        delay = min(_exponential(self.initial, self.exp_base, attempts), self.max)
        return max(0.0, min(delay + jitter, self.max))

    def __repr__(self) -> str:
        return (
            f"wait_exponential_jitter(initial={self.initial!r}, exp_base={self.exp_base!r}, "
            f"max={self.max!r}, jitter={self.jitter!r})"
        )


class wait_random_exponential(wait_exponential):
    """A uniform draw between ``min`` and ``wait_exponential``'s delay.

    That is ``U(min, max(max(0, min), min(multiplier * exp_base**n, max)))``: the window
    grows exponentially, and the delay is never below ``min``.
    """

    def __call__(self, attempts: int, *, seed: int | None = None) -> float:
        high = super().__call__(attempts, seed=seed)
        return _uniform(self.min, high, seed)


def wait_full_jitter(
    multiplier: int | float = 1.0,
    exp_base: int | float = 2.0,
    max: time_unit_type = 60.0,
    min: time_unit_type = 0.0,
) -> wait_random_exponential:
    """Another name for ``wait_random_exponential`` with the same arguments."""
    return wait_random_exponential(multiplier=multiplier, exp_base=exp_base, max=max, min=min)
