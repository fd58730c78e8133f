"""The reducer's accumulator and its dispatch primitives.

A reduction works on a ``Tx``: the run's scalar fields as attributes, the steps it
changed, and the commands it produced; ``commit`` builds the new state once.  The
functions here are the moves every phase makes: dispatch a work item to a free slot or
queue it, drain a queue, free a slot, end the run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, cast

from tickwork.runtime.types.commands import (
    CancelWorker,
    Command,
    CompleteRun,
    FailWorkflow,
    PublishStepState,
    RunWorker,
)
from tickwork.runtime.types.evolve import evolve as replace
from tickwork.runtime.types.persistent import PMap, PQueue
from tickwork.runtime.types.state import (
    EMPTY_PMAP,
    NO_HOLDINGS,
    NO_SENDS,
    NO_WAITER_INDEX,
    Holdings,
    Invocation,
    ReleaseState,
    RunState,
    RunStatus,
    StepRunState,
    StepSpec,
    StreamState,
    Waiter,
    WorkItem,
)
from tickwork.runtime.types.step_id import WORKER_NAMES
from tickwork.runtime.types.waiter_index import WaiterIndex

FRESH_STEP = StepRunState()


def fresh_steps(config: Any) -> Mapping[str, StepRunState]:
    """Every step of ``config`` idle and empty: one shared mapping per config (read-only,
    as every mapping of a state is), cached on the frozen config."""
    steps: Mapping[str, StepRunState] | None = config.__dict__.get("_fresh_steps")
    if steps is None:
        steps = {name: FRESH_STEP for name in config.steps}
        object.__setattr__(config, "_fresh_steps", steps)
    return steps


_NO_WAITERS: Mapping[str, Waiter] = {}


_log = logging.getLogger("tickwork.runtime")


_SCALARS = (
    "is_running",
    "queued",
    "running",
    "waiter_index",
    "streams",
    "releases",
    "stream_seq",
    "work_item_seq",
    "invocation_seq",
    "journal_seq",
    "elapsed_alive",
    "last_alive_stamp",
    "idle_check_pending",
    "holdings",
)


class Tx:
    """The accumulator of one reduction: the run's fields as attributes, the changed
    steps, and the commands produced so far.  ``commit`` builds the new state once."""

    __slots__ = (
        "_own_steps",
        "_status",
        "base",
        "commands",
        "live",
        "now",
        "quiet",
        "steps",
        "touched_streams",
        *_SCALARS,
    )

    _status: RunStatus
    live: bool
    """Whether the run is running (kept in step with ``status``: read on every phase)."""
    is_running: bool
    queued: int
    running: int
    waiter_index: WaiterIndex
    streams: PMap[str, StreamState]
    releases: PMap[str, ReleaseState]
    stream_seq: int
    work_item_seq: int
    invocation_seq: int
    journal_seq: int
    elapsed_alive: float
    last_alive_stamp: float | None
    idle_check_pending: bool
    holdings: Holdings

    def __init__(self, base: RunState, now: float) -> None:
        self.base = base
        self.now = now
        self.touched_streams: list[str] | None = None
        # The step states by name: the input's map (read-only) until the first put_step
        # copies it.  Read it directly: ``tx.steps[name]``.
        self.steps: Mapping[str, StepRunState] = base.steps
        self._own_steps: dict[str, StepRunState] | None = None
        self.commands: list[Command] = []
        # Set by folds that drop commands: the per-step ones are then not even built.
        self.quiet = False
        self._status = base.status
        self.live = base.status == "running"
        self.is_running = base.is_running
        self.queued = base.queued
        self.running = base.running
        self.waiter_index = base.waiter_index
        self.streams = base.streams
        self.releases = base.releases
        self.stream_seq = base.stream_seq
        self.work_item_seq = base.work_item_seq
        self.invocation_seq = base.invocation_seq
        self.journal_seq = base.journal_seq
        self.elapsed_alive = base.elapsed_alive
        self.last_alive_stamp = base.last_alive_stamp
        self.idle_check_pending = base.idle_check_pending
        self.holdings = base.holdings

    def put_step(self, name: str, value: StepRunState) -> None:
        own = self._own_steps
        if own is None:
            own = self._own_steps = dict(self.steps)
            self.steps = own
        own[name] = value

    def spec(self, name: str) -> StepSpec:
        spec: StepSpec = self.base.config.steps[name]
        return spec

    def emit(self, command: Command) -> None:
        self.commands.append(command)

    def touch_stream(self, stream: str) -> None:
        """Mark ``stream`` for the end-of-tick check for finished streams."""
        touched = self.touched_streams
        if touched is None:
            self.touched_streams = [stream]  # usually the only one: no set per tick
        elif stream not in touched:
            touched.append(stream)

    def mint_work_item(self) -> str:
        seq = self.work_item_seq
        self.work_item_seq = seq + 1
        # ``work_item_id(seq)``, spelled out: an f-string formats an int without parsing
        # a format string (two ids per hop; ``test_ids_match_step_id`` keeps them equal).
        return f"wi-{seq}"

    @property
    def status(self) -> str:
        return self._status

    @status.setter
    def status(self, value: str) -> None:
        self._status = cast(RunStatus, value)
        self.live = value == "running"

    def commit(self) -> RunState:
        base = self.base
        return RunState(
            base.config,
            self.steps,
            self._status,
            self.is_running,
            self.queued,
            self.running,
            self.waiter_index,
            self.streams,
            self.releases,
            self.stream_seq,
            self.work_item_seq,
            self.invocation_seq,
            self.journal_seq,
            self.elapsed_alive,
            self.last_alive_stamp,
            self.idle_check_pending,
            self.holdings,
        )


def invocation_order(invocation_id: str) -> int:
    """Sort key of invocation ids: minting order (maps iterate in hash order, and
    anything the reducer emits while walking one must not depend on the process)."""
    return int(invocation_id.rsplit("-", 1)[1])


def waiter_order(waiter: Waiter) -> str:
    """Sort key of waiters: their id."""
    return waiter.waiter_id


def start_invocation(
    tx: Tx,
    step: str,
    item: WorkItem,
    current: StepRunState | None = None,
    queue: PQueue[WorkItem] | None = None,
) -> None:
    """Dispatch ``item`` to the smallest free slot: record the invocation, ask for a worker.

    ``current`` is the step's state when the caller already holds it; ``queue`` is the
    step's queue once ``item`` was taken from it (a drained item), so that the step's
    new state is built once.
    """
    if current is None:
        current = tx.steps[step]
    slot, slots = current.slots.acquire()
    waiters = current.waiters
    item_waiters = current.waiters_by_item.get(item.work_item_id) if waiters.size else None
    resumed = item.resume_identity
    if resumed is None:  # a new invocation: mint its id
        seq = tx.invocation_seq
        tx.invocation_seq = seq + 1
        inv_id, received = f"inv-{seq}", NO_SENDS  # invocation_id(seq), see mint_work_item
    else:
        (inv_id, received), item = resumed, replace(item, resume_identity=None)
    invocation = Invocation(
        inv_id,
        step,
        slot,
        item,
        tx.now,
        received,
        current.collect_buffers,
        {wid: waiters[wid] for wid in item_waiters} if item_waiters else _NO_WAITERS,
    )
    tx.put_step(
        step,
        StepRunState(
            current.queue if queue is None else queue,
            current.in_progress.set(inv_id, invocation),
            slots,
            current.collect_buffers,
            current.join_buffer,
            current.join_counts,
            waiters,
            current.waiters_by_item,
        ),
    )
    tx.running += 1
    if not tx.quiet:
        tx.commands.append(RunWorker(invocation))


def dispatch_or_queue(tx: Tx, step: str, item: WorkItem) -> None:
    """Run ``item`` in the smallest free slot, or queue it (publishing PREPARING)."""
    current = tx.steps[step]
    if current.slots.busy < tx.base.config.steps[step].num_workers:
        start_invocation(tx, step, item, current)
        return
    tx.put_step(
        step,
        StepRunState(
            current.queue.append(item),
            current.in_progress,
            current.slots,
            current.collect_buffers,
            current.join_buffer,
            current.join_counts,
            current.waiters,
            current.waiters_by_item,
        ),
    )
    tx.queued += 1
    tx.emit(PublishStepState(step, "preparing", "<enqueued>", type(item.event)))


def drain_queue(tx: Tx, step: str) -> None:
    """Fill free slots of ``step`` with the first eligible queued items, in order."""
    workers = tx.base.config.steps[step].num_workers
    now = tx.now
    while True:
        current = tx.steps[step]
        queue = current.queue
        if not queue.size or current.slots.busy >= workers:
            return
        item, rest = queue.popleft()
        if item.not_before is not None and item.not_before > now:
            # A delayed retry at the front (rare): take the first item that is due.
            due, rest = queue.pop_first(lambda it: it.not_before is None or it.not_before <= now)
            if due is None:
                return
            item = due
        tx.queued += -1
        start_invocation(tx, step, item, current, rest)


def finish_invocation(
    tx: Tx,
    invocation: Invocation,
    publish: bool,
    output: type | None = None,
    has_output: bool = False,
    value: Any = None,
) -> None:
    """Free the invocation's slot and (with ``publish``) publish its NOT_RUNNING."""
    step = invocation.step
    current = tx.steps[step]
    if (
        current.in_progress.size == 1
        and current.queue is FRESH_STEP.queue
        and current.collect_buffers is FRESH_STEP.collect_buffers
        and current.join_buffer is FRESH_STEP.join_buffer
        and current.join_counts is FRESH_STEP.join_counts
        and current.waiters is FRESH_STEP.waiters
        and current.waiters_by_item is FRESH_STEP.waiters_by_item
    ):
        # The step held nothing but this invocation (the usual case): it is fresh again,
        # and the fresh state is shared instead of built.
        tx.put_step(step, FRESH_STEP)
    else:
        tx.put_step(
            step,
            StepRunState(
                current.queue,
                current.in_progress.delete(invocation.invocation_id),
                current.slots.release(invocation.worker_id),
                current.collect_buffers,
                current.join_buffer,
                current.join_counts,
                current.waiters,
                current.waiters_by_item,
            ),
        )
    tx.running -= 1
    if publish and not tx.quiet:
        tx.commands.append(
            PublishStepState(
                invocation.step,
                "not_running",
                WORKER_NAMES[invocation.worker_id],
                type(invocation.item.event),
                output,
                has_output,
                value,
            )
        )


