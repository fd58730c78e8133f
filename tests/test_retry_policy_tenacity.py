"""Compatibility of ``tickwork.retry_policy`` with tenacity 9.1.x (api.md §12.6).

Compared here: the primitives' parameter names, kinds and annotation types, and the delay,
stop and retry decisions for the same arguments.  tenacity counts attempts from 1, so
tickwork's retry index ``n`` corresponds to tenacity's ``attempt_number = n + 1``.
Skipped when tenacity is not installed.
"""

from __future__ import annotations

import importlib
import inspect
import random
import re
import types
import typing
from collections.abc import Callable
from typing import Any

import pytest

tenacity = pytest.importorskip("tenacity")

import tickwork.retry_policy as rp  # noqa: E402 - after the importorskip on purpose

# tenacity's base classes stand for tickwork's in ``*retries``/``*strategies``/``*stops``.
_EQUIVALENT_TYPES: dict[Any, Any] = {
    importlib.import_module("tenacity.retry").retry_base: rp.RetryCondition,
    importlib.import_module("tenacity.wait").wait_base: rp.WaitStrategy,
    importlib.import_module("tenacity.stop").stop_base: rp.StopCondition,
}

# tenacity exposes these three as ready-made instances, not classes, so their call
# signature (``retry_state``) is not a constructor; tickwork's are classes built with ``()``.
_TENACITY_INSTANCES = ["retry_always", "retry_never", "stop_never"]

PRIMITIVES = [
    "retry_if_exception",
    "retry_if_exception_type",
    "retry_if_not_exception_type",
    "retry_unless_exception_type",
    "retry_if_exception_message",
    "retry_if_not_exception_message",
    "retry_if_exception_cause_type",
    "retry_any",
    "retry_all",
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
]


def _normalize(annotation: Any) -> Any:
    """A comparable form of a type: unions as sets, ``typing`` aliases as builtins."""
    if isinstance(annotation, list):  # the argument list of a Callable
        return tuple(_normalize(item) for item in annotation)
    if annotation in _EQUIVALENT_TYPES:
        return _EQUIVALENT_TYPES[annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return ("union", frozenset(_normalize(arg) for arg in typing.get_args(annotation)))
    if origin is None:
        return annotation
    return (origin, tuple(_normalize(arg) for arg in typing.get_args(annotation)))


def _parameters(obj: Any) -> dict[str, tuple[inspect._ParameterKind, Any]]:
    function = obj.__init__ if inspect.isclass(obj) else obj
    hints = typing.get_type_hints(function)
    return {
        name: (parameter.kind, _normalize(hints.get(name, inspect.Parameter.empty)))
        for name, parameter in inspect.signature(obj).parameters.items()
    }


def _state(attempt_number: int, error: BaseException | None = None) -> Any:
    state = tenacity.RetryCallState(None, None, (), {})
    state.attempt_number = attempt_number
    if error is not None:
        state.outcome = tenacity.Future.construct(attempt_number, error, True)
    return state


def _stop_state(attempt_number: int, elapsed: float, upcoming_sleep: float) -> Any:
    state = _state(attempt_number)
    state.start_time = 0.0
    state.outcome_timestamp = elapsed
    state.upcoming_sleep = upcoming_sleep
    return state


# --------------------------------------------------------------------------------------
# Signatures
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PRIMITIVES)
def test_parameter_names_kinds_and_annotation_types_match(name: str) -> None:
    ours = _parameters(getattr(rp, name))
    theirs = _parameters(getattr(tenacity, name))
    assert ours == theirs


def test_annotation_types_named_by_the_spec() -> None:
    number = _normalize(int | float)
    duration = _normalize(rp.time_unit_type)
    exponential = _parameters(rp.wait_exponential)
    assert exponential["multiplier"][1] == exponential["exp_base"][1] == number
    assert exponential["max"][1] == exponential["min"][1] == duration
    jitter = _parameters(rp.wait_exponential_jitter)
    assert {annotation for _, annotation in jitter.values()} == {float}


@pytest.mark.parametrize("name", _TENACITY_INSTANCES)
def test_ready_made_tenacity_instances_are_classes_here(name: str) -> None:
    assert not inspect.isclass(getattr(tenacity, name))
    ours = getattr(rp, name)
    assert inspect.isclass(ours)
    assert not inspect.signature(ours).parameters


