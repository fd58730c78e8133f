"""``Workflow(verbose=True)``: one readable line per step activity and processed input.

Lines go to the logger ``tickwork.verbose`` at DEBUG when that level is enabled, else at
INFO when enabled, else to standard output (chosen when the workflow is constructed).
Every line starts with a bracketed tag: ``[step:worker]``, ``[step]`` or the kind of
input processed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from tickwork.events import StopEvent
from tickwork.runtime.types.commands import PublishStepState, RunWorker
from tickwork.runtime.types.results import Completed, Failed, Suspended
from tickwork.runtime.types.ticks import (
    AddEvent,
    CancelRun,
    StepResult,
    Tick,
    Timeout,
    WaiterTimeout,
)

__all__ = ["VerbosePrinter", "choose_sink", "summarize"]

_logger = logging.getLogger("tickwork.verbose")

_MAX_LINE = 200
_MAX_STRING = 50
_MAX_ITEMS = 3


def choose_sink() -> Callable[[str], None]:
    """DEBUG if enabled, else INFO if enabled, else ``print``."""
    if _logger.isEnabledFor(logging.DEBUG):
        return _logger.debug
    if _logger.isEnabledFor(logging.INFO):
        return _logger.info
    return print


def _short(value: Any) -> str:
    if isinstance(value, str) and len(value) > _MAX_STRING:
        return repr(value[:_MAX_STRING] + "...")
    if isinstance(value, (list, tuple)) and len(value) > _MAX_ITEMS:
        return f"[{len(value)} items]"
    if isinstance(value, dict) and len(value) > _MAX_ITEMS:
        return f"{{{len(value)} keys}}"
    return repr(value)


def summarize(event: Any) -> str:
    """``ClassName(k=v, ...)`` over declared and dynamic fields, at most 200 characters."""
    if event is None:
        return "None"
    if not isinstance(event, BaseModel):
        return _short(event)
    fields: dict[str, Any] = {name: getattr(event, name) for name in type(event).model_fields}
    fields.update(getattr(event, "_data", None) or {})
    if isinstance(event, StopEvent) and event.result is not None:
        fields["result"] = event.result
    text = f"{type(event).__name__}({', '.join(f'{k}={_short(v)}' for k, v in fields.items())})"
    return text if len(text) <= _MAX_LINE else text[: _MAX_LINE - 3] + "..."


class VerbosePrinter:
    """Formats the activity of one run into lines for a sink."""

    def __init__(self, sink: Callable[[str], None], timeout: float | None = None) -> None:
        self._sink = sink
        self._timeout = timeout

    def published(self, item: Any) -> None:
        """A published item: step state changes become dispatch/completion lines."""
        if isinstance(item, RunWorker):
            invocation = item.invocation
            tag = f"[{invocation.step}:{invocation.worker_id}]"
            self._sink(f"{tag} started with {summarize(invocation.event)}")
        elif isinstance(item, PublishStepState):
            self._step_state(item)
        elif isinstance(item, StopEvent):
            self._sink(f"[result] {summarize(item)}")
        else:
            self._sink(f"[publish] {summarize(item)}")

    def _step_state(self, item: PublishStepState) -> None:
        tag = f"[{item.step}:{item.worker_id}]"
        if item.state == "preparing":
            self._sink(f"[{item.step}] queued {item.input_type.__name__}: waiting for capacity")
        elif item.has_output:
            result = "no result" if item.event is None else f"-> {summarize(item.event)}"
            self._sink(f"{tag} completed {result}")

    def processed(self, tick: Tick) -> None:
        """A processed input that is worth a line of its own."""
        if isinstance(tick, AddEvent) and tick.emission_key is None:
            target = f" -> {tick.target_step}" if tick.target_step else ""
            self._sink(f"[add_event] {summarize(tick.event)}{target}")
        elif isinstance(tick, StepResult):
            self._step_result(tick)
        elif isinstance(tick, Timeout):
            self._sink(f"[timeout] the run timer fired (timeout={self._timeout}s)")
        elif isinstance(tick, WaiterTimeout):
            self._sink(f"[waiter_timeout] {tick.step}: waiter {tick.waiter_id}")
        elif isinstance(tick, CancelRun):
            self._sink("[cancel_run] cancel requested")

    def _step_result(self, tick: StepResult) -> None:
        outcome = tick.outcome
        if isinstance(outcome, Failed):
            retry = (
                f"retry in {outcome.retry_delay:g}s"
                if outcome.retry_delay is not None
                else "no retry"
            )
            self._sink(f"[{tick.step}] failed: {outcome.exception!r} ({retry})")
        elif isinstance(outcome, Suspended):
            waited = outcome.waiter.event_type.__name__
            self._sink(f"[{tick.step}] waiting for {waited} ({outcome.waiter.waiter_id})")
        elif isinstance(outcome, Completed):
            return
