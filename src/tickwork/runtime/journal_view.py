"""``handler.journal()``: the in-memory journal of a run kept with ``journal=True``."""

from __future__ import annotations

from collections.abc import AsyncIterator

from tickwork.errors import WorkflowRuntimeError
from tickwork.runtime.session import RunSession
from tickwork.serde.journal_codec import encode_tick
from tickwork.types import JournalRecord

__all__ = ["iterate_journal"]


async def iterate_journal(session: RunSession) -> AsyncIterator[JournalRecord]:
    """Yield the records kept so far, then live ones, until the run has ended."""
    if session.journal is None:
        raise WorkflowRuntimeError(
            f"journaling is not enabled for workflow {session.config.workflow_name}; "
            "create it with Workflow(journal=True)"
        )
    index = 0
    while True:
        while index < len(session.journal):
            tick, seq = session.journal[index]
            index += 1
            yield JournalRecord(seq=seq, data=encode_tick(tick, session.workflow.serializer))
        if not session.live:
            return
        await session.journal_grew()
