"""``tickwork runs show``: a journaled run as it is now.

The run's *current* state is its latest snapshot with the journal records after it
folded through the reducer (``tickwork.journal.load_run``), so it needs the run's
workflow.  ``current_view`` describes that state for a human: what the run is doing,
its alive time against its timeout, running and queued work (with the last error of a
retry), the waiters and their deadlines, the questions it asked, its state store, and
why a failed run failed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from tickwork._cli.console import one_line
from tickwork._cli.journal_view import local_time
from tickwork._cli.questions import pending_questions
from tickwork.events import CollectionReleaseEvent
from tickwork.journal import RunEntry, load_run
from tickwork.runtime.types.state import WorkItem
from tickwork.runtime.verbose import summarize
from tickwork.workflow import Workflow

__all__ = ["current_text", "current_view", "failure_text"]

_MAX_VALUE = 60
_FINISHED = ("completed", "failed", "timed_out")


async def current_view(workflow: Workflow, entry: RunEntry) -> dict[str, Any]:
    """The run's current state (see the module), as JSON-ready data.

    Raises ``JournalError`` when the journal cannot be loaded.
    """
    ctx = await load_run(workflow, entry.run_id)
    state = ctx._current_run_state()
    model = await ctx.store.get_state()
    timeout = entry.options.get("timeout", state.config.timeout)
    questions = pending_questions(state)
    busy = [
        {"step": name, "worker": inv.worker_id, "input": _input_name(inv.item)}
        for name, step in state.steps.items()
        for inv in step.in_progress.values()
    ]
    queued = [_queued(name, item) for name, step in state.steps.items() for item in step.queue]
    return {
        "activity": _activity(entry, busy, queued, questions),
        "alive_time": state.elapsed_alive,
        "timeout": timeout,
        "busy": busy,
        "queued": queued,
        "waiters": [
            {
                "step": q.step,
                "waiting_for": q.response_types[0].__name__,
                "requirements": {k: repr(v) for k, v in q.prefilled.items()},
                "question": summarize(q.asked) if q.asked is not None else None,
                "deadline": q.deadline,
            }
            for q in questions
            if q.step is not None
        ],
        "questions": [
            {"question": q.text, "answer_with": [t.__name__ for t in q.response_types]}
            for q in questions
            if q.step is None
        ],
        "state": _state_values(model),
    }


def _activity(entry: RunEntry, busy: list[Any], queued: list[Any], questions: list[Any]) -> str:
    if entry.status in _FINISHED:
        return entry.status
    if busy or queued:
        work = f"{len(busy)} running, {len(queued)} queued"
        return f"interrupted ({work}): resume it to go on"
    if questions:
        return "waiting for input"
    return "idle"


def _input_name(item: WorkItem) -> str:
    event = item.event
    if isinstance(event, CollectionReleaseEvent):
        return f"a batch of {len(event.events)}"
    return type(event).__name__


def _queued(step: str, item: WorkItem) -> dict[str, Any]:
    return {
        "step": step,
        "input": _input_name(item),
        "attempts": item.attempts,
        "last_error": one_line(item.last_exception) if item.last_exception else None,
        "not_before": item.not_before,
    }


def _state_values(model: Any) -> dict[str, str]:
    """Each key of the state store with a short ``repr`` of its value."""
    if not isinstance(model, BaseModel):
        return {}
    values: dict[str, Any] = {name: getattr(model, name) for name in type(model).model_fields}
    values.update(getattr(model, "_data", None) or {})
    return {key: _short(value) for key, value in values.items()}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 3] + "..."


def failure_text(failure: Mapping[str, Any] | None) -> str | None:
    """``step explode: RuntimeError: kaboom`` from a final snapshot's ``failure``."""
    if not isinstance(failure, Mapping):
        return None
    exception = failure.get("exception") or {}
    kind = str(exception.get("exception_type", "?")).rpartition(".")[2]
    message = " ".join(str(exception.get("exception_message", "")).split())
    return (
        f"step {failure.get('step_name')}: {kind}: {message}"
        if message
        else f"step {failure.get('step_name')}: {kind}"
    )


def _when(stamp: float) -> str:
    """``2026-12-01 10:00:05 (in 3s)`` or ``(3s ago)``, in local time."""
    delta = stamp - time.time()
    relative = f"in {_duration(delta)}" if delta > 0 else f"{_duration(-delta)} ago"
    return f"{local_time(stamp)} ({relative})"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def current_text(view: dict[str, Any]) -> list[str]:
    """The lines ``runs show`` prints for ``current_view``'s data."""
    alive = f"{view['alive_time']:.3f}s"
    timeout = view["timeout"]
    if timeout is None:
        alive += " (no timeout)"
    else:
        alive += f" ({max(0.0, timeout - view['alive_time']):.3f}s of the timeout left)"
    lines = [
        _row("activity", view["activity"]),
        _row("alive time", alive),
        _row(
            "running",
            ", ".join(f"{b['step']}:{b['worker']} ({b['input']})" for b in view["busy"]) or "none",
        ),
    ]
    queued = [_queued_text(q) for q in view["queued"]]
    lines.append(_row("queued", queued[0] if queued else "none"))
    lines += [_row("", text) for text in queued[1:]]
    waiters = view["waiters"]
    if not waiters:
        lines.append(_row("waiting", "none"))
    for index, waiter in enumerate(waiters):
        requirements = ", ".join(f"{k}={v}" for k, v in waiter["requirements"].items())
        wanted = waiter["waiting_for"] + (f" ({requirements})" if requirements else "")
        deadline = (
            "no deadline" if waiter["deadline"] is None else f"deadline {_when(waiter['deadline'])}"
        )
        lines.append(
            _row(
                "waiting" if index == 0 else "", f"{waiter['step']} waits for {wanted}, {deadline}"
            )
        )
        if waiter["question"]:
            lines.append(_row("", f"  asked: {waiter['question']}"))
    questions = view["questions"]
    if not questions:
        lines.append(_row("questions", "none"))
    for index, question in enumerate(questions):
        answers = " or ".join(question["answer_with"]) or "nothing (no step accepts an answer)"
        lines.append(
            _row(
                "questions" if index == 0 else "", f"{question['question']} (answer with {answers})"
            )
        )
    state = view["state"]
    lines.append(_row("state", ", ".join(f"{k}={v}" for k, v in state.items()) or "empty"))
    return lines


def _queued_text(item: dict[str, Any]) -> str:
    text = f"{item['step']} ({item['input']})"
    if item["last_error"]:
        text += f", attempt {item['attempts'] + 1} after {item['last_error']}"
    if item["not_before"] is not None:
        text += f", not before {_when(item['not_before'])}"
    return text


def _row(label: str, text: str) -> str:
    return f"{label + ':' if label else '':<15}{text}"
