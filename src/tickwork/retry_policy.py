"""Retry policies: when a failed step runs again, and after how long (api.md §12).

A policy is any object with a compatible ``next`` method (:class:`RetryPolicy`).  The usual
way to build one is :func:`retry_policy`, which combines three primitives:

- a :class:`RetryCondition` decides whether an error is worth retrying at all;
- a :class:`WaitStrategy` gives the delay before the next attempt;
- a :class:`StopCondition` decides when to give up.

The three kinds are protocols: any callable of the right shape qualifies, and so do
tenacity's own objects, which the policy and the combinators call with a small stand-in
for tenacity's call state (see :mod:`tickwork._retry_adapters`).

The primitives carry the names, parameter names and formulas of tenacity's, so code written
against tenacity reads the same here.  Two differences matter: they receive plain values
(the error, the retry index, the elapsed time) instead of a call-state object, and random
strategies accept a ``seed``.  The runtime derives that seed from the run id
(:func:`retry_seed`), so a replayed or resumed run computes the same jitter.

Example::

    from tickwork.retry_policy import retry_policy, stop_after_attempt, wait_exponential

    policy = retry_policy(wait=wait_exponential(max=30), stop=stop_after_attempt(5))
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
import inspect
import math
import numbers
import random
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from tickwork._deprecation import warn_once
from tickwork._retry_adapters import (
    RetryCall,
    StopCall,
    WaitCall,
    as_retry_call,
    as_stop_call,
    as_wait_call,
    is_tenacity,
)

__all__ = [
    "RetryPolicy",
    "RetryCondition",
    "WaitStrategy",
    "StopCondition",
    "RetryInfo",
    "time_unit_type",
    "retry_policy",
    "retry_if_exception",
    "retry_if_exception_type",
    "retry_if_not_exception_type",
    "retry_unless_exception_type",
    "retry_if_exception_message",
    "retry_if_not_exception_message",
    "retry_if_exception_cause_type",
    "retry_any",
    "retry_all",
    "retry_always",
    "retry_never",
    "wait_fixed",
    "wait_none",
    "wait_exponential",
    "wait_incrementing",
    "wait_random",
    "wait_exponential_jitter",
    "wait_random_exponential",
    "wait_full_jitter",
    "wait_chain",
    "wait_combine",
    "stop_after_attempt",
    "stop_after_delay",
    "stop_before_delay",
    "stop_any",
    "stop_all",
    "stop_never",
    "ConstantDelayRetryPolicy",
    "ExponentialBackoffRetryPolicy",
]

time_unit_type = int | float | timedelta
"""A duration: seconds as a number, or a :class:`~datetime.timedelta`."""

_ExceptionTypes = type[BaseException] | tuple[type[BaseException], ...]

# ``exp_base ** n`` with an integer base is computed exactly as a Python int, so a huge ``n``
# would allocate a huge number only to be clamped to ``max``.  Past this many bits the
# product cannot be a finite float, so it is treated as an overflow up front.
_OVERFLOW_BITS = 1100


# --------------------------------------------------------------------------------------
# Protocols and data
# --------------------------------------------------------------------------------------


@runtime_checkable
class RetryPolicy(Protocol):
    """Anything with a compatible ``next`` method is a retry policy.

    ``next`` is asked when a step invocation fails and returns the delay in seconds before
    the next attempt, or ``None`` to stop retrying.  ``attempts`` is the number of failures
    so far (1 at the first failure) and ``elapsed_time`` counts from the dispatch of the
    first attempt to this failure.  The runtime passes ``seed`` (for deterministic jitter)
    only when ``next`` declares a parameter of that name, so older policies keep working
    (see :func:`call_policy`).
    """

    def next(
        self, elapsed_time: float, attempts: int, error: Exception, *, seed: int | None = None
    ) -> float | None:
        """The delay before the next attempt, or ``None`` to give up."""
        ...


@dataclass(frozen=True)
class RetryInfo:
    """The retry state of the current step invocation, from ``Context.retry_info()``.

    On the first attempt it is ``RetryInfo(0, 0.0, None, None)``.  On a retry,
    ``retry_number`` counts from 1, ``elapsed_seconds`` from the dispatch of the first
    attempt, ``last_exception`` is the previous attempt's exception and ``last_failed_at``
    the UTC-aware time it failed.
    """

    retry_number: int
    elapsed_seconds: float
    last_exception: Exception | None
    last_failed_at: datetime | None


@runtime_checkable
class RetryCondition(Protocol):
    """Decides whether an error is worth retrying: ``condition(error) -> bool``.

    Any callable of that shape is a retry condition, and so is a tenacity retry object
    (one taking a ``retry_state``): tickwork hands it a call state whose ``outcome`` is
    the failed attempt.  tickwork's own conditions compose: ``a | b`` is
    ``retry_any(a, b)`` and ``a & b`` is ``retry_all(a, b)``, grouping left to right like
    any Python operator; a tenacity condition may stand on either side.
    """

    def __call__(self, error: Any, /) -> bool:
        """Return ``True`` if ``error`` should be retried."""
        ...


@runtime_checkable
class WaitStrategy(Protocol):
    """Gives the delay in seconds before retry ``n`` (counted from 0): ``wait(n) -> float``.

    tickwork calls it as ``wait(n, seed=seed)`` when it declares ``seed`` (random
    strategies then draw from ``random.Random(seed)``, so the same seed gives the same
    delay), and as ``wait(n)`` otherwise.  A tenacity wait object (one taking a
    ``retry_state``) is accepted too; its call state has ``attempt_number = n + 1``.
    tickwork's own strategies compose: ``a + b`` is ``wait_combine(a, b)``, and because
    ``0 + a`` is ``a``, ``sum([a, b, c])`` works too.
    """

    def __call__(self, attempts: Any, /) -> float:
        """Return the delay in seconds before retry ``attempts`` (0-based)."""
        ...


@runtime_checkable
class StopCondition(Protocol):
    """Decides when to give up: ``stop(attempts, elapsed, upcoming_sleep=...) -> bool``.

    ``attempts`` is the number of failures so far, ``elapsed`` the seconds since the first
    attempt was dispatched, and ``upcoming_sleep`` the delay the wait strategy chose (only
    passed when the condition declares it).  A tenacity stop object (one taking a
    ``retry_state``) is accepted too.  tickwork's own conditions compose: ``a | b`` is
    ``stop_any(a, b)`` and ``a & b`` is ``stop_all(a, b)``.
    """

    def __call__(self, attempts: Any, /, *args: Any, **kwargs: Any) -> bool:
        """Return ``True`` to stop retrying."""
        ...


# tickwork's own primitives derive from these bases, which add the operators.  They are
# not part of the protocols, so that a plain function or a tenacity object qualifies.


def _composable(other: object, base: type, kind: str) -> bool:
    """Whether ``other`` may stand beside a ``kind`` primitive in an operator."""
    return isinstance(other, base) or is_tenacity(other, kind)


class _RetryConditionBase(RetryCondition):
    """tickwork's retry conditions: ``|`` and ``&``."""

    def __init__(self) -> None:
        # Without it the protocol's placeholder ``__init__`` would give the primitives
        # without options the signature ``(*args, **kwargs)``.
        pass

    @abc.abstractmethod
    def __call__(self, error: BaseException, /) -> bool:
        """Return ``True`` if ``error`` should be retried."""

    def __or__(self, other: RetryCondition) -> retry_any:
        if not _composable(other, _RetryConditionBase, "retry"):
            return NotImplemented
        return retry_any(self, other)

    def __ror__(self, other: RetryCondition) -> retry_any:
        # tenacity's ``|`` hands over to the right operand's ``__ror__``.
        if not _composable(other, _RetryConditionBase, "retry"):
            return NotImplemented
        return retry_any(other, self)

    def __and__(self, other: RetryCondition) -> retry_all:
        if not _composable(other, _RetryConditionBase, "retry"):
            return NotImplemented
        return retry_all(self, other)

    def __rand__(self, other: RetryCondition) -> retry_all:
        if not _composable(other, _RetryConditionBase, "retry"):
            return NotImplemented
        return retry_all(other, self)


