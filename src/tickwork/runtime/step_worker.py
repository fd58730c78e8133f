"""Executing one invocation: bind arguments, call the body, turn the outcome into data.

Whatever the body does, ``execute_invocation`` returns one
``StepOutcome``: a return value (checked against
the step's contract), a waiter suspension, or a failure carrying the retry decision,
taken here and now so that replay never asks the policy again.  Only cancellation
propagates.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import anyio
import anyio.to_thread

from tickwork._step_threads import step_thread
from tickwork.errors import StepTimeoutError, WorkflowRuntimeError
from tickwork.events import Event
from tickwork.retry_policy import call_policy, retry_seed
from tickwork.runtime.control_loop.runner import WorkerLane
from tickwork.runtime.step_scope import CURRENT_SCOPE, ScopeHost, StepScope, Suspend
from tickwork.runtime.types.evolve import new_record
from tickwork.runtime.types.kinds import IS_EVENT
from tickwork.runtime.types.results import Completed, Failed, StepOutcome, Suspended
from tickwork.runtime.types.state import Invocation, RunConfig, StepSpec
from tickwork.runtime.types.ticks import StepResult

__all__ = ["WorkerHost", "StepInvoker", "StepInvokers", "check_return_value", "execute_invocation"]

# Read once per step: module globals spare the attribute lookups (and a bound method).
# The clock stays ``time.time()``, read through the module: a patched ``time.time``
# (a test's skewed clock, freezegun) must stamp step results too.
_weak = weakref.ref
_set_scope = CURRENT_SCOPE.set


class WorkerHost(ScopeHost, Protocol):
    """What executing an invocation needs from the run hosting it (the run session).

    Defined here, where it is used, so that the worker never imports the session.
    """

    @property
    def invokers(self) -> StepInvokers:
        """Step name -> how to call it."""
        ...

    @property
    def run_span(self) -> Any:
        """The run's tracing span (``None`` when tracing is off)."""
        ...

    def step_span(self, invocation: Invocation) -> Any:
        """The tracing span of one invocation (``None`` when tracing is off)."""
        ...

    def thread_limiter(self, spec: StepSpec) -> Any:
        """The limiter of a sync step's worker threads in this run."""
        ...

    async def resolve_resources(self, resources: list[Any]) -> dict[str, Any]:
        """Resolve a step's resources for one invocation."""
        ...


def check_return_value(spec: StepSpec, value: Any) -> None:
    """Raise ``WorkflowRuntimeError`` when ``value`` breaks the step's return contract."""
    if value is None:
        return
    if isinstance(value, list):
        if not spec.is_fan_out:
            raise WorkflowRuntimeError(
                f"step {spec.name!r} returned a list, but its return annotation is not a "
                "fan-out (annotate it -> list[E] to fan out)"
            )
        for element in value:
            if not isinstance(element, Event):
                raise WorkflowRuntimeError(
                    f"step {spec.name!r} returned a fan-out list containing "
                    f"{type(element).__name__}, which is not an Event"
                )
        return
    if not isinstance(value, Event):
        raise WorkflowRuntimeError(
            f"step {spec.name!r} returned {type(value).__name__}, which is not an Event "
            "(return an Event instance or None)"
        )
    if type(value) in spec.list_only_types:
        raise WorkflowRuntimeError(
            f"step {spec.name!r} returned a bare {type(value).__name__}, a type its "
            f"annotation declares only inside list[...]; return [{type(value).__name__}(...)] "
            "or declare it as a bare union member"
        )


