"""Tests for ``tickwork.retry_policy`` (api.md §12 and the runtime helpers of §22.2)."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import itertools
import math
import random
import re
import warnings
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tickwork.retry_policy as rp
from tickwork.retry_policy import (
    ConstantDelayRetryPolicy,
    ExponentialBackoffRetryPolicy,
    RetryCondition,
    RetryInfo,
    RetryPolicy,
    StopCondition,
    WaitStrategy,
    call_policy,
    retry_all,
    retry_always,
    retry_any,
    retry_if_exception,
    retry_if_exception_cause_type,
    retry_if_exception_message,
    retry_if_exception_type,
    retry_if_not_exception_message,
    retry_if_not_exception_type,
    retry_never,
    retry_policy,
    retry_seed,
    retry_unless_exception_type,
    stop_after_attempt,
    stop_after_delay,
    stop_all,
    stop_any,
    stop_before_delay,
    stop_never,
    time_unit_type,
    wait_chain,
    wait_combine,
    wait_exponential,
    wait_exponential_jitter,
    wait_fixed,
    wait_full_jitter,
    wait_incrementing,
    wait_none,
    wait_random,
    wait_random_exponential,
)

ERROR = RuntimeError("boom")

seeds = st.integers(min_value=0, max_value=2**32 - 1)
retry_indexes = st.integers(min_value=0, max_value=2000)
small_floats = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)


def _caused_by(*chain: BaseException) -> BaseException:
    """Link ``chain`` so that each exception is the ``__cause__`` of the one before it."""
    for error, cause in itertools.pairwise(chain):
        error.__cause__ = cause
    return chain[0]


class _RecordingWait(WaitStrategy):
    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.calls: list[tuple[int, int | None]] = []

    def __call__(self, attempts: int, *, seed: int | None = None) -> float:
        self.calls.append((attempts, seed))
        return self.delay


class _RecordingStop(StopCondition):
    def __init__(self, result: bool) -> None:
        self.result = result
        self.calls: list[tuple[int, float, float]] = []

    def __call__(self, attempts: int, elapsed: float, *, upcoming_sleep: float = 0.0) -> bool:
        self.calls.append((attempts, elapsed, upcoming_sleep))
        return self.result


# --------------------------------------------------------------------------------------
# Module surface
# --------------------------------------------------------------------------------------


def test_public_names() -> None:
    expected = {
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
    }
    assert set(rp.__all__) == expected
    assert len(rp.__all__) == len(expected)
    for name in expected:
        assert hasattr(rp, name)


def test_no_composable_retry_policy_name() -> None:
    assert not hasattr(rp, "ComposableRetryPolicy")
    policy_class = type(retry_policy())
    assert policy_class.__name__.startswith("_")
    assert policy_class.__name__ not in rp.__all__


def test_time_unit_type() -> None:
    assert time_unit_type == int | float | timedelta


def test_deprecated_factories_are_functions() -> None:
    assert inspect.isfunction(ConstantDelayRetryPolicy)
    assert inspect.isfunction(ExponentialBackoffRetryPolicy)
    assert inspect.isfunction(wait_full_jitter)


@pytest.mark.parametrize(
    ("func", "expected"),
    [
        (retry_policy, "(retry=None, wait=wait_fixed(5.0), stop=stop_after_attempt(3))"),
        (ConstantDelayRetryPolicy, "(maximum_attempts=3, delay=5)"),
        (
            ExponentialBackoffRetryPolicy,
            "(maximum_attempts=5, initial_delay=1.0, multiplier=2.0, max_delay=60.0, jitter=True)",
        ),
        (wait_exponential, "(multiplier=1.0, exp_base=2.0, max=60.0, min=0.0)"),
        (wait_incrementing, "(start=0.0, increment=100.0, max=inf)"),
        (wait_random, "(min=0.0, max=1.0)"),
        (wait_exponential_jitter, "(initial=1.0, exp_base=2.0, max=60.0, jitter=1.0)"),
        (wait_random_exponential, "(multiplier=1.0, exp_base=2.0, max=60.0, min=0.0)"),
        (wait_full_jitter, "(multiplier=1.0, exp_base=2.0, max=60.0, min=0.0)"),
        (retry_if_exception_message, "(message=None, match=None)"),
        (retry_if_not_exception_message, "(message=None, match=None)"),
        (retry_if_exception_type, "(exception_types=<class 'Exception'>)"),
        (retry_if_not_exception_type, "(exception_types=<class 'Exception'>)"),
        (retry_unless_exception_type, "(exception_types=<class 'Exception'>)"),
        (retry_if_exception_cause_type, "(exception_types=<class 'Exception'>)"),
        (wait_chain, "(*strategies)"),
        (wait_combine, "(*strategies)"),
        (retry_any, "(*retries)"),
        (retry_all, "(*retries)"),
        (stop_any, "(*stops)"),
        (stop_all, "(*stops)"),
        (retry_always, "()"),
        (retry_never, "()"),
        (stop_never, "()"),
        (wait_none, "()"),
    ],
)
def test_signatures_and_defaults(func: Any, expected: str) -> None:
    """Parameter names, order and defaults are part of the contract (api.md §1.2)."""
    signature = inspect.signature(func)
    unannotated = signature.replace(
        parameters=[
            p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()
        ],
        return_annotation=inspect.Signature.empty,
    )
    assert str(unannotated) == expected


# --------------------------------------------------------------------------------------
# Protocols and data
# --------------------------------------------------------------------------------------


def test_retry_policy_protocol_is_runtime_checkable() -> None:
    class Legacy:
        def next(self, elapsed_time: float, attempts: int, error: Exception) -> float | None:
            return None

    assert isinstance(retry_policy(), RetryPolicy)
    assert isinstance(Legacy(), RetryPolicy)
    assert not isinstance(object(), RetryPolicy)


def test_retry_info_is_a_frozen_dataclass() -> None:
    assert dataclasses.is_dataclass(RetryInfo)
    assert [f.name for f in dataclasses.fields(RetryInfo)] == [
        "retry_number",
        "elapsed_seconds",
        "last_exception",
        "last_failed_at",
    ]
    first = RetryInfo(retry_number=0, elapsed_seconds=0.0, last_exception=None, last_failed_at=None)
    assert first == RetryInfo(0, 0.0, None, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.retry_number = 1  # type: ignore[misc]
    when = datetime(2024, 1, 1, tzinfo=timezone.utc)
    retry = RetryInfo(
        retry_number=2, elapsed_seconds=1.5, last_exception=ERROR, last_failed_at=when
    )
    assert retry.last_exception is ERROR
    assert retry.last_failed_at == when


def test_primitives_are_instances_of_their_base() -> None:
    assert isinstance(retry_always(), RetryCondition)
    assert isinstance(retry_if_exception_type(), RetryCondition)
    assert isinstance(wait_fixed(1), WaitStrategy)
    assert isinstance(wait_full_jitter(), WaitStrategy)
    assert isinstance(stop_never(), StopCondition)


def test_the_primitive_types_are_protocols_any_callable_meets() -> None:
    """Plain callables qualify; operators stay on tickwork's own primitives."""
    for protocol in (RetryCondition, WaitStrategy, StopCondition):
        assert getattr(protocol, "_is_protocol", False), protocol
        assert isinstance(lambda *args: True, protocol)
        assert not isinstance(3, protocol)
        assert not {"__or__", "__and__", "__add__"} & set(vars(protocol)), protocol