class _WaitStrategyBase(WaitStrategy):
    """tickwork's wait strategies: ``+`` and ``sum()``."""

    def __init__(self) -> None:
        # Without it the protocol's placeholder ``__init__`` would give the primitives
        # without options the signature ``(*args, **kwargs)``.
        pass

    @abc.abstractmethod
    def __call__(self, attempts: int, /, *, seed: int | None = None) -> float:
        """Return the delay in seconds before retry ``attempts`` (0-based)."""

    def __add__(self, other: WaitStrategy) -> wait_combine:
        if not _composable(other, _WaitStrategyBase, "wait"):
            return NotImplemented
        return wait_combine(self, other)

    def __radd__(self, other: int) -> WaitStrategy:
        # ``sum()`` starts from the integer 0.  ``strategy + strategy`` never gets here:
        # the left operand's ``__add__`` handles it.
        if isinstance(other, int) and not isinstance(other, bool) and other == 0:
            return self
        return NotImplemented


class _StopConditionBase(StopCondition):
    """tickwork's stop conditions: ``|`` and ``&``."""

    def __init__(self) -> None:
        # Without it the protocol's placeholder ``__init__`` would give the primitives
        # without options the signature ``(*args, **kwargs)``.
        pass

    @abc.abstractmethod
    def __call__(self, attempts: int, elapsed: float, *, upcoming_sleep: float = 0.0) -> bool:
        """Return ``True`` to stop retrying."""

    def __or__(self, other: StopCondition) -> stop_any:
        if not _composable(other, _StopConditionBase, "stop"):
            return NotImplemented
        return stop_any(self, other)

    def __and__(self, other: StopCondition) -> stop_all:
        if not _composable(other, _StopConditionBase, "stop"):
            return NotImplemented
        return stop_all(self, other)