# --------------------------------------------------------------------------------------
# Wait strategies
# --------------------------------------------------------------------------------------

WAIT_CASES: list[tuple[str, dict[str, Any]]] = [
    ("wait_fixed", {"wait": 3}),
    ("wait_fixed", {"wait": 0.125}),
    ("wait_none", {}),
    ("wait_exponential", {"multiplier": 1, "exp_base": 2, "max": 60, "min": 0}),
    ("wait_exponential", {"multiplier": 3, "exp_base": 3, "max": 1e9, "min": 0.5}),
    ("wait_exponential", {"multiplier": 0.7, "exp_base": 1.5, "max": 20, "min": 2}),
    ("wait_exponential", {"multiplier": 2, "exp_base": 10, "max": 1e300, "min": 0}),
    ("wait_incrementing", {"start": 1, "increment": 2.5, "max": 20}),
    ("wait_incrementing", {"start": 10, "increment": -3, "max": 100}),
    ("wait_random", {"min": 0.5, "max": 3}),
    ("wait_exponential_jitter", {"initial": 1.0, "exp_base": 2.0, "max": 60.0, "jitter": 1.0}),
    ("wait_exponential_jitter", {"initial": 0.3, "exp_base": 3.0, "max": 40.0, "jitter": 2.5}),
    ("wait_exponential_jitter", {"initial": -5.0, "exp_base": 2.0, "max": 40.0, "jitter": 1.0}),
    ("wait_random_exponential", {"multiplier": 1, "exp_base": 2, "max": 60, "min": 0}),
    ("wait_random_exponential", {"multiplier": 0.5, "exp_base": 2.5, "max": 30, "min": 1}),
    ("wait_full_jitter", {"multiplier": 2, "exp_base": 3, "max": 100, "min": 0.25}),
]
RETRY_INDEXES = [*range(12), 50, 100, 1023, 1024, 1100, 5000]


@pytest.mark.parametrize(("name", "kwargs"), WAIT_CASES)
@pytest.mark.parametrize("seed", [0, 1, 2**32 - 1])
def test_wait_sequences_match(name: str, kwargs: dict[str, Any], seed: int) -> None:
    ours = getattr(rp, name)(**kwargs)
    theirs = getattr(tenacity, name)(**kwargs)
    for n in RETRY_INDEXES:
        random.seed(seed)
        # tenacity may return an exact int (e.g. ``2 * 10**50``); tickwork delays are floats.
        expected = float(theirs(_state(n + 1)))
        assert ours(n, seed=seed) == expected, (name, kwargs, n)
        random.seed(seed)
        assert ours(n) == expected, (name, kwargs, n)


def _wait_pairs() -> list[tuple[rp.WaitStrategy, Any]]:
    """The same composed strategy built with tickwork and with tenacity."""
    pairs = []
    for module in (rp, tenacity):
        pairs.append(
            [
                module.wait_chain(
                    module.wait_fixed(1), module.wait_random(0, 2), module.wait_exponential(max=60)
                ),
                module.wait_combine(module.wait_fixed(1), module.wait_random(0, 2)),
                module.wait_fixed(2) + module.wait_random_exponential(max=10),
                sum([module.wait_fixed(1), module.wait_incrementing(), module.wait_random()]),
                module.wait_combine(
                    module.wait_chain(module.wait_fixed(1), module.wait_fixed(2)),
                    module.wait_exponential_jitter(max=30),
                ),
            ]
        )
    return list(zip(*pairs, strict=True))


@pytest.mark.parametrize(("ours", "theirs"), _wait_pairs())
def test_composed_wait_sequences_match(ours: rp.WaitStrategy, theirs: Any) -> None:
    # Unseeded, both draw from the module generator in the same order.  (Seeded, tickwork
    # gives the same seed to every part of a sum, as api.md §12.4 requires.)
    for n in RETRY_INDEXES:
        random.seed(n)
        expected = float(theirs(_state(n + 1)))
        random.seed(n)
        assert ours(n) == expected, n