def cancel_all_workers(tx: Tx, keep_records: bool) -> list[str]:
    """Cancel every running invocation; returns the sorted names of active steps."""
    active: set[str] = set()
    for step in tx.base.steps:
        current = tx.steps[step]
        if current.in_progress.size:
            for inv_id in sorted(current.in_progress, key=invocation_order):
                tx.emit(CancelWorker(inv_id))
            active.add(step)
        if not keep_records and current is not FRESH_STEP:
            tx.put_step(step, FRESH_STEP)
    if not keep_records:
        fresh = fresh_steps(tx.base.config)
        if tx.steps is not fresh and list(tx.steps) == list(fresh):
            # Every step is fresh now: share the config's mapping (a finished run keeps
            # none of its own).
            tx.steps = fresh
            tx._own_steps = None
        tx.queued = 0
        tx.running = 0
        # The shared empty containers: a finished run keeps no containers of its own.
        tx.waiter_index = NO_WAITER_INDEX
        tx.streams = EMPTY_PMAP
        tx.releases = EMPTY_PMAP
        tx.holdings = NO_HOLDINGS
    return sorted(active)


def end_run(tx: Tx, status: str) -> list[str]:
    active = cancel_all_workers(tx, keep_records=False)
    tx.status = status
    tx.is_running = False
    return active


def complete_run(tx: Tx, stop_event: Any) -> None:
    end_run(tx, "completed")
    tx.emit(CompleteRun(stop_event))


def fail_run(
    tx: Tx,
    step: str,
    exception: BaseException,
    attempts: int | None,
    elapsed: float | None,
) -> None:
    end_run(tx, "failed")
    tx.emit(FailWorkflow(step, exception, attempts, elapsed))
