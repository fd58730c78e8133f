"""Composing a policy from the primitives, and calling policies from the runtime."""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import math
import numbers
import weakref
from collections.abc import Callable

from tickwork._deprecation import warn_once
from tickwork.retry_policy._base import (
    RetryCondition,
    RetryPolicy,
    StopCondition,
    WaitStrategy,
    _retry_call,
    _stop_call,
    _wait_call,
    time_unit_type,
)
from tickwork.retry_policy.stops import stop_after_attempt
from tickwork.retry_policy.waits import wait_exponential, wait_fixed, wait_random_exponential

# --------------------------------------------------------------------------------------
# Composed policies
# --------------------------------------------------------------------------------------


class _ComposedRetryPolicy:
    """The policy ``retry_policy`` returns; private so that only the factory is API."""

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
