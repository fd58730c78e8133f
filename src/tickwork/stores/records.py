"""The records a journal store keeps and hands out (the protocol is in ``.store``).

Plain frozen data: what a store knows about a run (``RunEntry``), the ownership a
worker holds on it (``Lease``, handed out by a ``Claim``), the messages other
processes leave for it (``InboxItem``), the events it published
(``StreamItem``), how it ended (``RunOutcome``) and the workers of a fleet
(``WorkerEntry``), plus the errors every store raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "FINISHED",
    "UNFINISHED",
    "Claim",
    "InboxItem",
    "InboxKind",
    "JournalError",
    "Lease",
    "LeaseLost",
    "RunEntry",
    "RunOutcome",
    "RunStatus",
    "STREAM_SLOTS",
    "StatePatch",
    "StoreUnavailable",
    "StreamItem",
    "WorkerEntry",
]

RunStatus = Literal["queued", "running", "parked", "completed", "failed", "timed_out", "cancelled"]
"""``queued``: submitted, never claimed yet; ``running``: owned by a worker (or a process
running it with ``Workflow.run()``); ``parked``: only waiting (waiters, timers), owned by
nobody and held in no memory; the rest are terminal outcomes (``cancelled`` runs can
still be resumed explicitly)."""

UNFINISHED: tuple[RunStatus, ...] = ("queued", "running", "parked")
FINISHED: tuple[RunStatus, ...] = ("completed", "failed", "timed_out", "cancelled")

InboxKind = Literal["send", "cancel"]


class JournalError(Exception):
    """A journal cannot be read or written: a gap, a corrupt record, an unknown run, a
    path that cannot hold a journal, a damaged file, a lost connection.

    The message names the store (a SQLite journal's path, a Postgres schema), the run id
    when the problem is about one run and, where it applies, the sequence number; an
    error of the underlying database is kept as ``__cause__``.
    """


class LeaseLost(JournalError):
    """A write of a run was refused: its lease moved to another worker (its epoch
    changed), or the journal moved on without this writer (``last_seq`` differs).

    The session that got it stops at once: it starts no step and publishes nothing more.
    Correctness never depends on clocks: an expired lease only makes a takeover
    possible, and the takeover is what makes the old owner's writes fail.
    """


class StoreUnavailable(JournalError):
    """The store could not be reached (a lost connection, a server down or restarting)
    for longer than a call retries.  Nothing is known to be wrong with the run: the
    call may succeed later."""


@dataclass(frozen=True)
class StatePatch:
    """A JSON patch of the state-store section, applied after record ``after_seq``."""

    after_seq: int
    patch: list[dict[str, Any]]


@dataclass(frozen=True)
class Lease:
    """Ownership of one run by one worker: every write of the run is fenced by it.

    ``epoch`` counts the claims of the run; a write carries the epoch it was claimed
    with, and the store refuses it once the run was claimed again.
    """

    run_id: str
    owner: str
    epoch: int


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended, as other processes read it: the serializer record of the
    ``StopEvent``'s result (``result``) or the error (``{"exception_type",
    "exception_message"}``, ``error``)."""

    result: Any = None
    error: Mapping[str, str] | None = None


@dataclass(frozen=True)
class RunEntry:
    """One run known to a store.

    ``start_event`` is the serializer record of the run's start event and ``options``
    what ``run()`` or ``submit()`` was given besides it (the run's ``timeout``); a resume
    uses both, so a resumed run keeps its original options.  ``created_at`` and
    ``updated_at`` are epoch seconds (the last write); ``elapsed_alive`` is the run's
    alive time as last recorded, which survives a crash even while the run waits and
    journals nothing.  The ownership fields (``owner``, ``epoch``, ``lease_until``),
    ``wake_at`` (when a parked run becomes claimable again), ``claims_without_progress``
    (a poison-run counter), ``queue`` and ``priority`` serve the worker fleet;
    ``outcome`` is set once the run has finished.
    """

    run_id: str
    workflow_name: str
    status: RunStatus
    last_seq: int
    created_at: float | None = None
    updated_at: float | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    start_event: Any = None
    elapsed_alive: float = 0.0
    queue: str = "default"
    priority: int = 0
    owner: str | None = None
    epoch: int = 0
    lease_until: float | None = None
    wake_at: float | None = None
    claims_without_progress: int = 0
    outcome: RunOutcome | None = None

    @property
    def finished(self) -> bool:
        """Whether the run has reached a terminal outcome."""
        return self.status in FINISHED


@dataclass(frozen=True)
class Claim:
    """A run a worker claimed: its lease and what the store knows about it."""

    lease: Lease
    entry: RunEntry


@dataclass(frozen=True)
class InboxItem:
    """A message another process left for a run: an event to send, or a cancel.

    ``item_id`` increases in insertion order; ``payload`` is the serializer record of the
    event (``None`` for a cancel).  The owner turns pending items into ticks and marks
    them consumed in the transaction that journals those ticks: each one enters the
    journal exactly once, across any failover.
    """

    item_id: int
    run_id: str
    kind: InboxKind
    payload: Any
    idempotency_key: str
    created_at: float


@dataclass(frozen=True)
class StreamItem:
    """An event a run published; ``event`` is its serializer record.

    ``seq`` is the event's position in the run's stream: ``record_seq * STREAM_SLOTS +
    k`` for the ``k``-th event published by journal record ``record_seq``.  Positions only
    grow, are the same whichever worker wrote them, and are written in the transaction
    that journals the record, so a re-run after a failover can never publish an event
    twice; a reader resumes after the last position it saw.
    """

    seq: int
    event: Any

    @staticmethod
    def position(record_seq: int, index: int) -> int:
        """The stream position of the ``index``-th event published by ``record_seq``."""
        return record_seq * STREAM_SLOTS + index


STREAM_SLOTS = 1 << 20
"""Stream positions per journal record (a record publishing more events than this is
refused)."""


@dataclass(frozen=True)
class WorkerEntry:
    """A worker process of a fleet (observability only: leases decide ownership)."""

    worker_id: str
    info: Mapping[str, Any]
    started_at: float
    last_seen: float
    runs: tuple[str, ...] = ()
