"""Journal stores and in-memory journals (api.md §18.1; ``tickwork.journal``).

Both stores are run against the store protocol (``InMemoryJournal`` and
``SqliteJournal`` on ``tmp_path``); corrupt SQLite files are made with the ``sqlite3``
module.  Durable runs are checked end to end: their status, compaction to the final
snapshot, recovery of an interrupted run in the same process, and agreement between
the durable records and ``handler.journal()``.
"""

from __future__ import annotations

import json
import sqlite3
import time
import warnings
from asyncio import CancelledError
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from tickwork import (
    Context,
    Event,
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
    Workflow,
    step,
)
from tickwork.errors import (
    WorkflowCancelledByUser,
    WorkflowRuntimeError,
    WorkflowTimeoutError,
)
from tickwork.handler import WorkflowHandler
from tickwork.journal import (
    InMemoryJournal,
    JournalError,
    JournalStore,
    SqliteJournal,
    StatePatch,
    load_run,
    recover_runs,
    resume_run,
)
from tickwork.types import JournalRecord

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0
RECORD_TYPES = {
    "session_start",
    "add_event",
    "step_result",
    "cancel_run",
    "publish_event",
    "timeout",
    "waiter_timeout",
    "wakeup",
    "idle_check",
}

StoreFactory = Callable[[Path], Any]


def _sqlite(tmp: Path) -> SqliteJournal:
    return SqliteJournal(tmp / "journal.db")


def _memory(tmp: Path) -> InMemoryJournal:
    return InMemoryJournal()


@pytest.fixture(params=[_memory, _sqlite], ids=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest) -> StoreFactory:
    factory: StoreFactory = request.param
    return factory


def rec(seq: int, kind: str = "idle_check") -> JournalRecord:
    return JournalRecord(seq=seq, data={"type": kind, "stamped_at": 1000.0 + seq})


def patch(after_seq: int, key: str) -> StatePatch:
    return StatePatch(after_seq, [{"op": "add", "path": f"/{key}", "value": after_seq}])


async def read_all(store: Any, run_id: str, from_seq: int = 0) -> list[JournalRecord]:
    return [r async for r in store.read(run_id, from_seq)]


# --------------------------------------------------------------------------- workflows


class Ask(InputRequiredEvent):
    prompt: str


class Reply(HumanResponseEvent):
    text: str


class AskFlow(Workflow):
    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        await ctx.store.set("asked", True)
        reply = await ctx.wait_for_event(Reply, waiter_event=Ask(prompt="?"))
        await ctx.store.set("answer", reply.text)
        return StopEvent(result=f"hello {reply.text}")


