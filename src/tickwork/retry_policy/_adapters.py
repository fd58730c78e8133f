"""Calling every accepted shape of retry primitive the one way tickwork calls them.

tickwork calls a retry condition as ``retry(error)``, a wait strategy as
``wait(n, seed=seed)`` (``n`` counts retries from 0) and a stop condition as
``stop(attempts, elapsed, upcoming_sleep=delay)``.  The protocols of
``tickwork.retry_policy`` also admit two other shapes:

- tenacity's objects (and any callable whose single parameter is named ``retry_state``),
  which read a ``RetryCallState``: they get a ``CallState`` holding what tickwork
  knows at that call;
- waits without a ``seed`` parameter and stops without an ``upcoming_sleep`` parameter,
  which are called without that argument.

Each function below looks at a component once, when a policy or a combinator is built,
and returns a callable of tickwork's shape: the component itself when it already has that
shape, so the usual case costs nothing per call.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, Protocol, cast

__all__ = [
    "CallState",
    "RetryCall",
    "StopCall",
    "WaitCall",
    "as_retry_call",
    "as_stop_call",
    "as_wait_call",
    "is_tenacity",
]

RetryCall = Callable[[BaseException], bool]


class WaitCall(Protocol):
    """A wait strategy as tickwork calls it."""

    def __call__(self, attempts: int, /, *, seed: int | None = None) -> float:
        """The delay before retry ``attempts`` (0-based)."""
        ...


class StopCall(Protocol):
    """A stop condition as tickwork calls it."""

    def __call__(self, attempts: int, elapsed: float, *, upcoming_sleep: float = 0.0) -> bool:
        """Whether to give up."""
        ...


class _FailedOutcome:
    """A failed attempt, presented the way tenacity's ``Future`` presents one."""

    __slots__ = ("_error",)
    failed = True

    def __init__(self, error: BaseException) -> None:
        self._error = error

    def exception(self) -> BaseException:
        """The error of the attempt."""
        return self._error

    def result(self) -> NoReturn:
        """Re-raise the error, as the result of a failed attempt does."""
        raise self._error


class CallState:
    """The part of tenacity's ``RetryCallState`` that its conditions read.

    Only what tickwork knows at the call is set: ``outcome`` for a retry condition,
    ``attempt_number`` (tenacity counts from 1) for a wait strategy, and
    ``attempt_number``, ``seconds_since_start`` and ``upcoming_sleep`` for a stop
    condition.  Reading anything else raises ``AttributeError`` instead of returning a
    made-up value.
    """

    __slots__ = ("attempt_number", "outcome", "outcome_timestamp", "start_time", "upcoming_sleep")

    attempt_number: int
    outcome: _FailedOutcome
    outcome_timestamp: float
    start_time: float
    upcoming_sleep: float

    @property
    def seconds_since_start(self) -> float:
        """Seconds from the first attempt's dispatch to this failure."""
        return self.outcome_timestamp - self.start_time


def is_tenacity(component: object, kind: str) -> bool:
    """Whether ``component`` is an instance of tenacity's ``<kind>_base`` class.

    ``kind`` is ``"retry"``, ``"wait"`` or ``"stop"``.  Checked by name, so tickwork does
    not import tenacity.
    """
    return any(
        cls.__name__ == f"{kind}_base" and cls.__module__ == f"tenacity.{kind}"
        for cls in type(component).__mro__
    )


def _parameters(component: object) -> Mapping[str, inspect.Parameter] | None:
    try:
        return inspect.signature(cast(Callable[..., Any], component)).parameters
    except (TypeError, ValueError):  # no introspectable signature: assume tickwork's shape
        return None


def _takes_call_state(parameters: Mapping[str, inspect.Parameter] | None) -> bool:
    return parameters is not None and list(parameters) == ["retry_state"]


def _accepts_keyword(parameters: Mapping[str, inspect.Parameter] | None, name: str) -> bool:
    if parameters is None:
        return True
    parameter = parameters.get(name)
    if parameter is not None and parameter.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    ):
        return True
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def as_retry_call(condition: Callable[..., Any]) -> RetryCall:
    """``condition`` as ``retry(error) -> bool``."""
    if not _takes_call_state(_parameters(condition)):
        return cast(RetryCall, condition)

    def retry_with_call_state(error: BaseException) -> bool:
        state = CallState()
        state.outcome = _FailedOutcome(error)
        return bool(condition(state))

    return retry_with_call_state


def as_wait_call(strategy: Callable[..., Any]) -> WaitCall:
    """``strategy`` as ``wait(n, seed=seed) -> float``."""
    parameters = _parameters(strategy)
    if _takes_call_state(parameters):

        def wait_with_call_state(attempts: int, *, seed: int | None = None) -> float:
            state = CallState()
            state.attempt_number = attempts + 1
            return float(strategy(state))

        return wait_with_call_state
    if _accepts_keyword(parameters, "seed"):
        return cast(WaitCall, strategy)

    def wait_without_seed(attempts: int, *, seed: int | None = None) -> float:
        return float(strategy(attempts))

    return wait_without_seed


def as_stop_call(condition: Callable[..., Any]) -> StopCall:
    """``condition`` as ``stop(attempts, elapsed, upcoming_sleep=delay) -> bool``."""
    parameters = _parameters(condition)
    if _takes_call_state(parameters):

        def stop_with_call_state(
            attempts: int, elapsed: float, *, upcoming_sleep: float = 0.0
        ) -> bool:
            state = CallState()
            state.attempt_number = attempts
            state.start_time = 0.0
            state.outcome_timestamp = elapsed
            state.upcoming_sleep = upcoming_sleep
            return bool(condition(state))

        return stop_with_call_state
    if _accepts_keyword(parameters, "upcoming_sleep"):
        return cast(StopCall, condition)

    def stop_without_upcoming_sleep(
        attempts: int, elapsed: float, *, upcoming_sleep: float = 0.0
    ) -> bool:
        return bool(condition(attempts, elapsed))

    return stop_without_upcoming_sleep