def test_custom_callables_in_policies_and_combinators() -> None:
    waits: list[int] = []

    def slow_then_fast(attempts: int) -> float:  # no ``seed``: called without it
        waits.append(attempts)
        return 10.0 if attempts == 0 else 1.0

    def after_two(attempts: int, elapsed: float) -> bool:  # no ``upcoming_sleep``
        return attempts >= 2

    def lookups(error: BaseException) -> bool:
        return isinstance(error, LookupError)

    policy = retry_policy(retry=lookups, wait=slow_then_fast, stop=after_two)
    assert policy.next(0.0, 1, KeyError()) == 10.0
    assert policy.next(0.0, 2, KeyError()) is None
    assert policy.next(0.0, 1, ValueError()) is None
    assert waits == [0, 1]

    assert wait_chain(slow_then_fast, wait_fixed(3))(0, seed=1) == 10.0
    assert wait_combine(slow_then_fast, wait_fixed(3))(1, seed=1) == 4.0
    assert [stop_any(after_two)(n, 0.0, upcoming_sleep=1.0) for n in (1, 2)] == [False, True]
    assert stop_all(after_two, stop_after_delay(5))(3, 4.0) is False
    assert retry_any(lookups, retry_never())(KeyError()) is True
    assert retry_all(lookups, retry_never())(KeyError()) is False


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda: retry_any(retry_always), "retry_any.*class retry_always"),
        (lambda: retry_all(wait_fixed(1)), "retry_all.*retry condition.*wait_fixed"),
        (lambda: wait_chain(stop_never()), "wait_chain.*wait strategy.*stop_never"),
        (lambda: wait_combine(1.5), "wait_combine.*wait strategy.*float"),
        (lambda: stop_any(retry_never()), "stop_any.*stop condition.*retry_never"),
        (lambda: stop_all("3"), "stop_all.*stop condition"),
        (lambda: retry_policy(wait=stop_never()), r"retry_policy\(wait=.*wait strategy"),
        (lambda: retry_policy(stop=wait_fixed(1)), r"retry_policy\(stop=.*stop condition"),
    ],
)
def test_combinators_reject_what_is_not_of_their_kind(
    build: Callable[[], object], fragment: str
) -> None:
    with pytest.raises(TypeError, match=fragment):
        build()


# --------------------------------------------------------------------------------------
# retry_policy()
# --------------------------------------------------------------------------------------


def test_spec_example() -> None:
    policy = retry_policy(wait=wait_fixed(1), stop=stop_after_attempt(3))
    assert policy.next(0, 0, ERROR) == 1.0
    assert policy.next(0, 1, ERROR) == 1.0
    assert policy.next(0, 2, ERROR) == 1.0
    assert policy.next(0, 3, ERROR) is None


def test_default_policy_retries_everything_three_executions_five_seconds() -> None:
    policy = retry_policy()
    for error in (ValueError("x"), KeyError("y"), TimeoutError()):
        assert policy.next(0.0, 1, error) == 5.0
        assert policy.next(100.0, 2, error) == 5.0
        assert policy.next(0.0, 3, error) is None


def test_policy_delay_is_a_float() -> None:
    delay = retry_policy(wait=wait_fixed(2), stop=stop_never()).next(0.0, 1, ERROR)
    assert type(delay) is float


def test_rejected_error_stops_before_asking_wait_or_stop() -> None:
    wait = _RecordingWait(1.0)
    stop = _RecordingStop(False)
    policy = retry_policy(retry=retry_if_exception_type(ValueError), wait=wait, stop=stop)
    assert policy.next(0.0, 1, KeyError("k")) is None
    assert wait.calls == [] and stop.calls == []
    assert policy.next(0.5, 1, ValueError("v")) == 1.0


def test_wait_receives_zero_based_retry_index_and_seed() -> None:
    wait = _RecordingWait(2.5)
    policy = retry_policy(wait=wait, stop=stop_never())
    policy.next(0.0, 0, ERROR, seed=7)
    policy.next(0.0, 1, ERROR, seed=8)
    policy.next(0.0, 4, ERROR)
    assert wait.calls == [(0, 7), (0, 8), (3, None)]