def test_wait_chain_seeded_matches_unseeded() -> None:
    ours = rp.wait_chain(rp.wait_fixed(1), rp.wait_random(0, 2))
    theirs = tenacity.wait_chain(tenacity.wait_fixed(1), tenacity.wait_random(0, 2))
    for n in range(5):
        random.seed(7)
        assert ours(n, seed=7) == theirs(_state(n + 1))


# --------------------------------------------------------------------------------------
# Stop conditions
# --------------------------------------------------------------------------------------

STOP_CASES: list[Callable[[Any], Any]] = [
    lambda m: m.stop_after_attempt(3),
    lambda m: m.stop_after_delay(10),
    lambda m: m.stop_before_delay(10),
    lambda m: m.stop_any(m.stop_after_attempt(4), m.stop_after_delay(5)),
    lambda m: m.stop_all(m.stop_after_attempt(2), m.stop_before_delay(8)),
    lambda m: m.stop_after_attempt(5) | m.stop_before_delay(12),
    lambda m: m.stop_after_attempt(2) & m.stop_after_delay(3) | m.stop_after_attempt(6),
    lambda m: m.stop_any(),
    lambda m: m.stop_all(),
]


@pytest.mark.parametrize("build", STOP_CASES)
def test_stop_decisions_match(build: Callable[[Any], Any]) -> None:
    ours, theirs = build(rp), build(tenacity)
    for attempts in range(8):
        for elapsed in (0.0, 2.5, 3.0, 4.99, 5.0, 7.5, 10.0, 11.0):
            for upcoming in (0.0, 0.5, 2.0, 5.0):
                expected = theirs(_stop_state(attempts, elapsed, upcoming))
                actual = ours(attempts, elapsed, upcoming_sleep=upcoming)
                assert actual == expected, (attempts, elapsed, upcoming)


def test_stop_never_matches() -> None:
    assert rp.stop_never()(100, 1e6, upcoming_sleep=1e6) == tenacity.stop_never(
        _stop_state(100, 1e6, 1e6)
    )


# --------------------------------------------------------------------------------------
# Retry conditions
# --------------------------------------------------------------------------------------


def _errors() -> list[BaseException]:
    chained = RuntimeError("wrapped timeout")
    chained.__cause__ = ValueError("middle")
    chained.__cause__.__cause__ = TimeoutError("root")
    contextual = RuntimeError("contextual")
    contextual.__context__ = TimeoutError("only context")
    return [
        ValueError("boom"),
        KeyError("missing"),
        TimeoutError("rate limited"),
        RuntimeError("rate limited: try later"),
        KeyboardInterrupt(),
        chained,
        contextual,
    ]


RETRY_CASES: list[Callable[[Any], Any]] = [
    lambda m: m.retry_if_exception(lambda e: isinstance(e, LookupError)),
    lambda m: m.retry_if_exception_type(),
    lambda m: m.retry_if_exception_type((KeyError, TimeoutError)),
    lambda m: m.retry_if_not_exception_type(ValueError),
    lambda m: m.retry_unless_exception_type(ValueError) if m is rp else None,
    lambda m: m.retry_if_exception_message(message="rate limited"),
    lambda m: m.retry_if_exception_message(match="rate limited"),
    lambda m: m.retry_if_exception_message(match=re.compile("^wrapped")),
    lambda m: m.retry_if_not_exception_message(message="boom"),
    lambda m: m.retry_if_not_exception_message(match="rate"),
    lambda m: m.retry_if_exception_cause_type(TimeoutError),
    lambda m: m.retry_if_exception_cause_type((ValueError, KeyError)),
    lambda m: m.retry_any(
        m.retry_if_exception_type(KeyError), m.retry_if_exception_type(ValueError)
    ),
    lambda m: m.retry_all(m.retry_if_exception_type(), m.retry_if_exception_message(match="rate")),
    lambda m: m.retry_if_exception_type(KeyError) | m.retry_if_exception_message(match="boom"),
    lambda m: m.retry_if_exception_type() & m.retry_if_not_exception_type(TimeoutError),
    lambda m: m.retry_any(),
    lambda m: m.retry_all(),
]


