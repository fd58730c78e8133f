"""Retry policies: when a failed step runs again, and after how long (api.md §12).

A policy is any object with a compatible ``next`` method (``RetryPolicy``).  The usual
way to build one is ``retry_policy``, which combines three primitives:

- a ``RetryCondition`` decides whether an error is worth retrying at all;
- a ``WaitStrategy`` gives the delay before the next attempt;
- a ``StopCondition`` decides when to give up.

The three kinds are protocols: any callable of the right shape qualifies, and so do
tenacity's own objects, which the policy and the combinators call with a small stand-in
for tenacity's call state (see ``tickwork.retry_policy._adapters``).

The primitives carry the names, parameter names and formulas of tenacity's, so code written
against tenacity reads the same here.  Two differences matter: they receive plain values
(the error, the retry index, the elapsed time) instead of a call-state object, and random
strategies accept a ``seed``.  The runtime derives that seed from the run id
(``retry_seed``), so a replayed or resumed run computes the same jitter.

Example::

    from tickwork.retry_policy import retry_policy, stop_after_attempt, wait_exponential

    policy = retry_policy(wait=wait_exponential(max=30), stop=stop_after_attempt(5))
"""

from __future__ import annotations

from tickwork.retry_policy._base import (
    RetryCondition,
    RetryInfo,
    RetryPolicy,
    StopCondition,
    WaitStrategy,
    retry_all,
    retry_any,
    stop_all,
    stop_any,
    time_unit_type,
    wait_chain,
    wait_combine,
)
from tickwork.retry_policy.conditions import (
    retry_always,
    retry_if_exception,
    retry_if_exception_cause_type,
    retry_if_exception_message,
    retry_if_exception_type,
    retry_if_not_exception_message,
    retry_if_not_exception_type,
    retry_never,
    retry_unless_exception_type,
)
from tickwork.retry_policy.policy import (
    ConstantDelayRetryPolicy,
    ExponentialBackoffRetryPolicy,
    retry_policy,
)
from tickwork.retry_policy.policy import (
    call_policy as call_policy,
)
from tickwork.retry_policy.policy import (
    retry_seed as retry_seed,
)
from tickwork.retry_policy.stops import (
    stop_after_attempt,
    stop_after_delay,
    stop_before_delay,
    stop_never,
)
from tickwork.retry_policy.waits import (
    wait_exponential,
    wait_exponential_jitter,
    wait_fixed,
    wait_full_jitter,
    wait_incrementing,
    wait_none,
    wait_random,
    wait_random_exponential,
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
