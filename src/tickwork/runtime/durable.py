"""Writing a run's journal to a durable store (``Workflow(journal=<store>)``).

``DurableWriter.register`` makes the run recoverable before ``run()`` returns: its
starting snapshot, start event and options in one store transaction, and the lease that
makes this process its owner.  The runner then reduces a drain of ticks and awaits
``DurableWriter.commit``, which writes, in one store transaction fenced by that
lease (group commit):

* the drain's records and the state-store patch accumulated with them;
* the inbox items those records consumed (each external event enters the journal once);
* the events they published, at their stream positions (so another process can follow
  the run, and a failover never publishes an event twice);
* the run's outcome, when the drain ended it, and its final compacting snapshot (when
  the store ``appends_snapshots``; otherwise that snapshot is a second call).

A compacting snapshot (run state + state store) is written at registration, every
``compact_every`` records, and with the last records of a finished run (before its
result is delivered), so recovery reads a snapshot plus a short tail — never the whole
history — and a finished run keeps only its final snapshot.
The final snapshot of a failed run also says why it failed (its ``failure`` key, which
loaders ignore): the records that showed it are compacted away with the rest.

While a run with a time budget waits and journals nothing, ``DurableWriter.heartbeat``
records its alive time about once a second, so that a crash forgets at most that much
of it (api.md §24.2).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Generator, Mapping, Sequence
from typing import Any

import anyio
from pydantic import BaseModel

from tickwork._serde_fields import dump_exception
from tickwork.errors import WorkflowRuntimeError
from tickwork.events import InternalDispatchEvent, StopEvent
from tickwork.runtime.types.commands import (
    Command,
    CompleteRun,
    FailWorkflow,
    Halt,
    PublishEvent,
    terminal_event,
)
from tickwork.runtime.types.results import Failed
from tickwork.runtime.types.state import RunState
from tickwork.runtime.types.ticks import SessionStart, StepResult, Tick
from tickwork.serde.journal_codec import (
    certain_tick_text,
    encode_tick,
    encode_tick_text,
    event_text,
    known_record,
    records_model_text,
)
from tickwork.serde.serializers import BaseSerializer
from tickwork.serde.snapshot import encode_snapshot
from tickwork.stores import metrics
from tickwork.stores.encoded import (
    DeferredTextRecord,
    TextOutcome,
    TextRecord,
    TextStreamItem,
    TextValue,
)
from tickwork.stores.records import STREAM_SLOTS, Lease, RunOutcome, StreamItem
from tickwork.stores.store import JournalStore, RunStatus, StatePatch
from tickwork.types import JournalRecord

__all__ = ["Ack", "DurableWriter"]

_FINAL: dict[str, RunStatus] = {
    "completed": "completed",
    "failed": "failed",
    "timed_out": "timed_out",
    "cancelled": "cancelled",
}


_LATENCY = "tickwork.journal.append_latency"


class _Done:
    """An awaitable done at once (a commit with nothing to write): no coroutine."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return iter(())  # type: ignore[return-value]  # an empty iterator: no wait


_DONE = _Done()