def test_stop_receives_attempts_elapsed_and_upcoming_sleep() -> None:
    stop = _RecordingStop(False)
    policy = retry_policy(wait=wait_fixed(2.5), stop=stop)
    assert policy.next(3.25, 2, ERROR) == 2.5
    assert stop.calls == [(2, 3.25, 2.5)]
    stop.result = True
    assert policy.next(3.25, 2, ERROR) is None


def test_policy_with_stop_before_delay_uses_upcoming_sleep() -> None:
    policy = retry_policy(wait=wait_fixed(3), stop=stop_before_delay(10))
    assert policy.next(6.9, 1, ERROR) == 3.0
    assert policy.next(7.0, 1, ERROR) is None


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"wait": wait_fixed}, "wait_fixed"),
        ({"stop": stop_after_attempt}, "stop_after_attempt"),
        ({"retry": retry_always}, "retry_always"),
        ({"stop": 3}, "stop"),
        ({"wait": 1.5}, "wait"),
        ({"retry": "ValueError"}, "retry"),
    ],
)
def test_retry_policy_rejects_bad_components(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(TypeError, match=fragment):
        retry_policy(**kwargs)


def test_policy_repr_names_its_parts() -> None:
    text = repr(retry_policy(retry=retry_if_exception_type(ValueError), wait=wait_fixed(1)))
    assert "retry_if_exception_type" in text and "wait_fixed(1.0)" in text
    assert "stop_after_attempt(3)" in text


# --------------------------------------------------------------------------------------
# Retry conditions
# --------------------------------------------------------------------------------------


def test_retry_if_exception() -> None:
    condition = retry_if_exception(lambda e: "retry" in str(e))
    assert condition(ValueError("please retry")) is True
    assert condition(ValueError("no")) is False
    assert retry_if_exception(lambda e: 1)(ERROR) is True  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="predicate"):
        retry_if_exception(42)  # type: ignore[arg-type]


def test_retry_if_exception_type() -> None:
    assert retry_if_exception_type()(ValueError()) is True
    assert retry_if_exception_type()(KeyboardInterrupt()) is False
    assert retry_if_exception_type(LookupError)(KeyError()) is True
    assert retry_if_exception_type((KeyError, ValueError))(ValueError()) is True
    assert retry_if_exception_type((KeyError, ValueError))(TypeError()) is False
    assert retry_if_exception_type(TimeoutError)(rp_step_timeout_error()) is True


def rp_step_timeout_error() -> BaseException:
    from tickwork.errors import StepTimeoutError

    return StepTimeoutError("too slow")


@pytest.mark.parametrize(
    "condition_class", [retry_if_not_exception_type, retry_unless_exception_type]
)
def test_retry_if_not_exception_type(condition_class: type[retry_if_not_exception_type]) -> None:
    assert condition_class()(ValueError()) is False
    assert condition_class()(KeyboardInterrupt()) is True
    assert condition_class(KeyError)(ValueError()) is True
    assert condition_class((KeyError, ValueError))(ValueError()) is False


def test_retry_unless_exception_type_is_a_subclass() -> None:
    assert issubclass(retry_unless_exception_type, retry_if_not_exception_type)


@pytest.mark.parametrize(
    "condition_class",
    [
        retry_if_exception_type,
        retry_if_not_exception_type,
        retry_unless_exception_type,
        retry_if_exception_cause_type,
    ],
)
@pytest.mark.parametrize("bad", [ValueError("instance"), "ValueError", (KeyError, int)])
def test_exception_types_are_validated(condition_class: Any, bad: Any) -> None:
    with pytest.raises(TypeError, match="exception_types"):
        condition_class(bad)


@pytest.mark.parametrize(
    "condition_class", [retry_if_exception_message, retry_if_not_exception_message]
)
@pytest.mark.parametrize(
    "kwargs", [{}, {"message": None, "match": None}, {"message": "a", "match": "a"}]
)
def test_exception_message_needs_exactly_one_argument(
    condition_class: Any, kwargs: dict[str, Any]
) -> None:
    with pytest.raises(TypeError, match=r"message.*match"):
        condition_class(**kwargs)


def test_retry_if_exception_message_by_message() -> None:
    condition = retry_if_exception_message(message="rate limited")
    assert condition(RuntimeError("rate limited")) is True
    assert condition(RuntimeError("rate limited!")) is False
    assert condition(RuntimeError("Rate limited")) is False


def test_retry_if_exception_message_by_match_uses_search() -> None:
    condition = retry_if_exception_message(match=r"\b50[34]\b")
    assert condition(RuntimeError("HTTP 503 from upstream")) is True
    assert condition(RuntimeError("HTTP 500")) is False
    compiled = retry_if_exception_message(match=re.compile("LIMIT", re.IGNORECASE))
    assert compiled(RuntimeError("over the limit")) is True
    assert compiled(RuntimeError("fine")) is False


def test_retry_if_not_exception_message() -> None:
    assert retry_if_not_exception_message(message="fatal")(RuntimeError("fatal")) is False
    assert retry_if_not_exception_message(message="fatal")(RuntimeError("transient")) is True
    assert retry_if_not_exception_message(match="fat")(RuntimeError("a fatal error")) is False
    assert retry_if_not_exception_message(match="fat")(RuntimeError("transient")) is True


def test_retry_if_exception_cause_type_follows_the_cause_chain() -> None:
    condition = retry_if_exception_cause_type(ConnectionError)
    deep = _caused_by(RuntimeError("top"), ValueError("middle"), ConnectionResetError("root"))
    assert condition(deep) is True
    assert condition(_caused_by(RuntimeError("top"), ValueError("middle"))) is False
    assert retry_if_exception_cause_type((KeyError, ValueError))(deep) is True


