"""An in-memory journal store: the protocol without durability (tests, examples).

It is the reference for the store contract (``tickwork.stores.store``): claims,
leases and fencing, the inbox and the stream behave here exactly as in the SQLite and
Postgres stores, within one process.
"""

from __future__ import annotations

import copy
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal

import anyio

from tickwork.stores.records import (
    FINISHED,
    UNFINISHED,
    Claim,
    InboxItem,
    InboxKind,
    JournalError,
    Lease,
    LeaseLost,
    RunEntry,
    RunOutcome,
    RunStatus,
    StatePatch,
    StreamItem,
    WorkerEntry,
)
from tickwork.stores.remote import RemoteHandler, attach
from tickwork.stores.store import DEFAULT_LEASE_SECONDS, DEFAULT_MAX_CLAIMS, is_progress
from tickwork.types import JournalRecord

__all__ = ["InMemoryJournal"]


class _Run:
    def __init__(self, workflow_name: str) -> None:
        self.workflow_name = workflow_name
        self.status: RunStatus = "running"
        self.records: dict[int, JournalRecord] = {}
        self.patches: list[StatePatch] = []
        self.snapshot: tuple[int, dict[str, Any]] | None = None
        self.last_seq = -1
        self.created_at = self.updated_at = time.time()
        self.options: dict[str, Any] = {}
        self.start_event: Any = None
        self.elapsed_alive = 0.0
        self.queue = "default"
        self.priority = 0
        self.owner: str | None = None
        self.epoch = 0
        self.lease_until: float | None = None
        self.wake_at: float | None = None
        self.claims_without_progress = 0
        self.outcome: RunOutcome | None = None
        self.inbox: list[tuple[InboxItem, int | None]] = []  # (item, consumed_seq)
        self.keys: set[str] = set()
        self.stream: dict[int, StreamItem] = {}

    def entry(self, run_id: str) -> RunEntry:
        return RunEntry(
            run_id,
            self.workflow_name,
            self.status,
            self.last_seq,
            self.created_at,
            self.updated_at,
            dict(self.options),
            copy.deepcopy(self.start_event),
            self.elapsed_alive,
            self.queue,
            self.priority,
            self.owner,
            self.epoch,
            self.lease_until,
            self.wake_at,
            self.claims_without_progress,
            self.outcome,
        )

    def has_pending_inbox(self) -> bool:
        return any(consumed is None for _item, consumed in self.inbox)

    def claimable(self, now: float) -> bool:
        if self.status == "queued":
            return True
        if self.status == "parked":
            return (self.wake_at is not None and self.wake_at <= now) or self.has_pending_inbox()
        if self.status == "running":
            return self.owner is None or self.lease_until is None or self.lease_until < now
        return False


