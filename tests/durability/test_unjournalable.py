"""A durable run whose payload cannot be journaled fails loudly, with one terminal event."""

from __future__ import annotations

import pytest

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
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


class Nudge(Event):
    pass


class Waits(Workflow):
    @step
    async def wait(self, ctx: Context, ev: StartEvent) -> StopEvent:
        got = await ctx.wait_for_event(Nudge)
        return StopEvent(result=type(got).__name__)


@pytest.mark.anyio
async def test_a_durable_send_returns_once_journaled_and_raises_when_it_cannot_be() -> None:
    """Issue #12: ``await handler.send_event`` to a journaled run is acknowledged when
    the event is durable; one that cannot be journaled raises instead."""
    store = InMemoryJournal()
    handler = Waits(journal=store, timeout=5).run(run_id="nudged")
    with pytest.raises(WorkflowRuntimeError, match="nudged"):
        await handler.send_event(Nudge(payload=Opaque()))  # JSON cannot hold it
    # Like any payload the journal cannot hold, it fails the run, loudly.
    with pytest.raises(WorkflowRuntimeError, match="Nudge"):
        await handler


@pytest.mark.anyio
async def test_a_durable_send_is_in_the_journal_when_the_call_returns() -> None:
    store = InMemoryJournal()
    handler = Waits(journal=store, timeout=5).run(run_id="acked")
    await handler.send_event(Nudge())
    kinds = [(r.data["type"], r.data.get("event", {})) async for r in store.read("acked")]
    assert any(kind == "add_event" and "Nudge" in str(event) for kind, event in kinds)
    assert await handler == "Nudge"
    with pytest.raises(WorkflowRuntimeError, match="ended"):
        await handler.send_event(Nudge())
