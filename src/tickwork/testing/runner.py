"""``WorkflowTestRunner``: run a workflow once and collect what it published."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from tickwork.context.context import Context
from tickwork.errors import WorkflowRuntimeError
from tickwork.events import Event, StartEvent

__all__ = ["WorkflowTestResult", "WorkflowTestRunner"]


@dataclass
class WorkflowTestResult:
    """What one test run produced: the streamed events, their counts, the result, ctx."""

    collected: list[Event]
    event_types: dict[type, int]
    result: Any
    ctx: Context[Any]


class WorkflowTestRunner:
    """Runs a workflow, drains its stream and returns a ``WorkflowTestResult``."""

    def __init__(self, workflow: Any) -> None:
        self._workflow = workflow

    async def run(
        self,
        start_event: StartEvent | None = None,
        ctx: Context[Any] | None = None,
        expose_internal: bool = True,
        exclude_events: list[type] | None = None,
    ) -> WorkflowTestResult:
        """Run once; failures propagate unchanged."""
        if start_event is None:
            cls = self._workflow.start_event_class
            try:
                start_event = cls()
            except ValidationError as error:
                raise WorkflowRuntimeError(
                    f"cannot build the start event {cls.__name__} with no arguments: {error}"
                ) from error
        handler = self._workflow.run(start_event=start_event, ctx=ctx)
        excluded = tuple(exclude_events or ())
        collected: list[Event] = []
        async for event in handler.stream_events(expose_internal=expose_internal):
            if type(event) not in excluded:
                collected.append(event)
        result = await handler
        return WorkflowTestResult(
            collected=collected,
            event_types=dict(Counter(type(ev) for ev in collected)),
            result=result,
            ctx=handler.ctx,
        )
