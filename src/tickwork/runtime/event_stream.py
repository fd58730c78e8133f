"""The run's published-event buffer and its single-consumer cursor.

Published events are buffered until consumed, so a consumer that attaches late (even
after the run has ended) still sees everything.  Each event goes to exactly one reader;
concurrent readers share one cursor.  ``StepStateChanged`` records are kept as light
command records (``PublishStepState``, and ``RunWorker`` for RUNNING) and turned into
pydantic events only when read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio

from tickwork.errors import WorkflowRuntimeError
from tickwork.events import InternalDispatchEvent, StepState, StepStateChanged, StopEvent
from tickwork.runtime.types.commands import PublishStepState, RunWorker

__all__ = ["EventStream", "materialize"]

_STATES = {
    "preparing": StepState.PREPARING,
    "not_running": StepState.NOT_RUNNING,
}


def materialize(item: Any) -> Any:
    """Turn a buffered item into the event a reader sees."""
    if isinstance(item, RunWorker):
        invocation = item.invocation
        return StepStateChanged.model_construct(
            name=invocation.step,
            step_state=StepState.RUNNING,
            worker_id=str(invocation.worker_id),
            input_event_name=type(invocation.item.event).__name__,
            output_event_name=None,
        )
    if not isinstance(item, PublishStepState):
        return item
    state = _STATES[item.state]
    if item.state == "not_running":
        input_name = str(item.input_type)
        output = str(item.output_type) if item.has_output else None
    else:
        input_name = item.input_type.__name__
        output = None
    return StepStateChanged.model_construct(
        name=item.step,
        step_state=state,
        worker_id=item.worker_id,
        input_event_name=input_name,
        output_event_name=output,
    )


def _is_internal(item: Any) -> bool:
    return isinstance(item, (PublishStepState, RunWorker, InternalDispatchEvent))


class EventStream:
    """An append-only buffer with one shared read cursor."""

    def __init__(self) -> None:
        self._items: list[Any] = []
        self._cursor = 0
        self._closed = False
        self._changed: anyio.Event | None = None
        self.consumed = False
        self.terminal_event: StopEvent | None = None

    def push(self, item: Any) -> None:
        """Append a published item and wake readers."""
        self._items.append(item)
        if isinstance(item, StopEvent):
            self.terminal_event = item
        self._wake()

    def close(self) -> None:
        """No more items will come (the terminal event was pushed, or the run aborted)."""
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    @property
    def drained(self) -> bool:
        """Closed and every item was handed out."""
        return self._closed and self._cursor >= len(self._items)

    async def next_item(self) -> tuple[bool, Any]:
        """The next unread item, waiting for one; ``(False, None)`` at the end."""
        while self._cursor >= len(self._items):
            if self._closed:
                return False, None
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()
        item = self._items[self._cursor]
        self._items[self._cursor] = None
        self._cursor += 1
        return True, item

    async def iterate(
        self, expose_internal: bool, consumed_error: str | None = None
    ) -> AsyncIterator[Any]:
        """Yield events until (and including) the first ``StopEvent``.

        With ``consumed_error``, a stream whose terminal event was already handed out
        raises ``WorkflowRuntimeError`` with that message instead of ending at once.
        """
        if consumed_error is not None and self.consumed:
            raise WorkflowRuntimeError(consumed_error)
        items = self._items
        while True:
            cursor = self._cursor
            if cursor < len(items):  # the common case: no coroutine, no wait
                item = items[cursor]
                items[cursor] = None
                self._cursor = cursor + 1
            else:
                ok, item = await self.next_item()
                if not ok:
                    return
            if not expose_internal and _is_internal(item):
                continue
            event = materialize(item)
            yield event
            if isinstance(event, StopEvent):
                self.consumed = True
                return