class InMemoryJournal:
    """Keeps journals in this process.  Same semantics as the SQLite store, no disk."""

    #: ``append`` takes ``snapshot=`` (see ``JournalStore.appends_snapshots``).
    appends_snapshots = True

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}
        self._workers: dict[str, WorkerEntry] = {}
        self._item_ids = itertools.count(1)
        self._changed: anyio.Event | None = None

    def __repr__(self) -> str:
        return f"InMemoryJournal({len(self._runs)} runs)"

    def check(self) -> None:
        """Nothing can be wrong with memory (the SQLite store opens its file here)."""

    # -- plumbing ------------------------------------------------------------------------

    def _run(self, run_id: str) -> _Run:
        run = self._runs.get(run_id)
        if run is None:
            raise JournalError(f"the journal has no run {run_id!r}")
        return run

    def _fence(self, run_id: str, run: _Run, lease: Lease | None, what: str) -> None:
        if lease is None:
            return
        if run.owner != lease.owner or run.epoch != lease.epoch:
            raise LeaseLost(
                f"run {run_id!r}: {what} refused: the run is owned by "
                f"{run.owner or 'nobody'} at epoch {run.epoch}, not by {lease.owner} at "
                f"epoch {lease.epoch}"
            )

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    @staticmethod
    def _compact(run: _Run, seq: int, snapshot: dict[str, Any]) -> None:
        run.snapshot = (seq, copy.deepcopy(snapshot))
        run.records = {s: r for s, r in run.records.items() if s >= seq}
        run.patches = [p for p in run.patches if p.after_seq >= seq]

    # -- registering and submitting runs ------------------------------------------

    def register_run(
        self,
        run_id: str,
        workflow_name: str,
        snapshot: dict[str, Any],
        *,
        start_event: Any = None,
        options: Mapping[str, Any] | None = None,
        owner: str | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        lease: Lease | None = None,
    ) -> Lease | None:
        found = self._runs.get(run_id)
        now = time.time()
        seq = int(snapshot.get("journal_seq", 0))
        # A new run is stored only once the checks passed: a refused one leaves nothing.
        run = found if found is not None else _Run(workflow_name)
        self._fence(run_id, run, lease, "registering a session")
        if lease is None and owner is not None:
            live = run.owner is not None and run.lease_until is not None and run.lease_until >= now
            if live and run.owner != owner:
                raise LeaseLost(
                    f"run {run_id!r} is owned by {run.owner} until {run.lease_until:.3f}; "
                    "it cannot be started here"
                )
            run.epoch += 1
            run.owner = owner
            run.lease_until = now + lease_seconds
            lease = Lease(run_id, owner, run.epoch)
        run.workflow_name = workflow_name
        run.status = "running"
        run.updated_at = now
        run.wake_at = None
        if start_event is not None:
            run.start_event = copy.deepcopy(start_event)
        if options is not None:
            run.options = dict(options)
        if found is None:
            run.last_seq = seq - 1  # its journal goes on from the snapshot
            self._runs[run_id] = run
        self._compact(run, seq, snapshot)
        return lease

    async def submit_run(
        self,
        run_id: str,
        workflow_name: str,
        snapshot: dict[str, Any],
        *,
        start_event: Any,
        options: Mapping[str, Any] | None = None,
        queue: str = "default",
        priority: int = 0,
    ) -> bool:
        if run_id in self._runs:
            return False
        run = self._runs[run_id] = _Run(workflow_name)
        run.status = "queued"
        run.start_event = copy.deepcopy(start_event)
        run.options = dict(options or {})
        run.queue = queue
        run.priority = priority
        seq = int(snapshot.get("journal_seq", 0))
        run.last_seq = seq - 1
        self._compact(run, seq, snapshot)
        self._notify()
        return True

    # -- the journal -----------------------------------------------------------------

    async def append(
        self,
        run_id: str,
        records: Sequence[JournalRecord],
        state_patch: StatePatch | None = None,
        final_status: RunStatus | None = None,
        *,
        lease: Lease | None = None,
        consumed: Sequence[int] = (),
        stream: Sequence[StreamItem] = (),
        outcome: RunOutcome | None = None,
        snapshot: tuple[int, dict[str, Any]] | None = None,
    ) -> None:
        run = self._run(run_id)
        self._fence(run_id, run, lease, "appending records")
        if records and lease is not None and records[0].seq != run.last_seq + 1:
            raise LeaseLost(
                f"run {run_id!r}: appending seq {records[0].seq} refused: the journal is "
                f"at seq {run.last_seq}"
            )
        for record in records:
            if record.seq in run.records:
                raise JournalError(f"run {run_id!r}: seq {record.seq} was already written")
        for record in records:
            run.records[record.seq] = record
            run.last_seq = max(run.last_seq, record.seq)
        if state_patch is not None:
            run.patches.append(state_patch)
        if consumed:
            at = records[-1].seq if records else run.last_seq
            wanted = set(consumed)
            run.inbox = [
                (item, at if item.item_id in wanted and done is None else done)
                for item, done in run.inbox
            ]
        for item in stream:
            run.stream[item.seq] = StreamItem(item.seq, copy.deepcopy(item.event))
        if is_progress(records):
            run.claims_without_progress = 0
        if final_status is not None:
            # The lease ends; the owner and epoch stay, so that the owner's last writes
            # (the final snapshot) are still fenced by its lease.
            run.status = final_status
            run.outcome = outcome
            run.lease_until = None
        if snapshot is not None:
            self._compact(run, *snapshot)
        run.updated_at = time.time()
        if final_status is not None or stream:
            self._notify()

    async def read(self, run_id: str, from_seq: int = 0) -> AsyncIterator[JournalRecord]:
        run = self._run(run_id)
        expected = from_seq
        for seq in sorted(s for s in run.records if s >= from_seq):
            if seq != expected:
                raise JournalError(
                    f"run {run_id!r}: journal gap, expected seq {expected}, found seq {seq}"
                )
            yield run.records[seq]
            expected += 1

    async def read_state_patches(self, run_id: str, from_seq: int = 0) -> list[StatePatch]:
        return [p for p in self._run(run_id).patches if p.after_seq >= from_seq]

    async def write_snapshot(
        self, run_id: str, seq: int, snapshot: dict[str, Any], *, lease: Lease | None = None
    ) -> None:
        run = self._run(run_id)
        self._fence(run_id, run, lease, "writing a snapshot")
        self._compact(run, seq, snapshot)

    async def read_snapshot(self, run_id: str) -> tuple[int, dict[str, Any]] | None:
        run = self._run(run_id)
        return None if run.snapshot is None else (run.snapshot[0], copy.deepcopy(run.snapshot[1]))

    async def mark_finished(
        self,
        run_id: str,
        status: RunStatus,
        *,
        lease: Lease | None = None,
        outcome: RunOutcome | None = None,
    ) -> None:
        run = self._run(run_id)
        self._fence(run_id, run, lease, "recording the outcome")
        run.status = status
        run.outcome = outcome if outcome is not None else run.outcome
        run.lease_until = None
        run.updated_at = time.time()
        self._notify()

    async def record_alive_time(
        self, run_id: str, elapsed_alive: float, *, lease: Lease | None = None
    ) -> None:
        run = self._run(run_id)
        self._fence(run_id, run, lease, "recording the alive time")
        run.elapsed_alive = max(run.elapsed_alive, elapsed_alive)
        run.updated_at = time.time()

    # -- what the store knows about runs -----------------------------------------------

    async def get_run(self, run_id: str) -> RunEntry | None:
        run = self._runs.get(run_id)
        return None if run is None else run.entry(run_id)

    async def list_runs(self) -> list[RunEntry]:
        entries = [run.entry(run_id) for run_id, run in self._runs.items()]
        return sorted(entries, key=lambda e: (-(e.updated_at or 0.0), e.run_id))

    async def list_unfinished(self, workflow_name: str | None = None) -> list[RunEntry]:
        return [
            entry
            for entry in await self.list_runs()
            if entry.status in UNFINISHED
            and (workflow_name is None or entry.workflow_name == workflow_name)
        ]

    # -- ownership ---------------------------------------------------------------------

    def _claim(self, run_id: str, run: _Run, owner: str, lease_seconds: float) -> Claim:
        now = time.time()
        run.epoch += 1
        run.owner = owner
        run.lease_until = now + lease_seconds
        run.status = "running"
        run.wake_at = None
        run.claims_without_progress += 1
        run.updated_at = now
        return Claim(Lease(run_id, owner, run.epoch), run.entry(run_id))

    def _poisoned(self, run_id: str, run: _Run, max_claims: int) -> bool:
        if run.claims_without_progress < max_claims:
            return False
        run.status = "failed"
        run.owner = None
        run.lease_until = None
        run.outcome = RunOutcome(
            error={
                "exception_type": "tickwork.stores.records.JournalError",
                "exception_message": (
                    f"run {run_id!r} was claimed {run.claims_without_progress} times "
                    "without progress (a poison run: it kills or stalls every worker that "
                    "takes it)"
                ),
            }
        )
        run.updated_at = time.time()
        return True

    async def claim_runs(
        self,
        owner: str,
        workflow_names: Sequence[str],
        *,
        queues: Sequence[str] | None = None,
        limit: int = 1,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_claims: int = DEFAULT_MAX_CLAIMS,
    ) -> list[Claim]:
        now = time.time()
        names = set(workflow_names)
        candidates = [
            (run_id, run)
            for run_id, run in self._runs.items()
            if run.workflow_name in names
            and (queues is None or run.queue in queues)
            and run.claimable(now)
        ]
        candidates.sort(key=lambda pair: (-pair[1].priority, pair[1].created_at, pair[0]))
        claims: list[Claim] = []
        for run_id, run in candidates:
            if len(claims) >= limit:
                break
            if self._poisoned(run_id, run, max_claims):
                continue
            claims.append(self._claim(run_id, run, owner, lease_seconds))
        return claims

    async def claim_run(
        self,
        run_id: str,
        owner: str,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_claims: int = DEFAULT_MAX_CLAIMS,
    ) -> Claim | None:
        run = self._runs.get(run_id)
        now = time.time()
        if run is None or run.status in FINISHED:
            return None
        if not (run.claimable(now) or run.status == "parked" or run.owner == owner):
            return None
        if self._poisoned(run_id, run, max_claims):
            return None
        return self._claim(run_id, run, owner, lease_seconds)

    def renew_leases(self, owner: str, leases: Sequence[Lease], lease_seconds: float) -> set[str]:
        now = time.time()
        kept: set[str] = set()
        for lease in leases:
            run = self._runs.get(lease.run_id)
            if run is None or run.owner != owner or run.epoch != lease.epoch:
                continue
            if run.status == "running":
                run.lease_until = now + lease_seconds
                kept.add(lease.run_id)
            elif run.status in FINISHED:
                kept.add(lease.run_id)  # ending: its last writes are still fenced by it
        return kept

    async def release_run(
        self,
        lease: Lease,
        *,
        status: Literal["queued", "parked"] = "queued",
        wake_at: float | None = None,
    ) -> None:
        run = self._run(lease.run_id)
        self._fence(lease.run_id, run, lease, f"releasing the run as {status}")
        if run.status in FINISHED:
            return  # it ended under this lease: there is nothing to give back
        run.status = status
        run.owner = None
        run.lease_until = None
        run.wake_at = wake_at if status == "parked" else None
        run.updated_at = time.time()
        self._notify()

    async def expire_owner(self, owner: str) -> int:
        ended = 0
        for run in self._runs.values():
            if run.owner == owner and run.status == "running":
                run.lease_until = 0.0
                ended += 1
        if ended:
            self._notify()
        return ended

    # -- inbox and stream --------------------------------------------------------------

    async def send(
        self,
        run_id: str,
        kind: InboxKind,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> bool:
        run = self._run(run_id)
        key = idempotency_key if idempotency_key is not None else uuid.uuid4().hex
        if key in run.keys:
            return False  # delivered before (perhaps what ended the run): a retry
        if run.status in FINISHED:
            raise JournalError(
                f"run {run_id!r} has finished ({run.status}); the {kind} was not delivered"
            )
        run.keys.add(key)
        item = InboxItem(
            next(self._item_ids), run_id, kind, copy.deepcopy(payload), key, time.time()
        )
        run.inbox.append((item, None))
        run.updated_at = time.time()
        self._notify()
        return True

    async def read_inbox(self, run_id: str) -> list[InboxItem]:
        return [item for item, consumed in self._run(run_id).inbox if consumed is None]

    async def read_stream(
        self, run_id: str, after_seq: int = -1, limit: int | None = None
    ) -> list[StreamItem]:
        run = self._run(run_id)
        items = [run.stream[seq] for seq in sorted(run.stream) if seq > after_seq]
        return items if limit is None else items[:limit]

    # -- workers and notifications ---------------------------------------------------

    async def register_worker(self, worker_id: str, info: Mapping[str, Any]) -> None:
        now = time.time()
        self._workers[worker_id] = WorkerEntry(worker_id, dict(info), now, now)

    async def touch_worker(self, worker_id: str, runs: Sequence[str]) -> None:
        found = self._workers.get(worker_id)
        if found is not None:
            self._workers[worker_id] = WorkerEntry(
                worker_id, found.info, found.started_at, time.time(), tuple(runs)
            )

    async def unregister_worker(self, worker_id: str) -> None:
        self._workers.pop(worker_id, None)

    async def list_workers(self) -> list[WorkerEntry]:
        return sorted(self._workers.values(), key=lambda w: w.worker_id)

    async def attach(self, run_id: str, *, serializer: Any = None) -> RemoteHandler:
        """A handler of ``run_id`` that works from any task (see ``.remote``)."""
        return await attach(self, run_id, serializer)

    async def wait_for_inbox(self, timeout: float, run_id: str) -> None:
        await self.wait_for_change(timeout, run_id)

    async def wait_for_change(self, timeout: float, run_id: str | None = None) -> None:
        if self._changed is None:
            self._changed = anyio.Event()
        with anyio.move_on_after(timeout):
            await self._changed.wait()
