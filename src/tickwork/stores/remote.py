"""Following and answering a run from any process: ``RemoteHandler``.

``await store.attach(run_id)`` (or ``await workflow.submit(...)``) gives a handler that
talks to the run through its journal store only, so the run may be owned by any worker
of a fleet, change owners, or be parked and hold no memory anywhere:

* ``send_event(ev, idempotency_key=...)`` leaves the event in the run's inbox and returns
  once it is durable; it enters the run's journal exactly once (a parked run is woken);
* ``stream_events(after=position)`` yields every event the run published, once and in
  order, across owner changes, and can be resumed from the last position seen;
* ``await handler`` gives the run's result, or raises its exception;
* ``cancel_run()`` asks the run to stop (gracefully, as ``WorkflowHandler.cancel_run``);
* ``is_done()``, ``result()`` and ``exception()`` read the store.

Everything is polled (about once a second) and woken early by the store's
notifications, which are only hints.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator
from typing import Any

from tickwork._serde_fields import load_exception
from tickwork.errors import WorkflowRuntimeError
from tickwork.events import Event, InternalDispatchEvent, StopEvent
from tickwork.serde.serializers import BaseSerializer, JsonSerializer
from tickwork.stores.records import JournalError, RunEntry
from tickwork.stores.store import JournalStore

__all__ = ["RemoteHandler", "attach"]

POLL_SECONDS = 1.0
"""How long a remote handler waits between two reads when no notification comes."""


async def attach(
    store: JournalStore, run_id: str, serializer: BaseSerializer | None = None
) -> RemoteHandler:
    """A ``RemoteHandler`` of ``run_id`` (``JournalError`` if the store has no such
    run)."""
    if await store.get_run(run_id) is None:
        raise JournalError(f"the journal has no run {run_id!r}")
    return RemoteHandler(store, run_id, serializer)


class RemoteHandler:
    """The handle of a run that may live in another process (see the module docs)."""

    def __init__(
        self, store: JournalStore, run_id: str, serializer: BaseSerializer | None = None
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.serializer = serializer or JsonSerializer()
        self.position = -1
        """The stream position of the last event ``stream_events`` yielded."""

    def __repr__(self) -> str:
        return f"RemoteHandler({self.run_id!r}, {self.store!r})"

    # -- reading the store -------------------------------------------------------------

    async def _entry(self) -> RunEntry:
        entry = await self.store.get_run(self.run_id)
        if entry is None:
            raise JournalError(f"the journal has no run {self.run_id!r}")
        return entry

    async def is_done(self) -> bool:
        """Whether the run has reached a terminal outcome."""
        return (await self._entry()).finished

    async def _finished(self) -> RunEntry:
        while True:
            entry = await self._entry()
            if entry.finished:
                return entry
            await self.store.wait_for_change(POLL_SECONDS, self.run_id)

    def _decode(self, record: Any) -> Any:
        with self.serializer.validation_context():
            return self.serializer.from_record(record)

    async def stop_event(self) -> StopEvent:
        """Wait for the end of the run; its ``StopEvent``, or raise its exception."""
        entry = await self._finished()
        outcome = entry.outcome
        if entry.status == "completed" and outcome is not None and outcome.result is not None:
            stop: StopEvent = self._decode(outcome.result)
            return stop
        if outcome is not None and outcome.error is not None:
            with self.serializer.validation_context():
                error = load_exception(dict(outcome.error))
            if isinstance(error, BaseException):
                raise error
        raise WorkflowRuntimeError(
            f"run {self.run_id!r} ended as {entry.status} without a recorded outcome"
        )

    async def result(self) -> Any:
        """Wait for the end of the run: its result (``StopEvent.result``, or the event
        itself for a ``StopEvent`` subclass), or raise its exception."""
        stop = await self.stop_event()
        return stop.result if type(stop) is StopEvent else stop

    def __await__(self) -> Generator[Any, None, Any]:
        return self.result().__await__()

    async def exception(self) -> BaseException | None:
        """The run's exception once it has ended with one, else ``None`` (no wait)."""
        entry = await self._entry()
        outcome = entry.outcome
        if not entry.finished or outcome is None or outcome.error is None:
            return None
        with self.serializer.validation_context():
            error = load_exception(dict(outcome.error))
        return error if isinstance(error, BaseException) else None

    # -- talking to the run ------------------------------------------------------------

    async def send_event(
        self, event: Event, step: str | None = None, *, idempotency_key: str | None = None
    ) -> bool:
        """Deliver ``event`` to the run (to ``step`` only, when given); returns once the
        event is durable in the run's inbox.

        With the same ``idempotency_key`` a send is delivered once however often it is
        made; returns whether this call delivered it (a retry returns ``False``, even
        once the run has finished).  ``JournalError`` for a new event to a finished run.
        """
        payload = {"event": self.serializer.to_record(event), "step": step}
        return await self.store.send(self.run_id, "send", payload, idempotency_key=idempotency_key)

    async def cancel_run(self) -> None:
        """Ask the run to stop gracefully (nothing happens if it has already ended)."""
        entry = await self._entry()
        if entry.finished:
            return
        try:
            await self.store.send(self.run_id, "cancel")
        except JournalError:
            if not (await self._entry()).finished:
                raise

    async def stream_events(
        self, after: int | None = None, expose_internal: bool = False
    ) -> AsyncIterator[Event]:
        """Every event the run published after stream position ``after`` (default: where
        this handler stopped last), in order, ending with the terminal event."""
        position = self.position if after is None else after
        while True:
            items = await self.store.read_stream(self.run_id, position)
            for item in items:
                position = self.position = item.seq
                event = self._decode(item.event)
                if isinstance(event, InternalDispatchEvent) and not expose_internal:
                    continue
                yield event
                if isinstance(event, StopEvent):
                    return
            if not items:
                entry = await self._entry()
                if entry.finished and not await self.store.read_stream(self.run_id, position):
                    return
                await self.store.wait_for_change(POLL_SECONDS, self.run_id)
