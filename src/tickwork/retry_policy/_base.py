"""The retry protocols, the data they exchange, and the helpers of the primitives."""

from __future__ import annotations

import abc
import math
import numbers
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from tickwork.retry_policy._adapters import (
    RetryCall,
    StopCall,
    WaitCall,
    as_retry_call,
    as_stop_call,
    as_wait_call,
    is_tenacity,
)

time_unit_type = int | float | timedelta
"""A duration: seconds as a number, or a ``timedelta``."""

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
    (see ``call_policy``).
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
# Components as tickwork calls them, and the combinators the operators build
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
    seconds = float(value)
    if math.isnan(seconds):
        raise ValueError(f"{name} must be a number of seconds, got nan")
    return seconds


def _check_number(value: int | float, name: str) -> int | float:
    # Kept as given (not converted to float) so that integer powers stay exact, as in
    # tenacity: the delay sequences then match to the last bit.
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if math.isnan(value):
        raise ValueError(f"{name} must be a number, got nan")
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
