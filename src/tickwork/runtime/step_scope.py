"""What one step invocation can do to its run: the backend of the step-face ``Context``.

A ``StepScope`` numbers the invocation's sends (their emission keys make them
exactly-once across resumes), records ``collect_events`` decisions and waiter
deletions for the step result, and answers ``wait_for_event`` from the waiters the
invocation was dispatched with.  Calls from a sync step's worker thread are handed to
the event loop and return once the run has accepted them.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import re
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol

import anyio.from_thread

from tickwork._serde_fields import qualified_name
from tickwork.errors import WorkflowRuntimeError
from tickwork.events import StopEvent
from tickwork.retry_policy import RetryInfo
from tickwork.runtime.control_loop.runner import TickFeed
from tickwork.runtime.control_loop.streams import EMPTY_BUFFER, decide_collect
from tickwork.runtime.types.results import CollectOp, Suspend, WaiterRequest
from tickwork.runtime.types.state import CollectBuffer, Invocation, RunConfig, StepSpec
from tickwork.runtime.types.ticks import AddEvent, PublishEvent, Tick

__all__ = [
    "CURRENT_SCOPE",
    "ScopeHost",
    "StepScope",
    "Suspend",
    "check_send_target",
    "current_step_context",
    "implicit_waiter_id",
]

_log = logging.getLogger("tickwork.runtime")
# Read per stream write: a module global saves the attribute lookup on ``threading``.
_get_ident = threading.get_ident


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _stable_repr(value: Any) -> str:
    """``repr(value)`` without memory addresses, which differ between runs."""
    return f"{type(value).__qualname__}:{_ADDRESS.sub('', repr(value))}"


def _canonical(requirements: Mapping[str, Any] | None) -> str:
    if not requirements:
        return ""
    return json.dumps(dict(sorted(requirements.items())), sort_keys=True, default=_stable_repr)


def implicit_waiter_id(
    event_type: type, requirements: Mapping[str, Any] | None, work_item_id: str
) -> str:
    """A waiter id stable across re-runs and resumes, distinct per work item."""
    raw = f"{qualified_name(event_type)}|{_canonical(requirements)}"
    digest = hashlib.sha256(f"{raw}|{work_item_id}".encode()).hexdigest()[:16]
    return f"waiter-{digest}"


def check_send_target(specs: Mapping[str, StepSpec], event: Any, step: str | None) -> None:
    """Reject what a send can never deliver, at the call (both faces)."""
    if isinstance(event, StopEvent):
        raise WorkflowRuntimeError(
            f"cannot send {type(event).__name__} with send_event(): a stop event must be "
            "returned from a step to end the run"
        )
    if step is None:
        return
    spec = specs.get(step)
    if spec is None:
        raise WorkflowRuntimeError(
            f"send_event(step={step!r}): the workflow has no step named {step!r} "
            f"(steps: {', '.join(sorted(specs))})"
        )
    if spec.kind == "collect":
        raise WorkflowRuntimeError(
            f"send_event(step={step!r}) with {type(event).__name__}: {step!r} is a list[E] "
            "collect step, and collect steps only receive events emitted inside a fan-out "
            "stream"
        )
    if not spec.accepts(type(event)):
        raise WorkflowRuntimeError(
            f"send_event(step={step!r}): step {step!r} does not accept {type(event).__name__}"
        )


CURRENT_SCOPE: contextvars.ContextVar[weakref.ref[StepScope] | None] = contextvars.ContextVar(
    "tickwork_step_scope", default=None
)
"""The scope of the invocation running in this task (weakly), set when its body starts.

