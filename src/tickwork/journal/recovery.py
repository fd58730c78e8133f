"""Resuming journaled runs after the process that ran them died.

Recovery loads the run's latest compacting snapshot, folds the journal records written
after it through the same reducer the live run used (step bodies are not run again:
their journaled results are replayed), applies the state-store patches and the alive
time recorded while the run waited, and starts the run again from that state under its
original run id and options.  The new session rewinds the invocations that were in flight
at the crash, so only those run again.  A run that was registered but had not processed
anything yet starts afresh with its stored start event.
"""

from __future__ import annotations

import logging
from typing import Any

from tickwork.context.context import Context
from tickwork.context.state_store import InMemoryStateStore, apply_state_patch
from tickwork.errors import ContextSerdeError, WorkflowRuntimeError
from tickwork.handler import WorkflowHandler
from tickwork.runtime.control_loop.reduce import reduce
from tickwork.runtime.types.evolve import evolve
from tickwork.serde.journal_codec import decode_tick
from tickwork.stores.leases import owner_is_dead_local_process, process_owner
from tickwork.stores.records import Claim, Lease
from tickwork.stores.store import JournalError, JournalStore, RunEntry

# The ends a run cannot be resumed from (a cancelled run can be).
_ENDED = ("completed", "failed", "timed_out")

__all__ = ["RecoveryResult", "load_run", "recover_runs", "resume_run"]

_log = logging.getLogger("tickwork.journal")


class RecoveryResult(dict[str, WorkflowHandler]):
    """What ``recover_runs`` did: ``{run_id: handler}`` of the runs it resumed.

    It is a plain dict of handlers, plus ``failed``: ``{run_id: exception}`` for the
    runs it could not resume (each also logged as an error naming the run and the
    reason).  One bad run never keeps the others from being resumed.
    """

    def __init__(self) -> None:
        super().__init__()
        self.failed: dict[str, BaseException] = {}


def _store_of(workflow: Any) -> JournalStore:
    store = workflow._journal
    if isinstance(store, bool) or store is None:
        raise JournalError(
            f"workflow {workflow.workflow_name} has no journal store; create it with "
            "Workflow(journal=SqliteJournal(...))"
        )
    journal_store: JournalStore = store
    return journal_store


def _label(store: Any, run_id: str) -> str:
    """``journal '<path>', run '<id>'`` (the path when the store has one, as SQLite's does)."""
    path = getattr(store, "path", None)
    return f"journal {path!r}, run {run_id!r}" if isinstance(path, str) else f"run {run_id!r}"


async def load_run(workflow: Any, run_id: str) -> Context[Any]:
    """A pre-run Context holding the journaled run ``run_id`` as it was when last written.

    Raises ``JournalError`` naming the run, the seq and the store's path when the journal
    is missing, has a gap, or holds a record, snapshot or state patch that cannot be
    loaded.  Nothing stored is changed.
    """
    store = _store_of(workflow)
    found = await store.read_snapshot(run_id)
    if found is None:
        raise JournalError(f"{_label(store, run_id)}: the journal has no snapshot for the run")
    seq, snapshot = found
    try:
        ctx: Context[Any] = Context.from_dict(workflow, snapshot)
    except ContextSerdeError as error:
        raise JournalError(
            f"{_label(store, run_id)}: the snapshot at seq {seq} cannot be loaded: {error}"
        ) from error
    state = ctx._current_run_state()
    serializer = ctx._serializer
    async for record in store.read(run_id, seq):
        if record.seq != state.journal_seq:
            raise JournalError(
                f"{_label(store, run_id)}: expected seq {state.journal_seq}, found seq {record.seq}"
            )
        try:
            tick = decode_tick(record.data, serializer)
        except Exception as error:
            raise JournalError(
                f"{_label(store, run_id)}: record seq {record.seq} is corrupt: {error}"
            ) from error
        state, _ = reduce(state, tick)
    section = snapshot.get("state")
    patches = await store.read_state_patches(run_id, seq)
    if section is not None and patches:
        for patch in patches:
            try:
                section = apply_state_patch(section, patch.patch)
            except Exception as error:
                raise JournalError(
                    f"{_label(store, run_id)}: the state patch after seq {patch.after_seq} "
                    f"does not apply: {error}"
                ) from error
        try:
            ctx._staging_store = InMemoryStateStore.from_dict(section, serializer)
        except Exception as error:
            raise JournalError(
                f"{_label(store, run_id)}: the state store after the patches up to seq "
                f"{patches[-1].after_seq} cannot be loaded: {error}"
            ) from error
        ctx._staging_store._bind_serializer(serializer)
    entry = await store.get_run(run_id)
    if entry is not None and entry.elapsed_alive > state.elapsed_alive:
        # Alive time recorded while the run waited and journaled nothing (api.md §24.2).
        state = evolve(state, elapsed_alive=entry.elapsed_alive)
    ctx._restored = state
    return ctx