# --------------------------------------------------------------------------------------
# Argument helpers
# --------------------------------------------------------------------------------------


def _to_seconds(value: time_unit_type, name: str) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a number of seconds or a datetime.timedelta, "
            f"got {type(value).__name__} {value!r}"
        )
    return float(value)


def _check_number(value: int | float, name: str) -> int | float:
    # Kept as given (not converted to float) so that integer powers stay exact, as in
    # tenacity: the delay sequences then match to the last bit.
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    return value


def _check_exception_types(value: _ExceptionTypes, name: str) -> _ExceptionTypes:
    types = value if isinstance(value, tuple) else (value,)
    for item in types:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise TypeError(
                f"{name} must be an exception class or a tuple of exception classes, got {item!r}"
            )
    return value


def _exponential(multiplier: int | float, exp_base: int | float, n: int) -> float:
    """``multiplier * exp_base ** n``, or ``inf`` when that overflows a float."""
    try:
        if isinstance(exp_base, int) and exp_base > 1 and n * math.log2(exp_base) > _OVERFLOW_BITS:
            raise OverflowError
        return float(multiplier * exp_base**n)
    except OverflowError:
        return math.inf


def _uniform(low: float, high: float, seed: int | None) -> float:
    """A uniform draw in ``[low, high]``, from ``random.Random(seed)`` when seeded.

    Unseeded draws use the module-level generator, so ``random.seed()`` controls them.
    The result is clamped because ``low + (high - low) * r`` can round one ulp past
    ``high`` for extreme bounds, and the strategies promise their bounds.
    """
    r = random.Random(seed).random() if seed is not None else random.random()
    value = low + (high - low) * r
    return min(max(value, low), high) if low <= high else value


# --------------------------------------------------------------------------------------
# Retry conditions
# --------------------------------------------------------------------------------------


class retry_if_exception(_RetryConditionBase):
    """Retry when ``predicate(error)`` is true."""

    def __init__(self, predicate: Callable[[BaseException], bool]) -> None:
        if not callable(predicate):
            raise TypeError(f"predicate must be callable, got {predicate!r}")
        self.predicate = predicate

    def __call__(self, error: BaseException) -> bool:
        return bool(self.predicate(error))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.predicate!r})"


class retry_if_exception_type(_RetryConditionBase):
    """Retry when the error is an instance of ``exception_types``."""

    def __init__(self, exception_types: _ExceptionTypes = Exception) -> None:
        self.exception_types = _check_exception_types(exception_types, "exception_types")

    def __call__(self, error: BaseException) -> bool:
        return isinstance(error, self.exception_types)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.exception_types!r})"


class retry_if_not_exception_type(_RetryConditionBase):
    """Retry when the error is **not** an instance of ``exception_types``."""

    def __init__(self, exception_types: _ExceptionTypes = Exception) -> None:
        self.exception_types = _check_exception_types(exception_types, "exception_types")

    def __call__(self, error: BaseException) -> bool:
        return not isinstance(error, self.exception_types)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.exception_types!r})"


