"""Talking to runs that live in other processes, on Postgres (scale-out.md §7, test 7).

* Two processes send the same events with the same idempotency keys at once: each event
  is delivered, and received by its step, once.
* A reader in this process follows a run's stream while its worker is killed with
  SIGKILL and another worker takes the run over: it sees every event the steps
  published, once and in order.
* A send to a parked run (held by no worker) resumes it on whichever worker claims it.
* A parked waiter's deadline fires on time: no worker touches the run until its
  ``wake_at``, then one claims it and the step sees ``TimeoutError``.

The workers are ``tickwork worker`` processes and the workflows are in ``fleet_child``.
The test process runs one anyio backend per test (the workers alternate asyncio and
trio); every test runs under a hard time limit and kills its children when it ends.
"""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from psycopg import sql

from fleet.fleet_child import (
    Answer,
    Asker,
    Chain,
    Children,
    Counted,
    Deadline,
    Finish,
    Numbered,
    Ping,
    Pings,
    Question,
    read_log,
    wait_until,
)
from postgres_support import PgSchema
from tickwork.events import Event, StopEvent
from tickwork.serde.serializers import JsonSerializer
from tickwork.stores.postgres import PostgresJournal
from tickwork.stores.records import RunEntry

pytestmark = [pytest.mark.postgres, pytest.mark.anyio]

FAST_PARKING = ("--idle-release", "0.2")


@pytest.fixture
def anyio_backend() -> str:
    """One backend for the test process (see the module docs); some tests pick trio."""
    return "asyncio"


@pytest.fixture
async def store(pg_schema: PgSchema) -> AsyncIterator[PostgresJournal]:
    journal = PostgresJournal(pg_schema.dsn, pg_schema.schema, pool_size=8)
    await anyio.to_thread.run_sync(journal.check)  # migrated before any child connects
    yield journal
    journal.close()


@pytest.fixture
def children(pg_schema: PgSchema, tmp_path: Path) -> Iterator[Children]:
    procs = Children(tmp_path, pg_schema.dsn, pg_schema.schema)
    yield procs
    procs.close()