Each invocation runs in its own task with its own copy of the contextvars, so the value
never needs resetting; a weak reference, because tasks the body spawns copy it."""


def current_step_context() -> Any:
    """The step-face Context of the invocation running in this task/thread, or ``None``."""
    ref = CURRENT_SCOPE.get()
    scope = ref() if ref is not None else None
    return scope.context() if scope is not None else None


class ScopeHost(Protocol):
    """What a ``StepScope`` needs from the run hosting it (the run session).

    Defined here, where it is used, so that the scope never imports the session.
    """

    @property
    def config(self) -> RunConfig:
        """The run's immutable configuration."""
        ...

    @property
    def live(self) -> bool:
        """Whether the run has not ended yet."""
        ...

    @property
    def run_id(self) -> str:
        """The run's id."""
        ...

    @property
    def loop_thread(self) -> int:
        """The thread id of the event loop running the run."""
        ...

    def make_step_context(self, scope: Any) -> Any:
        """The step-face ``Context`` of an invocation (built by the layer above)."""
        ...

    @property
    def stream_lane(self) -> Any:
        """Where a step's stream writes go from the loop's thread (``.write(event,
        invocation id)``), while the run's loop runs; ``None`` otherwise."""
        ...


class StepScope:
    """The per-invocation state behind a step-face ``Context``.

    A worker builds its scope without calling the class (``execute_invocation``, one
    per step): a new slot must be written there too.
    """

    __slots__ = (
        "__weakref__",
        "collect_ops",
        "deleted_waiters",
        "face",
        "invocation",
        "lane",
        "loop_thread",
        "returned",
        "sends",
        "session",
        "views",
        "worker_thread",
    )

    def __init__(
        self,
        session: ScopeHost,
        invocation: Invocation,
        lane: TickFeed,
        loop_thread: int,
    ) -> None:
        self.session = session
        self.invocation = invocation
        self.lane = lane  # the run's loop (its ``post``): no bound method per invocation
        self.loop_thread = loop_thread
        """The event loop's thread: writes from it go straight to the stream lane."""
        self.sends = 0
        self.returned = False
        # Created on first use: most invocations never collect nor time out a waiter.
        self.collect_ops: list[CollectOp] | tuple[()] = ()
        self.deleted_waiters: list[str] | tuple[()] = ()
        self.views: dict[str, CollectBuffer] | None = None
        self.face: Any = None
        self.worker_thread: int | None = None

    def context(self) -> Any:
        """The step-face ``Context`` of this invocation, built on first use."""
        if self.face is None:
            self.face = self.session.make_step_context(self)
        return self.face

    def close(self) -> None:
        """The body returned: later calls are best-effort, and the scope lets go of its
        ``Context``.  The Context refers back to the scope, and that cycle would keep
        both (and the invocation, its buffers and views) alive until the garbage
        collector ran, which made a fan-in of n events pay full collections."""
        self.returned = True
        self.face = None

    # -- plumbing ----------------------------------------------------------------

    def _hand_to_loop(self, tick: Tick) -> None:
        thread = threading.get_ident()
        if thread == self.loop_thread:
            self.lane.post(tick)
            return
        if thread != self.worker_thread:
            raise RuntimeError(
                f"a Context of step {self.invocation.step!r} was used from a thread "
                "tickwork did not start for it; call it from the event loop's thread or "
                "from the step's own worker thread"
            )
        try:
            anyio.from_thread.run_sync(self.lane.post, tick)
        except RuntimeError as error:
            if self.session.live:
                raise RuntimeError(
                    f"a Context of step {self.invocation.step!r} was used from a thread "
                    "tickwork did not start for it; call it from the event loop's thread "
                    "or from the step's own worker thread"
                ) from error
            _log.warning(
                "%s from step %r was dropped: the run has ended",
                type(tick).__name__,
                self.invocation.step,
            )

    def _late(self, what: str) -> bool:
        """A call after the invocation returned is best-effort and never recorded."""
        if not self.session.live:
            _log.warning(
                "%s from step %r after the run ended was ignored", what, self.invocation.step
            )
            return True
        return False

    # -- sends and stream writes -------------------------------------------------------

    def send(self, event: Any, step: str | None) -> None:
        """Add ``event`` to the run, keyed by this invocation and its send index."""
        check_send_target(self.session.config.steps, event, step)
        if self.returned:
            if not self._late("send_event"):
                self._hand_to_loop(AddEvent(time.time(), event, step))
            return
        key = (self.invocation.invocation_id, self.sends)
        self.sends += 1
        self._hand_to_loop(
            AddEvent(
                time.time(),
                event,
                step,
                emission_key=key,
                source_step=self.invocation.step,
                recovery_counts=self.invocation.recovery_counts,
            )
        )

    def write(self, event: Any) -> None:
        """Publish ``event`` to the run's stream (``None`` is a no-op)."""
        if event is None or (self.returned and self._late("write_event_to_stream")):
            return
        if _get_ident() == self.loop_thread:  # Context.write_event_to_stream inlines this
            lane = self.session.stream_lane
            if lane is not None:  # else the loop has stopped: the run has ended
                lane.write(event, self.invocation.invocation_id)
        else:
            self._hand_to_loop(PublishEvent(time.time(), event, self.invocation.invocation_id))

    # -- collect_events -------------------------------------------------------------

    def collect(
        self, event: Any, expected: Sequence[type], buffer_id: str | None
    ) -> list[Any] | None:
        """Decide one ``collect_events`` call against this invocation's view."""
        if not expected:
            return []
        bid = buffer_id or "default"
        views = self.views
        if views is None:
            views = self.views = {}
        view = views.get(bid)
        if view is None:
            view = self.invocation.collect_view.get(bid, EMPTY_BUFFER)
        # ``expected`` is read, never kept: copying it would add O(len) to every call.
        wanted = expected if isinstance(expected, (list, tuple)) else list(expected)
        op, new_view, released = decide_collect(view, bid, event, wanted)
        views[bid] = new_view
        if not self.collect_ops:
            self.collect_ops = []
        self.collect_ops.append(op)
        return released

    # -- waiters -------------------------------------------------------------------

    def wait_for(
        self,
        event_type: type,
        waiter_event: Any,
        waiter_id: str | None,
        requirements: Mapping[str, Any] | None,
        timeout: float | None,
    ) -> Any:
        """The resolved event, or raise: ``TimeoutError`` or ``Suspend``."""
        item = self.invocation  # the work item it runs
        wid = waiter_id or implicit_waiter_id(event_type, requirements, item.work_item_id)
        waiter = self.invocation.waiters_view.get(wid)
        if waiter is not None and waiter.resolved_event is not None:
            return waiter.resolved_event
        if waiter is not None and waiter.timed_out:
            if wid not in self.deleted_waiters:
                if not self.deleted_waiters:
                    self.deleted_waiters = []
                self.deleted_waiters.append(wid)
            raise TimeoutError(
                f"timed out after {timeout}s waiting for {event_type.__name__} "
                f"in step {self.invocation.step!r}"
            )
        raise Suspend(WaiterRequest(wid, event_type, requirements, waiter_event, timeout))

    def idempotency_key(self) -> str:
        """``run-id:invocation-id:attempt``: stable across re-runs of this invocation."""
        invocation = self.invocation
        return f"{self.session.run_id}:{invocation.invocation_id}:{invocation.attempts}"

    # -- retry info ------------------------------------------------------------------

    def retry_info(self) -> RetryInfo:
        """This invocation's retry state (``retry_number`` 0 on the first attempt)."""
        item = self.invocation  # the work item it runs
        first = item.first_attempt_at or self.invocation.dispatched_at
        failed_at = (
            datetime.fromtimestamp(item.last_failed_at, tz=timezone.utc)
            if item.last_failed_at is not None
            else None
        )
        return RetryInfo(
            retry_number=item.attempts,
            elapsed_seconds=max(0.0, self.invocation.dispatched_at - first)
            if item.attempts
            else 0.0,
            last_exception=item.last_exception,  # type: ignore[arg-type]
            last_failed_at=failed_at,
        )
