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
from tickwork.stores.records import JournalError, Lease, LeaseLost

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
    assert worker.parked >= 1


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


async def test_a_finished_run_is_never_released() -> None:
    store = InMemoryJournal()
    handler = await Echo(journal=store).submit(run_id="done", text="x")
    worker = Worker([Echo(journal=store)], store, WorkerOptions(poll_seconds=0.05))

    async def body() -> Any:
        return await handler

    await serving(worker, body)
    entry = await store.get_run("done")
    assert entry is not None and entry.owner is not None
    lease = Lease("done", entry.owner, entry.epoch)  # its last owner still holds the fence
    with pytest.raises(LeaseLost, match=r"run 'done'.*has finished \(completed\)"):
        await store.release_run(lease, status="queued")
    assert (await store.get_run("done")).status == "completed"  # type: ignore[union-attr]