class StepInvoker:
    """What calling one step needs, looked up once per run instead of per invocation."""

    __slots__ = (
        "collection_param",
        "context_parameter",
        "direct",
        "event_name",
        "event_returns",
        "fn",
        "is_async",
        "list_only_types",
        "positional",
        "resources",
        "retry_policy",
        "spec",
        "timeout",
    )

    def __init__(self, fn: Callable[..., Any], spec: StepSpec) -> None:
        config = fn._step_config  # type: ignore[attr-defined]
        self.fn = fn
        self.spec = spec
        self.is_async = inspect.iscoroutinefunction(fn)
        self.list_only_types = spec.list_only_types
        self.timeout: float | None = config.timeout
        self.retry_policy = config.retry_policy
        self.event_name: str = config.event_name
        self.context_parameter: str | None = config.context_parameter
        self.collection_param: str | None = (
            config.collection_param[0] if config.collection_param is not None else None
        )
        self.resources: list[Any] = list(config.resources)
        self.event_returns: set[type] = set()
        """Classes of the values this step returned that passed as bare events (an
        ``Event``, not one of its list-only types): another value of one of them needs
        no check (see ``_check_direct_return``).  A cache: shared by the runs of the
        workflow, and losing an entry only costs a check."""
        # The common shape: an async body with no resources and no per-step timeout,
        # awaited right in execute_invocation (no extra coroutine layer).
        self.direct = self.is_async and not self.resources and self.timeout is None
        self.positional = (
            _positional_order(fn, self.event_name, self.context_parameter)
            if self.direct and spec.kind == "plain" and self.collection_param is None
            else NO_POSITIONAL
        )
        """How a direct body takes its arguments by position (``NO_POSITIONAL``: by
        keyword, through ``_bind_arguments``)."""


NO_POSITIONAL = 0
"""``StepInvoker.positional``: call with keyword arguments."""
EVENT_ONLY = 1
"""``StepInvoker.positional``: ``fn(event)``."""
CONTEXT_FIRST = 2
"""``StepInvoker.positional``: ``fn(context, event)``."""
EVENT_FIRST = 3
"""``StepInvoker.positional``: ``fn(event, context)``."""


def _positional_order(fn: Callable[..., Any], event_name: str, context_name: str | None) -> int:
    """How ``fn`` takes the event (and the context) by position, when its own parameters
    are exactly those, positional-or-keyword; else ``NO_POSITIONAL``.

    Positional arguments skip a kwargs dict and the keyword matching of every call
    (``_bind_arguments``), the same binding for such a signature.  A wrapper's own
    signature is read, not the one ``functools.wraps`` reports for the function it
    wraps: a ``(*args, **kwargs)`` wrapper sees keywords, as it always did.
    """
    try:
        parameters = list(inspect.signature(fn, follow_wrapped=False).parameters.values())
    except (TypeError, ValueError):
        return NO_POSITIONAL
    if any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters):
        return NO_POSITIONAL
    names = [p.name for p in parameters]
    if names == [event_name] and context_name is None:
        return EVENT_ONLY
    if context_name is not None:
        if names == [context_name, event_name]:
            return CONTEXT_FIRST
        if names == [event_name, context_name]:
            return EVENT_FIRST
    return NO_POSITIONAL


class StepInvokers:
    """Step name -> ``StepInvoker``, each built when first asked for: one table per
    workflow instance and step registry, shared by all its runs.

    The invokers built so far are in ``table``, a plain dict, which a worker reads
    first: a subscript of a dict subclass (one with ``__missing__``, say) goes through a
    method call, some 200 machine instructions per step.
    """

    __slots__ = ("_config", "_functions", "table")

    def __init__(self, functions: Mapping[str, Callable[..., Any]], config: RunConfig) -> None:
        self._functions = functions
        self._config = config
        self.table: dict[str, StepInvoker] = {}

    def __getitem__(self, step: str) -> StepInvoker:
        """The invoker of ``step``, built if it is not yet."""
        invoker = self.table.get(step)
        if invoker is None:
            spec = self._config.steps[step]
            invoker = self.table[step] = StepInvoker(self._functions[step], spec)
        return invoker