def test_retry_if_exception_cause_type_does_not_check_the_error_itself() -> None:
    assert retry_if_exception_cause_type(ValueError)(ValueError("alone")) is False


def test_retry_if_exception_cause_type_ignores_context() -> None:
    try:
        try:
            raise ConnectionError("implicit")
        except ConnectionError:
            raise RuntimeError("while handling") from None
    except RuntimeError as error:
        assert isinstance(error.__context__, ConnectionError)
        assert retry_if_exception_cause_type(ConnectionError)(error) is False
    try:
        try:
            raise ConnectionError("implicit")
        except ConnectionError:
            raise RuntimeError("while handling")  # noqa: B904 - the implicit context is the point
    except RuntimeError as error:
        assert error.__cause__ is None
        assert retry_if_exception_cause_type(ConnectionError)(error) is False


def test_retry_if_exception_cause_type_with_raise_from() -> None:
    try:
        try:
            raise ConnectionError("root")
        except ConnectionError as root:
            raise RuntimeError("wrapped") from root
    except RuntimeError as error:
        assert retry_if_exception_cause_type(OSError)(error) is True


def test_retry_if_exception_cause_type_terminates_on_a_cycle() -> None:
    first, second = ValueError("a"), KeyError("b")
    first.__cause__ = second
    second.__cause__ = first
    assert retry_if_exception_cause_type(TypeError)(first) is False
    assert retry_if_exception_cause_type(ValueError)(first) is True


def test_constant_conditions() -> None:
    assert retry_always()(ERROR) is True
    assert retry_never()(ERROR) is False
    assert retry_any()(ERROR) is False
    assert retry_all()(ERROR) is True


def test_retry_any_and_all() -> None:
    value_or_key = retry_any(retry_if_exception_type(ValueError), retry_if_exception_type(KeyError))
    assert value_or_key(KeyError()) is True
    assert value_or_key(TypeError()) is False
    lookup_and_key = retry_all(
        retry_if_exception_type(LookupError), retry_if_exception_type(KeyError)
    )
    assert lookup_and_key(KeyError()) is True
    assert lookup_and_key(IndexError()) is False


def test_retry_operators_build_any_and_all_left_to_right() -> None:
    a = retry_if_exception_type(ValueError)
    b = retry_if_exception_type(KeyError)
    c = retry_if_exception_message(match="x")
    either = a | b | c
    assert isinstance(either, retry_any)
    assert isinstance(either.retries[0], retry_any)
    assert either.retries[0].retries == (a, b)
    assert either.retries[1] is c
    both = a & b & c
    assert isinstance(both, retry_all)
    assert isinstance(both.retries[0], retry_all)
    assert both.retries[0].retries == (a, b)
    assert either(KeyError()) is True
    assert either(TypeError("x")) is True
    assert either(TypeError("y")) is False
    # ``&`` binds tighter than ``|``, as for any Python operands.
    mixed = retry_never() | retry_if_exception_type(LookupError) & retry_if_exception_message(
        match="gone"
    )
    assert isinstance(mixed, retry_any)
    assert mixed(KeyError("gone")) is True
    assert mixed(KeyError("here")) is False


def test_retry_operators_reject_non_conditions() -> None:
    with pytest.raises(TypeError):
        retry_always() | (lambda e: True)  # type: ignore[operator]
    with pytest.raises(TypeError):
        retry_always() & 1  # type: ignore[operator]


@pytest.mark.parametrize(
    "condition",
    [
        retry_if_exception(bool),
        retry_if_exception_type(),
        retry_if_not_exception_type(),
        retry_if_exception_message(message="m"),
        retry_if_not_exception_message(match="m"),
        retry_if_exception_cause_type(),
        retry_any(retry_always()),
        retry_all(),
        retry_always(),
        retry_never(),
    ],
)
def test_conditions_return_bool(condition: RetryCondition) -> None:
    assert type(condition(ERROR)) is bool
    assert type(condition(_caused_by(RuntimeError("m"), ValueError("m")))) is bool


# --------------------------------------------------------------------------------------
# Wait strategies
# --------------------------------------------------------------------------------------


def test_wait_fixed_and_none() -> None:
    assert wait_fixed(5)(0) == 5.0
    assert type(wait_fixed(5)(0)) is float
    assert wait_fixed(0.25)(17, seed=3) == 0.25
    assert wait_fixed(timedelta(minutes=1, milliseconds=500))(0) == 60.5
    assert wait_none()(0) == 0.0
    assert wait_none()(100, seed=1) == 0.0


@pytest.mark.parametrize("bad", ["5", None, True, [1]])
def test_durations_are_validated(bad: Any) -> None:
    with pytest.raises(TypeError, match="wait"):
        wait_fixed(bad)
    with pytest.raises(TypeError, match="max_delay"):
        stop_after_delay(bad)
    with pytest.raises(TypeError, match="max"):
        wait_exponential(max=bad)


@pytest.mark.parametrize("bad", [-1, -0.5, timedelta(seconds=-3), math.nan, math.inf])
def test_wait_fixed_rejects_negative_and_non_finite_waits(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"wait.*(finite number of seconds >= 0|got nan)"):
        wait_fixed(bad)


@pytest.mark.parametrize(
    "make",
    [
        lambda: wait_random(min=math.nan),
        lambda: wait_incrementing(start=math.nan),
        lambda: wait_exponential(multiplier=math.nan),
        lambda: wait_exponential_jitter(jitter=math.nan),
        lambda: stop_after_delay(math.nan),
        lambda: stop_before_delay(math.nan),
    ],
)
def test_nan_durations_and_factors_are_rejected(make: Callable[[], object]) -> None:
    with pytest.raises(ValueError, match="got nan"):
        make()


