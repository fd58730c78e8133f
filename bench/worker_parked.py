"""worker_parked: m runs parked by a worker, then woken; the memory a parked run holds.

An in-process :class:`~tickwork.fleet.Worker` (``idle_release=0``, concurrency 16) on an
``InMemoryJournal`` claims m submitted ``Wake`` runs, which ask and wait; the worker
parks each one as soon as it only waits.  Timed: from the first submit until all m are
parked, each sent its ``Ping`` through a ``RemoteHandler``, and all m have completed.

The extra pass measures what the *worker* holds for parked runs (tracemalloc): the
traced memory with m runs parked and the worker alive, minus the same after the worker
was stopped and dropped (what is left is the store's own copy of the runs, which a
real fleet keeps in the database), as a slope per parked run between m/5 and m parked
runs, so that the worker's own fixed memory does not count.  quality.md wants 0: a
parked run holds no memory in any worker.  The pass also checks that no run session is
left alive.
"""

from __future__ import annotations

import gc
import time
import tracemalloc

import anyio

from bench._harness import BenchmarkError, Scenario, expect, run_timed
from bench.fleet_flows import Ping, Wake
from tickwork.fleet import Worker, WorkerOptions
from tickwork.journal import InMemoryJournal
from tickwork.runtime.session import RunSession

OPTIONS = WorkerOptions(idle_release=0.0, poll_seconds=0.05, concurrency=16)


async def _until_parked(worker: Worker, store: InMemoryJournal, m: int) -> None:
    """Until the worker has parked m runs (its counter: polling the store's list of
    runs would cost O(m) per look), then check the store agrees."""
    deadline = time.monotonic() + 120
    while worker.parked < m or worker.active:
        if time.monotonic() > deadline:
            raise BenchmarkError(f"{m} runs were not parked in time ({worker.parked} were)")
        await anyio.sleep(0.01)
    statuses = [entry.status for entry in await store.list_runs()]
    expect("runs parked in the store", statuses.count("parked"), m)


async def _cycle(m: int) -> float:
    store = InMemoryJournal()
    worker = Worker([Wake(journal=store, timeout=None)], store, OPTIONS)
    workflow = Wake(journal=store, timeout=None)
    async with anyio.create_task_group() as group:
        group.start_soon(worker.run)
        start = time.perf_counter()
        handlers = [await workflow.submit(run_id=f"p{i}", index=i) for i in range(m)]
        await _until_parked(worker, store, m)
        expect("runs held by the worker once parked", len(worker.active), 0)
        for i, handler in enumerate(handlers):
            await handler.send_event(Ping(), idempotency_key=f"ping-{i}")
        results = [await handler for handler in handlers]
        elapsed = time.perf_counter() - start
        worker.stop()
    expect("results", results, list(range(m)))
    return elapsed


def measure(m: int) -> float:
    return run_timed(_cycle, m)


def _live_sessions() -> int:
    return sum(isinstance(obj, RunSession) for obj in gc.get_objects())


async def _held_by_worker(m: int) -> int:
    """Bytes the worker holds with m runs parked (worker alive minus worker dropped)."""
    store = InMemoryJournal()
    workflow = Wake(journal=store, timeout=None)
    worker = Worker([Wake(journal=store, timeout=None)], store, OPTIONS)
    gc.collect()
    before = _live_sessions()  # sessions the hosting program keeps (in the tests, say)
    async with anyio.create_task_group() as group:
        group.start_soon(worker.run)
        for i in range(m):
            await workflow.submit(run_id=f"p{i}", index=i)
        await _until_parked(worker, store, m)
        await anyio.sleep(0.1)  # the worker's loop settles
        gc.collect()
        expect("run sessions alive with every run parked", _live_sessions() - before, 0)
        alive, _ = tracemalloc.get_traced_memory()
        worker.stop()
    del worker
    gc.collect()
    dropped, _ = tracemalloc.get_traced_memory()
    return alive - dropped


async def _per_parked_run(m: int) -> tuple[float, int]:
    """The slope of what the worker holds from m/5 to m parked runs, and the total."""
    await _cycle(5)  # imports, caches and validation are not per-run memory
    gc.collect()
    fewer = max(1, m // 5)
    tracemalloc.start()
    try:
        few = await _held_by_worker(fewer)
        many = await _held_by_worker(m)
    finally:
        tracemalloc.stop()
    return (many - few) / (m - fewer), many


def parked_memory(m: int) -> str:
    per_run, total = anyio.run(_per_parked_run, m)
    return (
        f"{per_run:.1f} B per parked run held by the worker (slope from {max(1, m // 5):,} "
        f"to {m:,} parked; {total / 1024:.1f} KiB in all, a fixed amount)"
    )


SCENARIO = Scenario(
    name="worker_parked",
    summary="m runs parked by an in-process worker (memory store), then woken",
    unit="run",
    sizes=(200, 1_000),
    quick_sizes=(50, 200),
    measure=measure,
    vs_baseline=False,
    extra_pass=parked_memory,
    goal="0 B per parked run held by a worker",
)