class Chain(Workflow):
    """start -> three hops -> stop; with ``fail`` the last hop raises."""

    def __init__(self, fail: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("timeout", TIMEOUT)
        super().__init__(**kwargs)
        self.fail = fail

    @step
    async def hop(self, ctx: Context, ev: StartEvent) -> StopEvent:
        total = 0
        for i in range(3):
            total += i
            await ctx.store.set(f"k{i}", i)
        if self.fail:
            raise RuntimeError("chain broke")
        return StopEvent(result=total)


async def wait_for_ask(handler: WorkflowHandler, seconds: float = 5) -> None:
    with anyio.fail_after(seconds):
        async for ev in handler.stream_events():
            if isinstance(ev, Ask):
                return
    raise AssertionError("the run ended without asking")


async def wait_until_durable(store: Any, run_id: str, seq: int) -> None:
    """Wait until record ``seq`` of ``run_id`` has been committed to ``store``."""
    with anyio.fail_after(5):
        while True:
            entry = await store.get_run(run_id)
            if entry is not None and entry.last_seq >= seq:
                return
            await anyio.sleep(0.005)


async def wait_until_settled(handler: WorkflowHandler, store: Any, run_id: str) -> None:
    """Wait until everything the run has journaled in memory is committed to ``store``
    and nothing more came meanwhile (the idle check of a waiting run comes a moment
    after its request is published)."""
    assert handler.ctx is not None
    seq = -1
    with anyio.fail_after(5):
        while (last := handler.ctx.to_dict()["journal_seq"] - 1) != seq:
            seq = last
            await wait_until_durable(store, run_id, seq)
            await anyio.sleep(0.02)


async def hard_abort(handler: WorkflowHandler) -> None:
    """Abort the run on the spot: nothing more is journaled, as if the process died."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        handler.cancel()
    # asyncio: CancelledError; trio: WorkflowCancelledByUser (§24.1).
    with pytest.raises((WorkflowCancelledByUser, CancelledError)):
        await handler


# --------------------------------------------------------------------------- protocol


async def test_both_stores_implement_the_protocol(make_store: StoreFactory, tmp_path: Path) -> None:
    assert isinstance(make_store(tmp_path), JournalStore)


async def test_begin_append_read_and_get_run(make_store: StoreFactory, tmp_path: Path) -> None:
    store = make_store(tmp_path)
    assert await store.get_run("r1") is None
    store.register_run("r1", "wf.A", {"journal_seq": 0, "marker": 1})
    entry = await store.get_run("r1")
    assert entry is not None
    assert (entry.run_id, entry.workflow_name, entry.status, entry.last_seq) == (
        "r1",
        "wf.A",
        "running",
        -1,
    )
    assert await store.read_snapshot("r1") == (0, {"journal_seq": 0, "marker": 1})
    await store.append("r1", [rec(0, "session_start"), rec(1, "add_event")])
    await store.append("r1", [rec(2), rec(3), rec(4)])
    records = await read_all(store, "r1")
    assert [r.seq for r in records] == [0, 1, 2, 3, 4]
    assert records[0].data == {"type": "session_start", "stamped_at": 1000.0}
    assert [r.seq for r in await read_all(store, "r1", 3)] == [3, 4]
    assert (await store.get_run("r1")).last_seq == 4  # type: ignore[union-attr]


async def test_a_duplicate_seq_is_refused(make_store: StoreFactory, tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.register_run("dup", "wf", {"journal_seq": 0})
    await store.append("dup", [rec(0), rec(1)])
    with pytest.raises(JournalError) as info:
        await store.append("dup", [rec(1)])
    assert "'dup'" in str(info.value)
    assert "1" in str(info.value)
    assert [r.seq for r in await read_all(store, "dup")] == [0, 1]


async def test_a_snapshot_compacts_older_records_and_patches(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    store = make_store(tmp_path)
    store.register_run("c", "wf", {"journal_seq": 0})
    await store.append("c", [rec(0), rec(1)], patch(1, "a"))
    await store.append("c", [rec(2), rec(3)], patch(3, "b"))
    await store.append("c", [rec(4)], patch(4, "c"))
    assert [p.after_seq for p in await store.read_state_patches("c")] == [1, 3, 4]
    await store.write_snapshot("c", 3, {"journal_seq": 3, "v": "three"})
    assert await store.read_snapshot("c") == (3, {"journal_seq": 3, "v": "three"})
    assert [r.seq for r in await read_all(store, "c", 3)] == [3, 4]
    # The history before the snapshot is gone: asking for it is a gap, never a
    # silently partial journal.
    with pytest.raises(JournalError, match="expected seq 0"):
        await read_all(store, "c", 0)
    assert [p.after_seq for p in await store.read_state_patches("c", 3)] == [3, 4]
    assert (await store.get_run("c")).last_seq == 4  # type: ignore[union-attr]


async def test_list_unfinished_and_mark_finished(make_store: StoreFactory, tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.register_run("a", "wf.A", {"journal_seq": 0})
    store.register_run("b", "wf.B", {"journal_seq": 0})
    store.register_run("c", "wf.A", {"journal_seq": 0})
    assert {e.run_id for e in await store.list_unfinished()} == {"a", "b", "c"}
    assert {e.run_id for e in await store.list_unfinished("wf.A")} == {"a", "c"}
    await store.mark_finished("a", "completed")
    await store.append("c", [rec(0)], final_status="failed")
    assert {e.run_id for e in await store.list_unfinished("wf.A")} == set()
    assert {e.run_id for e in await store.list_unfinished()} == {"b"}
    assert (await store.get_run("a")).status == "completed"  # type: ignore[union-attr]
    assert (await store.get_run("c")).status == "failed"  # type: ignore[union-attr]
    assert {e.run_id for e in await store.list_runs()} == {"a", "b", "c"}
    # A new session of a finished run makes it running again.
    store.register_run("a", "wf.A", {"journal_seq": 0})
    assert (await store.get_run("a")).status == "running"  # type: ignore[union-attr]


async def test_a_gap_names_the_run_and_the_seq(make_store: StoreFactory, tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.register_run("g", "wf", {"journal_seq": 0})
    await store.append("g", [rec(0), rec(1), rec(3)])
    with pytest.raises(JournalError) as info:
        await read_all(store, "g")
    message = str(info.value)
    assert "'g'" in message
    assert "expected seq 2" in message and "seq 3" in message


async def test_writes_for_an_unknown_run_raise(make_store: StoreFactory, tmp_path: Path) -> None:
    store = make_store(tmp_path)
    for write in (
        lambda: store.append("ghost", [rec(0)]),
        lambda: store.mark_finished("ghost", "completed"),
        lambda: store.write_snapshot("ghost", 0, {"journal_seq": 0}),
    ):
        with pytest.raises(JournalError, match="ghost"):
            await write()
    assert await store.get_run("ghost") is None


async def test_a_registration_keeps_the_start_event_options_and_times(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    """Issue #12: a run is registered with everything needed to start it again."""
    store = make_store(tmp_path)
    before = time.time()
    store.register_run(
        "o", "wf", {"journal_seq": 0}, start_event={"topic": "x"}, options={"timeout": None}
    )
    entry = await store.get_run("o")
    assert entry is not None
    assert entry.start_event == {"topic": "x"} and dict(entry.options) == {"timeout": None}
    assert entry.created_at is not None and before - 1 <= entry.created_at <= time.time() + 1
    created = entry.created_at
    # A new session of the run keeps its start event, options and creation time.
    store.register_run("o", "wf", {"journal_seq": 3})
    await store.append("o", [rec(3)])
    entry = await store.get_run("o")
    assert entry is not None
    assert entry.start_event == {"topic": "x"} and dict(entry.options) == {"timeout": None}
    assert entry.created_at == created
    assert entry.updated_at is not None and entry.updated_at >= created


async def test_alive_time_is_recorded_and_never_goes_back(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    store = make_store(tmp_path)
    store.register_run("h", "wf", {"journal_seq": 0})
    await store.record_alive_time("h", 12.5)
    await store.record_alive_time("h", 3.0)  # a late, older heartbeat
    entry = await store.get_run("h")
    assert entry is not None and entry.elapsed_alive == 12.5


# --------------------------------------------------------------------------- corrupt SQLite


def _sql(path: Path, statement: str, *args: Any) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute(statement, args)
        conn.commit()
    finally:
        conn.close()


def _dump(path: Path) -> dict[str, list[Any]]:
    conn = sqlite3.connect(path)
    try:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
            for table in ("runs", "records", "snapshots", "state_patches")
        }
    finally:
        conn.close()


async def _five_records(path: Path) -> SqliteJournal:
    store = SqliteJournal(path)
    store.register_run("bad", "wf", {"journal_seq": 0})
    await store.append("bad", [rec(i) for i in range(5)])
    store.close()
    return store


@pytest.mark.parametrize(
    "garbage", ['{"type": "idle_check", "stamped_', "\x00\x01", "[1, 2, 3]", "{}"]
)
async def test_a_corrupt_sqlite_row_names_the_run_and_seq(tmp_path: Path, garbage: str) -> None:
    path = tmp_path / "corrupt.db"
    store = await _five_records(path)
    _sql(path, "UPDATE records SET data = ? WHERE run_id = 'bad' AND seq = 2", garbage)
    with pytest.raises(JournalError) as info:
        await read_all(store, "bad")
    assert "'bad'" in str(info.value)
    assert "seq 2" in str(info.value)
    # The records before the corrupt one are still readable on their own.
    assert [r.seq for r in await read_all(store, "bad", 3)] == [3, 4]


async def test_a_deleted_sqlite_row_is_a_gap(tmp_path: Path) -> None:
    path = tmp_path / "gap.db"
    store = await _five_records(path)
    _sql(path, "DELETE FROM records WHERE run_id = 'bad' AND seq = 3")
    with pytest.raises(JournalError) as info:
        await read_all(store, "bad")
    assert "'bad'" in str(info.value) and "expected seq 3" in str(info.value)


async def test_a_corrupt_sqlite_snapshot_names_the_run(tmp_path: Path) -> None:
    path = tmp_path / "snap.db"
    store = await _five_records(path)
    _sql(path, "UPDATE snapshots SET data = 'not json' WHERE run_id = 'bad'")
    with pytest.raises(JournalError) as info:
        await store.read_snapshot("bad")
    assert "'bad'" in str(info.value) and "seq 0" in str(info.value)


async def test_loading_a_corrupt_durable_run_fails_without_changing_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.db"
    wf = AskFlow(timeout=TIMEOUT, journal=SqliteJournal(path))
    handler = wf.run(run_id="hitl")
    await wait_for_ask(handler)
    await hard_abort(handler)
    wf._journal.close()
    _sql(
        path,
        "UPDATE records SET data = ? WHERE run_id = 'hitl' AND seq = 1",
        json.dumps({"type": "add_event", "stamped_at": 1.0, "event": "{broken"}),
    )
    before = _dump(path)
    store = SqliteJournal(path)
    with pytest.raises(JournalError) as info:
        await load_run(AskFlow(timeout=TIMEOUT, journal=store), "hitl")
    assert "'hitl'" in str(info.value) and "seq 1" in str(info.value)
    # recover_runs reports the run it cannot resume instead of raising (issue #12).
    result = await recover_runs(AskFlow(timeout=TIMEOUT, journal=store))
    assert dict(result) == {}
    assert isinstance(result.failed["hitl"], JournalError)
    assert "'hitl'" in str(result.failed["hitl"]) and "seq 1" in str(result.failed["hitl"])
    store.close()
    assert _dump(path) == before


async def test_an_unknown_record_type_in_a_store_names_run_and_seq(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    store = make_store(tmp_path)
    wf = AskFlow(timeout=TIMEOUT, journal=store)
    handler = wf.run(run_id="odd")
    await wait_for_ask(handler)
    await hard_abort(handler)
    entry = await store.get_run("odd")
    assert entry is not None and entry.status == "running"
    bogus = JournalRecord(entry.last_seq + 1, {"type": "bogus", "stamped_at": 1.0})
    await store.append("odd", [bogus])
    with pytest.raises(JournalError) as info:
        await load_run(AskFlow(timeout=TIMEOUT, journal=store), "odd")
    assert "'odd'" in str(info.value) and f"seq {entry.last_seq + 1}" in str(info.value)


# --------------------------------------------------------------------------- durable runs


async def test_a_completed_durable_run_keeps_only_its_final_snapshot(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    store = make_store(tmp_path)
    handler = Chain(journal=store).run(run_id="done")
    assert await handler == 3
    entry = await store.get_run("done")
    assert entry is not None and entry.status == "completed"
    assert await store.list_unfinished() == []
    found = await store.read_snapshot("done")
    assert found is not None
    seq, snap = found
    live = handler.ctx.to_dict()
    assert {k: v for k, v in snap.items() if k != "state"} == {
        k: v for k, v in live.items() if k != "state"
    }
    assert seq == snap["journal_seq"] == entry.last_seq + 1
    assert snap["is_running"] is False
    assert await read_all(store, "done", seq) == []
    assert await store.read_state_patches("done", 0) == []
    if isinstance(store, SqliteJournal):
        store.close()
        tables = _dump(tmp_path / "journal.db")
        assert tables["records"] == [] and tables["state_patches"] == []
    # The final snapshot holds the store; nothing is left to recover.
    ctx = await load_run(Chain(journal=store), "done")
    assert await ctx.store.get("k2") == 2
    assert await recover_runs(Chain(journal=store)) == {}


def _counting(base: type[Any], takes_snapshots: bool) -> type[Any]:
    """``base`` recording its write calls after registration (in ``calls``); without
    ``takes_snapshots``, a store from before ``append(snapshot=)`` existed."""

    class Counting(base):  # type: ignore[misc,valid-type]
        appends_snapshots = takes_snapshots

        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.calls: list[tuple[str, Any]] = []

        async def append(self, run_id: str, records: Any, *args: Any, **kwargs: Any) -> None:
            if not takes_snapshots:
                assert "snapshot" not in kwargs  # never passed to a store lacking it
            self.calls.append(("append", kwargs.get("snapshot")))
            await super().append(run_id, records, *args, **kwargs)

        async def write_snapshot(self, run_id: str, seq: int, snapshot: Any, **kw: Any) -> None:
            self.calls.append(("write_snapshot", seq))
            await super().write_snapshot(run_id, seq, snapshot, **kw)

    return Counting


@pytest.mark.parametrize("takes_snapshots", [True, False], ids=["snapshot-append", "legacy"])
@pytest.mark.parametrize("fail", [False, True], ids=["completed", "failed"])
@pytest.mark.parametrize("base", [InMemoryJournal, SqliteJournal], ids=["memory", "sqlite"])
async def test_a_finished_run_ends_with_one_store_call_holding_its_final_snapshot(
    tmp_path: Path, base: type[Any], fail: bool, takes_snapshots: bool
) -> None:
    store = _counting(base, takes_snapshots)(
        *([tmp_path / "j.db"] if base is SqliteJournal else [])
    )
    handler = Chain(fail=fail, journal=store).run(run_id="end")
    if fail:
        with pytest.raises(RuntimeError, match="chain broke"):
            await handler
    else:
        assert await handler == 3
    entry = await store.get_run("end")
    assert entry is not None and entry.status == ("failed" if fail else "completed")
    found = await store.read_snapshot("end")
    assert found is not None
    seq, snap = found
    assert seq == snap["journal_seq"] == entry.last_seq + 1 and snap["is_running"] is False
    assert await read_all(store, "end", 0) == []
    assert await store.read_state_patches("end", 0) == []
    if fail:
        assert snap["failure"]["step_name"] == "hop"
        assert "chain broke" in json.dumps(snap["failure"]["exception"])
    else:
        assert "failure" not in snap
    if takes_snapshots:
        # One store call at the end: the final append carries the snapshot.
        assert store.calls[-1] == ("append", (seq, snap))
        assert [c for c in store.calls if c[0] == "write_snapshot"] == []
    else:
        assert store.calls[-2:] == [("append", None), ("write_snapshot", seq)]
    if isinstance(store, SqliteJournal):
        store.close()


@pytest.mark.parametrize(
    ("kind", "status"),
    [("fail", "failed"), ("timeout", "timed_out"), ("cancel", "cancelled")],
)
async def test_terminal_statuses_are_recorded(
    make_store: StoreFactory, tmp_path: Path, kind: str, status: str
) -> None:
    store = make_store(tmp_path)
    if kind == "fail":
        handler = Chain(fail=True, journal=store).run(run_id="t")
        with pytest.raises(RuntimeError, match="chain broke"):
            await handler
    elif kind == "timeout":
        handler = AskFlow(timeout=0.2, journal=store).run(run_id="t")
        with pytest.raises(WorkflowTimeoutError):
            await handler
    else:
        handler = AskFlow(timeout=TIMEOUT, journal=store).run(run_id="t")
        await wait_for_ask(handler)
        await handler.cancel_run()
        with pytest.raises(WorkflowCancelledByUser):
            await handler
    entry = await store.get_run("t")
    assert entry is not None and entry.status == status
    assert await store.list_unfinished() == []
    assert await recover_runs(AskFlow(timeout=TIMEOUT, journal=store)) == {}
    if kind == "cancel":
        # Not resumed automatically, but resume_run continues it under its id.
        again = await resume_run(AskFlow(timeout=TIMEOUT, journal=store), "t")
        assert again.run_id == "t"
        again.ctx.send_event(Reply(text="later"))
        assert await again == "hello later"
        assert (await store.get_run("t")).status == "completed"  # type: ignore[union-attr]
    else:
        # A run that ended any other way is not started again from its start event.
        with pytest.raises(
            WorkflowRuntimeError, match=rf"run 't' has already finished \({status}\)"
        ):
            await resume_run(AskFlow(timeout=TIMEOUT, journal=store), "t")
        assert (await store.get_run("t")).status == status  # type: ignore[union-attr]


async def test_a_completed_run_is_not_resumed(make_store: StoreFactory, tmp_path: Path) -> None:
    store = make_store(tmp_path)
    assert await Chain(journal=store).run(run_id="done") is not None
    with pytest.raises(
        WorkflowRuntimeError, match=r"run 'done' has already finished \(completed\)"
    ):
        await resume_run(Chain(journal=store), "done")
    entry = await store.get_run("done")
    assert entry is not None and entry.status == "completed"


async def test_an_interrupted_durable_run_is_recovered_in_process(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    store = make_store(tmp_path)
    handler = AskFlow(timeout=TIMEOUT, journal=store).run(run_id="crash")
    await wait_for_ask(handler)
    await wait_until_settled(handler, store, "crash")
    await hard_abort(handler)
    live_records = [r async for r in handler.journal()]
    assert [e.run_id for e in await store.list_unfinished()] == ["crash"]
    # The durable journal holds exactly what the run journaled in memory.
    seq, _ = await store.read_snapshot("crash")  # type: ignore[misc]
    assert seq == 0
    durable = await read_all(store, "crash", seq)
    assert [(r.seq, r.data) for r in durable] == [(r.seq, r.data) for r in live_records]
    # The state patches bring the store back.
    ctx = await load_run(AskFlow(timeout=TIMEOUT, journal=store), "crash")
    assert await ctx.store.get("asked") is True

    handlers = await recover_runs(AskFlow(timeout=TIMEOUT, journal=store))
    assert list(handlers) == ["crash"]
    recovered = handlers["crash"]
    assert recovered.run_id == "crash"
    recovered.ctx.send_event(Reply(text="again"))
    assert await recovered == "hello again"
    assert (await store.get_run("crash")).status == "completed"  # type: ignore[union-attr]
    assert await recovered.ctx.store.get("answer") == "again"


# --------------------------------------------------------------------------- handler.journal()


async def test_handler_journal_records_are_consecutive_and_json() -> None:
    handler = Chain(journal=True).run()
    assert await handler == 3
    records = [r async for r in handler.journal()]
    assert [r.seq for r in records] == list(range(len(records)))
    assert records[0].data["type"] == "session_start"
    assert {r.data["type"] for r in records} <= RECORD_TYPES
    assert all(isinstance(r.data["stamped_at"], float) for r in records)
    for r in records:
        assert json.loads(json.dumps(r.data)) == r.data
    # A journal can be read again, from the first record.
    again = [r async for r in handler.journal()]
    assert [(r.seq, r.data) for r in again] == [(r.seq, r.data) for r in records]
    assert handler.ctx.to_dict()["journal_seq"] == len(records)


async def test_handler_journal_follows_a_live_run() -> None:
    wf = AskFlow(timeout=TIMEOUT, journal=True)
    handler = wf.run()
    seen: list[JournalRecord] = []

    async def read() -> None:
        async for r in handler.journal():
            seen.append(r)

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        await wait_for_ask(handler)
        handler.ctx.send_event(Reply(text="live"))
        assert await handler == "hello live"
    assert [r.seq for r in seen] == list(range(len(seen)))
    assert seen[-1].seq == handler.ctx.to_dict()["journal_seq"] - 1


async def test_a_resumed_run_continues_the_journal_numbering() -> None:
    wf = AskFlow(timeout=TIMEOUT, journal=True)
    handler = wf.run()
    await wait_for_ask(handler)
    await handler.cancel_run()
    snap = handler.ctx.to_dict()
    first = [r async for r in handler.journal()]
    assert first[-1].seq == snap["journal_seq"] - 1
    assert first[-1].data["type"] == "cancel_run"

    again = AskFlow(timeout=TIMEOUT, journal=True)
    resumed = again.run(ctx=Context.from_dict(again, snap))
    resumed.ctx.send_event(Reply(text="r"))
    assert await resumed == "hello r"
    records = [r async for r in resumed.journal()]
    assert records[0].seq == snap["journal_seq"]
    assert records[0].data["type"] == "session_start"
    start = snap["journal_seq"]
    assert [r.seq for r in records] == list(range(start, start + len(records)))


class Opaque:
    """A dynamic-field value JSON cannot express."""


async def test_an_unencodable_payload_fails_the_iterator_not_the_run() -> None:
    handler = Chain(journal=True).run(opaque=Opaque())
    assert await handler == 3
    seen: list[JournalRecord] = []
    with pytest.raises(ValueError, match="StartEvent"):
        async for r in handler.journal():
            seen.append(r)
    assert [r.data["type"] for r in seen] == ["session_start"]


async def test_handler_journal_without_journaling_raises() -> None:
    handler = Chain().run()
    assert await handler == 3
    with pytest.raises(WorkflowRuntimeError, match="journal"):
        async for _ in handler.journal():
            pass


async def test_journal_must_be_a_bool_or_a_store() -> None:
    from tickwork.errors import WorkflowConfigurationError

    with pytest.raises(WorkflowConfigurationError, match="journal"):
        Chain(journal="runs.db")


# --------------------------------------------------------------------------- compaction


class Hop(Event):
    i: int


class LongFlow(Workflow):
    """A chain long enough to cross a compacting snapshot (every 1000 records), then a
    human wait."""

    HOPS = 1100

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("timeout", 120.0)
        super().__init__(**kwargs)
        self.hops_run = 0

    @step
    async def begin(self, ev: StartEvent) -> Hop:
        return Hop(i=0)

    @step
    async def hop(self, ctx: Context, ev: Hop) -> Hop | StopEvent:
        self.hops_run += 1
        if ev.i < self.HOPS:
            return Hop(i=ev.i + 1)
        reply = await ctx.wait_for_event(Reply, waiter_event=Ask(prompt="done?"))
        return StopEvent(result=(ev.i, reply.text))


async def test_recovery_after_a_compacting_snapshot_keeps_the_tail(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    store = make_store(tmp_path)
    handler = LongFlow(journal=store).run(run_id="long")
    # 1,100 durable hops (fsync on): generous for a loaded machine.
    await wait_for_ask(handler, seconds=60)
    live_seq = handler.ctx.to_dict()["journal_seq"]
    await wait_until_durable(store, "long", live_seq - 1)
    await hard_abort(handler)
    seq, _ = await store.read_snapshot("long")  # type: ignore[misc]
    assert 0 < seq < live_seq  # a compacting snapshot was written mid-session

    entry = await store.get_run("long")
    assert entry is not None and entry.status == "running"
    ctx = await load_run(LongFlow(journal=store), "long")
    state = ctx._current_run_state()
    assert state.journal_seq == entry.last_seq + 1
    assert len(state.steps["hop"].waiters) == 1
    assert not state.steps["hop"].in_progress

    wf = LongFlow(journal=store)
    recovered = (await recover_runs(wf))["long"]
    recovered.ctx.send_event(Reply(text="yes"))
    with anyio.fail_after(10):
        assert await recovered == (LongFlow.HOPS, "yes")
    assert wf.hops_run == 1  # only the waiting hop's pass that receives the answer


async def test_one_run_that_cannot_be_recovered_never_blocks_the_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue #12: recover_runs resumes every run it can and reports each one it cannot."""
    path = tmp_path / "runs.db"
    wf = AskFlow(timeout=TIMEOUT, journal=SqliteJournal(path))
    for run_id in ("bad", "good"):
        handler = wf.run(run_id=run_id)
        await wait_for_ask(handler)
        await hard_abort(handler)
    wf._journal.close()
    _sql(path, "UPDATE snapshots SET data = '{\"version\": 999}' WHERE run_id = 'bad'")
    store = SqliteJournal(path)
    result = await recover_runs(AskFlow(timeout=TIMEOUT, journal=store))
    assert set(result) == {"good"} and set(result.failed) == {"bad"}
    assert "'bad'" in str(result.failed["bad"]) and "999" in str(result.failed["bad"])
    assert any("bad" in r.getMessage() for r in caplog.records if r.levelname == "ERROR")
    await result["good"].send_event(Reply(text="Ada"))
    assert await result["good"] == "hello Ada"
    store.close()