@pytest.mark.parametrize("bad", ["2", None, True, timedelta(seconds=1)])
def test_numbers_are_validated(bad: Any) -> None:
    with pytest.raises(TypeError, match="multiplier"):
        wait_exponential(multiplier=bad)
    with pytest.raises(TypeError, match="exp_base"):
        wait_random_exponential(exp_base=bad)
    with pytest.raises(TypeError, match="initial"):
        wait_exponential_jitter(initial=bad)


def test_wait_exponential_defaults() -> None:
    strategy = wait_exponential()
    assert [strategy(n) for n in range(8)] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]


def test_wait_exponential_formula() -> None:
    strategy = wait_exponential(multiplier=0.5, exp_base=3, max=30, min=1)
    # max(max(0, 1), min(0.5 * 3**n, 30))
    assert [strategy(n) for n in range(6)] == [1.0, 1.5, 4.5, 13.5, 30.0, 30.0]


def test_wait_exponential_min_above_max_wins() -> None:
    assert wait_exponential(min=10, max=5)(0) == 10.0
    assert wait_exponential(min=-3, max=5, multiplier=-1)(0) == 0.0


def test_wait_exponential_timedelta_bounds() -> None:
    strategy = wait_exponential(max=timedelta(seconds=10), min=timedelta(milliseconds=1500))
    assert [strategy(n) for n in range(6)] == [1.5, 2.0, 4.0, 8.0, 10.0, 10.0]


@pytest.mark.parametrize("exp_base", [2, 2.0, 10, 1.5])
@pytest.mark.parametrize("n", [1023, 1024, 5000, 10**9])
def test_wait_exponential_overflow_is_capped(exp_base: float, n: int) -> None:
    assert wait_exponential(exp_base=exp_base, max=42)(n) == 42.0
    assert wait_random_exponential(exp_base=exp_base, max=42)(n, seed=1) <= 42.0
    assert wait_exponential_jitter(exp_base=exp_base, max=42)(n, seed=1) == 42.0


def test_wait_incrementing() -> None:
    assert [wait_incrementing()(n) for n in range(3)] == [0.0, 100.0, 200.0]
    assert wait_incrementing()(10**6) == 1e8
    strategy = wait_incrementing(start=1, increment=2.5, max=6)
    assert [strategy(n) for n in range(4)] == [1.0, 3.5, 6.0, 6.0]
    falling = wait_incrementing(start=3, increment=-2)
    assert [falling(n) for n in range(4)] == [3.0, 1.0, 0.0, 0.0]
    timed = wait_incrementing(start=timedelta(seconds=1), increment=timedelta(seconds=2))
    assert [timed(n) for n in range(3)] == [1.0, 3.0, 5.0]


def test_wait_random_uses_seeded_generator() -> None:
    strategy = wait_random(min=1, max=3)
    expected = 1 + (3 - 1) * random.Random(1234).random()
    assert strategy(0, seed=1234) == expected
    assert strategy(5, seed=1234) == expected  # the index does not change a draw


def test_unseeded_random_uses_the_module_generator() -> None:
    strategy = wait_random_exponential(multiplier=2, max=100)
    random.seed(99)
    unseeded = strategy(4)
    assert unseeded == strategy(4, seed=99)


def test_wait_exponential_jitter_formula() -> None:
    strategy = wait_exponential_jitter(initial=0.5, exp_base=3, max=10, jitter=2)
    for n in range(6):
        u = 2 * random.Random(n).random()
        assert strategy(n, seed=n) == min(min(0.5 * 3**n, 10) + u, 10)


def test_wait_exponential_jitter_is_never_negative() -> None:
    assert wait_exponential_jitter(initial=-5, jitter=1)(0, seed=3) == 0.0


def test_wait_random_exponential_formula() -> None:
    strategy = wait_random_exponential(multiplier=0.5, exp_base=2, max=6, min=1)
    for n in range(6):
        high = max(max(0, 1), min(0.5 * 2**n, 6))
        assert strategy(n, seed=n) == 1 + (high - 1) * random.Random(n).random()


def test_wait_full_jitter_returns_wait_random_exponential() -> None:
    strategy = wait_full_jitter(multiplier=3, exp_base=4, max=timedelta(seconds=50), min=2)
    assert type(strategy) is wait_random_exponential
    assert (strategy.multiplier, strategy.exp_base, strategy.max, strategy.min) == (3, 4, 50.0, 2.0)
    same = wait_random_exponential(multiplier=3, exp_base=4, max=50, min=2)
    assert [strategy(n, seed=n) for n in range(6)] == [same(n, seed=n) for n in range(6)]


def test_wait_chain() -> None:
    chain = wait_chain(wait_fixed(1), wait_fixed(2), wait_exponential(multiplier=1, max=100))
    # strategies[min(n, len - 1)], each called with the overall index n
    assert [chain(n) for n in range(6)] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    assert wait_chain(wait_fixed(7))(0) == wait_chain(wait_fixed(7))(99) == 7.0


def test_wait_chain_passes_the_seed() -> None:
    chain = wait_chain(wait_fixed(1), wait_random(0, 10))
    assert chain(1, seed=5) == wait_random(0, 10)(1, seed=5)


def test_wait_chain_needs_a_strategy() -> None:
    with pytest.raises(ValueError, match="wait_chain"):
        wait_chain()


def test_wait_combine() -> None:
    assert wait_combine()(3) == 0.0
    combined = wait_combine(wait_fixed(1), wait_incrementing(start=0, increment=2))
    assert [combined(n) for n in range(3)] == [1.0, 3.0, 5.0]


