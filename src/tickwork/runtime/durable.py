"""Writing a run's journal to a durable store (``Workflow(journal=<store>)``).

The runner reduces a drain of ticks, then awaits :meth:`DurableWriter.commit`, which
writes that drain's records and the state-store patch accumulated with them in one
store transaction (group commit).  A compacting snapshot (run state + state store) is
written when the session starts, every ``compact_every`` records, and with the last
records of a finished run (before its result is delivered), so recovery reads a
snapshot plus a short tail — never the whole history — and a finished run keeps only
its final snapshot.
"""

from __future__ import annotations

from typing import Any

from tickwork.errors import WorkflowRuntimeError
from tickwork.runtime.types.state import RunState
from tickwork.runtime.types.ticks import Tick
from tickwork.serde.journal_codec import encode_tick
from tickwork.serde.serializers import BaseSerializer
from tickwork.serde.snapshot import encode_snapshot
from tickwork.stores.store import JournalStore, RunStatus, StatePatch
from tickwork.types import JournalRecord

__all__ = ["DurableWriter"]

_FINAL: dict[str, RunStatus] = {
    "completed": "completed",
    "failed": "failed",
    "timed_out": "timed_out",
    "cancelled": "cancelled",
}


class DurableWriter:
    """Group-commits one run's ticks and state patches to a journal store."""

    def __init__(
        self,
        store: JournalStore,
        run_id: str,
        workflow_name: str,
        serializer: BaseSerializer,
        state_store: Any,
        compact_every: int = 1000,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.workflow_name = workflow_name
        self.serializer = serializer
        self.state_store = state_store
        self.compact_every = compact_every
        self._pending: list[tuple[Tick, int]] = []
        self._checkpoint: Any = None
        self._since_snapshot = 0

    def _snapshot(self, state: RunState) -> dict[str, Any]:
        self._checkpoint = self.state_store.checkpoint()
        return encode_snapshot(state, self.serializer, self._checkpoint.to_dict())

    async def begin(self, state: RunState) -> None:
        """Register the session with its starting snapshot."""
        await self.store.begin_run(self.run_id, self.workflow_name, self._snapshot(state))
        self._since_snapshot = 0

    def record(self, tick: Tick, seq: int) -> None:
        """Remember a reduced tick until the next commit."""
        self._pending.append((tick, seq))

    def _state_patch(self, after_seq: int) -> StatePatch | None:
        checkpoint = self.state_store.checkpoint()
        if self._checkpoint is None or checkpoint.state is self._checkpoint.state:
            return None
        patch = checkpoint.diff(self._checkpoint)
        self._checkpoint = checkpoint
        return StatePatch(after_seq, patch) if patch else None

    def _encode(self, tick: Tick, seq: int) -> JournalRecord:
        try:
            return JournalRecord(seq=seq, data=encode_tick(tick, self.serializer))
        except Exception as error:
            payload = getattr(tick, "event", None)
            outcome = getattr(tick, "outcome", None)
            if payload is None and outcome is not None:
                payload = getattr(outcome, "value", None)
                if isinstance(payload, list) and payload:
                    payload = payload[0]
            raise WorkflowRuntimeError(
                f"run {self.run_id}: cannot journal a {type(tick).__name__} tick carrying "
                f"{type(payload).__name__}: {error}; use a serializer that can encode it "
                "(e.g. PickleSerializer) or make the payload serializable"
            ) from error

    async def commit(self, state: RunState) -> None:
        """Write the pending records (and the state patch after them) in one transaction."""
        if not self._pending:
            return
        records = [self._encode(tick, seq) for tick, seq in self._pending]
        self._pending = []
        patch = self._state_patch(records[-1].seq)
        final = _FINAL.get(state.status)
        await self.store.append(self.run_id, records, patch, final)
        self._since_snapshot += len(records)
        if final is not None or self._since_snapshot >= self.compact_every:
            await self.store.write_snapshot(self.run_id, state.journal_seq, self._snapshot(state))
            self._since_snapshot = 0