@pytest.mark.parametrize("build", RETRY_CASES)
def test_retry_decisions_match(build: Callable[[Any], Any]) -> None:
    ours, theirs = build(rp), build(tenacity)
    if theirs is None:
        # tenacity's retry_unless_exception_type also retries on success; api.md §12.3
        # defines tickwork's as retry_if_not_exception_type, so it is compared to that.
        theirs = tenacity.retry_if_not_exception_type(ValueError)
    for error in _errors():
        assert ours(error) == theirs(_state(1, error)), error


@pytest.mark.parametrize("name", ["retry_always", "retry_never"])
def test_constant_retry_conditions_match(name: str) -> None:
    for error in _errors():
        assert getattr(rp, name)()(error) == getattr(tenacity, name)(_state(1, error))


def test_message_match_searches_the_whole_message() -> None:
    """api.md §12.3 says ``re.search``: a match need not start the message."""
    error = RuntimeError("upstream said: rate limited")
    assert rp.retry_if_exception_message(match="rate limited")(error) is True


# --------------------------------------------------------------------------------------
# Whole policies: the delays tenacity sleeps are the delays ``next`` returns
# --------------------------------------------------------------------------------------

POLICY_CASES: list[Callable[[Any], dict[str, Any]]] = [
    lambda m: {"wait": m.wait_fixed(1), "stop": m.stop_after_attempt(3)},
    lambda m: {"wait": m.wait_exponential(multiplier=0.5, max=10), "stop": m.stop_after_attempt(9)},
    lambda m: {"wait": m.wait_random_exponential(max=20), "stop": m.stop_after_attempt(7)},
    lambda m: {"wait": m.wait_exponential_jitter(max=5), "stop": m.stop_after_attempt(6)},
    lambda m: {
        "wait": m.wait_chain(m.wait_none(), m.wait_fixed(2), m.wait_incrementing(1, 1)),
        "stop": m.stop_after_attempt(6),
    },
    lambda m: {"wait": m.wait_fixed(1) + m.wait_random(0, 1), "stop": m.stop_after_attempt(1)},
    lambda m: {
        "retry": m.retry_if_exception_type(ValueError),
        "wait": m.wait_fixed(1),
        "stop": m.stop_after_attempt(4),
    },
    lambda m: {
        "retry": m.retry_if_exception_type(KeyError),
        "wait": m.wait_fixed(1),
        "stop": m.stop_after_attempt(4),
    },
]


@pytest.mark.parametrize("build", POLICY_CASES)
def test_policy_delays_match_tenacity_sleeps(build: Callable[[Any], dict[str, Any]]) -> None:
    error = ValueError("always fails")
    sleeps: list[float] = []

    def fail() -> None:
        raise error

    retrying = tenacity.Retrying(sleep=sleeps.append, reraise=True, **build(tenacity))
    random.seed(42)
    with pytest.raises(ValueError):
        retrying(fail)

    policy = rp.retry_policy(**build(rp))
    random.seed(42)
    delays: list[float] = []
    attempts = 1
    while (delay := policy.next(0.0, attempts, error)) is not None:
        delays.append(delay)
        attempts += 1
    assert delays == sleeps


# --------------------------------------------------------------------------------------
# tenacity's own objects inside tickwork's combinators and policies (api.md §12.1)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "kwargs"), WAIT_CASES)
def test_tenacity_waits_work_inside_tickwork_combinators(name: str, kwargs: dict[str, Any]) -> None:
    theirs = getattr(tenacity, name)(**kwargs)
    ours = getattr(rp, name)(**kwargs)
    for wrapped in (rp.wait_chain(theirs), rp.wait_combine(theirs)):
        for n in RETRY_INDEXES:
            # tenacity's random waits draw from the module generator whatever the seed.
            random.seed(n)
            expected = ours(n)
            random.seed(n)
            assert wrapped(n, seed=5) == expected, (name, n)


@pytest.mark.parametrize("build", STOP_CASES)
def test_tenacity_stops_work_inside_tickwork_combinators(build: Callable[[Any], Any]) -> None:
    ours, wrapped = build(rp), rp.stop_any(build(tenacity))
    for attempts in range(8):
        for elapsed in (0.0, 3.0, 5.0, 10.0, 11.0):
            for upcoming in (0.0, 2.0, 5.0):
                expected = ours(attempts, elapsed, upcoming_sleep=upcoming)
                assert wrapped(attempts, elapsed, upcoming_sleep=upcoming) == expected