def _rows(pg: PgSchema, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """``query`` with ``{}`` standing for the test's schema."""
    text = sql.SQL(query).format(sql.Identifier(pg.schema))
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        return conn.execute(text, params).fetchall()


async def _stream(store: PostgresJournal, run_id: str) -> list[Event]:
    """The run's stream as stored; its positions strictly increase."""
    items = await store.read_stream(run_id)
    positions = [item.seq for item in items]
    assert positions == sorted(set(positions)), positions
    serializer = JsonSerializer()
    return [serializer.from_record(item.event) for item in items]


async def _entry(store: PostgresJournal, run_id: str) -> RunEntry:
    entry = await store.get_run(run_id)
    assert entry is not None
    return entry


async def _until_parked(store: PostgresJournal, run_id: str, children: Children) -> RunEntry:
    deadline = time.monotonic() + 20
    while (entry := await _entry(store, run_id)).status != "parked":
        assert time.monotonic() < deadline, f"run {run_id} was not parked\n{children.report()}"
        await anyio.sleep(0.02)
    return entry


# -- duplicate sends ---------------------------------------------------------------------------


async def test_duplicate_sends_from_two_processes_are_consumed_once(
    store: PostgresJournal, children: Children, pg_schema: PgSchema, tmp_path: Path
) -> None:
    log = tmp_path / "steps.log"
    keys = ["k1", "k2", "k3"]
    with anyio.fail_after(60):
        handler = await Pings(journal=store, timeout=60).submit(run_id="pings", log=str(log))
        children.worker("worker", backend="trio")
        senders = [children.script(f"sender{i}", "send", "pings", *keys) for i in range(2)]
        await wait_until(lambda: read_log(log), 20, "the run to listen", children)
        for sender in senders:
            await wait_until(lambda s=sender: "READY" in s.stdout(), 20, "READY", children)
        for sender in senders:  # at once: the same keys race into the inbox
            sender.tell("go")
        await wait_until(
            lambda: all(s.proc.poll() is not None for s in senders), 20, "the senders", children
        )
        await wait_until(
            lambda: len([line for line in read_log(log) if line.words[0] == "ping"]) >= 3,
            20,
            "all the pings",
            children,
        )
        # A send again, once the first was consumed, is still the same send.
        assert not await handler.send_event(Ping(key="k1", sender=0), idempotency_key="k1")
        await anyio.sleep(0.5)  # room for a duplicate to arrive, if one would
        assert await handler.send_event(Finish(), idempotency_key="finish")
        assert await handler == "finished"

    delivered: dict[str, list[int]] = {}
    for sender in senders:
        assert sender.proc.returncode == 0, children.report()
        for line in sender.stdout().splitlines()[1:]:
            _, key, ok = line.split()
            if ok == "True":
                delivered.setdefault(key, []).append(sender.pid)
    # Each key was delivered by exactly one of the two senders...
    assert {key: len(pids) for key, pids in delivered.items()} == dict.fromkeys(keys, 1)
    # ...and its step received it exactly once, with that sender's payload.
    pings = [line for line in read_log(log) if line.words[0] == "ping"]
    assert sorted((line.words[1], int(line.words[2])) for line in pings) == sorted(
        (key, pids[0]) for key, pids in delivered.items()
    )
    counted = [ev.key for ev in await _stream(store, "pings") if isinstance(ev, Counted)]
    assert Counter(counted) == Counter(keys)
    inbox = _rows(pg_schema, "SELECT idempotency_key, consumed_seq FROM {}.inbox")
    assert sorted(key for key, _ in inbox) == sorted([*keys, "finish"])
    assert all(seq is not None for _, seq in inbox)


# -- the stream across an owner change ---------------------------------------------------------


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_reader_follows_the_stream_across_an_owner_change(
    store: PostgresJournal, children: Children, tmp_path: Path
) -> None:
    log, gate = tmp_path / "steps.log", tmp_path / "gate"
    count, hold_at = 12, 5
    seen: list[Event] = []

    def holds() -> list[int]:
        return [line.pid for line in read_log(log) if line.words[0] == "hold"]

    with anyio.fail_after(60):
        handler = await Chain(journal=store, timeout=60).submit(
            run_id="chain", count=count, hold_at=hold_at, log=str(log), gate=str(gate)
        )
        first = children.worker("first", "--lease", "1", backend="asyncio")

        async def follow() -> None:
            async for event in handler.stream_events():
                seen.append(event)

        async with anyio.create_task_group() as group:
            group.start_soon(follow)
            await wait_until(holds, 20, "the first worker to reach the hold", children)
            await wait_until(
                lambda: len(seen) >= hold_at, 10, "the reader to see the first events", children
            )
            first.signal(signal.SIGKILL)
            second = children.worker("second", "--lease", "1", backend="trio")
            await wait_until(
                lambda: holds() == [first.pid, second.pid], 20, "the takeover", children
            )
            gate.touch()
        assert await handler == count

    numbered = [(ev.n, ev.pid) for ev in seen if isinstance(ev, Numbered)]
    assert [n for n, _ in numbered] == list(range(count)), numbered
    owners = [first.pid] * hold_at + [second.pid] * (count - hold_at)
    assert [pid for _, pid in numbered] == owners
    # Exactly the events the steps published (each step notes it after publishing).
    emitted = [(int(line.words[1]), line.pid) for line in read_log(log) if line.words[0] == "emit"]
    assert emitted == numbered
    assert isinstance(seen[-1], StopEvent) and seen[-1].result == count
    assert [type(ev) for ev in seen] == [type(ev) for ev in await _stream(store, "chain")]


# -- parked runs -------------------------------------------------------------------------------


async def test_a_send_to_a_parked_run_resumes_it_on_any_worker(
    store: PostgresJournal, children: Children, tmp_path: Path
) -> None:
    log = tmp_path / "steps.log"
    names = [f"ask{i}" for i in range(4)]
    with anyio.fail_after(60):
        workers = [
            children.worker(f"w{i}", *FAST_PARKING, backend=backend)
            for i, backend in enumerate(["asyncio", "trio"])
        ]
        asker = Asker(journal=store, timeout=60)
        handlers = [await asker.submit(run_id=name, log=str(log), name=name) for name in names]
        for handler in handlers:
            entry = await _until_parked(store, handler.run_id, children)
            assert entry.owner is None and entry.lease_until is None and entry.wake_at is None
        for index, handler in enumerate(handlers):
            assert await handler.send_event(Answer(value=f"yes{index}"), idempotency_key="a")
        results = [await handler for handler in handlers]
        # One worker may have done everything while the other was still starting (a
        # loaded machine): a SIGTERM before it serves would find no handler.
        await wait_until(
            lambda: all(" serving " in w.stderr() for w in workers), 30, "serving", children
        )
        for worker in workers:
            worker.signal(signal.SIGTERM)
        await wait_until(
            lambda: all(w.proc.poll() is not None for w in workers), 20, "exits", children
        )

    assert [result["answer"] for result in results] == [f"yes{i}" for i in range(4)]
    assert {result["pid"] for result in results} <= {worker.pid for worker in workers}
    answered = [line.words[1] for line in read_log(log) if line.words[0] == "answered"]
    assert sorted(answered) == names
    for name in names:
        questions = [ev for ev in await _stream(store, name) if isinstance(ev, Question)]
        assert len(questions) == 1, f"run {name} asked {len(questions)} times"
    summaries = [re.findall(r"parked (\d+)", worker.stderr()) for worker in workers]
    assert all(summaries), children.report()  # every worker said what it did as it left
    assert sum(int(found[-1]) for found in summaries) >= len(names), children.report()


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_parked_waiters_deadline_fires_on_time(
    store: PostgresJournal, children: Children, tmp_path: Path
) -> None:
    log, seconds = tmp_path / "steps.log", 2.5
    with anyio.fail_after(60):
        workers = [
            children.worker(f"w{i}", *FAST_PARKING, backend=backend)
            for i, backend in enumerate(["trio", "asyncio"])
        ]
        handler = await Deadline(journal=store, timeout=60).submit(
            run_id="late", log=str(log), seconds=seconds
        )
        started = (await wait_until(lambda: read_log(log), 20, "the wait", children))[0].time
        parked = await _until_parked(store, "late", children)
        assert parked.wake_at is not None and parked.owner is None
        assert abs(parked.wake_at - (started + seconds)) < 0.5, (parked.wake_at, started)
        # No worker touches the run until its wake time...
        while time.time() < parked.wake_at - 0.1:
            entry = await _entry(store, "late")
            assert (entry.status, entry.epoch) == ("parked", parked.epoch), entry
            await anyio.sleep(0.05)
        # ...then one claims it, and the step sees its deadline pass.
        result = await handler

    timeouts = [line for line in read_log(log) if line.words == ["timeout"]]
    assert len(timeouts) == 1, read_log(log)
    assert parked.wake_at - 0.05 <= timeouts[0].time <= parked.wake_at + 2.0
    assert result["pid"] == timeouts[0].pid and result["pid"] in {w.pid for w in workers}
    entry = await _entry(store, "late")
    assert entry.status == "completed" and entry.epoch == parked.epoch + 1