class retry_unless_exception_type(retry_if_not_exception_type):
    """The same as :class:`retry_if_not_exception_type`, under tenacity's other name."""


class retry_if_exception_message(_RetryConditionBase):
    """Retry when ``str(error)`` equals ``message``, or when ``match`` is found in it.

    Exactly one of ``message`` and ``match`` must be given, otherwise ``TypeError``.
    ``match`` is applied with ``re.search`` and may be a string or a compiled pattern.
    """

    def __init__(
        self, message: str | None = None, match: str | re.Pattern[str] | None = None
    ) -> None:
        if (message is None) == (match is None):
            raise TypeError(
                f"{type(self).__name__}() takes exactly one of 'message' (the exact text) "
                f"and 'match' (a regular expression), got message={message!r}, match={match!r}"
            )
        self.message = message
        self.match = match
        self._pattern = re.compile(match) if match is not None else None

    def _matches(self, error: BaseException) -> bool:
        text = str(error)
        if self._pattern is not None:
            return self._pattern.search(text) is not None
        return text == self.message

    def __call__(self, error: BaseException) -> bool:
        return self._matches(error)

    def __repr__(self) -> str:
        if self._pattern is not None:
            return f"{type(self).__name__}(match={self.match!r})"
        return f"{type(self).__name__}(message={self.message!r})"


class retry_if_not_exception_message(retry_if_exception_message):
    """Retry when :class:`retry_if_exception_message` with the same arguments would not."""

    def __call__(self, error: BaseException) -> bool:
        return not self._matches(error)


class retry_if_exception_cause_type(_RetryConditionBase):
    """Retry when an exception in the error's ``__cause__`` chain matches.

    Only explicit causes (``raise ... from cause``) are followed, not ``__context__``, and
    the error itself is not checked: combine with :class:`retry_if_exception_type` for that.
    """

    def __init__(self, exception_types: _ExceptionTypes = Exception) -> None:
        self.exception_types = _check_exception_types(exception_types, "exception_types")

    def __call__(self, error: BaseException) -> bool:
        seen: set[int] = set()
        cause = error.__cause__
        # A cause chain can loop when user code assigns ``__cause__`` by hand.
        while cause is not None and id(cause) not in seen:
            if isinstance(cause, self.exception_types):
                return True
            seen.add(id(cause))
            cause = cause.__cause__
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.exception_types!r})"


class retry_any(_RetryConditionBase):
    """Retry when any of ``retries`` says so (``False`` when there are none)."""

    def __init__(self, *retries: RetryCondition) -> None:
        self.retries = retries
        self._calls = tuple(_retry_call(retry, "retry_any()") for retry in retries)

    def __call__(self, error: BaseException) -> bool:
        return any(call(error) for call in self._calls)

    def __repr__(self) -> str:
        return f"retry_any({', '.join(map(repr, self.retries))})"


class retry_all(_RetryConditionBase):
    """Retry when all of ``retries`` say so (``True`` when there are none)."""

    def __init__(self, *retries: RetryCondition) -> None:
        self.retries = retries
        self._calls = tuple(_retry_call(retry, "retry_all()") for retry in retries)

    def __call__(self, error: BaseException) -> bool:
        return all(call(error) for call in self._calls)

    def __repr__(self) -> str:
        return f"retry_all({', '.join(map(repr, self.retries))})"


class retry_always(_RetryConditionBase):
    """Retry every error."""

    def __call__(self, error: BaseException) -> bool:
        return True

    def __repr__(self) -> str:
        return "retry_always()"


class retry_never(_RetryConditionBase):
    """Retry no error."""

    def __call__(self, error: BaseException) -> bool:
        return False

    def __repr__(self) -> str:
        return "retry_never()"


# --------------------------------------------------------------------------------------
# Wait strategies (``n`` is the retry index, from 0)
# --------------------------------------------------------------------------------------


