"""OpenTelemetry spans for runs and step invocations (api.md §27.2).

Spans exist only when ``opentelemetry-api`` is importable (extra ``otel``); otherwise
every function here is a cheap no-op and nothing is imported.  With the API but no SDK
configured, OpenTelemetry's no-op tracer makes them nearly free.

* ``tickwork.run``: one per session (a resume makes a new one), a child of the span that
  was current when ``run()`` was called (``run()`` captures the contextvars).
* ``tickwork.step``: one per invocation, a child of the run span.  User spans started in
  a step, and child workflow runs, are children of the step span.
"""

from __future__ import annotations

import contextlib
from typing import Any

from tickwork._otel import available, tracer, tracing_configured

__all__ = ["StepSpan", "end_run_span", "start_run_span", "step_span", "tracing_available"]


def tracing_available() -> bool:
    """Whether ``opentelemetry-api`` can be imported (checked once)."""
    return available()


def start_run_span(run_id: str, workflow_name: str, start_event: Any, resumed: bool) -> Any:
    """Start the run span of a session; ``None`` when tracing is unavailable."""
    if not tracing_configured():
        return None
    attributes: dict[str, Any] = {
        "tickwork.run_id": run_id,
        "tickwork.workflow.name": workflow_name,
        "tickwork.resumed": resumed,
    }
    if start_event is not None:
        cls = type(start_event)
        attributes["tickwork.start_event"] = f"{cls.__module__}.{cls.__qualname__}"
    return tracer().start_span("tickwork.run", attributes=attributes)


def end_run_span(span: Any, kind: str | None, error: BaseException | None) -> None:
    """End a run span with the status of the run's outcome (``kind`` None: aborted)."""
    if span is None:
        return
    from opentelemetry.trace import Status, StatusCode

    if kind == "complete":
        span.set_status(Status(StatusCode.OK))
    elif kind == "cancel" or kind is None:
        span.set_attribute("tickwork.cancelled", True)
    else:
        if error is not None:
            span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, str(error) if error is not None else kind))
    span.end()


class StepSpan:
    """The span of one invocation, made current for the step body."""

    __slots__ = ("_span", "_token")

    def __init__(self, run_span: Any, attributes: dict[str, Any]) -> None:
        from opentelemetry import context, trace

        parent = trace.set_span_in_context(run_span)
        self._span = tracer().start_span("tickwork.step", context=parent, attributes=attributes)
        self._token = context.attach(trace.set_span_in_context(self._span))

    def _detach(self) -> None:
        from opentelemetry import context

        # A different context may be current after a cancellation: nothing to undo then.
        with contextlib.suppress(Exception):
            context.detach(self._token)

    def succeeded(self) -> None:
        """The body returned."""
        self._detach()
        self._span.end()

    def suspended(self) -> None:
        """The body is waiting for an event: not an error."""
        self._span.set_attribute("tickwork.step.suspended", True)
        self._detach()
        self._span.end()

    def failed(self, error: BaseException) -> None:
        """The body failed (step timeouts included)."""
        from opentelemetry.trace import Status, StatusCode

        self._span.record_exception(error)
        self._span.set_status(Status(StatusCode.ERROR, str(error)))
        self._detach()
        self._span.end()

    def cancelled(self) -> None:
        """The invocation was cancelled: not an error."""
        self._span.set_attribute("tickwork.step.cancelled", True)
        self._detach()
        self._span.end()


def step_span(
    run_span: Any,
    run_id: str,
    workflow_name: str,
    step: str,
    worker_id: int,
    input_event: Any,
    attempt: int,
) -> StepSpan | None:
    """Start the span of one invocation (``None`` without a run span)."""
    if run_span is None:
        return None
    return StepSpan(
        run_span,
        {
            "tickwork.run_id": run_id,
            "tickwork.workflow.name": workflow_name,
            "tickwork.step.name": step,
            "tickwork.step.worker_id": str(worker_id),
            "tickwork.step.input_event": type(input_event).__name__,
            "tickwork.step.attempt": attempt,
        },
    )