def _in_step_thread(scope: StepScope, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Run a sync body in its worker thread, marked as this invocation's thread."""
    scope.worker_thread = threading.get_ident()
    with step_thread():
        return fn(**kwargs)


def _bind_arguments(
    invocation: Invocation, invoker: StepInvoker, scope: StepScope
) -> dict[str, Any]:
    item = invocation  # the work item it runs (an Invocation carries its fields)
    kwargs: dict[str, Any]
    if invoker.collection_param is not None:
        kwargs = {invoker.collection_param: list(getattr(item.event, "events", []))}
    elif item.bound_events is not None:
        kwargs = dict(item.bound_events)
    else:
        kwargs = {invoker.event_name: item.event}
    if invoker.context_parameter:
        kwargs[invoker.context_parameter] = scope.context()
    return kwargs


def _call_direct(invocation: Invocation, invoker: StepInvoker, scope: StepScope) -> Any:
    """Call a direct body (see ``StepInvoker.positional``); returns its coroutine."""
    positional = invoker.positional
    event = invocation.event
    if positional == CONTEXT_FIRST:
        return invoker.fn(scope.context(), event)
    if positional == EVENT_FIRST:
        return invoker.fn(event, scope.context())
    return invoker.fn(**_bind_arguments(invocation, invoker, scope))


async def _run_body(
    session: WorkerHost, invocation: Invocation, invoker: StepInvoker, scope: StepScope
) -> Any:
    CURRENT_SCOPE.set(weakref.ref(scope))
    kwargs = _bind_arguments(invocation, invoker, scope)
    if invoker.resources:
        kwargs.update(await session.resolve_resources(invoker.resources))
    if invoker.is_async:
        value = await invoker.fn(**kwargs)
    else:
        value = await anyio.to_thread.run_sync(
            functools.partial(_in_step_thread, scope, invoker.fn, kwargs),
            abandon_on_cancel=True,
            limiter=session.thread_limiter(invoker.spec),
        )
    check_return_value(invoker.spec, value)
    return value


async def _run_with_timeout(
    session: WorkerHost, invocation: Invocation, invoker: StepInvoker, scope: StepScope
) -> Any:
    timeout = invoker.timeout
    with anyio.move_on_after(timeout) as deadline:
        return await _run_body(session, invocation, invoker, scope)
    if deadline.cancelled_caught:
        raise StepTimeoutError(
            f"step {invocation.step!r} exceeded its timeout of {timeout} seconds",
            step_name=invocation.step,
            timeout=timeout,
        )
    raise AssertionError("unreachable")  # pragma: no cover


def _failure(
    session: WorkerHost,
    invocation: Invocation,
    invoker: StepInvoker,
    error: Exception,
    scope: StepScope,
) -> Failed:
    """A ``Failed`` outcome with the retry decision taken now."""
    failed_at = time.time()
    policy = invoker.retry_policy
    delay: float | None = None
    if policy is not None:
        item = invocation  # the work item it runs
        attempts = item.attempts + 1
        first = item.first_attempt_at or invocation.dispatched_at
        try:
            delay = call_policy(
                policy,
                max(0.0, failed_at - first),
                attempts,
                error,
                retry_seed(session.run_id, invocation.step, attempts),
            )
        except Exception as policy_error:
            policy_error.__cause__ = error
            error, delay = policy_error, None
    return Failed(
        exception=error,
        retry_delay=delay,
        failed_at=failed_at,
        sends=scope.sends,
        deleted_waiters=tuple(scope.deleted_waiters),
    )


async def execute_invocation(session: WorkerHost, invocation: Invocation, lane: WorkerLane) -> None:
    """Run one invocation and post its outcome to ``lane`` (a ``StepResult`` tick).  Only
    cancellation propagates.

    It takes itself off ``lane.unstarted`` first, before anything can suspend: the loop
    waits for every dispatched worker to start before it reduces a result.

    The outcome is reported from here rather than returned, so that a worker task is this
    one coroutine over the step body.  An exception escaping the outcome's computation
    (a runtime bug, never a step's own failure) is reported as the invocation's failure,
    so the run ends instead of waiting for a result that never comes.
    """
    outcome: StepOutcome
    lane.unstarted -= 1
    try:
        # StepScope(session, invocation, lane, session.loop_thread) without a class call
        # or a helper's frame (see new_record): one per step.  Every slot is written
        # here, as ``StepScope.__init__`` writes it; a new slot must be written in both.
        scope: StepScope = new_record(StepScope)
        scope.session = session
        scope.invocation = invocation
        scope.lane = lane
        scope.loop_thread = session.loop_thread
        scope.sends = 0
        scope.returned = False
        scope.collect_ops = ()
        scope.deleted_waiters = ()
        scope.views = None
        scope.face = None
        scope.worker_thread = None
        try:  # the built invokers as a plain dict (see StepInvokers)
            invoker = session.invokers.table[invocation.step]
        except KeyError:
            invoker = session.invokers[invocation.step]
        span = session.step_span(invocation) if session.run_span is not None else None
        try:
            if invoker.direct:
                _set_scope(_weak(scope))
                if invoker.positional == EVENT_ONLY:  # the simplest body: no frame more
                    value = await invoker.fn(invocation.event)
                else:
                    value = await _call_direct(invocation, invoker, scope)
                if type(value) not in invoker.event_returns:
                    _check_direct_return(invoker, value)
            elif invoker.timeout is None:
                value = await _run_body(session, invocation, invoker, scope)
            else:
                value = await _run_with_timeout(session, invocation, invoker, scope)
        except Suspend as suspend:
            if span is not None:
                span.suspended()
            outcome = Suspended(
                suspend.request,
                sends=scope.sends,
                collect_ops=tuple(scope.collect_ops),
                deleted_waiters=tuple(scope.deleted_waiters),
            )
        except Exception as error:
            if span is not None:
                span.failed(error)
            outcome = _failure(session, invocation, invoker, error, scope)
        except BaseException:
            if span is not None:
                span.cancelled()
            raise
        else:
            if span is not None:
                span.succeeded()
            if scope.collect_ops or scope.deleted_waiters:
                outcome = _completed_with_ops(value, scope)
            else:  # Completed(value, scope.sends) without a class call (see new_record)
                outcome = new_record(Completed)
                outcome.value = value
                outcome.sends = scope.sends
                outcome.collect_ops = ()
                outcome.deleted_waiters = ()
        finally:
            scope.returned = True  # scope.close(), without its frame: one per step
            scope.face = None
    except Exception as error:
        outcome = Failed(error, None, time.time())
    # The outcome posted as a tick, here rather than by a method of the loop (one frame
    # less per step): the worker leaves the asyncio pool's task map first (what
    # ``AsyncioPool.done`` does; ``None`` under trio, whose workers leave on exit).
    tasks = lane.worker_tasks
    if tasks is not None:
        tasks.pop(invocation.invocation_id, None)
    tick = new_record(StepResult)  # without a class call: one per step (every field)
    tick.stamped_at = time.time()
    tick.step = invocation.step
    tick.invocation_id = invocation.invocation_id
    tick.outcome = outcome
    lane.post(tick)
    # A failure's traceback holds this frame: drop the outcome (which holds the
    # exception) so that the two do not keep each other alive for the GC to find.
    del outcome, tick


_MAX_EVENT_RETURNS = 64
"""The most classes a ``StepInvoker.event_returns`` holds (a program making event
classes on the fly must not keep them all alive through it)."""


def _check_direct_return(invoker: StepInvoker, value: Any) -> None:
    """``check_return_value`` for a direct body's ``value``, remembering its class in
    ``invoker.event_returns`` when it is a bare event the step may return.

    Such a value needs no check: it is an ``Event`` and not of a list-only type, which is
    all ``check_return_value`` asks of it.  A step returns the same few classes over and
    over, and a set lookup is cheaper than asking ``IS_EVENT`` and ``list_only_types``
    (a subscript of a dict subclass goes through a method call) on every return.
    """
    kind = type(value)
    if IS_EVENT[kind] and kind not in invoker.list_only_types:
        returns = invoker.event_returns
        if len(returns) >= _MAX_EVENT_RETURNS:
            returns.clear()
        returns.add(kind)
        return
    check_return_value(invoker.spec, value)  # None, a list, or a wrong value


def _completed_with_ops(value: Any, scope: StepScope) -> Completed:
    """The outcome of a body that returned ``value`` after collecting or deleting waiters."""
    return Completed(
        value,
        sends=scope.sends,
        collect_ops=tuple(scope.collect_ops),
        deleted_waiters=tuple(scope.deleted_waiters),
    )