class wait_fixed(_WaitStrategyBase):
    """Always ``wait`` seconds."""

    def __init__(self, wait: time_unit_type) -> None:
        self.wait = _to_seconds(wait, "wait")

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
    """A uniform draw between ``min`` and :class:`wait_exponential`'s delay.

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
    """Another name for :class:`wait_random_exponential` with the same arguments."""
    return wait_random_exponential(multiplier=multiplier, exp_base=exp_base, max=max, min=min)


class wait_chain(_WaitStrategyBase):
    """Use ``strategies[n]`` for retry ``n``, and the last strategy once they run out.

    Each strategy receives the overall retry index ``n``, not its position in the chain.
    """

    def __init__(self, *strategies: WaitStrategy) -> None:
        if not strategies:
            raise ValueError(
                "wait_chain() needs at least one wait strategy, "
                "e.g. wait_chain(wait_fixed(1), wait_fixed(5))"
            )
        self.strategies = strategies
        self._calls = tuple(_wait_call(strategy, "wait_chain()") for strategy in strategies)

    def __call__(self, attempts: int, *, seed: int | None = None) -> float:
        call = self._calls[min(max(attempts, 0), len(self._calls) - 1)]
        return call(attempts, seed=seed)

    def __repr__(self) -> str:
        return f"wait_chain({', '.join(map(repr, self.strategies))})"


class wait_combine(_WaitStrategyBase):
    """The sum of all ``strategies``; each one receives the same ``seed``."""

    def __init__(self, *strategies: WaitStrategy) -> None:
        self.strategies = strategies
        self._calls = tuple(_wait_call(strategy, "wait_combine()") for strategy in strategies)

    def __call__(self, attempts: int, *, seed: int | None = None) -> float:
        return float(sum(call(attempts, seed=seed) for call in self._calls))

    def __repr__(self) -> str:
        return f"wait_combine({', '.join(map(repr, self.strategies))})"


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


class stop_any(_StopConditionBase):
    """Stop when any of ``stops`` says so (``False`` when there are none)."""

    def __init__(self, *stops: StopCondition) -> None:
        self.stops = stops
        self._calls = tuple(_stop_call(stop, "stop_any()") for stop in stops)

    def __call__(self, attempts: int, elapsed: float, *, upcoming_sleep: float = 0.0) -> bool:
        return any(call(attempts, elapsed, upcoming_sleep=upcoming_sleep) for call in self._calls)

    def __repr__(self) -> str:
        return f"stop_any({', '.join(map(repr, self.stops))})"


class stop_all(_StopConditionBase):
    """Stop when all of ``stops`` say so (``True`` when there are none)."""

    def __init__(self, *stops: StopCondition) -> None:
        self.stops = stops
        self._calls = tuple(_stop_call(stop, "stop_all()") for stop in stops)

    def __call__(self, attempts: int, elapsed: float, *, upcoming_sleep: float = 0.0) -> bool:
        return all(call(attempts, elapsed, upcoming_sleep=upcoming_sleep) for call in self._calls)

    def __repr__(self) -> str:
        return f"stop_all({', '.join(map(repr, self.stops))})"


class stop_never(_StopConditionBase):
    """Never stop: retry for as long as the retry condition allows."""

    def __call__(self, attempts: int, elapsed: float, *, upcoming_sleep: float = 0.0) -> bool:
        return False

    def __repr__(self) -> str:
        return "stop_never()"


# --------------------------------------------------------------------------------------
# Components as tickwork calls them
# --------------------------------------------------------------------------------------

_KINDS: tuple[tuple[type, str, str], ...] = (
    (_RetryConditionBase, "retry condition", "retry_if_exception_type(ValueError)"),
    (_WaitStrategyBase, "wait strategy", "wait_fixed(1)"),
    (_StopConditionBase, "stop condition", "stop_after_attempt(3)"),
)


def _check_kind(component: object, expected: int, where: str) -> None:
    """Reject a class, a non-callable, or one of tickwork's primitives of another kind."""
    base, kind, example = _KINDS[expected]
    if isinstance(component, type):
        raise TypeError(
            f"{where} got the class {component.__name__}; pass an instance, e.g. {example}"
        )
    if not callable(component):
        raise TypeError(
            f"{where} needs a {kind} (a callable), got {type(component).__name__} "
            f"{component!r}; e.g. {example}"
        )
    for other_base, other_kind, _ in _KINDS:
        if other_base is not base and isinstance(component, other_base):
            raise TypeError(
                f"{where} needs a {kind}, got the {other_kind} {component!r}; e.g. {example}"
            )


def _retry_call(condition: RetryCondition, where: str) -> RetryCall:
    if isinstance(condition, _RetryConditionBase):
        return condition
    _check_kind(condition, 0, where)
    return as_retry_call(condition)


