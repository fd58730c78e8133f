"""fleet: short 3-step runs submitted to n worker processes over PostgreSQL.

``n`` ``tickwork worker`` processes (concurrency 16 each) serve one fresh schema.  Timed:
``RUNS`` runs of ``ThreeSteps`` submitted with ``Workflow.submit`` (8 at a time, as a web
front end would) until the last one has completed.  Each result is checked.  The note
gives the throughput, the speed-up over one worker, and the CPU time per run of the
workers and of the database server, read from ``/proc`` over the timed region (worker
start-up is not counted).  The machine has 2 cores: more workers than cores add
overlap, not CPU.  The server: :mod:`bench._postgres`.
"""

from __future__ import annotations

import statistics
import time

import anyio
import anyio.to_thread

from bench import _postgres
from bench._harness import BenchmarkError, Scenario, expect, run_timed
from bench._workers import Workers, cpu_seconds
from bench.fleet_flows import ThreeSteps
from tickwork.stores.records import FINISHED

RUNS = 200
SUBMITTERS = 8
_cpu_per_run: dict[int, list[tuple[float, float]]] = {}
_medians: dict[int, float] = {}


def _server_cpu(pids: list[int]) -> dict[int, float]:
    return {pid: seconds for pid in pids if (seconds := cpu_seconds(pid)) is not None}


async def _submit_all(workflow: ThreeSteps) -> None:
    limiter = anyio.CapacityLimiter(SUBMITTERS)

    async def submit(i: int) -> None:
        async with limiter:
            await workflow.submit(run_id=f"r{i}", value=i)

    async with anyio.create_task_group() as group:
        for i in range(RUNS):
            group.start_soon(submit, i)


async def _wait_done(store: object, workers: Workers) -> None:
    """Until every run has finished (one count query every 5 ms)."""
    import psycopg

    schema = store.schema  # type: ignore[attr-defined]
    query = f'SELECT count(*) FROM "{schema}".runs WHERE status IN {FINISHED!r}'
    with psycopg.connect(_postgres.dsn(), autocommit=True) as conn:
        deadline = time.monotonic() + 120
        while True:
            row = await anyio.to_thread.run_sync(lambda: conn.execute(query).fetchone())
            if row is not None and row[0] >= RUNS:
                return
            workers.check_alive()
            if time.monotonic() > deadline:
                raise BenchmarkError(f"only {row[0] if row else 0} of {RUNS} runs finished")
            await anyio.sleep(0.005)


async def _timed(n: int) -> float:
    from tickwork.journal import PostgresJournal
    from tickwork.serde.serializers import JsonSerializer

    with _postgres.fresh_schema() as schema:
        store = PostgresJournal(_postgres.dsn(), schema=schema)
        store.check()  # creates the schema before the workers look at it
        store_args = ["--dsn", _postgres.dsn(), "--schema", schema]
        try:
            with Workers(store_args, "--grace", "5") as workers:
                workers.start(n)
                await workers.ready(store, n)
                workflow = ThreeSteps(journal=store, timeout=None)
                pids = _postgres.backend_pids()
                server_before = _server_cpu(pids)
                cpu_before = workers.cpu()
                start = time.perf_counter()
                await _submit_all(workflow)
                await _wait_done(store, workers)
                elapsed = time.perf_counter() - start
                cpu_after = workers.cpu()
                server_after = _server_cpu(_postgres.backend_pids())
            runs = await store.list_runs()
            expect("runs", len(runs), RUNS)
            serializer = JsonSerializer()
            wrong = [
                entry.run_id
                for entry in runs
                if entry.status != "completed"
                or entry.outcome is None
                or serializer.from_record(entry.outcome.result).result
                != (int(entry.run_id[1:]) + 1) * 2
            ]
            expect("runs without their result", wrong[:5], [])
        finally:
            store.close()
    if cpu_before is not None and cpu_after is not None:
        server = sum(after - server_before.get(pid, 0.0) for pid, after in server_after.items())
        _cpu_per_run.setdefault(n, []).append(((cpu_after - cpu_before) / RUNS, server / RUNS))
    return elapsed


def measure(n: int) -> float:
    return run_timed(_timed, n)


def _note(n: int, median: float) -> str:
    _medians[n] = median
    parts = [f"{n} worker(s): {RUNS / median:,.0f} runs/s"]
    if 1 in _medians and n != 1:
        parts.append(f"{_medians[1] / median:.2f}x 1 worker")
    samples = _cpu_per_run.get(n)
    if samples:
        workers_cpu = statistics.median(s[0] for s in samples)
        server_cpu = statistics.median(s[1] for s in samples)
        parts.append(
            f"CPU per run: workers {workers_cpu * 1e3:.2f} ms, db {server_cpu * 1e3:.2f} ms"
        )
    return ", ".join(parts)


SCENARIO = Scenario(
    name="fleet",
    summary=f"{RUNS} short 3-step runs submitted to n worker processes over PostgreSQL",
    unit="worker",
    sizes=(1, 2, 4),
    quick_sizes=(1, 2),
    measure=measure,
    vs_baseline=False,
    note=_note,
    requires=_postgres.postgres_missing,
    max_size=4,
    tiny=1,
    goal="scaling and CPU per run reported (2 cores)",
)