@pytest.mark.parametrize("build", RETRY_CASES)
def test_tenacity_retries_work_inside_tickwork_combinators(build: Callable[[Any], Any]) -> None:
    theirs = build(tenacity)
    if theirs is None:
        return  # no tenacity counterpart (see test_retry_decisions_match)
    ours = build(rp)
    for wrapped in (rp.retry_any(theirs), rp.retry_all(theirs)):
        for error in _errors():
            assert wrapped(error) == ours(error), error


def test_operators_combine_tenacity_and_tickwork_retry_conditions() -> None:
    theirs = tenacity.retry_if_exception_type(KeyError)
    ours = rp.retry_if_exception_message(match="rate")
    # tenacity's ``|`` and ``&`` hand over to the right operand, so both orders work.
    for either in (theirs | ours, ours | theirs):
        assert isinstance(either, rp.retry_any)
        assert [either(e) for e in (KeyError("x"), TimeoutError("rate"), ValueError("x"))] == [
            True,
            True,
            False,
        ]
    for both in (theirs & ours, ours & theirs):
        assert isinstance(both, rp.retry_all)
        assert [both(e) for e in (KeyError("rate"), KeyError("x"), ValueError("rate"))] == [
            True,
            False,
            False,
        ]
    assert isinstance(rp.stop_after_attempt(2) | tenacity.stop_after_delay(1), rp.stop_any)
    assert isinstance(rp.wait_fixed(1) + tenacity.wait_fixed(2), rp.wait_combine)
    assert (rp.wait_fixed(1) + tenacity.wait_fixed(2))(0) == 3.0


@pytest.mark.parametrize("build", POLICY_CASES)
def test_policies_built_from_tenacity_objects_sleep_like_tenacity(
    build: Callable[[Any], dict[str, Any]],
) -> None:
    error = ValueError("always fails")
    sleeps: list[float] = []

    def fail() -> None:
        raise error

    retrying = tenacity.Retrying(sleep=sleeps.append, reraise=True, **build(tenacity))
    random.seed(42)
    with pytest.raises(ValueError):
        retrying(fail)

    policy = rp.retry_policy(**build(tenacity))
    random.seed(42)
    delays: list[float] = []
    attempts = 1
    while (delay := policy.next(0.0, attempts, error, seed=attempts)) is not None:
        delays.append(delay)
        attempts += 1
    assert delays == sleeps


def test_call_state_holds_only_what_tickwork_knows() -> None:
    seen: list[Any] = []

    def reads_attempt_number(retry_state: Any) -> bool:
        seen.append(retry_state.outcome.exception())
        return bool(retry_state.attempt_number)  # unknown to a retry condition

    with pytest.raises(AttributeError, match="attempt_number"):
        rp.retry_any(reads_attempt_number)(KeyError("x"))
    assert isinstance(seen[0], KeyError)


@pytest.mark.anyio
async def test_a_step_retries_under_a_policy_of_tenacity_objects() -> None:
    from tickwork import StartEvent, StopEvent, Workflow, step

    attempts: list[int] = []

    class Flaky(Workflow):
        @step(
            retry_policy=rp.retry_policy(
                retry=tenacity.retry_if_exception_type(ConnectionError),
                wait=tenacity.wait_none(),
                stop=tenacity.stop_after_attempt(3),
            )
        )
        async def call(self, ev: StartEvent) -> StopEvent:
            attempts.append(len(attempts))
            if len(attempts) <= ev.failures:
                raise ev.error("down")
            return StopEvent(result=len(attempts))

    assert await Flaky(timeout=5).run(failures=2, error=ConnectionError) == 3
    attempts.clear()
    with pytest.raises(ConnectionError):
        await Flaky(timeout=5).run(failures=5, error=ConnectionError)
    assert len(attempts) == 3  # stop_after_attempt(3): three executions
    attempts.clear()
    with pytest.raises(KeyError):
        await Flaky(timeout=5).run(failures=5, error=KeyError)
    assert len(attempts) == 1  # not a ConnectionError: never retried
