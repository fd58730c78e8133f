"""The inbox watcher: one reader of the inboxes of all the journaled runs of an event loop
(``tickwork.runtime.inbox_watcher``), for a store that reads many inboxes at once (the
SQLite store).

Every run still gets each item sent to it once, promptly when the send goes through the
same store object and within the poll interval when it comes from another process; a
run whose inbox cannot be read fails alone, as its own read would have made it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.journal import InMemoryJournal, SqliteJournal
from tickwork.runtime.inbox_watcher import _loop_watchers
from tickwork.stores.records import JournalError

pytestmark = pytest.mark.anyio

RUNS = 20


class Go(Event):
    value: int


class Waits(Workflow):
    @step
    async def first(self, ctx: Context, ev: StartEvent) -> StopEvent:
        go = await ctx.wait_for_event(Go, timeout=None)
        return StopEvent(result=go.value)


async def _until_waiting(store: SqliteJournal, run_ids: list[str]) -> None:
    """Until every run has journaled its wait (its first step is running)."""
    with anyio.fail_after(10):
        for run_id in run_ids:
            while len([r async for r in store.read(run_id)]) < 2:
                await anyio.sleep(0.01)


async def test_the_runs_of_one_event_loop_share_one_inbox_reader(tmp_path: Path) -> None:
    store = SqliteJournal(tmp_path / "runs.db")
    other = SqliteJournal(tmp_path / "runs.db")  # another process's store object
    try:
        workflow = Waits(journal=store, timeout=None)
        run_ids = [f"run-{i}" for i in range(RUNS)]
        handlers = [workflow.run(run_id=run_id) for run_id in run_ids]
        await _until_waiting(store, run_ids)
        watcher = _loop_watchers()[id(store)]
        assert len(watcher.feeds) == RUNS
        reads = watcher.reads
        # Sent through this store object: each send wakes the watcher.
        with anyio.fail_after(5):
            for i, run_id in enumerate(run_ids[: RUNS // 2]):
                remote = await store.attach(run_id)
                assert await remote.send_event(Go(value=i))
                assert await handlers[i] == i
        # Sent from elsewhere: found by the next poll.
        with anyio.fail_after(5):
            for i, run_id in enumerate(run_ids[RUNS // 2 :], RUNS // 2):
                remote = await other.attach(run_id)
                assert await remote.send_event(Go(value=i))
            results = [await handler for handler in handlers[RUNS // 2 :]]
        assert results == list(range(RUNS // 2, RUNS))
        # Far fewer reads than one per run and send.
        assert watcher.reads - reads <= RUNS // 2 + 5
        for _ in range(10):  # the watcher's task notices that its last run left
            await anyio.sleep(0)
        assert id(store) not in _loop_watchers()
        assert not watcher.feeds
    finally:
        store.close()
        other.close()


async def test_a_run_whose_inbox_cannot_be_read_fails_alone(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = SqliteJournal(path)
    try:
        workflow = Waits(journal=store, timeout=None)
        broken, fine = workflow.run(run_id="broken"), workflow.run(run_id="fine")
        await _until_waiting(store, ["broken", "fine"])
        conn = sqlite3.connect(path)
        with conn:
            conn.execute(
                "INSERT INTO inbox (run_id, kind, payload, idempotency_key, created_at) "
                "VALUES ('broken', 'send', '{not json', 'k', 0)"
            )
        conn.close()
        remote = await store.attach("fine")
        assert await remote.send_event(Go(value=7))  # wakes the watcher: it reads both
        with anyio.fail_after(5):
            assert await fine == 7
            with pytest.raises(JournalError, match=r"broken.*inbox item .* is corrupt"):
                await broken
    finally:
        store.close()


class _BrokenInbox(InMemoryJournal):
    """A store read run by run (no ``read_inboxes``) whose inbox of ``broken`` fails."""

    async def read_inbox(self, run_id: str) -> Any:
        if run_id == "broken":
            raise JournalError("run 'broken': the inbox cannot be read")
        return await super().read_inbox(run_id)


async def test_a_run_polling_its_own_inbox_fails_alone_when_it_cannot_be_read() -> None:
    store = _BrokenInbox()
    assert getattr(store, "read_inboxes", None) is None  # each run polls its own inbox
    workflow = Waits(journal=store, timeout=None)
    broken, fine = workflow.run(run_id="broken"), workflow.run(run_id="fine")
    with anyio.fail_after(5):
        with pytest.raises(JournalError, match=r"broken.*cannot be read"):
            await broken
        remote = await store.attach("fine")
        assert await remote.send_event(Go(value=3))
        assert await fine == 3


class _SlowInbox(InMemoryJournal):
    """A store read run by run whose inbox read, like a database call on a worker
    thread, must not be cut short once it started (it shields itself)."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = anyio.Event()
        self.reads: list[str] = []

    async def read_inbox(self, run_id: str) -> Any:
        with anyio.CancelScope(shield=True):
            self.reading.set()
            try:
                await anyio.sleep(0.2)
            except BaseException:
                self.reads.append("cut")
                raise
            self.reads.append("done")
        return await super().read_inbox(run_id)


async def test_a_run_polling_its_own_inbox_lets_a_read_in_flight_finish_when_it_ends() -> None:
    """Ending the run stops its poller through a cancel scope, which respects the store
    call's shield: a bare task cancellation would cut it (and a database read on a
    worker thread would lose its connection and capacity token on the way)."""
    store = _SlowInbox()
    handler = Waits(journal=store, timeout=None).run(run_id="slow")
    with anyio.fail_after(5):
        await store.reading.wait()
        await handler.cancel_run()
        with pytest.raises(Exception):  # noqa: B017 - whichever way a cancelled run ends
            await handler
        while not store.reads:
            await anyio.sleep(0.01)
    assert store.reads == ["done"]