def test_wait_combine_passes_the_same_seed_to_each_strategy() -> None:
    jitter = wait_random(0, 1)
    combined = wait_combine(jitter, wait_fixed(2), jitter)
    assert combined(0, seed=11) == 2 * jitter(0, seed=11) + 2
    assert combined(0, seed=11) == combined(0, seed=11)


def test_wait_plus_builds_wait_combine() -> None:
    a, b, c = wait_fixed(1), wait_fixed(2), wait_random(0, 1)
    total = a + b + c
    assert isinstance(total, wait_combine)
    assert isinstance(total.strategies[0], wait_combine)
    assert total.strategies[0].strategies == (a, b)
    assert total(0, seed=1) == 3 + c(0, seed=1)


def test_sum_of_waits() -> None:
    a, b = wait_fixed(1), wait_exponential()
    assert 0 + a is a
    assert sum([a]) is a
    total = sum([a, b, wait_fixed(timedelta(seconds=2))])
    assert isinstance(total, wait_combine)
    assert [total(n) for n in range(3)] == [4.0, 5.0, 7.0]


def test_wait_plus_rejects_non_strategies() -> None:
    with pytest.raises(TypeError):
        1 + wait_fixed(1)
    with pytest.raises(TypeError):
        wait_fixed(1) + 1  # type: ignore[operator]
    with pytest.raises(TypeError):
        False + wait_fixed(1)


def test_wait_reprs() -> None:
    assert repr(wait_fixed(2)) == "wait_fixed(2.0)"
    assert repr(wait_fixed(1) + wait_none()) == "wait_combine(wait_fixed(1.0), wait_none())"
    assert "wait_random_exponential" in repr(wait_full_jitter())


RANDOM_STRATEGIES: list[WaitStrategy] = [
    wait_random(0.5, 3),
    wait_exponential_jitter(initial=0.25, max=20, jitter=3),
    wait_random_exponential(multiplier=0.5, max=30, min=0.1),
    wait_full_jitter(multiplier=2),
    wait_chain(wait_random(), wait_exponential_jitter()),
    wait_combine(wait_random(), wait_fixed(1), wait_random_exponential()),
    wait_random(0, 1) + wait_exponential_jitter(),
]


@pytest.mark.parametrize("strategy", RANDOM_STRATEGIES, ids=repr)
@given(n=retry_indexes, seed=seeds)
def test_seeded_strategies_are_deterministic(strategy: WaitStrategy, n: int, seed: int) -> None:
    assert strategy(n, seed=seed) == strategy(n, seed=seed)


@pytest.mark.parametrize("strategy", RANDOM_STRATEGIES, ids=repr)
def test_seeded_strategies_vary_with_the_seed(strategy: WaitStrategy) -> None:
    assert len({strategy(3, seed=seed) for seed in range(20)}) > 1


@given(low=small_floats, width=small_floats, n=retry_indexes, seed=seeds)
def test_wait_random_bounds(low: float, width: float, n: int, seed: int) -> None:
    high = low + width
    assert low <= wait_random(low, high)(n, seed=seed) <= high


@given(
    initial=small_floats,
    exp_base=st.floats(min_value=1.0, max_value=10.0),
    maximum=small_floats,
    jitter=small_floats,
    n=retry_indexes,
    seed=seeds,
)
def test_wait_exponential_jitter_bounds(
    initial: float, exp_base: float, maximum: float, jitter: float, n: int, seed: int
) -> None:
    delay = wait_exponential_jitter(initial, exp_base, maximum, jitter)(n, seed=seed)
    base = min(wait_exponential(multiplier=initial, exp_base=exp_base, max=maximum)(n), maximum)
    assert delay <= maximum
    assert delay >= base


@given(
    multiplier=small_floats,
    exp_base=st.floats(min_value=1.0, max_value=10.0),
    low=small_floats,
    maximum=small_floats,
    n=retry_indexes,
    seed=seeds,
)
def test_wait_random_exponential_bounds(
    multiplier: float, exp_base: float, low: float, maximum: float, n: int, seed: int
) -> None:
    strategy = wait_random_exponential(multiplier, exp_base, maximum, low)
    high = wait_exponential(multiplier, exp_base, maximum, low)(n)
    delay = strategy(n, seed=seed)
    assert low <= delay <= high
    assert delay <= max(maximum, low)


@given(
    multiplier=small_floats,
    exp_base=st.floats(min_value=1.0, max_value=10.0) | st.integers(min_value=1, max_value=10),
    low=small_floats,
    maximum=small_floats,
    n=retry_indexes,
)
def test_wait_exponential_is_bounded_and_non_decreasing(
    multiplier: float, exp_base: float, low: float, maximum: float, n: int
) -> None:
    strategy = wait_exponential(multiplier, exp_base, maximum, low)
    assert max(0, low) <= strategy(n) <= max(maximum, low)
    assert strategy(n) <= strategy(n + 1)


@given(seed=seeds, n=retry_indexes)
def test_sum_of_seeded_strategies_is_the_sum_of_their_values(seed: int, n: int) -> None:
    parts = [wait_random(), wait_exponential(), wait_exponential_jitter()]
    total = sum(parts)
    assert isinstance(total, WaitStrategy)
    assert total(n, seed=seed) == pytest.approx(sum(part(n, seed=seed) for part in parts))


# --------------------------------------------------------------------------------------
# Stop conditions
# --------------------------------------------------------------------------------------


def test_stop_after_attempt() -> None:
    stop = stop_after_attempt(3)
    assert [stop(n, 0.0) for n in range(5)] == [False, False, False, True, True]


def test_stop_after_delay() -> None:
    stop = stop_after_delay(2.5)
    assert stop(1, 2.4) is False
    assert stop(1, 2.5) is True
    assert stop(1, 2.4, upcoming_sleep=100) is False
    assert stop_after_delay(timedelta(milliseconds=2500))(1, 2.5) is True


