"""Resuming journaled runs after the process that ran them died.

Recovery loads the run's latest compacting snapshot, folds the journal records written
after it through the same reducer the live run used (step bodies are not run again:
their journaled results are replayed), applies the state-store patches, and starts the
run again from that state under its original run id.  The new session rewinds the
invocations that were in flight at the crash, so only those run again.
"""

from __future__ import annotations

from typing import Any

from tickwork.context.context import Context
from tickwork.context.state_store import InMemoryStateStore, apply_state_patch
from tickwork.errors import ContextSerdeError
from tickwork.handler import WorkflowHandler
from tickwork.runtime.control_loop.reduce import reduce
from tickwork.serde.journal_codec import decode_tick
from tickwork.stores.store import JournalError, JournalStore

__all__ = ["load_run", "recover_runs", "resume_run"]


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
    ctx._restored = state
    return ctx


async def resume_run(workflow: Any, run_id: str) -> WorkflowHandler:
    """Continue the journaled run ``run_id`` under its own id; returns its handler."""
    ctx = await load_run(workflow, run_id)
    return workflow.run(ctx=ctx, run_id=run_id)  # type: ignore[no-any-return]


async def recover_runs(*workflows: Any) -> dict[str, WorkflowHandler]:
    """Resume every unfinished run of ``workflows`` (call once at start-up).

    Each workflow must be constructed with ``journal=<store>``; runs are matched to a
    workflow by ``workflow_name``.  Runs that were cancelled with ``cancel_run()`` are
    not resumed automatically (use :func:`resume_run`).  Returns ``{run_id: handler}``.
    """
    handlers: dict[str, WorkflowHandler] = {}
    for workflow in workflows:
        store = _store_of(workflow)
        for entry in await store.list_unfinished(workflow.workflow_name):
            if entry.run_id in handlers:
                continue
            ctx = await load_run(workflow, entry.run_id)
            state = ctx._current_run_state()
            if state.finished and state.status != "cancelled":
                await store.mark_finished(entry.run_id, state.status)  # type: ignore[arg-type]
                continue
            handlers[entry.run_id] = workflow.run(ctx=ctx, run_id=entry.run_id)
    return handlers
