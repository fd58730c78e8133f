"""A step that completes a ``collect_events`` batch and then waits for a human.

Buffer changes take effect when the invocation completes (api.md §8.5); a waiter
suspension is not a completion, so the re-run after the answer sees the same buffer and
releases the same batch.
"""

from __future__ import annotations

import anyio
import pytest

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.events import HumanResponseEvent


class Part(Event):
    n: int


class Approve(HumanResponseEvent):
    pass


class CollectThenWait(Workflow):
    @step
    async def start(self, ctx: Context, ev: StartEvent) -> Part | None:
        for n in (1, 2):
            ctx.send_event(Part(n=n))
        return None

    @step(num_workers=1)
    async def join(self, ctx: Context, ev: Part) -> StopEvent | None:
        batch = ctx.collect_events(ev, [Part, Part])
        if batch is None:
            return None
        await ctx.wait_for_event(Approve, timeout=5)
        return StopEvent(result=[part.n for part in batch])


@pytest.mark.anyio
async def test_a_suspension_does_not_commit_the_collect_release() -> None:
    handler = CollectThenWait(timeout=5).run()
    await anyio.sleep(0.05)
    snapshot = handler.ctx.to_dict()
    buffered = snapshot["workers"]["join"]["collected_events"]
    assert len(buffered.get("default", [])) == 1, "the released batch is still pending"
    handler.ctx.send_event(Approve())
    assert await handler == [1, 2]
