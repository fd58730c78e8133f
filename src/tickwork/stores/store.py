"""The journal-store protocol: what a durable backend implements.

A store keeps, per run: its identity (workflow name, status, start event and options,
times), the journal records of the run (consecutive ``seq`` numbers), an optional
*compacting snapshot* (recovery reads the latest snapshot plus the records after it,
never the whole history) and the state store patches that go with the records.

``register_run`` makes a run durable in **one transaction** with everything needed to
start it again (its starting snapshot, start event and options), before ``run()``
returns; ``append`` writes one batch of records and their state patch in one
transaction (the runner commits all the ticks it reduced in one drain at once: group
commit).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from tickwork.types import JournalRecord

__all__ = ["JournalError", "JournalStore", "RunEntry", "RunStatus", "StatePatch"]

RunStatus = Literal["running", "completed", "failed", "timed_out", "cancelled"]


class JournalError(Exception):
    """A journal cannot be read or written: a gap, a corrupt record, an unknown run, a
    path that cannot hold a journal, a damaged file.

    The message names the store (a SQLite journal's path), the run id when the problem
    is about one run and, where it applies, the sequence number; an error of the
    underlying database is kept as ``__cause__``.
    """


@dataclass(frozen=True)
class RunEntry:
    """One run known to a store.

    ``start_event`` is the serializer record of the run's start event and ``options``
    what ``run()`` was given besides it (the run's ``timeout``); a resume uses both, so
    a resumed run keeps its original options.  ``created_at`` and ``updated_at`` are
    epoch seconds (the last write); ``elapsed_alive`` is the run's alive time as last
    recorded, which survives a crash even while the run waits and journals nothing.
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


@dataclass(frozen=True)
class StatePatch:
    """A JSON patch of the state-store section, applied after record ``after_seq``."""

    after_seq: int
    patch: list[dict[str, Any]]


@runtime_checkable
class JournalStore(Protocol):
    """A durable home for run journals.  All methods are async (anyio-friendly).

    A store may also define a synchronous ``check()`` (not part of the protocol, so
    stores without one still qualify): ``Workflow(journal=store)`` and ``run()`` call it,
    and it raises ``JournalError`` when the store cannot be used (a bad path, a file that
    cannot be opened), so that the problem surfaces there and not inside a running
    workflow.  It should be cheap once the store is known to work.
    """

    def register_run(
        self,
        run_id: str,
        workflow_name: str,
        snapshot: dict[str, Any],
        *,
        start_event: Any = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        """Register a run (or a new session of one) in one transaction, and block until
        it is durable.

        ``snapshot`` is the state the session starts from.  A new run also gives its
        ``start_event`` record and ``options``; a new session of a known run passes
        ``None`` for them and keeps the stored ones.  Synchronous on purpose:
        ``Workflow.run()`` returns its handler only once the run can be recovered.
        """

    async def record_alive_time(self, run_id: str, elapsed_alive: float) -> None:
        """Record the alive time a run has spent (heartbeats of journaled runs)."""

    async def append(
        self,
        run_id: str,
        records: Sequence[JournalRecord],
        state_patch: StatePatch | None = None,
        final_status: RunStatus | None = None,
    ) -> None:
        """Append records (and the state patch after them) in one transaction.

        ``final_status`` marks the run finished in the same transaction, so a run whose
        last records are durable is never mistaken for an interrupted one.
        """

    def read(self, run_id: str, from_seq: int = 0) -> AsyncIterator[JournalRecord]:
        """The run's records with ``seq >= from_seq``, in order; gaps raise."""
        ...

    async def read_state_patches(self, run_id: str, from_seq: int = 0) -> list[StatePatch]:
        """The state patches after records ``>= from_seq``, in order."""
        ...

    async def write_snapshot(self, run_id: str, seq: int, snapshot: dict[str, Any]) -> None:
        """Store a compacting snapshot taken before record ``seq``; drop older history."""

    async def read_snapshot(self, run_id: str) -> tuple[int, dict[str, Any]] | None:
        """The latest compacting snapshot and the seq it was taken at."""
        ...

    async def list_unfinished(self, workflow_name: str | None = None) -> list[RunEntry]:
        """Runs that have not reached a terminal outcome (optionally of one workflow)."""
        ...

    async def mark_finished(self, run_id: str, status: RunStatus) -> None:
        """Record the run's terminal outcome."""

    async def get_run(self, run_id: str) -> RunEntry | None:
        """What the store knows about ``run_id``."""
        ...

    async def list_runs(self) -> list[RunEntry]:
        """Every run the store knows, newest first."""
        ...