def _wait_call(strategy: WaitStrategy, where: str) -> WaitCall:
    if isinstance(strategy, _WaitStrategyBase):
        return strategy
    _check_kind(strategy, 1, where)
    return as_wait_call(strategy)


def _stop_call(condition: StopCondition, where: str) -> StopCall:
    if isinstance(condition, _StopConditionBase):
        return condition
    _check_kind(condition, 2, where)
    return as_stop_call(condition)


# --------------------------------------------------------------------------------------
# Composed policies
# --------------------------------------------------------------------------------------


class _ComposedRetryPolicy:
    """The policy :func:`retry_policy` returns; private so that only the factory is API."""

    __slots__ = ("_retry_call", "_stop_call", "_wait_call", "retry", "stop", "wait")

    def __init__(
        self, retry: RetryCondition | None, wait: WaitStrategy, stop: StopCondition
    ) -> None:
        self.retry = retry
        self.wait = wait
        self.stop = stop
        self._retry_call = None if retry is None else _retry_call(retry, "retry_policy(retry=...)")
        self._wait_call = _wait_call(wait, "retry_policy(wait=...)")
        self._stop_call = _stop_call(stop, "retry_policy(stop=...)")

    def next(
        self, elapsed_time: float, attempts: int, error: Exception, *, seed: int | None = None
    ) -> float | None:
        if self._retry_call is not None and not self._retry_call(error):
            return None
        delay = float(self._wait_call(max(attempts - 1, 0), seed=seed))
        if self._stop_call(attempts, elapsed_time, upcoming_sleep=delay):
            return None
        return delay

    def __repr__(self) -> str:
        return f"retry_policy(retry={self.retry!r}, wait={self.wait!r}, stop={self.stop!r})"


def _check_component(value: object, name: str, example: str) -> None:
    if isinstance(value, type):
        raise TypeError(
            f"retry_policy({name}=...) got the class {value.__name__}; "
            f"pass an instance, e.g. {name}={example}"
        )
    if not callable(value):
        raise TypeError(
            f"retry_policy({name}=...) must be callable, got {type(value).__name__} "
            f"{value!r}; e.g. {name}={example}"
        )


def retry_policy(
    retry: RetryCondition | None = None,
    wait: WaitStrategy = wait_fixed(5),
    stop: StopCondition = stop_after_attempt(3),
) -> RetryPolicy:
    """Build a policy from a retry condition, a wait strategy and a stop condition.

    For failure number ``attempts`` (1 at the first), ``next`` returns ``None`` if
    ``retry`` rejects the error; otherwise it computes ``delay = wait(attempts - 1)`` and
    returns ``None`` if ``stop(attempts, elapsed, upcoming_sleep=delay)``, else ``delay``.
    ``retry=None`` retries every exception, and ``stop_after_attempt(3)`` means three
    executions in total.  With no arguments: every exception, three executions, 5 s apart.

    Raises ``TypeError`` when a component is not callable, or is a class instead of an
    instance (``wait=wait_fixed`` instead of ``wait=wait_fixed(1)``).
    """
    if retry is not None:
        _check_component(retry, "retry", "retry_if_exception_type(ValueError)")
    _check_component(wait, "wait", "wait_fixed(1)")
    _check_component(stop, "stop", "stop_after_attempt(3)")
    return _ComposedRetryPolicy(retry, wait, stop)


def ConstantDelayRetryPolicy(maximum_attempts: int = 3, delay: time_unit_type = 5) -> RetryPolicy:
    """Deprecated: use ``retry_policy(wait=wait_fixed(delay), stop=stop_after_attempt(n))``."""
    warn_once(
        "ConstantDelayRetryPolicy",
        "ConstantDelayRetryPolicy is deprecated; use retry_policy(wait=wait_fixed(delay), "
        "stop=stop_after_attempt(maximum_attempts)) from tickwork.retry_policy",
    )
    return retry_policy(wait=wait_fixed(delay), stop=stop_after_attempt(maximum_attempts))


