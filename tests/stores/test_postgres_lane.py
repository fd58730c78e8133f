"""The asyncio lane of the Postgres journal (``postgres_lane.py``): under asyncio an
append runs on the store's async connection, with the same fences, the same answers to a
lost acknowledgement, a killed connection or a cancelled caller as the threaded path;
under trio the lane is never used.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.lowlevel
import psycopg
import pytest

from postgres_support import PgSchema
from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.stores.postgres import PostgresJournal
from tickwork.stores.postgres_lane import AsyncLane
from tickwork.stores.records import Lease, LeaseLost
from tickwork.types import JournalRecord

pytestmark = pytest.mark.postgres

SNAPSHOT: dict[str, Any] = {"version": 1, "journal_seq": 0}


@pytest.fixture
def store(pg_schema: PgSchema) -> Iterator[PostgresJournal]:
    journal = PostgresJournal(pg_schema.dsn, pg_schema.schema, pool_size=2)
    yield journal
    journal.close()


def _records(*seqs: int) -> list[JournalRecord]:
    return [JournalRecord(seq, {"type": "step_result", "n": seq}) for seq in seqs]


class _Spy:
    """Counts the statements the lane ran (and lets a test fail one after it ran)."""

    def __init__(self, lane: AsyncLane, monkeypatch: pytest.MonkeyPatch) -> None:
        self.statements = 0
        self.lose_next_ack = False
        original = lane.run

        async def run(sql: str, params: Any) -> Any:
            row = await original(sql, params)
            self.statements += 1
            if self.lose_next_ack:
                self.lose_next_ack = False
                raise psycopg.OperationalError("simulated: the connection dropped after COMMIT")
            return row

        monkeypatch.setattr(lane, "run", run)


def _backends(pg_schema: PgSchema, at_most: int) -> int:
    """How many server connections the store holds, once at most ``at_most`` (a closed
    connection's server process takes a moment to go), or after 5 seconds."""
    deadline = time.monotonic() + 5
    with psycopg.connect(pg_schema.dsn, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                (f"tickwork:{pg_schema.schema}",),
            ).fetchone()
            assert row is not None
            if row[0] <= at_most or time.monotonic() > deadline:
                return int(row[0])
            time.sleep(0.02)


class Ask(Event):
    n: int


class Counter(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> Ask:
        return Ask(n=0)

    @step
    async def count(self, ctx: Context, ev: Ask) -> Ask | StopEvent:
        ctx.write_event_to_stream(ev)
        return StopEvent(result=ev.n) if ev.n >= 5 else Ask(n=ev.n + 1)


@pytest.mark.anyio
async def test_a_durable_run_appends_on_the_lane_under_asyncio_only(
    store: PostgresJournal, monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    spy = _Spy(store._lane, monkeypatch)
    handler = Counter(timeout=30, journal=store).run(run_id="lane")
    streamed = [ev.n async for ev in handler.stream_events() if isinstance(ev, Ask)]
    assert await handler == 5
    assert streamed == [0, 1, 2, 3, 4, 5]
    entry = await store.get_run("lane")
    assert entry is not None and entry.status == "completed"
    # Every record the run journaled is stored once, in order.
    seqs = [r.seq async for r in store.read("lane")]
    assert seqs == list(range(len(seqs)))
    if anyio_backend == "asyncio":
        assert spy.statements >= 6
    else:
        assert spy.statements == 0


@pytest.mark.anyio
async def test_a_lost_acknowledgement_on_the_lane_is_not_a_lost_or_doubled_record(
    store: PostgresJournal, monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("the lane serves asyncio only")
    lease = store.register_run("fenced", "Flow", SNAPSHOT, owner="w1")
    store.register_run("unfenced", "Flow", SNAPSHOT)
    spy = _Spy(store._lane, monkeypatch)
    for run_id, fence in (("fenced", lease), ("unfenced", None)):
        spy.lose_next_ack = True
        await store.append(run_id, _records(0, 1), lease=fence)
        assert not spy.lose_next_ack  # the failure happened, after the commit
        assert [r.seq async for r in store.read(run_id)] == [0, 1]
    # The fence saw seq 1 as the last one: the next append follows it.
    await store.append("fenced", _records(2), lease=lease)
    assert [r.seq async for r in store.read("fenced")] == [0, 1, 2]


@pytest.mark.anyio
async def test_a_killed_lane_connection_costs_no_record(
    store: PostgresJournal, pg_schema: PgSchema, anyio_backend: str
) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("the lane serves asyncio only")
    lease = store.register_run("r1", "Flow", SNAPSHOT, owner="w1")
    assert lease is not None
    await store.append("r1", _records(0), lease=lease)
    assert store._lane._conn is not None  # the append used the lane
    with psycopg.connect(pg_schema.dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
            "WHERE application_name = %s",
            (f"tickwork:{pg_schema.schema}",),
        )
    await store.append("r1", _records(1, 2), lease=lease)
    await store.append("r1", _records(3), lease=lease)
    assert [r.seq async for r in store.read("r1")] == [0, 1, 2, 3]


@pytest.mark.anyio
async def test_a_fence_refused_on_the_lane_raises_lease_lost(
    store: PostgresJournal, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _Spy(store._lane, monkeypatch)
    lease = store.register_run("r1", "Flow", SNAPSHOT, owner="w1")
    assert lease is not None
    await store.append("r1", _records(0), lease=lease)
    stale = Lease(lease.run_id, lease.owner, lease.epoch - 1)
    with pytest.raises(LeaseLost, match=r"run 'r1'.*appending seq 1 refused"):
        await store.append("r1", _records(1), lease=stale)
    with pytest.raises(LeaseLost, match=r"appending seq 5 refused: the journal is at seq 0"):
        await store.append("r1", _records(5), lease=lease)
    assert [r.seq async for r in store.read("r1")] == [0]
    assert spy.statements in (0, 3)  # trio: none; asyncio: every append


@pytest.mark.anyio
async def test_a_caller_cancelled_during_a_lane_append_leaves_it_known(
    store: PostgresJournal, anyio_backend: str
) -> None:
    """The statement goes on (shielded): once the caller sees its cancellation, the
    append has committed, and the lane serves the next one."""
    if anyio_backend != "asyncio":
        pytest.skip("the lane serves asyncio only")
    lease = store.register_run("r1", "Flow", SNAPSHOT, owner="w1")
    await store.append("r1", _records(0), lease=lease)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await store.append("r1", _records(1), lease=lease)
        await anyio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    assert [r.seq async for r in store.read("r1")] == [0, 1]
    await store.append("r1", _records(2), lease=lease)
    assert [r.seq async for r in store.read("r1")] == [0, 1, 2]


def test_each_event_loop_gets_its_own_lane_connection_and_close_ends_it(
    store: PostgresJournal, pg_schema: PgSchema
) -> None:
    import asyncio

    lease = store.register_run("r1", "Flow", SNAPSHOT, owner="w1")
    before = _backends(pg_schema, at_most=99)  # now
    for seq in range(3):  # a new event loop each time: the old loop's connection is closed
        asyncio.run(store.append("r1", _records(seq), lease=lease))
    assert store._lane._conn is not None
    assert _backends(pg_schema, before + 1) == before + 1  # only the last loop's lane
    store.close()
    assert store._lane._conn is None
    assert _backends(pg_schema, 0) == 0
    records = asyncio.run(_read_all(store, "r1"))
    assert [r.seq for r in records] == [0, 1, 2]


async def _read_all(store: PostgresJournal, run_id: str) -> list[JournalRecord]:
    return [r async for r in store.read(run_id)]


def test_an_event_loop_in_another_thread_does_not_take_the_lane_of_a_running_one(
    store: PostgresJournal,
) -> None:
    import asyncio
    import threading

    lease = store.register_run("r1", "Flow", SNAPSHOT, owner="w1")
    store.register_run("r2", "Flow", SNAPSHOT)
    appended = threading.Event()
    finish = threading.Event()
    taken: list[bool] = []

    async def hold_the_lane() -> None:
        await store.append("r1", _records(0), lease=lease)  # opens the lane on this loop
        appended.set()
        while not finish.is_set():  # this event loop keeps running meanwhile
            await asyncio.sleep(0.01)

    owner = threading.Thread(target=asyncio.run, args=(hold_the_lane(),))
    owner.start()
    try:
        assert appended.wait(10)
        first_conn = store._lane._conn

        async def other_loop() -> None:
            taken.append(store._lane.take())
            await store.append("r2", _records(0))  # the threaded path serves it

        asyncio.run(other_loop())
        assert taken == [False]
        assert store._lane._conn is first_conn  # the running loop's connection is intact
    finally:
        finish.set()
        owner.join(10)
    records = asyncio.run(_read_all(store, "r2"))
    assert [r.seq for r in records] == [0]
