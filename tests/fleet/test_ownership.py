"""Ownership of a journaled run: leases, epochs and fencing (scale-out.md §3).

A run started here is owned by this process; when another owner claims it (its lease
expired: this process was paused, or partitioned), every later write of the old session
is refused and the session stops at once, publishing nothing.  The lease renewal thread
notices a lost lease without waiting for a write.
"""

from __future__ import annotations

import anyio
import pytest

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.journal import InMemoryJournal
from tickwork.stores.leases import keeper_for
from tickwork.stores.records import LeaseLost

pytestmark = pytest.mark.anyio


class Go(Event):
    pass


class Slow(Workflow):
    @step
    async def first(self, ctx: Context, ev: StartEvent) -> Go:
        await ctx.wait_for_event(Go, timeout=None)  # parked here until the test says go
        return Go()

    @step
    async def second(self, ev: Go) -> StopEvent:
        return StopEvent(result="done")


async def test_a_run_started_here_is_owned_by_this_process() -> None:
    store = InMemoryJournal()
    handler = Slow(journal=store, timeout=10).run(run_id="mine")
    entry = await store.get_run("mine")
    assert entry is not None and entry.owner is not None and entry.epoch == 1
    assert entry.lease_until is not None
    handler.ctx.send_event(Go())
    assert await handler == "done"


async def test_a_zombie_session_stops_at_its_first_refused_write() -> None:
    store = InMemoryJournal()
    handler = Slow(journal=store, timeout=10).run(run_id="zombie")
    await anyio.sleep(0.05)  # the run waits
    entry = await store.get_run("zombie")
    assert entry is not None and entry.owner is not None
    # Another worker takes the run over (the lease "expired" while this one was paused).
    await store.expire_owner(entry.owner)
    claim = await store.claim_run("zombie", "other-worker")
    assert claim is not None and claim.lease.epoch == entry.epoch + 1
    before = [r.seq async for r in store.read("zombie")]
    handler.ctx.send_event(Go())  # the zombie would now run its next step
    with anyio.fail_after(5), pytest.raises(LeaseLost, match="zombie"):
        await handler
    # Nothing the zombie did after the takeover reached the journal.
    assert [r.seq async for r in store.read("zombie")] == before
    assert handler.get_stop_event() is None  # and it published no terminal event


async def test_the_renewal_thread_stops_a_session_whose_lease_was_taken() -> None:
    store = InMemoryJournal()
    handler = Slow(journal=store, timeout=10).run(run_id="renewed")
    await anyio.sleep(0.05)
    entry = await store.get_run("renewed")
    assert entry is not None and entry.owner is not None
    await store.expire_owner(entry.owner)
    assert await store.claim_run("renewed", "other-worker") is not None
    keeper_for(store, entry.owner, 30.0).renew_now()  # the thread's next renewal
    with anyio.fail_after(5), pytest.raises(LeaseLost, match="renewed"):
        await handler
