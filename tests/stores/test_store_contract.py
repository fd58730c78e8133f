"""The store contract (``tickwork.stores.store``; scale-out.md §2, §3, §7.1), run against
every store: in memory, SQLite and PostgreSQL (the ``store`` fixture in conftest.py).

Part one: the journal (register, append, read, gaps, snapshots, patches), fencing and
ownership (leases, takeovers, claims, poison runs, renewals, releases, expiry).  The
inbox, the stream, outcomes, workers and notifications are in
``test_store_contract_io.py``.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from tickwork.stores.records import (
    JournalError,
    Lease,
    LeaseLost,
    RunOutcome,
    StatePatch,
    StreamItem,
)
from tickwork.types import JournalRecord

from .helpers import EXPIRED, SHORT, claim_ids, rec, seqs, snap, submit

pytestmark = pytest.mark.anyio

# --------------------------------------------------------------------------- the journal


async def test_register_append_and_read(store: Any) -> None:
    assert (
        store.register_run("r", "wf", snap(), start_event={"e": 1}, options={"timeout": 5}) is None
    )
    entry = await store.get_run("r")
    assert entry is not None
    assert (entry.workflow_name, entry.status, entry.last_seq) == ("wf", "running", -1)
    assert entry.start_event == {"e": 1} and dict(entry.options) == {"timeout": 5}
    assert entry.owner is None and entry.outcome is None and not entry.finished
    await store.append("r", [rec(0), rec(1)])
    await store.append("r", [rec(2)])
    assert await seqs(store, "r") == [0, 1, 2]
    assert [r async for r in store.read("r", 1)] == [rec(1), rec(2)]
    entry = await store.get_run("r")
    assert entry is not None and entry.last_seq == 2
    assert entry.created_at is not None and entry.updated_at is not None
    assert entry.updated_at >= entry.created_at
    assert [e.run_id for e in await store.list_runs()] == ["r"]


async def test_a_new_session_keeps_the_start_event_options_and_journal(store: Any) -> None:
    store.register_run("r", "wf", snap(), start_event={"e": 1}, options={"timeout": 5})
    await store.append("r", [rec(0), rec(1)])
    store.register_run("r", "wf", snap(2, note="again"))
    entry = await store.get_run("r")
    assert entry is not None and entry.last_seq == 1
    assert entry.start_event == {"e": 1} and dict(entry.options) == {"timeout": 5}
    assert await store.read_snapshot("r") == (2, snap(2, note="again"))


async def test_a_run_registered_from_a_later_snapshot_goes_on_from_it(store: Any) -> None:
    lease = store.register_run("r", "wf", snap(3), owner="w1")
    await store.append("r", [rec(3)], lease=lease)
    assert await seqs(store, "r", 3) == [3]


async def test_unknown_runs_raise_journal_errors(store: Any) -> None:
    assert await store.get_run("nope") is None
    with pytest.raises(JournalError, match="nope"):
        await store.append("nope", [rec(0)])
    with pytest.raises(JournalError, match="nope"):
        await seqs(store, "nope")
    with pytest.raises(JournalError, match="nope"):
        await store.read_snapshot("nope")
    with pytest.raises(JournalError, match="nope"):
        await store.write_snapshot("nope", 0, snap())
    with pytest.raises(JournalError, match="nope"):
        await store.mark_finished("nope", "completed")
    with pytest.raises(JournalError, match="nope"):
        await store.record_alive_time("nope", 1.0)


async def test_a_gap_raises_after_the_records_before_it(store: Any) -> None:
    store.register_run("r", "wf", snap())
    await store.append("r", [rec(0), rec(1), rec(3)])
    seen: list[int] = []
    with pytest.raises(JournalError) as info:
        async for record in store.read("r"):
            seen.append(record.seq)
    assert seen == [0, 1]
    assert "'r'" in str(info.value) and "2" in str(info.value)


async def test_a_seq_written_twice_is_refused_and_nothing_of_the_batch_is_kept(
    store: Any,
) -> None:
    store.register_run("r", "wf", snap())
    await store.append("r", [rec(0), rec(1)])
    with pytest.raises(JournalError):
        await store.append(
            "r", [rec(2), rec(1)], StatePatch(2, [{"op": "add", "path": "/a", "value": 1}])
        )
    assert await seqs(store, "r") == [0, 1]
    assert await store.read_state_patches("r") == []
    entry = await store.get_run("r")
    assert entry is not None and entry.last_seq == 1


async def test_state_patches_come_back_in_order_from_a_seq(store: Any) -> None:
    store.register_run("r", "wf", snap())
    patches = [StatePatch(i, [{"op": "add", "path": f"/k{i}", "value": i}]) for i in range(3)]
    for i, patch in enumerate(patches):
        await store.append("r", [rec(i)], patch)
    assert await store.read_state_patches("r") == patches
    assert await store.read_state_patches("r", 1) == patches[1:]


async def test_a_snapshot_compacts_the_history_before_it(store: Any) -> None:
    store.register_run("r", "wf", snap(0, first=True))
    assert await store.read_snapshot("r") == (0, snap(0, first=True))
    for i in range(5):
        await store.append("r", [rec(i)], StatePatch(i, [{"op": "add", "path": "/x", "value": i}]))
    await store.write_snapshot("r", 3, snap(3, at=3))
    assert await store.read_snapshot("r") == (3, snap(3, at=3))
    assert await seqs(store, "r", 3) == [3, 4]
    assert [p.after_seq for p in await store.read_state_patches("r")] == [3, 4]
    await store.append("r", [rec(5)])
    assert await seqs(store, "r", 3) == [3, 4, 5]


@pytest.mark.parametrize("at", [5, 4], ids=["after-the-records", "before-the-last"])
@pytest.mark.parametrize("owned", [False, True], ids=["unowned", "leased"])
async def test_an_append_with_a_snapshot_compacts_in_its_transaction(
    store: Any, at: int, owned: bool
) -> None:
    assert store.appends_snapshots is True
    lease = store.register_run("r", "wf", snap(), owner="w1" if owned else None)
    for i in range(3):
        await store.append(
            "r", [rec(i)], StatePatch(i, [{"op": "add", "path": "/x", "value": i}]), lease=lease
        )
    await store.append(
        "r",
        [rec(3), rec(4)],
        StatePatch(4, [{"op": "add", "path": "/y", "value": 4}]),
        "completed",
        lease=lease,
        stream=[StreamItem(0, {"ev": 1})],
        outcome=RunOutcome(result={"r": 1}),
        snapshot=(at, snap(at, final=True)),
    )
    # As ``write_snapshot`` leaves it: the snapshot, and only the history after it.
    assert await store.read_snapshot("r") == (at, snap(at, final=True))
    assert await seqs(store, "r", at) == list(range(at, 5))
    assert [p.after_seq for p in await store.read_state_patches("r")] == list(range(at, 5))
    assert await store.read_stream("r") == [StreamItem(0, {"ev": 1})]
    entry = await store.get_run("r")
    assert entry is not None and (entry.status, entry.last_seq) == ("completed", 4)
    assert entry.outcome == RunOutcome(result={"r": 1})


async def test_an_append_with_a_snapshot_refused_by_its_fence_writes_nothing(
    store: Any,
) -> None:
    lease = await _owned(store)
    for bad, first in [(Lease("r", "w1", lease.epoch + 1), 2), (lease, 3)]:
        with pytest.raises(LeaseLost):
            await store.append(
                "r",
                [rec(first)],
                StatePatch(first, [{"op": "add", "path": "/a", "value": 1}]),
                "completed",
                lease=bad,
                snapshot=(first + 1, snap(first + 1)),
            )
        assert await seqs(store, "r") == [0, 1]
        assert await store.read_state_patches("r") == []
        assert await store.read_snapshot("r") == (0, snap())
        entry = await store.get_run("r")
        assert entry is not None and (entry.status, entry.last_seq) == ("running", 1)
    with pytest.raises(JournalError, match="nope"):
        await store.append("nope", [rec(0)], snapshot=(1, snap(1)))


async def test_alive_time_never_goes_back(store: Any) -> None:
    store.register_run("r", "wf", snap())
    await store.record_alive_time("r", 7.5)
    await store.record_alive_time("r", 2.0)
    entry = await store.get_run("r")
    assert entry is not None and entry.elapsed_alive == 7.5


# --------------------------------------------------------------------------- fencing


async def _owned(store: Any, run_id: str = "r", owner: str = "w1") -> Lease:
    lease: Lease = store.register_run(run_id, "wf", snap(), owner=owner)
    assert lease == Lease(run_id, owner, 1)
    await store.append(run_id, [rec(0), rec(1)], lease=lease)
    return lease


@pytest.mark.parametrize(
    "stale",
    [
        pytest.param(lambda lease: Lease(lease.run_id, lease.owner, lease.epoch + 1), id="epoch"),
        pytest.param(lambda lease: Lease(lease.run_id, "w2", lease.epoch), id="owner"),
    ],
)
async def test_a_write_with_a_stale_lease_is_refused_and_writes_nothing(
    store: Any, stale: Any
) -> None:
    lease = await _owned(store)
    await store.send("r", "send", {"x": 1}, idempotency_key="k")
    item = (await store.read_inbox("r"))[0]
    bad = stale(lease)
    with pytest.raises(LeaseLost) as info:
        await store.append(
            "r",
            [rec(2)],
            StatePatch(2, [{"op": "add", "path": "/a", "value": 1}]),
            "completed",
            lease=bad,
            consumed=[item.item_id],
            stream=[StreamItem(2, {"ev": 1})],
        )
    assert isinstance(info.value, JournalError) and "'r'" in str(info.value)
    for write in (
        store.write_snapshot("r", 2, snap(2), lease=bad),
        store.mark_finished("r", "completed", lease=bad),
        store.record_alive_time("r", 9.0, lease=bad),
        store.release_run(bad),
    ):
        with pytest.raises(LeaseLost):
            await write
    with pytest.raises(LeaseLost):
        store.register_run("r", "wf", snap(2), lease=bad)
    assert await seqs(store, "r") == [0, 1]
    assert await store.read_state_patches("r") == []
    assert await store.read_snapshot("r") == (0, snap())
    assert await store.read_inbox("r") == [item]
    assert await store.read_stream("r") == []
    entry = await store.get_run("r")
    assert entry is not None
    assert (entry.status, entry.owner, entry.epoch, entry.last_seq) == ("running", "w1", 1, 1)
    assert entry.elapsed_alive == 0.0


@pytest.mark.parametrize("first", [1, 3], ids=["overlap", "gap"])
async def test_an_append_not_right_after_the_last_seq_is_refused(store: Any, first: int) -> None:
    lease = await _owned(store)
    with pytest.raises(LeaseLost) as info:
        await store.append("r", [rec(first), rec(first + 1)], lease=lease)
    assert str(first) in str(info.value)
    assert await seqs(store, "r") == [0, 1]
    await store.append("r", [rec(2)], lease=lease)  # the lease itself is still good
    assert await seqs(store, "r") == [0, 1, 2]


async def test_the_right_lease_writes_everything(store: Any) -> None:
    lease = await _owned(store)
    await store.write_snapshot("r", 2, snap(2), lease=lease)
    await store.record_alive_time("r", 3.0, lease=lease)
    assert store.register_run("r", "wf", snap(2), lease=lease) == lease
    await store.append("r", [rec(2)], lease=lease)
    await store.mark_finished("r", "completed", lease=lease)
    entry = await store.get_run("r")
    assert entry is not None and entry.status == "completed" and entry.lease_until is None
    # The final snapshot, written after the outcome, is still fenced by the same lease.
    await store.write_snapshot("r", 3, snap(3), lease=lease)


async def test_register_with_an_owner_takes_over_only_an_expired_lease(store: Any) -> None:
    first = store.register_run("r", "wf", snap(), owner="w1", lease_seconds=SHORT)
    assert first == Lease("r", "w1", 1)
    again = store.register_run("r", "wf", snap(), owner="w1", lease_seconds=SHORT)
    assert again == Lease("r", "w1", 2)  # its own live lease: a new session, a new epoch
    await anyio.sleep(EXPIRED)
    taken = store.register_run("r", "wf", snap(), owner="w2")
    assert taken == Lease("r", "w2", 3)
    with pytest.raises(LeaseLost):
        store.register_run("r", "wf", snap(), owner="w1")  # w2's lease is live
    with pytest.raises(LeaseLost):
        await store.append("r", [rec(0)], lease=again)
    await store.append("r", [rec(0)], lease=taken)
    entry = await store.get_run("r")
    assert entry is not None and (entry.owner, entry.epoch) == ("w2", 3)
    assert entry.lease_until is not None and entry.lease_until > time.time()


async def test_a_refused_registration_of_a_new_run_leaves_nothing(store: Any) -> None:
    with pytest.raises(LeaseLost):
        store.register_run("ghost", "wf", snap(), lease=Lease("ghost", "w1", 1))
    assert await store.get_run("ghost") is None


# --------------------------------------------------------------------------- submit and claim


async def test_submit_is_idempotent_on_the_run_id(store: Any) -> None:
    assert await submit(store, "s", queue="q1", priority=3, options={"timeout": 1})
    assert not await store.submit_run("s", "other", snap(9), start_event={"x": 2}, priority=9)
    entry = await store.get_run("s")
    assert entry is not None
    assert (entry.workflow_name, entry.status, entry.queue, entry.priority) == (
        "wf",
        "queued",
        "q1",
        3,
    )
    assert entry.owner is None and entry.epoch == 0 and entry.last_seq == -1
    assert entry.start_event == {"run": "s"} and dict(entry.options) == {"timeout": 1}
    assert await store.read_snapshot("s") == (0, snap())


async def test_claims_come_by_priority_then_age(store: Any) -> None:
    for run_id, priority in [("a", 0), ("b", 5), ("c", 0), ("d", 5), ("e", -1)]:
        await submit(store, run_id, priority=priority)
        await anyio.sleep(0.002)  # distinct creation times
    claims = await store.claim_runs("w1", ["wf"], limit=3)
    assert [c.lease.run_id for c in claims] == ["b", "d", "a"]
    for claim in claims:
        assert claim.lease == Lease(claim.entry.run_id, "w1", 1)
        assert claim.entry.status == "running" and claim.entry.owner == "w1"
        assert claim.entry.lease_until is not None and claim.entry.lease_until > time.time()
        assert claim.entry.start_event == {"run": claim.lease.run_id}
    assert await claim_ids(store, "w2") == ["c", "e"]
    assert await store.claim_runs("w3", ["wf"]) == []


async def test_claims_only_take_the_workflows_and_queues_asked_for(store: Any) -> None:
    await submit(store, "a", "wf", queue="fast")
    await submit(store, "b", "wf", queue="slow")
    await submit(store, "c", "other", queue="fast")
    assert await store.claim_runs("w1", []) == []
    assert await store.claim_runs("w1", ["wf"], queues=[]) == []
    assert await claim_ids(store, "w1", queues=["fast"]) == ["a"]
    assert await claim_ids(store, "w1", ("wf", "other")) == ["b", "c"]


async def test_what_is_claimable(store: Any) -> None:
    await submit(store, "queued")
    for run_id, wake_at in [
        ("due", time.time() - 1),
        ("later", time.time() + 60),
        ("asleep", None),
        ("sent", None),
    ]:
        await submit(store, run_id)
        claim = await store.claim_run(run_id, "w0")
        assert claim is not None
        await store.release_run(claim.lease, status="parked", wake_at=wake_at)
    await store.send("sent", "send", {"hello": 1})
    store.register_run("unowned", "wf", snap())
    store.register_run("live", "wf", snap(), owner="w0")
    store.register_run("expired", "wf", snap(), owner="w0", lease_seconds=SHORT)
    store.register_run("done", "wf", snap())
    await store.mark_finished("done", "completed")
    await anyio.sleep(EXPIRED)
    assert sorted(await claim_ids(store, "w1")) == ["due", "expired", "queued", "sent", "unowned"]
    assert await claim_ids(store, "w2") == []  # all taken, now with live leases


async def test_claim_run_takes_one_run(store: Any) -> None:
    await submit(store, "q")
    claim = await store.claim_run("q", "w1")
    assert claim is not None and claim.lease == Lease("q", "w1", 1)
    assert await store.claim_run("q", "w2") is None  # w1's lease is live
    mine = await store.claim_run("q", "w1")  # its own run: a new epoch
    assert mine is not None and mine.lease.epoch == 2
    await store.release_run(mine.lease, status="parked", wake_at=time.time() + 60)
    parked = await store.claim_run("q", "w2")  # parked: explicitly claimable
    assert parked is not None and parked.lease == Lease("q", "w2", 3)
    await store.mark_finished("q", "completed", lease=parked.lease)
    assert await store.claim_run("q", "w2") is None
    assert await store.claim_run("nope", "w2") is None


async def test_a_run_claimed_too_often_without_progress_fails_as_poison(store: Any) -> None:
    await submit(store, "bad")
    await anyio.sleep(0.002)
    await submit(store, "good")
    for expected in (1, 2):
        claims = await store.claim_runs("w1", ["wf"], max_claims=2)
        assert [c.lease.run_id for c in claims] == ["bad"]
        assert claims[0].entry.claims_without_progress == expected
        await store.release_run(claims[0].lease)
    claims = await store.claim_runs("w1", ["wf"], max_claims=2)
    assert [c.lease.run_id for c in claims] == ["good"]  # the poison run is skipped
    entry = await store.get_run("bad")
    assert entry is not None and entry.status == "failed" and entry.owner is None
    assert entry.outcome is not None and entry.outcome.error is not None
    assert "'bad'" in entry.outcome.error["exception_message"]
    assert "poison" in entry.outcome.error["exception_message"]
    assert await store.claim_run("bad", "w1") is None


async def test_an_append_resets_the_poison_counter(store: Any) -> None:
    await submit(store, "r")
    claim = await store.claim_run("r", "w1", max_claims=2)
    assert claim is not None
    await store.release_run(claim.lease)
    claim = await store.claim_run("r", "w1", max_claims=2)
    assert claim is not None and claim.entry.claims_without_progress == 2
    await store.append("r", [rec(0)], lease=claim.lease)
    entry = await store.get_run("r")
    assert entry is not None and entry.claims_without_progress == 0
    await store.release_run(claim.lease)
    claim = await store.claim_run("r", "w1", max_claims=2)
    assert claim is not None and claim.entry.claims_without_progress == 1


async def test_only_progress_resets_the_poison_counter(store: Any) -> None:
    # Every claim opens a session with a record of its own: appending that record alone
    # is no progress, or a run that kills every worker taking it would never be poison.
    await submit(store, "r")
    for _ in range(2):
        claim = await store.claim_run("r", "w1", max_claims=5)
        assert claim is not None
        await store.release_run(claim.lease)
    claim = await store.claim_run("r", "w1", max_claims=5)
    assert claim is not None and claim.entry.claims_without_progress == 3
    await store.append("r", [_session_start(0)], lease=claim.lease)
    entry = await store.get_run("r")
    assert entry is not None and entry.claims_without_progress == 3
    await store.append("r", [rec(1), _session_start(2)], lease=claim.lease)
    entry = await store.get_run("r")
    assert entry is not None and entry.claims_without_progress == 0
    assert await seqs(store, "r") == [0, 1, 2]


def _session_start(seq: int) -> JournalRecord:
    return JournalRecord(
        seq=seq, data={"type": "session_start", "stamped_at": 1000.0, "run_id": "r"}
    )


async def test_claim_poison_fails_a_single_run_too(store: Any) -> None:
    await submit(store, "r")
    claim = await store.claim_run("r", "w1", max_claims=1)
    assert claim is not None
    await store.release_run(claim.lease)
    assert await store.claim_run("r", "w1", max_claims=1) is None
    entry = await store.get_run("r")
    assert entry is not None and entry.status == "failed"


# --------------------------------------------------------------------------- leases


async def test_renewals_keep_the_leases_still_held(store: Any) -> None:
    for run_id in ("a", "b", "c"):
        await submit(store, run_id)
    leases = {
        c.lease.run_id: c.lease
        for c in await store.claim_runs("w1", ["wf"], limit=3, lease_seconds=SHORT)
    }
    await store.release_run(leases["c"])
    await anyio.sleep(EXPIRED)
    taken = await store.claim_run("b", "w2")  # b's lease expired: w2 takes it
    assert taken is not None
    before = time.time()
    kept = store.renew_leases("w1", list(leases.values()), 30.0)
    assert kept == {"a"}
    entry = await store.get_run("a")
    assert entry is not None and entry.lease_until is not None and entry.lease_until >= before + 29
    assert store.renew_leases("w1", [], 30.0) == set()
    assert store.renew_leases("w2", [leases["a"]], 30.0) == set()  # not w2's lease
    assert await store.claim_run("a", "w3") is None  # renewed: still live
    again = await store.claim_run("a", "w1")  # a new session of w1's: the old lease is gone
    assert again is not None
    assert store.renew_leases("w1", [leases["a"]], 30.0) == set()
    assert store.renew_leases("w1", [again.lease], 30.0) == {"a"}


async def test_release_as_queued_hands_the_run_to_anyone_at_once(store: Any) -> None:
    await submit(store, "r")
    claim = await store.claim_run("r", "w1")
    assert claim is not None
    await store.release_run(claim.lease)
    entry = await store.get_run("r")
    assert entry is not None and (entry.status, entry.owner, entry.wake_at) == (
        "queued",
        None,
        None,
    )
    with pytest.raises(LeaseLost):
        await store.release_run(claim.lease)  # it no longer holds the run
    assert await claim_ids(store, "w2") == ["r"]


@pytest.mark.parametrize("finish", ["append", "mark_finished"])
async def test_releasing_a_run_that_finished_under_the_lease_leaves_it_finished(
    store: Any, finish: str
) -> None:
    # A worker that stops (or parks) just as its run ends gives nothing back: were the
    # run claimable again, it would run twice.
    await submit(store, "r")
    claim = await store.claim_run("r", "w1")
    assert claim is not None
    if finish == "append":
        await store.append(
            "r", [rec(0)], None, "completed", lease=claim.lease, outcome=RunOutcome(7)
        )
    else:
        await store.mark_finished("r", "completed", lease=claim.lease, outcome=RunOutcome(7))
    await store.release_run(claim.lease)  # raises nothing
    await store.release_run(claim.lease, status="parked", wake_at=0.0)
    entry = await store.get_run("r")
    assert entry is not None and entry.status == "completed"
    assert entry.outcome == RunOutcome(7)
    assert await claim_ids(store, "w2") == []
    assert await store.claim_run("r", "w2") is None
    assert await store.list_unfinished() == []
    for stale in (Lease("r", "w1", claim.lease.epoch - 1), Lease("r", "w2", claim.lease.epoch)):
        with pytest.raises(LeaseLost, match="'r'"):
            await store.release_run(stale)
    entry = await store.get_run("r")
    assert entry is not None and entry.status == "completed"


async def test_a_parked_run_wakes_at_its_time(store: Any) -> None:
    await submit(store, "r")
    claim = await store.claim_run("r", "w1")
    assert claim is not None
    wake_at = time.time() + 0.3
    await store.release_run(claim.lease, status="parked", wake_at=wake_at)
    entry = await store.get_run("r")
    assert entry is not None and (entry.status, entry.owner) == ("parked", None)
    assert entry.wake_at == pytest.approx(wake_at)
    assert await claim_ids(store, "w2") == []
    await anyio.sleep(0.4)
    claims = await store.claim_runs("w2", ["wf"])
    assert [c.lease for c in claims] == [Lease("r", "w2", 2)]
    assert claims[0].entry.wake_at is None


async def test_a_parked_run_without_a_time_wakes_for_its_inbox(store: Any) -> None:
    await submit(store, "r")
    claim = await store.claim_run("r", "w1")
    assert claim is not None
    await store.release_run(claim.lease, status="parked")
    assert await claim_ids(store, "w2") == []
    await store.send("r", "cancel")
    assert await claim_ids(store, "w2") == ["r"]


async def test_expire_owner_ends_only_that_owners_leases(store: Any) -> None:
    for run_id in ("a", "b", "c"):
        await submit(store, run_id)
    await store.claim_runs("w1", ["wf"], limit=2)
    await store.claim_runs("w2", ["wf"], limit=1)
    assert await store.expire_owner("w1") == 2
    assert await store.expire_owner("nobody") == 0
    assert await claim_ids(store, "w3") == ["a", "b"]
    assert await store.expire_owner("w1") == 0