def ExponentialBackoffRetryPolicy(
    maximum_attempts: int = 5,
    initial_delay: float = 1.0,
    multiplier: float = 2.0,
    max_delay: float = 60.0,
    jitter: bool = True,
) -> RetryPolicy:
    """Deprecated: use ``retry_policy`` with ``wait_random_exponential``/``wait_exponential``.

    ``initial_delay`` becomes the strategy's ``multiplier`` and ``multiplier`` its
    ``exp_base``; ``jitter`` chooses the random variant.
    """
    warn_once(
        "ExponentialBackoffRetryPolicy",
        "ExponentialBackoffRetryPolicy is deprecated; use retry_policy("
        "wait=wait_random_exponential(multiplier=initial_delay, exp_base=multiplier, "
        "max=max_delay), stop=stop_after_attempt(maximum_attempts)) from "
        "tickwork.retry_policy (wait_exponential when jitter=False)",
    )
    strategy = wait_random_exponential if jitter else wait_exponential
    wait = strategy(multiplier=initial_delay, exp_base=multiplier, max=max_delay)
    return retry_policy(wait=wait, stop=stop_after_attempt(maximum_attempts))


# --------------------------------------------------------------------------------------
# Runtime helpers (not in ``__all__``: the runtime's, not the user's)
# --------------------------------------------------------------------------------------

# Whether ``next`` declares ``seed``, per policy class.  Weak keys, so a policy class
# defined in a function (or a test) does not outlive its last use.
_accepts_seed_by_class: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def _next_accepts_seed(next_method: Callable[..., object]) -> bool:
    try:
        parameters = inspect.signature(next_method).parameters
    except (TypeError, ValueError):  # no introspectable signature: assume the old form
        return False
    parameter = parameters.get("seed")
    return parameter is not None and parameter.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )


def _policy_accepts_seed(policy: RetryPolicy) -> bool:
    policy_class = type(policy)
    instance_attributes = getattr(policy, "__dict__", None)
    if (instance_attributes is not None and "next" in instance_attributes) or not hasattr(
        policy_class, "next"
    ):
        # ``next`` belongs to this object, not to its class, so the class cache cannot
        # answer for it.
        return _next_accepts_seed(policy.next)
    try:
        return _accepts_seed_by_class[policy_class]
    except KeyError:
        accepts = _next_accepts_seed(policy.next)
        with contextlib.suppress(TypeError):  # a class without weak references: no cache
            _accepts_seed_by_class[policy_class] = accepts
        return accepts


def _check_delay(policy: RetryPolicy, delay: object) -> float | None:
    if delay is None:
        return None
    if isinstance(delay, bool) or not isinstance(delay, numbers.Real):
        raise TypeError(
            f"{type(policy).__name__}.next() returned {delay!r}; a retry policy must return "
            f"a delay in seconds (a number) or None to stop retrying"
        )
    seconds = float(delay)
    if not math.isfinite(seconds):
        raise ValueError(
            f"{type(policy).__name__}.next() returned {delay!r}; a retry policy must return "
            f"a finite delay in seconds, or None to stop retrying"
        )
    # A negative delay means "as soon as possible", as it does for ``sleep()``.
    return max(seconds, 0.0)


def call_policy(
    policy: RetryPolicy, elapsed: float, attempts: int, error: Exception, seed: int | None
) -> float | None:
    """Ask ``policy`` for the retry decision after failure number ``attempts``.

    ``seed`` is passed only if ``policy.next`` declares a parameter named ``seed``
    (checked once per policy class), so policies written before seeds existed keep working.
    Returns the delay in seconds (a negative delay becomes 0.0), or ``None`` to stop.
    Whatever the policy raises propagates unchanged.  A return value that is neither
    ``None`` nor a finite number raises ``TypeError`` or ``ValueError`` naming the policy.
    """
    if _policy_accepts_seed(policy):
        delay: object = policy.next(elapsed, attempts, error, seed=seed)
    else:
        legacy_next: Callable[[float, int, Exception], object] = policy.next
        delay = legacy_next(elapsed, attempts, error)
    return _check_delay(policy, delay)


def retry_seed(run_id: str, step_name: str, attempts: int) -> int:
    """The jitter seed for failure ``attempts`` of ``step_name`` in run ``run_id``.

    ``int(sha256(f"{run_id}:{step_name}:{attempts}").hexdigest(), 16) & 0xFFFFFFFF``, so
    a replay or resume of the run draws the same delays.
    """
    digest = hashlib.sha256(f"{run_id}:{step_name}:{attempts}".encode()).hexdigest()
    return int(digest, 16) & 0xFFFFFFFF
