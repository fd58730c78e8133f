"""A worker of a fleet, in one process on the in-memory store (scale-out.md §4, §5).

The same flows run across processes on SQLite and Postgres in the other fleet tests;
here every piece is in one event loop, so each behaviour is checked quickly and under
asyncio and trio: submit and await a result, follow the stream remotely, park a run that
only waits and wake it with a send, idempotent sends, cancel, poison runs, graceful
hand-back.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.errors import WorkflowCancelledByUser
from tickwork.events import InputRequiredEvent
from tickwork.fleet import Worker, WorkerOptions
from tickwork.journal import InMemoryJournal
from tickwork.journal.recovery import resume_claimed
from tickwork.serde.serializers import JsonSerializer
from tickwork.stores.records import JournalError, Lease, LeaseLost, StoreUnavailable

pytestmark = pytest.mark.anyio


class Note(Event):
    text: str


class Echo(Workflow):
    @step
    async def echo(self, ctx: Context, ev: StartEvent) -> StopEvent:
        ctx.write_event_to_stream(Note(text=f"got {ev.text}"))
        return StopEvent(result=ev.text.upper())


class Question(InputRequiredEvent):
    prompt: str


class Answer(Event):
    value: str


class Approve(Workflow):
    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        answer = await ctx.wait_for_event(
            Answer, waiter_event=Question(prompt=f"approve {ev.item}?"), timeout=None
        )
        return StopEvent(result=f"{ev.item}: {answer.value}")


async def serving(worker: Worker, body: Any) -> Any:
    """Run ``worker`` while ``body()`` runs; stop it after."""
    async with anyio.create_task_group() as group:
        group.start_soon(worker.run)
        try:
            with anyio.fail_after(10):
                return await body()
        finally:
            worker.stop()


async def test_a_submitted_run_is_claimed_run_and_its_result_read_remotely() -> None:
    store = InMemoryJournal()
    handler = await Echo(journal=store).submit(run_id="e1", text="hi")
    assert (await store.get_run("e1")).status == "queued"  # type: ignore[union-attr]
    worker = Worker([Echo(journal=store)], store, WorkerOptions(poll_seconds=0.05))

    async def body() -> Any:
        return await handler

    assert await serving(worker, body) == "HI"
    events = [type(ev).__name__ async for ev in handler.stream_events(after=-1)]
    assert events == ["Note", "StopEvent"]
    assert await handler.is_done()


async def test_submit_is_idempotent_on_the_run_id() -> None:
    store = InMemoryJournal()
    await Echo(journal=store).submit(run_id="same", text="a")
    await Echo(journal=store).submit(run_id="same", text="b")
    entry = await store.get_run("same")
    assert entry is not None
    assert JsonSerializer().from_record(entry.start_event).text == "a"


async def test_a_waiting_run_is_parked_and_a_send_wakes_it_on_any_worker() -> None:
    store = InMemoryJournal()
    handler = await Approve(journal=store).submit(run_id="p1", item="tea")
    options = WorkerOptions(poll_seconds=0.05, idle_release=0.1)
    worker = Worker([Approve(journal=store)], store, options)

    async def body() -> Any:
        async for ev in handler.stream_events():
            if isinstance(ev, Question):
                break
        while (await store.get_run("p1")).status != "parked":  # type: ignore[union-attr]
            await anyio.sleep(0.02)
        assert "p1" not in worker.active  # no memory held for it
        assert await handler.send_event(Answer(value="yes"), idempotency_key="k1")
        assert not await handler.send_event(Answer(value="no"), idempotency_key="k1")
        return await handler

    assert await serving(worker, body) == "tea: yes"
    assert worker.parked == 1  # the woken run is not parked again before it ran
    entry = await store.get_run("p1")
    assert entry is not None and entry.status == "completed" and entry.lease_until is None


class SlowSnapshots(InMemoryJournal):
    """Snapshots take ``snapshot_pause`` seconds to write."""

    snapshot_pause = 0.0

    async def write_snapshot(
        self, run_id: str, seq: int, snapshot: dict[str, Any], *, lease: Lease | None = None
    ) -> None:
        await anyio.sleep(self.snapshot_pause)
        await super().write_snapshot(run_id, seq, snapshot, lease=lease)


class StalledInbox:
    """A worker's view of ``base`` whose reads of an empty inbox, made by the task
    named ``worker`` (not by the runs' sessions), take ``stall`` seconds once armed."""

    def __init__(self, base: InMemoryJournal) -> None:
        self.base = base
        self.stall = 0.0
        self.stalled = anyio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    async def read_inbox(self, run_id: str) -> Any:
        items = await self.base.read_inbox(run_id)
        if not items and self.stall and anyio.get_current_task().name == "worker":
            self.stalled.set()
            await anyio.sleep(self.stall)
        return items


async def test_a_run_that_finishes_while_the_worker_reads_its_inbox_is_not_parked() -> None:
    # The worker found the run only waiting and reads its inbox before parking it;
    # meanwhile the run's session gets its answer and finishes.  Parking it then would
    # stop the session while it writes its final snapshot.
    store = SlowSnapshots()
    handler = await Approve(journal=store).submit(run_id="r1", item="tea")
    view = StalledInbox(store)
    options = WorkerOptions(poll_seconds=0.05, idle_release=0.1)
    worker = Worker([Approve(journal=store)], view, options)  # type: ignore[arg-type]

    async def body() -> Any:
        async for ev in handler.stream_events():
            if isinstance(ev, Question):
                break
        store.snapshot_pause = 1.0
        view.stall = 0.5
        await view.stalled.wait()  # the worker found the run idle, reads its inbox
        assert await handler.send_event(Answer(value="yes"))
        result = await handler
        while "r1" in worker.active:  # its session writes its final snapshot
            await anyio.sleep(0.02)
        return result

    async with anyio.create_task_group() as group:
        group.start_soon(worker.run, name="worker")
        try:
            with anyio.fail_after(10):
                assert await body() == "tea: yes"
        finally:
            worker.stop()
    entry = await store.get_run("r1")
    snapshot = await store.read_snapshot("r1")
    assert entry is not None and entry.status == "completed" and snapshot is not None
    assert snapshot[0] == entry.last_seq + 1, "the final snapshot was not written"
    assert worker.parked == 0


async def test_a_remote_cancel_ends_the_run_as_cancelled() -> None:
    store = InMemoryJournal()
    handler = await Approve(journal=store).submit(run_id="c1", item="tea")
    worker = Worker([Approve(journal=store)], store, WorkerOptions(poll_seconds=0.05))

    async def body() -> Any:
        async for ev in handler.stream_events():
            if isinstance(ev, Question):
                break
        await handler.cancel_run()
        with pytest.raises(WorkflowCancelledByUser):
            await handler
        return (await store.get_run("c1")).status  # type: ignore[union-attr]

    assert await serving(worker, body) == "cancelled"


async def test_a_send_to_a_finished_run_raises() -> None:
    store = InMemoryJournal()
    handler = await Echo(journal=store).submit(run_id="f1", text="x")
    worker = Worker([Echo(journal=store)], store, WorkerOptions(poll_seconds=0.05))

    async def body() -> Any:
        return await handler

    await serving(worker, body)
    with pytest.raises(JournalError, match="f1"):
        await handler.send_event(Answer(value="late"))


class Stuck(Workflow):
    """Its step never returns: each session of the run dies inside it (a poison run)."""

    started: list[str] = []

    @step
    async def hang(self, ev: StartEvent) -> StopEvent:
        Stuck.started.append("hang")
        await anyio.sleep_forever()
        return StopEvent()


async def test_a_run_whose_every_session_dies_in_a_step_fails_as_poison() -> None:
    store = InMemoryJournal()
    flow = Stuck(journal=store)
    Stuck.started.clear()
    await flow.submit(run_id="stuck")
    sessions = 0
    with anyio.fail_after(10):
        while claim := await store.claim_run("stuck", f"w{sessions}", max_claims=3):
            assert sessions < 10, "the run was never failed as poison"
            handler = await resume_claimed(flow, claim)
            while len(Stuck.started) == sessions:  # its session journaled, then ran the step
                await anyio.sleep(0.01)
            handler._session.lose_lease(LeaseLost("the worker died"))  # writes nothing more
            await store.expire_owner(claim.lease.owner)
            sessions += 1
    entry = await store.get_run("stuck")
    assert entry is not None and entry.status == "failed" and entry.outcome is not None
    assert entry.outcome.error is not None
    message = entry.outcome.error["exception_message"]
    assert "run 'stuck' was claimed 3 times without progress" in message
    # The first session journaled the start event (progress); the next three did not.
    assert sessions == 4


async def test_a_session_stopped_before_it_began_does_not_move_the_run() -> None:
    # A worker may park or hand back a run it just claimed before the run's task ran.
    store = InMemoryJournal()
    await Echo(journal=store).submit(run_id="s1", text="x")
    claim = await store.claim_run("s1", "w")
    assert claim is not None
    handler = await resume_claimed(Echo(journal=store), claim)
    handler._session.stop_here()
    with anyio.fail_after(5):
        await handler._session.host_done.wait()
    await anyio.sleep(0.05)
    entry = await store.get_run("s1")
    assert entry is not None and (entry.status, entry.last_seq) == ("running", -1)
    assert await store.read_stream("s1") == []  # its step never ran


class Patient(Workflow):
    @step
    async def wait(self, ctx: Context, ev: StartEvent) -> StopEvent:
        try:
            await ctx.wait_for_event(Answer, timeout=ev.seconds)
        except TimeoutError:
            return StopEvent(result="timed out")
        return StopEvent(result="answered")


@pytest.mark.parametrize("wake", ["send", "deadline"])
async def test_a_parked_run_claimed_to_wake_is_not_parked_again_first(wake: str) -> None:
    # With idle_release=0 a run that only waits is parked at once; one claimed for its
    # inbox item or its passed deadline must first take it, then end.
    store = InMemoryJournal()
    seconds = 30.0 if wake == "send" else 0.3
    handler = await Patient(journal=store).submit(run_id="w1", seconds=seconds)
    options = WorkerOptions(poll_seconds=0.05, idle_release=0)
    worker = Worker([Patient(journal=store)], store, options)

    async def body() -> Any:
        while (await store.get_run("w1")).status != "parked":  # type: ignore[union-attr]
            await anyio.sleep(0.01)
        if wake == "send":
            await handler.send_event(Answer(value="yes"), idempotency_key="a")
        return await handler

    assert await serving(worker, body) == ("answered" if wake == "send" else "timed out")
    assert (worker.claimed, worker.parked) == (2, 1)
    entry = await store.get_run("w1")
    assert entry is not None and entry.status == "completed"


class Nap(Workflow):
    @step
    async def nap(self, ev: StartEvent) -> StopEvent:
        await anyio.sleep(ev.seconds)
        return StopEvent(result="rested")


async def test_a_worker_renews_its_leases_within_its_own_lease_time() -> None:
    # The run outlives its lease many times over: renewed every third of the worker's
    # lease time, it is never taken over, not even by its own worker.
    store = InMemoryJournal()
    handler = await Nap(journal=store, timeout=None).submit(run_id="n1", seconds=1.5)
    options = WorkerOptions(poll_seconds=0.05, lease_seconds=0.4)
    worker = Worker([Nap(journal=store, timeout=None)], store, options)

    async def body() -> Any:
        return await handler

    assert await serving(worker, body) == "rested"
    entry = await store.get_run("n1")
    assert entry is not None and entry.epoch == 1  # claimed once
    assert worker.claimed == 1 and worker.lost == 0


async def test_a_worker_that_claims_its_own_expired_run_again_resumes_it() -> None:
    # Late renewals let the lease expire; the worker's next claim takes the run again
    # (a new epoch): the stale session stops, the run goes on from its journal.
    store = InMemoryJournal()
    handler = await Approve(journal=store).submit(run_id="x1", item="tea")
    worker = Worker([Approve(journal=store)], store, WorkerOptions(poll_seconds=0.05))

    async def body() -> Any:
        async for ev in handler.stream_events():
            if isinstance(ev, Question):
                break
        await store.expire_owner(worker.worker_id)
        while (await store.get_run("x1")).epoch < 2:  # type: ignore[union-attr]
            await anyio.sleep(0.02)
        await handler.send_event(Answer(value="yes"), idempotency_key="k1")
        return await handler

    assert await serving(worker, body) == "tea: yes"
    assert worker.lost == 1


class _Outage(InMemoryJournal):
    """A store that is unreachable for its first few claims and touches (the database
    is down longer than the store retries)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def _down(self) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise JournalError("the database is unreachable")

    async def claim_runs(self, *args: Any, **kwargs: Any) -> Any:
        self._down()
        return await super().claim_runs(*args, **kwargs)

    async def touch_worker(self, *args: Any, **kwargs: Any) -> None:
        self._down()
        await super().touch_worker(*args, **kwargs)


async def test_a_worker_outlives_a_store_that_fails_for_a_while() -> None:
    store = _Outage(failures=4)
    handler = await Echo(journal=store).submit(run_id="o1", text="still here")
    worker = Worker([Echo(journal=store)], store, WorkerOptions(poll_seconds=0.05))

    async def body() -> Any:
        return await handler

    assert await serving(worker, body) == "STILL HERE"
    assert store.failures == 0


class _UnreachableOnce(InMemoryJournal):
    """A store whose first snapshot read finds the database unreachable."""

    def __init__(self) -> None:
        super().__init__()
        self.unreachable = 1

    async def read_snapshot(self, run_id: str) -> Any:
        if self.unreachable:
            self.unreachable -= 1
            raise StoreUnavailable(f"run {run_id!r}: the database is unreachable")
        return await super().read_snapshot(run_id)


async def test_a_run_the_store_cannot_load_for_now_is_claimed_again_not_failed() -> None:
    store = _UnreachableOnce()
    handler = await Echo(journal=store).submit(run_id="u1", text="later")
    options = WorkerOptions(poll_seconds=0.05, lease_seconds=0.3)
    worker = Worker([Echo(journal=store)], store, options)

    async def body() -> Any:
        return await handler

    assert await serving(worker, body) == "LATER"
    assert worker.claimed == 2  # again once the first claim's lease expired


async def test_releasing_a_run_that_finished_under_the_lease_leaves_it_finished() -> None:
    store = InMemoryJournal()
    handler = await Echo(journal=store).submit(run_id="done", text="x")
    worker = Worker([Echo(journal=store)], store, WorkerOptions(poll_seconds=0.05))

    async def body() -> Any:
        return await handler

    await serving(worker, body)
    entry = await store.get_run("done")
    assert entry is not None and entry.owner is not None
    lease = Lease("done", entry.owner, entry.epoch)  # its last owner still holds the fence
    for status in ("queued", "parked"):
        await store.release_run(lease, status=status)  # type: ignore[arg-type]
    entry = await store.get_run("done")
    assert entry is not None and entry.status == "completed"
    assert await store.claim_runs("w2", ["Echo"]) == []
    with pytest.raises(LeaseLost):  # a stale lease is still refused
        await store.release_run(Lease("done", entry.owner, entry.epoch - 1))