class Ack:
    """Set once a tick is durable in the journal, or failed to become so (``error``)."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.error: BaseException | None = None

    def settle(self, error: BaseException | None = None) -> None:
        if not self.done.is_set():
            self.error = error
            self.done.set()


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
        self.lease: Lease | None = None
        """The lease that makes this process the run's owner (fences every write)."""
        # Records, stream items and the outcome go to a store that writes JSON text as
        # that text, written in one pass, when the serializer's records allow it
        # (``tickwork.stores.encoded``); the records known then hold texts.
        self._text = bool(getattr(store, "takes_record_text", False)) and records_model_text(
            serializer
        )
        self._appends_snapshots = bool(getattr(store, "appends_snapshots", False))
        # The ticks reduced and the events published since the last commit: lists made
        # when the first one comes (a run waiting for its commit keeps no empty ones).
        self._pending: list[tuple[Tick, int]] | None = None
        self._published: list[StreamItem] | None = None
        self._terminal: CompleteRun | FailWorkflow | Halt | None = None
        self._checkpoint: Any = None
        self._since_snapshot = 0
        # Acknowledgements awaited by senders, and inbox items turned into ticks, by the
        # identity of their tick: made on first use (most runs have neither, and every
        # live journaled run would hold two empty dictionaries).
        self._acks: dict[int, tuple[Tick, Ack]] | None = None
        self._inbox: dict[int, tuple[Tick, int]] | None = None
        # The records of the events published since the last commit, by the identity
        # of their event (kept with it: the id stays its own): a tick carrying one of
        # them (the StopEvent of a run's last step) and the run's outcome reuse it.
        self._records: dict[int, tuple[Any, Any]] | None = None

    @property
    def settled(self) -> bool:
        """Whether every reduced tick was committed (nothing waits for a commit)."""
        return not self._pending

    # -- registration ------------------------------------------------------------------

    def register(
        self,
        state: RunState,
        start_event: Any,
        options: Mapping[str, Any] | None,
        *,
        owner: str | None = None,
        lease: Lease | None = None,
        lease_seconds: float = 30.0,
    ) -> Lease | None:
        """Make the run (or its new session) durable before ``run()`` returns.

        A new run gives its start event and options; a resumed one gives ``None`` for
        both and keeps what the store has.  ``owner`` takes the run over (a new lease);
        ``lease`` is the lease of a claim.  Blocks until the store has committed.
        """
        record = None if start_event is None else self._start_record(start_event)
        self.lease = self.store.register_run(
            self.run_id,
            self.workflow_name,
            self._snapshot(state),
            start_event=record,
            options=options,
            owner=owner,
            lease_seconds=lease_seconds,
            lease=lease,
        )
        self._since_snapshot = 0
        return self.lease

    def _start_record(self, start_event: Any) -> Any:
        try:
            record = self.serializer.to_record(start_event)
        except Exception as error:
            raise WorkflowRuntimeError(
                f"run {self.run_id}: cannot journal the start event "
                f"{type(start_event).__name__}: {error}; use a serializer that can encode "
                "it (e.g. PickleSerializer) or make it serializable"
            ) from error
        text = self._event_text(start_event) if self._text else None
        if text is None:
            return record
        # Its text is written once: the store takes it with the record, and the first
        # commit's record of the start event (``AddEvent``) reuses it.
        self._records = {id(start_event): (start_event, text)}
        return TextValue(record, text)

    def _snapshot(self, state: RunState) -> dict[str, Any]:
        self._checkpoint = self.state_store.checkpoint()
        return encode_snapshot(state, self.serializer, self._checkpoint.to_dict())

    # -- acknowledgements and inbox items ---------------------------------------------

    def ack_when_durable(self, tick: Tick) -> Ack:
        """An ``Ack`` settled when ``tick`` is committed (``tick`` is not posted)."""
        ack = Ack()
        if self._acks is None:
            self._acks = {}
        self._acks[id(tick)] = (tick, ack)
        return ack

    def abandon_acks(self, reason: str) -> None:
        """The run ended: every tick still awaited will never be journaled."""
        acks, self._acks = self._acks, None
        if not acks:
            return
        for _tick, ack in acks.values():
            ack.settle(WorkflowRuntimeError(f"run {self.run_id}: {reason}"))

    def consumes(self, tick: Tick, item_id: int) -> None:
        """``tick`` stands for inbox item ``item_id``: consume it when it is journaled."""
        if self._inbox is None:
            self._inbox = {}
        self._inbox[id(tick)] = (tick, item_id)

    # -- recording and committing ----------------------------------------------------------

    def record(self, tick: Tick, seq: int, commands: Sequence[Command]) -> None:
        """Remember a reduced tick (and the events it publishes) until the next commit."""
        pending = self._pending
        if pending is None:
            self._pending = [(tick, seq)]
        else:
            pending.append((tick, seq))
        index = 0
        for command in commands:
            kind = type(command)
            if kind is PublishEvent:
                event = command.event  # type: ignore[union-attr]
                if isinstance(event, InternalDispatchEvent):
                    continue
            elif isinstance(command, (CompleteRun, FailWorkflow, Halt)):
                self._terminal = command
                event = terminal_event(command)
            else:
                continue
            if index >= STREAM_SLOTS:
                raise WorkflowRuntimeError(
                    f"run {self.run_id}: record seq {seq} publishes more than {STREAM_SLOTS} events"
                )
            item = self._stream_item(StreamItem.position(seq, index), event)
            if self._published is None:
                self._published = [item]
            else:
                self._published.append(item)
            index += 1

    def _stream_item(self, position: int, event: Any) -> StreamItem:
        """The stream item of ``event``; its record (or text) is kept for the commit."""
        text = self._event_text(event) if self._text else None
        item: StreamItem
        if text is None:
            kept = self._event_record(event)
            item = StreamItem(position, kept)
            if self._text:  # the records known hold texts
                return item
        else:
            kept = text
            item = TextStreamItem(position, text)
        if self._records is None:
            self._records = {}
        self._records[id(event)] = (event, kept)
        return item

    @staticmethod
    def _event_text(event: Any) -> str | None:
        """The record text of a model ``event``; ``None`` when it is no model or does
        not dump (``_event_record`` then says why)."""
        if not isinstance(event, BaseModel):
            return None
        try:
            return event_text(event)
        except Exception:
            return None

    def _event_record(self, event: Any) -> Any:
        try:
            return self.serializer.to_record(event)
        except Exception as error:
            raise WorkflowRuntimeError(
                f"run {self.run_id}: cannot journal the published event "
                f"{type(event).__name__}: {error}"
            ) from error

    def _encode(
        self,
        tick: Tick,
        seq: int,
        known: dict[int, tuple[Any, Any]] | None,
        defer: bool = False,
    ) -> JournalRecord:
        """The journal record of ``tick``; with ``defer``, a record whose text is
        certain is written only if the store reads it (``DeferredTextRecord``)."""
        if self._text:
            if defer:
                write = certain_tick_text(tick, known)
                if write is not None:
                    return DeferredTextRecord(seq, type(tick) is SessionStart, write)
            text = encode_tick_text(tick, known)
            if text is not None:
                return TextRecord(seq, text, type(tick) is SessionStart)
            known = None  # it holds texts
        try:
            return JournalRecord(seq=seq, data=encode_tick(tick, self.serializer, known))
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

    def _state_patch(self, after_seq: int) -> StatePatch | None:
        checkpoint = self.state_store.checkpoint()
        if self._checkpoint is None or checkpoint.state is self._checkpoint.state:
            return None
        patch = checkpoint.diff(self._checkpoint)
        self._checkpoint = checkpoint
        return StatePatch(after_seq, patch) if patch else None

    def _outcome(self, known: dict[int, tuple[Any, Any]] | None) -> RunOutcome | None:
        terminal = self._terminal
        if terminal is None:
            return None
        if isinstance(terminal, CompleteRun):
            stop: StopEvent = terminal.stop_event
            made = known_record(known, stop)
            if made is not None:
                return TextOutcome(made) if self._text else RunOutcome(result=made)
            return RunOutcome(result=self._event_record(stop))
        exception = terminal.exception
        return RunOutcome(error=dump_exception(exception) if exception is not None else None)

    def commit(self, state: RunState) -> Awaitable[None]:
        """Write the pending records (and what goes with them) in one transaction:
        await what this returns.

        A plain function: when nothing is left to do once the write is done (no
        acknowledgement to settle, no latency to record, no compacting snapshot to
        write after it), it returns the store's own awaitable of the write, not a
        coroutine of ours around it (every journaled run waiting for its commit would
        hold it, and every wake-up would resume it); with nothing pending, an
        awaitable that is done at once."""
        batch = self._pending
        if batch is None:
            return _DONE
        self._pending = None
        final = _FINAL.get(state.status)
        try:
            writing, closed = self._append(state, batch, final)
        except BaseException as error:
            self._settle(batch, error)
            raise
        since = 0 if closed else self._since_snapshot + len(batch)
        if (
            not self._acks
            and (closed or (final is None and since < self.compact_every))
            and not metrics.recording(_LATENCY)
        ):
            # Counted before the write is done: a failed write raises through the
            # caller and stops the run (were the count read again, a compacting
            # snapshot would only come sooner).
            self._since_snapshot = since
            return writing
        return self._commit_then(writing, state, batch, final, closed)

    async def _commit_then(
        self,
        writing: Awaitable[None],
        state: RunState,
        batch: list[tuple[Tick, int]],
        final: RunStatus | None,
        closed: bool,
    ) -> None:
        """Await ``writing``, then settle the batch's acknowledgements, record the
        latency and write the compacting snapshot that is due."""
        try:
            began = time.monotonic()
            await writing
        except BaseException as error:
            self._settle(batch, error)
            raise
        metrics.record(_LATENCY, time.monotonic() - began)
        self._settle(batch, None)
        self._since_snapshot += len(batch)
        if closed:
            self._since_snapshot = 0
        elif final is not None or self._since_snapshot >= self.compact_every:
            snapshot = self._compacting_snapshot(state, batch, final)
            await self.store.write_snapshot(
                self.run_id, state.journal_seq, snapshot, lease=self.lease
            )
            self._since_snapshot = 0

    def _append(
        self, state: RunState, batch: list[tuple[Tick, int]], final: RunStatus | None
    ) -> tuple[Awaitable[None], bool]:
        """The store's append of ``batch`` (await it), and whether the final snapshot
        rides in it.

        A frame of its own: the records, events and snapshot encoded here are the
        store's to keep, not the frame of a run waiting for its commit (a store that
        encodes them before it waits lets them go)."""
        published, self._published = self._published, None
        known, self._records = self._records, None
        # The records of a final append that carries its compacting snapshot are
        # compacted away in its own transaction: a store that knows it does not write
        # them, so their texts are written only if read.
        defer = final is not None and self._appends_snapshots
        if len(batch) == 1:  # one tick (a step's result) is most drains': no comprehension
            tick, seq = batch[0]
            records = [self._encode(tick, seq, known, defer)]
        else:
            records = [self._encode(tick, seq, known, defer) for tick, seq in batch]
        patch = self._state_patch(records[-1].seq)
        stream = () if published is None else published
        if final is None:  # the common call, without a keyword dictionary
            writing = self.store.append(
                self.run_id,
                records,
                patch,
                lease=self.lease,
                consumed=self._consumed(batch) if self._inbox else (),
                stream=stream,
            )
            return writing, False
        # The final snapshot rides in the final append's transaction when the store
        # can take it: a finished run is never left uncompacted, and one store call
        # fewer per run.
        closing = self._final_snapshot(state, batch, final)
        extra: dict[str, Any] = {} if closing is None else {"snapshot": closing}
        writing = self.store.append(
            self.run_id,
            records,
            patch,
            final,
            lease=self.lease,
            consumed=self._consumed(batch),
            stream=stream,
            outcome=self._outcome(known),
            **extra,
        )
        return writing, closing is not None

    def _final_snapshot(
        self, state: RunState, batch: list[tuple[Tick, int]], final: RunStatus
    ) -> tuple[int, dict[str, Any]] | None:
        """The final snapshot for the final append, when the store takes one there."""
        if not self._appends_snapshots:
            return None
        return state.journal_seq, self._compacting_snapshot(state, batch, final)

    def _compacting_snapshot(
        self, state: RunState, batch: list[tuple[Tick, int]], final: RunStatus | None
    ) -> dict[str, Any]:
        """A snapshot of ``state`` after ``batch``; a failed run's says why it failed."""
        snapshot = self._snapshot(state)
        if final == "failed":
            snapshot["failure"] = _failure(batch)
        return snapshot

    def _consumed(self, batch: list[tuple[Tick, int]]) -> Sequence[int]:
        if not self._inbox:
            return ()
        consumed = []
        for tick, _seq in batch:
            found = self._inbox.pop(id(tick), None)
            if found is not None:
                consumed.append(found[1])
        return consumed

    def _settle(self, batch: list[tuple[Tick, int]], error: BaseException | None) -> None:
        if not self._acks:
            return
        for tick, _seq in batch:
            waiting = self._acks.pop(id(tick), None)
            if waiting is not None:
                waiting[1].settle(error)

    async def write_compacting_snapshot(self, state: RunState) -> None:
        """A snapshot now (before the run is parked or handed back): a short journal."""
        await self.store.write_snapshot(
            self.run_id, state.journal_seq, self._snapshot(state), lease=self.lease
        )
        self._since_snapshot = 0

    async def heartbeat(self, state: RunState, now: float) -> None:
        """Record the alive time spent up to ``now`` (the run's last input may be old)."""
        last = state.last_alive_stamp
        alive = state.elapsed_alive + (max(0.0, now - last) if last is not None else 0.0)
        await self.store.record_alive_time(self.run_id, alive, lease=self.lease)


def _failure(batch: list[tuple[Tick, int]]) -> dict[str, Any] | None:
    """``{"step_name", "exception"}`` of the step failure that ended the run, if one did.

    The failing result is the last tick of the drain that ended the run; a run failed
    for another reason (a stuck stream) gives ``None``.
    """
    for tick, _seq in reversed(batch):
        if isinstance(tick, StepResult) and isinstance(tick.outcome, Failed):
            exception = dump_exception(tick.outcome.exception)
            return {"step_name": tick.step, "exception": exception}
    return None