def test_stop_before_delay() -> None:
    stop = stop_before_delay(10)
    assert stop(1, 5.0) is False
    assert stop(1, 5.0, upcoming_sleep=4.9) is False
    assert stop(1, 5.0, upcoming_sleep=5.0) is True
    assert stop_before_delay(timedelta(seconds=10))(1, 10.0) is True


def test_stop_never_any_all() -> None:
    assert stop_never()(10**9, 1e9, upcoming_sleep=1e9) is False
    assert stop_any()(1, 0.0) is False
    assert stop_all()(1, 0.0) is True
    attempts_or_time = stop_any(stop_after_attempt(3), stop_after_delay(10))
    assert attempts_or_time(3, 0.0) is True
    assert attempts_or_time(1, 10.0) is True
    assert attempts_or_time(2, 9.0) is False
    attempts_and_time = stop_all(stop_after_attempt(3), stop_after_delay(10))
    assert attempts_and_time(3, 0.0) is False
    assert attempts_and_time(3, 10.0) is True


def test_stop_composites_pass_upcoming_sleep() -> None:
    assert stop_any(stop_before_delay(10))(1, 5.0, upcoming_sleep=5.0) is True
    assert stop_all(stop_before_delay(10))(1, 5.0, upcoming_sleep=4.0) is False


def test_stop_operators() -> None:
    a, b, c = stop_after_attempt(5), stop_after_delay(10), stop_before_delay(20)
    either = a | b | c
    assert isinstance(either, stop_any)
    assert isinstance(either.stops[0], stop_any)
    assert either.stops[0].stops == (a, b)
    both = a & b & c
    assert isinstance(both, stop_all)
    assert isinstance(both.stops[0], stop_all)
    assert either(1, 0.0, upcoming_sleep=20.0) is True
    assert both(5, 10.0, upcoming_sleep=9.0) is False
    assert both(5, 10.0, upcoming_sleep=10.0) is True
    with pytest.raises(TypeError):
        a | 3  # type: ignore[operator]
    with pytest.raises(TypeError):
        a & wait_fixed(1)  # type: ignore[operator]


def test_stop_after_attempt_in_a_policy_counts_executions() -> None:
    policy = retry_policy(wait=wait_none(), stop=stop_after_attempt(4))
    decisions = [policy.next(0.0, attempts, ERROR) for attempts in range(1, 6)]
    assert decisions == [0.0, 0.0, 0.0, None, None]


# --------------------------------------------------------------------------------------
# Deprecated factories
# --------------------------------------------------------------------------------------


def test_constant_delay_retry_policy() -> None:
    with pytest.warns(DeprecationWarning, match="ConstantDelayRetryPolicy"):
        policy = ConstantDelayRetryPolicy(maximum_attempts=2, delay=timedelta(seconds=3))
    assert isinstance(policy, RetryPolicy)
    assert policy.next(0.0, 1, ERROR) == 3.0
    assert policy.next(0.0, 2, ERROR) is None
    default = ConstantDelayRetryPolicy()  # no second warning: once per process
    assert [default.next(0.0, n, ERROR) for n in (1, 2, 3)] == [5.0, 5.0, None]


def test_constant_delay_retry_policy_components() -> None:
    with pytest.warns(DeprecationWarning):
        policy: Any = ConstantDelayRetryPolicy(maximum_attempts=4, delay=2)
    assert policy.retry is None
    assert isinstance(policy.wait, wait_fixed) and policy.wait.wait == 2.0
    assert isinstance(policy.stop, stop_after_attempt) and policy.stop.max_attempt_number == 4


def test_exponential_backoff_retry_policy_with_jitter() -> None:
    with pytest.warns(DeprecationWarning, match="ExponentialBackoffRetryPolicy"):
        policy: Any = ExponentialBackoffRetryPolicy(
            maximum_attempts=4, initial_delay=0.5, multiplier=3.0, max_delay=10.0
        )
    assert type(policy.wait) is wait_random_exponential
    assert (policy.wait.multiplier, policy.wait.exp_base, policy.wait.max, policy.wait.min) == (
        0.5,
        3.0,
        10.0,
        0.0,
    )
    assert isinstance(policy.stop, stop_after_attempt) and policy.stop.max_attempt_number == 4
    same = wait_random_exponential(multiplier=0.5, exp_base=3.0, max=10.0)
    for attempts in (1, 2, 3):
        assert policy.next(0.0, attempts, ERROR, seed=attempts) == same(attempts - 1, seed=attempts)
    assert policy.next(0.0, 4, ERROR, seed=4) is None


def test_exponential_backoff_retry_policy_without_jitter() -> None:
    with pytest.warns(DeprecationWarning):
        policy: Any = ExponentialBackoffRetryPolicy(jitter=False)
    assert type(policy.wait) is wait_exponential
    assert (policy.wait.multiplier, policy.wait.exp_base, policy.wait.max) == (1.0, 2.0, 60.0)
    assert [policy.next(0.0, n, ERROR) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, None, None]


def test_deprecation_warning_points_at_the_caller() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ConstantDelayRetryPolicy()
        ExponentialBackoffRetryPolicy()
    assert [w.category for w in caught] == [DeprecationWarning, DeprecationWarning]
    assert all(w.filename == __file__ for w in caught)


# --------------------------------------------------------------------------------------
# Runtime helpers: call_policy and retry_seed
# --------------------------------------------------------------------------------------


class _SeededPolicy:
    def __init__(self) -> None:
        self.calls: list[tuple[float, int, Exception, int | None]] = []

    def next(
        self, elapsed_time: float, attempts: int, error: Exception, *, seed: int | None = None
    ) -> float | None:
        self.calls.append((elapsed_time, attempts, error, seed))
        return 1.5


