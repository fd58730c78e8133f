"""The store contract, part two (part one is ``test_store_contract.py``): the inbox,
the event stream, outcomes, ``list_unfinished``, the workers table and
``wait_for_change``, against every store.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from tickwork.stores.records import JournalError, Lease, RunOutcome, StreamItem

from .helpers import rec, snap, submit

pytestmark = pytest.mark.anyio


async def _claimed(store: Any, run_id: str = "r") -> Lease:
    await submit(store, run_id)
    claim = await store.claim_run(run_id, "w1")
    assert claim is not None
    lease: Lease = claim.lease
    return lease


# --------------------------------------------------------------------------- inbox


async def test_a_key_delivers_once(store: Any) -> None:
    await submit(store, "r")
    assert await store.send("r", "send", {"n": 1}, idempotency_key="k")
    assert not await store.send("r", "send", {"n": 2}, idempotency_key="k")
    assert await store.send("r", "cancel")
    assert await store.send("r", "send", {"n": 3})  # no key: a fresh one each time
    assert await store.send("r", "send", {"n": 3})
    items = await store.read_inbox("r")
    assert [(i.kind, i.payload) for i in items] == [
        ("send", {"n": 1}),
        ("cancel", None),
        ("send", {"n": 3}),
        ("send", {"n": 3}),
    ]
    assert items[0].idempotency_key == "k" and items[0].run_id == "r"
    assert len({i.idempotency_key for i in items}) == 4
    ids = [i.item_id for i in items]
    assert ids == sorted(ids) and len(set(ids)) == 4
    assert all(abs(i.created_at - time.time()) < 60 for i in items)


async def test_a_key_is_per_run(store: Any) -> None:
    await submit(store, "a")
    await submit(store, "b")
    assert await store.send("a", "send", 1, idempotency_key="k")
    assert await store.send("b", "send", 2, idempotency_key="k")
    assert [i.payload for i in await store.read_inbox("b")] == [2]


async def test_items_consumed_by_an_append_are_gone_for_good(store: Any) -> None:
    lease = await _claimed(store)
    for key in ("one", "two", "three"):
        await store.send("r", "send", key, idempotency_key=key)
    one, two, three = await store.read_inbox("r")
    await store.append("r", [rec(0), rec(1)], lease=lease, consumed=[one.item_id, two.item_id])
    assert await store.read_inbox("r") == [three]
    # Consumed once: naming them again changes nothing, and their keys stay used.
    await store.append("r", [rec(2)], lease=lease, consumed=[one.item_id, three.item_id])
    assert await store.read_inbox("r") == []
    assert not await store.send("r", "send", "again", idempotency_key="one")
    assert await store.read_inbox("r") == []


async def test_items_consumed_without_records(store: Any) -> None:
    lease = await _claimed(store)
    await store.send("r", "send", 1)
    [item] = await store.read_inbox("r")
    await store.append("r", [], lease=lease, consumed=[item.item_id])
    assert await store.read_inbox("r") == []


async def test_only_the_runs_own_items_are_consumed(store: Any) -> None:
    lease = await _claimed(store, "a")
    await submit(store, "b")
    await store.send("b", "send", "for b")
    [other] = await store.read_inbox("b")
    await store.append("a", [rec(0)], lease=lease, consumed=[other.item_id])
    assert await store.read_inbox("b") == [other]


async def test_a_send_to_a_finished_or_unknown_run_raises(store: Any) -> None:
    lease = await _claimed(store)
    await store.append("r", [rec(0)], None, "completed", lease=lease, outcome=RunOutcome(1))
    with pytest.raises(JournalError, match="'r'"):
        await store.send("r", "send", {"late": True})
    with pytest.raises(JournalError, match="'nope'"):
        await store.send("nope", "send", 1)
    with pytest.raises(JournalError):
        await store.read_inbox("nope")


# --------------------------------------------------------------------------- stream


async def test_the_stream_follows_a_cursor(store: Any) -> None:
    lease = await _claimed(store)
    await store.append("r", [rec(0), rec(1)], lease=lease, stream=[StreamItem(1, {"ev": "a"})])
    await store.append(
        "r",
        [rec(2), rec(3), rec(4)],
        lease=lease,
        stream=[StreamItem(2, {"ev": "b"}), StreamItem(4, ["c", 1])],
    )
    everything = [StreamItem(1, {"ev": "a"}), StreamItem(2, {"ev": "b"}), StreamItem(4, ["c", 1])]
    assert await store.read_stream("r") == everything
    assert await store.read_stream("r", after_seq=1) == everything[1:]
    assert await store.read_stream("r", after_seq=2, limit=5) == everything[2:]
    assert await store.read_stream("r", limit=2) == everything[:2]
    assert await store.read_stream("r", after_seq=4) == []
    with pytest.raises(JournalError):
        await store.read_stream("nope")


async def test_the_stream_outlives_compaction(store: Any) -> None:
    lease = await _claimed(store)
    await store.append("r", [rec(0)], lease=lease, stream=[StreamItem(0, "kept")])
    await store.write_snapshot("r", 1, snap(1), lease=lease)
    assert await store.read_stream("r") == [StreamItem(0, "kept")]


# --------------------------------------------------------------------------- outcomes


@pytest.mark.parametrize(
    "outcome",
    [
        RunOutcome(result={"answer": 42}),
        RunOutcome(result=None),
        RunOutcome(error={"exception_type": "builtins.ValueError", "exception_message": "no"}),
    ],
    ids=["result", "none", "error"],
)
async def test_the_outcome_is_stored_with_the_final_status(store: Any, outcome: RunOutcome) -> None:
    lease = await _claimed(store)
    status = "failed" if outcome.error else "completed"
    await store.append("r", [rec(0)], None, status, lease=lease, outcome=outcome)
    entry = await store.get_run("r")
    assert entry is not None and entry.finished
    # The lease ends; the last owner stays (its final snapshot is still fenced by it).
    assert (entry.status, entry.owner, entry.lease_until) == (status, lease.owner, None)
    assert entry.outcome == outcome
    assert await store.list_unfinished() == []
    assert await store.claim_run("r", "w2") is None


async def test_mark_finished_records_or_keeps_the_outcome(store: Any) -> None:
    store.register_run("r", "wf", snap())
    entry = await store.get_run("r")
    assert entry is not None and entry.outcome is None
    error = {"exception_type": "x.Timeout", "exception_message": "late"}
    await store.mark_finished("r", "timed_out", outcome=RunOutcome(error=error))
    await store.mark_finished("r", "timed_out")
    entry = await store.get_run("r")
    assert entry is not None and entry.status == "timed_out"
    assert entry.outcome == RunOutcome(error=error)


async def test_list_unfinished_covers_queued_running_and_parked(store: Any) -> None:
    await submit(store, "queued")
    await submit(store, "parked")
    claim = await store.claim_run("parked", "w1")
    assert claim is not None
    await store.release_run(claim.lease, status="parked")
    store.register_run("running", "wf", snap())
    store.register_run("other", "wf2", snap())
    store.register_run("done", "wf", snap())
    await store.mark_finished("done", "cancelled")
    assert {e.run_id for e in await store.list_unfinished()} == {
        "queued",
        "parked",
        "running",
        "other",
    }
    assert {e.run_id for e in await store.list_unfinished("wf2")} == {"other"}
    statuses = {e.run_id: e.status for e in await store.list_runs()}
    assert statuses == {
        "queued": "queued",
        "parked": "parked",
        "running": "running",
        "other": "running",
        "done": "cancelled",
    }


# --------------------------------------------------------------------------- workers


async def test_workers_come_and_go(store: Any) -> None:
    assert await store.list_workers() == []
    await store.register_worker("w2", {"host": "b", "pid": 2})
    await store.register_worker("w1", {"host": "a", "pid": 1})
    await store.touch_worker("w1", ["r1", "r2"])
    await store.touch_worker("ghost", ["r3"])  # unknown: nothing happens
    w1, w2 = await store.list_workers()
    assert (w1.worker_id, dict(w1.info), w1.runs) == ("w1", {"host": "a", "pid": 1}, ("r1", "r2"))
    assert (w2.worker_id, w2.runs) == ("w2", ())
    assert w1.last_seen >= w1.started_at and abs(w1.last_seen - time.time()) < 60
    await store.unregister_worker("w2")
    await store.unregister_worker("w2")
    assert [w.worker_id for w in await store.list_workers()] == ["w1"]


# --------------------------------------------------------------------------- notifications


async def test_wait_for_change_returns_after_its_timeout(store: Any) -> None:
    started = time.monotonic()
    await store.wait_for_change(0.2)
    # The upper bound is 10x the timeout: it only catches a wait that ignores it.
    assert 0.15 <= time.monotonic() - started < 2.0


@pytest.mark.parametrize("change", ["submit", "send"])
async def test_wait_for_change_wakes_early_for_a_change_in_this_process(
    store: Any, change: str
) -> None:
    await submit(store, "r")
    woke: list[float] = []

    async def wait() -> None:
        started = time.monotonic()
        await store.wait_for_change(10.0)
        woke.append(time.monotonic() - started)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.sleep(0.1)  # the waiter is waiting
            if change == "submit":
                await submit(store, "new")
            else:
                await store.send("r", "send", {"x": 1})
    assert woke and woke[0] < 3.0


async def test_a_key_sent_again_after_the_run_finished_is_a_duplicate(store: Any) -> None:
    # A client retrying the send that ended the run must not get an error for it.
    await submit(store, "r")
    assert await store.send("r", "send", {"n": 1}, idempotency_key="k")
    await store.mark_finished("r", "completed")
    assert not await store.send("r", "send", {"n": 1}, idempotency_key="k")
    with pytest.raises(JournalError, match=r"'r'.*finished \(completed\)"):
        await store.send("r", "send", {"n": 2}, idempotency_key="new")
    with pytest.raises(JournalError, match=r"'r'.*finished \(completed\)"):
        await store.send("r", "cancel")
