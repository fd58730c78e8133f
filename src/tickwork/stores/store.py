"""The journal-store protocol: what a durable backend implements.

A store keeps, per run: its identity (workflow name, status, start event and options,
times), the journal records of the run (consecutive ``seq`` numbers), an optional
*compacting snapshot* (recovery reads the latest snapshot plus the records after it,
never the whole history), the state store patches that go with the records and, for
runs shared by several processes (scale-out.md), their ownership, inbox and event
stream.  The records it hands out are in ``tickwork.stores.records``.

**Transactions.** ``register_run`` makes a run durable in one transaction with
everything needed to start it again (its starting snapshot, start event and options),
before ``run()`` returns; ``append`` writes one batch of records, their state patch, the
inbox items they consumed, the events they published and the run's outcome in one
transaction (the runner commits all the ticks it reduced in one drain at once: group
commit).

**Ownership.** Every run is owned by at most one worker at a time, through a
``Lease`` whose ``epoch`` counts the claims of the run.
Every write may carry the writer's lease: the store then refuses it with
``LeaseLost`` unless the run is still owned by that lease
(same owner, same epoch) and, for ``append``, the batch starts right after the last
record written (``last_seq = first seq - 1``), all in the same statement.  Leases expire
(``lease_until``) only so that another worker may claim the run; correctness never
depends on clocks.  Times are epoch seconds from the database's clock (the process clock
for the embedded stores).

A run is claimable when it is ``queued``; ``parked`` with a passed ``wake_at`` or an
unconsumed inbox item; or ``running`` with an expired lease or no owner.  A run claimed
``max_claims`` times without progress in between (a successful ``append`` of more than
the record each session opens with: ``is_progress``) is *poison*: the store fails it
(with an error naming it) instead of handing it out again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from tickwork.serde.journal_codec import opens_session
from tickwork.stores.encoded import TextRecord
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
from tickwork.types import JournalRecord

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_MAX_CLAIMS",
    "FINISHED",
    "UNFINISHED",
    "Claim",
    "InboxItem",
    "InboxKind",
    "JournalError",
    "JournalStore",
    "Lease",
    "LeaseLost",
    "RunEntry",
    "RunOutcome",
    "RunStatus",
    "SnapshotAppendingStore",
    "StatePatch",
    "StreamItem",
    "WorkerEntry",
    "is_progress",
]

DEFAULT_LEASE_SECONDS = 30.0
"""How long a claim holds a run unless renewed (renewals come every third of it)."""

DEFAULT_MAX_CLAIMS = 5
"""Claims without progress after which a run is failed as poison."""


def is_progress(records: Sequence[JournalRecord]) -> bool:
    """Whether appending ``records`` is progress of their run, which resets its poison
    counter: any record but the one a session opens with.

    Every claim of a run starts a session, and the session journals its opening record
    before it runs a step; were that record progress, a run that kills every worker
    taking it would never be failed as poison.
    """
    for record in records:
        if not (record.opens if isinstance(record, TextRecord) else opens_session(record.data)):
            return True
    return False


@runtime_checkable
class JournalStore(Protocol):
    """A durable home for run journals.

    All methods are async (anyio-friendly), except the two that must block their
    caller: ``register_run`` (``Workflow.run()`` is synchronous and returns its handler
    only once the run is durable) and ``renew_leases`` (called by a dedicated thread, so
    that a blocked event loop cannot starve a worker's heartbeat).

    A store may also take the final compacting snapshot in its final append's
    transaction: see ``SnapshotAppendingStore``.  One that does not (a store written
    before that existed) gets it through ``write_snapshot`` after the append.
    """

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
        """Register a run (or a new session of one) in one transaction, and block until
        it is durable; its status becomes ``running``.

        ``snapshot`` is the state the session starts from.  A new run also gives its
        ``start_event`` record and ``options``; a new session of a known run passes
        ``None`` for them and keeps the stored ones.  With ``lease`` (from a claim) the
        write is fenced by it and the same lease is returned.  With ``owner`` instead,
        the run is taken over by ``owner`` (a new epoch) when nobody else holds a live
        lease on it, and the new lease is returned; ``LeaseLost`` otherwise.  Without
        either, the run is registered unowned (``None``).
        """

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
        """Queue a run for the fleet (``queued``, no owner), idempotent on ``run_id``.

        Returns whether it was created; a run that already exists is left as it is.
        """
        ...

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
    ) -> None:
        """Append records (and the state patch after them) in one transaction.

        In the same transaction: the inbox items ``consumed`` are marked consumed by
        these records, the ``stream`` items are stored, and ``final_status`` (with its
        ``outcome``) marks the run finished, so a run whose last records are durable is
        never mistaken for an interrupted one.  A successful append of progress
        (``is_progress``) resets the run's poison counter.  Fenced by ``lease`` when
        given (``LeaseLost``): a refused append writes nothing.
        """

    def read(self, run_id: str, from_seq: int = 0) -> AsyncIterator[JournalRecord]:
        """The run's records with ``seq >= from_seq``, in order; gaps raise."""
        ...

    async def read_state_patches(self, run_id: str, from_seq: int = 0) -> list[StatePatch]:
        """The state patches after records ``>= from_seq``, in order."""
        ...

    async def write_snapshot(
        self, run_id: str, seq: int, snapshot: dict[str, Any], *, lease: Lease | None = None
    ) -> None:
        """Store a compacting snapshot taken before record ``seq``; drop older history."""

    async def read_snapshot(self, run_id: str) -> tuple[int, dict[str, Any]] | None:
        """The latest compacting snapshot and the seq it was taken at."""
        ...

    async def mark_finished(
        self,
        run_id: str,
        status: RunStatus,
        *,
        lease: Lease | None = None,
        outcome: RunOutcome | None = None,
    ) -> None:
        """Record the run's terminal outcome (and release its lease)."""

    async def record_alive_time(
        self, run_id: str, elapsed_alive: float, *, lease: Lease | None = None
    ) -> None:
        """Record the alive time a run has spent (heartbeats of journaled runs)."""

    # -- what the store knows about runs -----------------------------------------------

    async def get_run(self, run_id: str) -> RunEntry | None:
        """What the store knows about ``run_id``."""
        ...

    async def list_runs(self) -> list[RunEntry]:
        """Every run the store knows, most recently updated first."""
        ...

    async def list_unfinished(self, workflow_name: str | None = None) -> list[RunEntry]:
        """Runs that have not reached a terminal outcome (optionally of one workflow)."""
        ...

    # -- ownership ---------------------------------------------------------------------

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
        """Claim up to ``limit`` claimable runs of these workflows (and queues), highest
        priority first, then oldest; each gets a new epoch and a lease for ``owner``.

        Concurrent claimers never get the same run (``FOR UPDATE SKIP LOCKED`` or a
        write lock).  Poison runs are failed instead of handed out.
        """
        ...

    async def claim_run(
        self,
        run_id: str,
        owner: str,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_claims: int = DEFAULT_MAX_CLAIMS,
    ) -> Claim | None:
        """Claim one run if it is claimable (``None`` if it is finished or another
        worker holds a live lease on it)."""
        ...

    def renew_leases(self, owner: str, leases: Sequence[Lease], lease_seconds: float) -> set[str]:
        """Extend ``owner``'s leases in one statement; the ids of the runs still held
        (a lease missing from the result was lost).  A run that finished under its lease
        counts as held: its owner is still writing its last records (the final
        snapshot), which the lease fences.  Blocking: a renewal thread calls it."""
        ...

    async def release_run(
        self,
        lease: Lease,
        *,
        status: Literal["queued", "parked"] = "queued",
        wake_at: float | None = None,
    ) -> None:
        """Give a run back, fenced by ``lease``: ``queued`` (a worker shutting down hands
        it to others at once) or ``parked`` (it only waits: claimable again at
        ``wake_at`` or when its inbox gets an item).  The owner writes a compacting
        snapshot first, so that the next claimer reads a short journal.  A run that
        finished under ``lease`` is left as it is (never made claimable again)."""

    async def expire_owner(self, owner: str) -> int:
        """End every lease of ``owner`` (a worker known to be dead); how many ended."""
        ...

    # -- inbox and stream --------------------------------------------------------------

    async def send(
        self,
        run_id: str,
        kind: InboxKind,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> bool:
        """Leave an item in the run's inbox; returns once it is durable.

        Idempotent on ``(run_id, idempotency_key)`` (``None``: a fresh key): a second
        item with the same key is dropped and ``False`` returned, also once the run has
        finished (a retry of a send that was delivered, perhaps the one that ended it).
        An item makes a parked run claimable.  ``JournalError`` for an unknown run, and
        for a new item to a finished run.
        """
        ...

    async def read_inbox(self, run_id: str) -> list[InboxItem]:
        """The run's unconsumed inbox items, in insertion order."""
        ...

    async def read_stream(
        self, run_id: str, after_seq: int = -1, limit: int | None = None
    ) -> list[StreamItem]:
        """The events the run published after record ``after_seq``, in order."""
        ...

    # -- workers and notifications ---------------------------------------------------

    async def register_worker(self, worker_id: str, info: Mapping[str, Any]) -> None:
        """Announce a worker (observability: ``tickwork workers``)."""

    async def touch_worker(self, worker_id: str, runs: Sequence[str]) -> None:
        """A worker is alive and owns ``runs``."""

    async def unregister_worker(self, worker_id: str) -> None:
        """A worker stopped."""

    async def list_workers(self) -> list[WorkerEntry]:
        """The workers that announced themselves and did not stop."""
        ...

    async def wait_for_change(self, timeout: float, run_id: str | None = None) -> None:
        """Return when the store was told about a change (of ``run_id``, or of any run:
        a submit, an inbox item, a release) or after ``timeout`` seconds, whichever
        comes first.  Notifications are hints: callers poll after the timeout anyway."""

    async def wait_for_inbox(self, timeout: float, run_id: str) -> None:
        """``wait_for_change`` for the inbox pump of ``run_id``: return when an item may
        have been sent to its inbox, or after ``timeout`` seconds.  A store that cannot
        tell an inbox item from the run's other changes returns on any of them (the
        pump then reads an inbox with nothing new); one that can spares the pump of a
        busy run a read per commit."""


@runtime_checkable
class SnapshotAppendingStore(JournalStore, Protocol):
    """A ``JournalStore`` whose ``append`` also writes a compacting snapshot.

    It says so at run time with the class attribute ``appends_snapshots = True`` (the
    built-in stores do); a run then writes its final snapshot in the transaction of its
    final append, so a finished run is never left uncompacted.  A store without the
    attribute is never passed ``snapshot=``.
    """

    appends_snapshots: bool

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
        """``JournalStore.append``, and with ``snapshot`` ``(seq, snapshot)``: a
        compacting snapshot taken before record ``seq``, written after the records in
        the same transaction, dropping the older history as ``write_snapshot`` does."""
