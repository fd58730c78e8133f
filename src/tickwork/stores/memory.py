"""An in-memory journal store: the protocol without durability (tests, examples)."""

from __future__ import annotations

import copy
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from tickwork.stores.store import JournalError, RunEntry, RunStatus, StatePatch
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
        )


class InMemoryJournal:
    """Keeps journals in this process.  Same semantics as the SQLite store, no disk."""

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}

    def check(self) -> None:
        """Nothing can be wrong with memory: a no-op (see ``JournalStore``)."""

    def _run(self, run_id: str) -> _Run:
        run = self._runs.get(run_id)
        if run is None:
            raise JournalError(f"the journal has no run {run_id!r}")
        return run

    def register_run(
        self,
        run_id: str,
        workflow_name: str,
        snapshot: dict[str, Any],
        *,
        start_event: Any = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = _Run(workflow_name)
        run.workflow_name = workflow_name
        run.status = "running"
        run.updated_at = time.time()
        if start_event is not None:
            run.start_event = copy.deepcopy(start_event)
        if options is not None:
            run.options = dict(options)
        seq = int(snapshot.get("journal_seq", 0))
        run.snapshot = (seq, copy.deepcopy(snapshot))
        run.records = {s: r for s, r in run.records.items() if s >= seq}
        run.patches = [p for p in run.patches if p.after_seq >= seq]

    async def append(
        self,
        run_id: str,
        records: Sequence[JournalRecord],
        state_patch: StatePatch | None = None,
        final_status: RunStatus | None = None,
    ) -> None:
        run = self._run(run_id)
        for record in records:
            if record.seq in run.records:
                raise JournalError(f"run {run_id!r}: seq {record.seq} was already written")
            run.records[record.seq] = record
            run.last_seq = max(run.last_seq, record.seq)
        if state_patch is not None:
            run.patches.append(state_patch)
        if final_status is not None:
            run.status = final_status
        run.updated_at = time.time()

    async def record_alive_time(self, run_id: str, elapsed_alive: float) -> None:
        run = self._run(run_id)
        run.elapsed_alive = max(run.elapsed_alive, elapsed_alive)
        run.updated_at = time.time()

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

    async def write_snapshot(self, run_id: str, seq: int, snapshot: dict[str, Any]) -> None:
        run = self._run(run_id)
        run.snapshot = (seq, copy.deepcopy(snapshot))
        run.records = {s: r for s, r in run.records.items() if s >= seq}
        run.patches = [p for p in run.patches if p.after_seq >= seq]

    async def read_snapshot(self, run_id: str) -> tuple[int, dict[str, Any]] | None:
        run = self._run(run_id)
        return None if run.snapshot is None else (run.snapshot[0], copy.deepcopy(run.snapshot[1]))

    async def list_unfinished(self, workflow_name: str | None = None) -> list[RunEntry]:
        return [
            entry
            for entry in await self.list_runs()
            if entry.status == "running"
            and (workflow_name is None or entry.workflow_name == workflow_name)
        ]

    async def mark_finished(self, run_id: str, status: RunStatus) -> None:
        self._run(run_id).status = status

    async def get_run(self, run_id: str) -> RunEntry | None:
        run = self._runs.get(run_id)
        return None if run is None else run.entry(run_id)

    async def list_runs(self) -> list[RunEntry]:
        return [run.entry(run_id) for run_id, run in reversed(self._runs.items())]
