"""A durable run whose payload cannot be journaled fails loudly, with one terminal event."""

from __future__ import annotations

import pytest

from tickwork import Event, StartEvent, StopEvent, Workflow, step
from tickwork.errors import WorkflowRuntimeError
from tickwork.events import WorkflowFailedEvent
from tickwork.journal import InMemoryJournal


class Opaque:
    """Not JSON-serializable."""


class Carrier(Event):
    pass


class Unjournalable(Workflow):
    @step
    async def first(self, ev: StartEvent) -> Carrier:
        return Carrier(payload=Opaque())

    @step
    async def second(self, ev: Carrier) -> StopEvent:
        return StopEvent(result="never durable")


@pytest.mark.anyio
async def test_a_payload_the_journal_cannot_encode_fails_the_run_naming_it() -> None:
    store = InMemoryJournal()
    handler = Unjournalable(journal=store, timeout=5).run(run_id="opaque-run")
    events = [ev async for ev in handler.stream_events()]
    with pytest.raises(WorkflowRuntimeError, match="Carrier") as info:
        await handler
    assert "opaque-run" in str(info.value)
    terminal = [ev for ev in events if isinstance(ev, StopEvent)]
    assert len(terminal) == 1 and isinstance(terminal[0], WorkflowFailedEvent)
    assert terminal[0].exception is info.value