class _LegacyPolicy:
    def __init__(self) -> None:
        self.calls: list[tuple[float, int, Exception]] = []

    def next(self, elapsed_time: float, attempts: int, error: Exception) -> float | None:
        self.calls.append((elapsed_time, attempts, error))
        return 2


class _KwargsPolicy:
    def __init__(self) -> None:
        self.kwargs: list[dict[str, Any]] = []

    def next(self, elapsed_time: float, attempts: int, error: Exception, **kwargs: Any) -> None:
        self.kwargs.append(kwargs)
        return None


def test_call_policy_passes_seed_when_declared() -> None:
    policy = _SeededPolicy()
    assert call_policy(policy, 0.5, 2, ERROR, 1234) == 1.5
    assert policy.calls == [(0.5, 2, ERROR, 1234)]


def test_call_policy_omits_seed_for_legacy_policies() -> None:
    policy = _LegacyPolicy()
    delay = call_policy(policy, 0.5, 2, ERROR, 1234)  # type: ignore[arg-type]
    assert delay == 2.0 and type(delay) is float
    assert policy.calls == [(0.5, 2, ERROR)]


def test_call_policy_does_not_pass_seed_into_var_keyword() -> None:
    policy = _KwargsPolicy()
    assert call_policy(policy, 0.0, 1, ERROR, 5) is None
    assert policy.kwargs == [{}]


def test_call_policy_with_positional_seed_parameter() -> None:
    class Positional:
        def next(
            self, elapsed_time: float, attempts: int, error: Exception, seed: int | None = None
        ) -> float:
            return float(seed or 0)

    assert call_policy(Positional(), 0.0, 1, ERROR, 9) == 9.0


def test_call_policy_with_composed_policy_is_deterministic() -> None:
    policy = retry_policy(wait=wait_random(0, 100), stop=stop_never())
    seed = retry_seed("run-1", "fetch", 1)
    first = call_policy(policy, 0.0, 1, ERROR, seed)
    assert first == call_policy(policy, 0.0, 1, ERROR, seed)
    assert first == wait_random(0, 100)(0, seed=seed)


def test_call_policy_inspects_once_per_class(monkeypatch: pytest.MonkeyPatch) -> None:
    class Counted:
        def next(
            self, elapsed_time: float, attempts: int, error: Exception, *, seed: int | None = None
        ) -> float:
            return 0.0

    real_signature = inspect.signature
    inspected: list[object] = []

    def counting_signature(obj: Any) -> inspect.Signature:
        inspected.append(obj)
        return real_signature(obj)

    monkeypatch.setattr(inspect, "signature", counting_signature)
    for _ in range(3):
        call_policy(Counted(), 0.0, 1, ERROR, 1)
    assert len(inspected) == 1


def test_call_policy_handles_per_instance_next() -> None:
    seen: list[object] = []

    def legacy_next(elapsed: float, attempts: int, error: Exception) -> float:
        seen.append("legacy")
        return 1.0

    def seeded_next(
        elapsed: float, attempts: int, error: Exception, *, seed: int | None = None
    ) -> float:
        seen.append(seed)
        return 2.0

    legacy: Any = SimpleNamespace(next=legacy_next)
    seeded: Any = SimpleNamespace(next=seeded_next)
    assert call_policy(legacy, 0.0, 1, ERROR, 3) == 1.0
    assert call_policy(seeded, 0.0, 1, ERROR, 3) == 2.0
    assert call_policy(legacy, 0.0, 1, ERROR, 4) == 1.0
    assert seen == ["legacy", 3, "legacy"]


def test_call_policy_lets_policy_errors_propagate() -> None:
    failure = LookupError("policy bug")

    class Broken:
        def next(self, elapsed_time: float, attempts: int, error: Exception) -> float:
            raise failure

    with pytest.raises(LookupError) as info:
        call_policy(Broken(), 0.0, 1, ERROR, 1)  # type: ignore[arg-type]
    assert info.value is failure


@pytest.mark.parametrize(
    ("returned", "error_type"),
    [
        ("1", TypeError),
        (True, TypeError),
        ([1.0], TypeError),
        (math.nan, ValueError),
        (math.inf, ValueError),
    ],
)
def test_call_policy_rejects_bad_delays(returned: object, error_type: type[Exception]) -> None:
    class Odd:
        def next(self, elapsed_time: float, attempts: int, error: Exception) -> object:
            return returned

    with pytest.raises(error_type, match="Odd"):
        call_policy(Odd(), 0.0, 1, ERROR, 1)  # type: ignore[arg-type]


def test_call_policy_clamps_negative_delays() -> None:
    class Early:
        def next(self, elapsed_time: float, attempts: int, error: Exception) -> float:
            return -3.0

    assert call_policy(Early(), 0.0, 1, ERROR, 1) == 0.0  # type: ignore[arg-type]


def test_retry_seed_formula() -> None:
    digest = hashlib.sha256(b"run-abc:fetch:2").hexdigest()
    assert retry_seed("run-abc", "fetch", 2) == int(digest, 16) & 0xFFFFFFFF
    assert retry_seed("run-abc", "fetch", 2) == retry_seed("run-abc", "fetch", 2)
    assert retry_seed("run-abc", "fetch", 2) != retry_seed("run-abc", "fetch", 3)
    assert retry_seed("run-abc", "fetch", 2) != retry_seed("run-abd", "fetch", 2)


@given(run_id=st.text(), step_name=st.text(), attempts=st.integers(min_value=0, max_value=10**6))
def test_retry_seed_is_a_32_bit_int(run_id: str, step_name: str, attempts: int) -> None:
    seed = retry_seed(run_id, step_name, attempts)
    assert type(seed) is int
    assert 0 <= seed <= 0xFFFFFFFF
