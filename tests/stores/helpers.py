"""Helpers shared by the store contract tests."""

from __future__ import annotations

from typing import Any

from tickwork.types import JournalRecord

SHORT = 0.05  # a lease that has expired after EXPIRED seconds
EXPIRED = 0.15


def rec(seq: int) -> JournalRecord:
    return JournalRecord(seq=seq, data={"type": "idle_check", "stamped_at": 1000.0 + seq})


def snap(seq: int = 0, **extra: Any) -> dict[str, Any]:
    return {"journal_seq": seq, **extra}


async def seqs(store: Any, run_id: str, from_seq: int = 0) -> list[int]:
    return [r.seq async for r in store.read(run_id, from_seq)]


async def submit(store: Any, run_id: str, workflow: str = "wf", **kwargs: Any) -> bool:
    created: bool = await store.submit_run(
        run_id, workflow, snap(), start_event={"run": run_id}, **kwargs
    )
    return created


async def claim_ids(
    store: Any, owner: str, workflows: tuple[str, ...] = ("wf",), **kw: Any
) -> list[str]:
    return [c.lease.run_id for c in await store.claim_runs(owner, workflows, limit=100, **kw)]