async def resume_run(workflow: Any, run_id: str) -> WorkflowHandler:
    """Continue the journaled run ``run_id`` under its own id and options; its handler.

    Raises ``JournalError`` naming the run when the store does not know it,
    ``WorkflowRuntimeError`` when the run has completed, failed or timed out (a
    cancelled run is resumed), and
    ``LeaseLost`` when a live process holds the run (the runs of a process of this
    machine that died are taken over at once).
    """
    store = _store_of(workflow)
    entry = await store.get_run(run_id)
    if entry is None:
        raise JournalError(f"the journal has no run {run_id!r}")
    if entry.status in _ENDED:
        raise WorkflowRuntimeError(
            f"run {run_id!r} has already finished ({entry.status}); there is nothing to "
            "resume (start a new run, or load it with load_run to read its state)"
        )
    await _expire_if_dead_local_owner(store, entry)
    return await _resume(workflow, entry)


async def _expire_if_dead_local_owner(store: JournalStore, entry: RunEntry) -> None:
    """Free the runs of a process of this machine that has died (killed, or exited
    without handing its runs back): nobody else can hold that lease any more."""
    if entry.owner is not None and owner_is_dead_local_process(entry.owner):
        await store.expire_owner(entry.owner)


async def _resume(
    workflow: Any,
    entry: RunEntry,
    lease: Lease | None = None,
    lease_seconds: float | None = None,
    *,
    ctx: Context[Any] | None = None,
) -> WorkflowHandler:
    """Start ``entry``'s run again from ``ctx`` (its loaded journal; loaded here when
    not given)."""
    if ctx is None:
        ctx = await load_run(workflow, entry.run_id)
    state = ctx._current_run_state()
    start = None
    if state.journal_seq == 0 and not state.is_running and entry.start_event is not None:
        # Registered, then killed before its first input was journaled.
        serializer = ctx._serializer
        with serializer.validation_context():
            start = serializer.from_record(entry.start_event)
    handler: WorkflowHandler = workflow._start_run(
        ctx, start, {}, entry.run_id, entry.options or None, lease, lease_seconds
    )
    return handler


async def resume_claimed(
    workflow: Any, claim: Claim, *, lease_seconds: float | None = None
) -> WorkflowHandler:
    """Start a claimed run under the claim's lease (a worker of a fleet does this),
    renewed for ``lease_seconds``: the lease time it was claimed with."""
    return await _resume(workflow, claim.entry, claim.lease, lease_seconds)


async def recover_runs(*workflows: Any) -> RecoveryResult:
    """Resume every unfinished run of ``workflows`` (call once at start-up).

    Each workflow must be constructed with ``journal=<store>``; runs are matched to a
    workflow by ``workflow_name``.  Only runs nobody else holds are taken: unowned
    runs, runs whose lease expired, and the runs of a process of this machine that died
    (two processes sharing one store never both resume a run).  Runs that were cancelled
    with ``cancel_run()`` are not resumed automatically (use ``resume_run``).  Returns a
    ``RecoveryResult``: ``{run_id: handler}`` of the resumed runs, with the runs
    that could not be resumed in ``.failed`` (logged too); one bad run never blocks the
    others.
    """
    result = RecoveryResult()
    for workflow in workflows:
        store = _store_of(workflow)
        for entry in await store.list_unfinished(workflow.workflow_name):
            if entry.run_id in result or entry.run_id in result.failed:
                continue
            try:
                handler = await _recover_one(workflow, store, entry)
            except Exception as error:
                result.failed[entry.run_id] = error
                _log.error(
                    "run %s of %s could not be recovered: %s",
                    entry.run_id,
                    workflow.workflow_name,
                    error,
                    exc_info=error,
                )
                continue
            if handler is not None:
                result[entry.run_id] = handler
    return result


async def _recover_one(
    workflow: Any, store: JournalStore, entry: RunEntry
) -> WorkflowHandler | None:
    """Claim and resume one unfinished run.

    ``None``: another live process owns it (only expired or unowned runs are taken;
    the runs of a dead process of this machine are taken at once), or it had in fact
    finished durably.
    """
    # Load before claiming: a journal that cannot be loaded is reported with nothing
    # in the store changed (not even its owner).
    ctx = await load_run(workflow, entry.run_id)
    await _expire_if_dead_local_owner(store, entry)
    claim = await store.claim_run(entry.run_id, process_owner())
    if claim is None:
        return None
    if claim.entry.last_seq != entry.last_seq:  # it moved on in between: load it again
        ctx = await load_run(workflow, entry.run_id)
    state = ctx._current_run_state()
    if state.finished and state.status != "cancelled":
        await store.mark_finished(
            entry.run_id,
            state.status,  # type: ignore[arg-type]
            lease=claim.lease,
        )
        return None
    return await _resume(workflow, claim.entry, claim.lease, ctx=ctx)
