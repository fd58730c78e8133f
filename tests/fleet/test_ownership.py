"""Ownership of a journaled run: leases, epochs and fencing (scale-out.md §3).

A run started here is owned by this process; when another owner claims it (its lease
expired: this process was paused, or partitioned), every later write of the old session
is refused and the session stops at once, publishing nothing.  The lease renewal thread
notices a lost lease without waiting for a write.
"""

from __future__ import annotations

import gc
import threading
import time
import warnings
import weakref
from typing import Any

import anyio
import pytest

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.errors import WorkflowCancelledByUser
from tickwork.journal import InMemoryJournal
from tickwork.stores.leases import LeaseKeeper, keeper_for
from tickwork.stores.records import JournalError, Lease, LeaseLost

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


class _Renewals(InMemoryJournal):
    """A store whose lease renewals succeed (every lease is kept), then fail or hang (a
    partition) on demand."""

    def __init__(self) -> None:
        super().__init__()
        self.mode = "ok"
        self.release = threading.Event()
        self.renewed_at: list[float] = []  # when each successful renewal began

    def renew_leases(self, owner: str, leases: Any, lease_seconds: float) -> set[str]:
        if self.mode == "fail":
            raise JournalError("the database is unreachable")
        if self.mode == "hang":
            self.release.wait(10)
            return set()
        self.renewed_at.append(time.monotonic())
        return {lease.run_id for lease in leases}


@pytest.mark.parametrize("mode", ["fail", "hang"])
async def test_a_keeper_whose_renewals_fail_or_hang_fences_itself_before_the_lease_ends(
    mode: str,
) -> None:
    store = _Renewals()
    lease_seconds = 1.0
    lost: list[tuple[float, str]] = []
    keeper = LeaseKeeper(store, "me", lease_seconds)
    keeper.hold(Lease("r1", "me", 1), lambda reason: lost.append((time.monotonic(), reason)))
    try:
        await anyio.sleep(0.4)  # a renewal succeeds
        store.mode = mode
        with anyio.fail_after(5):
            while not lost:
                await anyio.sleep(0.01)
    finally:
        store.release.set()
        keeper.drop("r1")
    fenced_at, reason = lost[0]
    assert "fenced itself" in reason
    # 0.8 x the lease after the last successful renewal began: before the lease that
    # renewal gave (from then at the latest) runs out.
    last_renewal = store.renewed_at[-1]
    assert 0.7 * lease_seconds <= fenced_at - last_renewal < 0.95 * lease_seconds


async def test_a_session_that_loses_its_lease_before_its_task_began_runs_nothing() -> None:
    # A worker may stop a session it just started (its lease was lost, or it parks the
    # run) before the session's task ran at all: the run must not go on regardless.
    store = InMemoryJournal()
    ran: list[str] = []

    class Once(Workflow):
        @step
        async def only(self, ev: StartEvent) -> StopEvent:
            ran.append("only")
            return StopEvent(result="ran")

    handler = Once(journal=store, timeout=10).run(run_id="early")
    handler._session.lose_lease(LeaseLost("run 'early': taken over"))  # no await before
    with anyio.fail_after(5), pytest.raises(LeaseLost, match="early"):
        await handler
    await handler._session.host_done.wait()
    assert ran == []
    assert [r.seq async for r in store.read("early")] == []


async def test_releasing_a_run_that_finished_under_the_lease_leaves_it_finished() -> None:
    store = InMemoryJournal()
    lease = store.register_run("done", "Flow", {"version": 1, "journal_seq": 0}, owner="w1")
    assert lease is not None
    await store.mark_finished("done", "completed", lease=lease)
    await store.release_run(lease, status="queued")  # a worker stopping as the run ends
    await store.release_run(lease, status="parked", wake_at=0.0)
    entry = await store.get_run("done")
    assert entry is not None and entry.status == "completed"
    assert await store.claim_runs("w2", ["Flow"], limit=5) == []


class _HangingAppends(InMemoryJournal):
    """Appends wait on a worker thread (as Postgres's do) and hang there on demand."""

    def __init__(self) -> None:
        super().__init__()
        self.hang = False
        self.release = threading.Event()

    async def append(self, run_id: str, records: Any, *args: Any, **kwargs: Any) -> None:
        if self.hang:
            await anyio.to_thread.run_sync(self.release.wait, 10)
        await super().append(run_id, records, *args, **kwargs)


class LongJob(Event):
    pass


class ShortJob(Event):
    pass


async def test_a_lost_lease_cancels_the_step_bodies_while_a_write_hangs() -> None:
    # The loop waits for an append the database does not answer (a partition) when
    # the lease is lost: the running step bodies stop at once all the same.
    store = _HangingAppends()
    seen: list[str] = []

    class Pair(Workflow):
        @step
        async def start(self, ctx: Context, ev: StartEvent) -> LongJob | ShortJob | None:
            ctx.send_event(LongJob())
            ctx.send_event(ShortJob())
            return None

        @step
        async def slow(self, ev: LongJob) -> StopEvent:
            seen.append("slow began")
            await anyio.sleep(1.0)
            seen.append("slow ended")
            return StopEvent(result="slow")

        @step
        async def quick(self, ev: ShortJob) -> None:
            await anyio.sleep(0.1)  # its result's append hangs

    handler = Pair(journal=store, timeout=10).run(run_id="hung")
    try:
        with anyio.fail_after(5):
            while not seen:
                await anyio.sleep(0.01)
        store.hang = True
        await anyio.sleep(0.3)
        handler._session.lose_lease(LeaseLost("run 'hung': fenced"))
        await anyio.sleep(1.2)
        assert seen == ["slow began"]
    finally:
        store.release.set()
    with anyio.fail_after(5), pytest.raises(LeaseLost, match="hung"):
        await handler


async def test_a_run_that_finished_under_its_lease_is_still_held_by_renewals() -> None:
    # Its owner is writing its final snapshot: a renewal must not report it lost.
    store = InMemoryJournal()
    lease = store.register_run("ending", "Flow", {"version": 1, "journal_seq": 0}, owner="w1")
    assert lease is not None
    await store.mark_finished("ending", "completed", lease=lease)
    assert store.renew_leases("w1", [lease], 30.0) == {"ending"}
    assert store.renew_leases("w1", [Lease("ending", "w1", 0)], 30.0) == set()
    entry = await store.get_run("ending")
    assert entry is not None and entry.lease_until is None  # finished: no lease renewed


async def test_a_hard_aborted_run_stops_renewing_its_lease_and_is_freed() -> None:
    # handler.cancel() abandons the run on the spot, as if the process had died: its lease
    # must run out (for a recovery to take the run over), and nothing keeps its session.
    store = InMemoryJournal()
    handler = Slow(journal=store, timeout=10).run(run_id="aborted")
    await anyio.sleep(0.05)  # the run waits
    entry = await store.get_run("aborted")
    assert entry is not None and entry.owner is not None
    ownership = handler._session.ownership
    assert ownership is not None
    keeper = keeper_for(store, entry.owner, ownership.lease_seconds)
    assert "aborted" in [lease.run_id for lease in keeper.held()]
    session = weakref.ref(handler._session)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        handler.cancel()
    with pytest.raises((WorkflowCancelledByUser, anyio.get_cancelled_exc_class())):
        await handler
    assert "aborted" not in [lease.run_id for lease in keeper.held()]
    del handler, ownership
    gc.collect()
    assert session() is None
