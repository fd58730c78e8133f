"""parked_wake: from a send to a parked run until its step runs again.

One ``tickwork worker --idle-release 0`` parks n ``Wake`` runs as soon as they wait
(their snapshot is written, the worker lets go of them).  Then, one run after the other:
``await handler.send_event(Ping())`` through a ``RemoteHandler``, and the time from its
return until the woken step starts, which the step stamps in the ``Resumed`` event it
writes to the stream (the bench reads it from there: the whole round trip must work).
The timed figure is the sum of the n latencies, so the per-run column is their mean.
Sends come at random moments (a pause of up to ``jitter`` seconds before each), so
that a polling worker is met at every phase of its cycle.

Over PostgreSQL (``parked_wake``) the worker is woken by ``LISTEN``/``NOTIFY``: quality.md
wants at most 100 ms.  Over SQLite (``parked_wake_poll``, :mod:`bench.parked_wake_poll`)
a worker in another process finds the send by polling (every second): at most 1.5 s.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from bench import _postgres
from bench._harness import BenchmarkError, Scenario, expect, run_timed
from bench._workers import Workers
from bench.fleet_flows import Ping, Resumed, Wake

_latencies: dict[tuple[str, int], list[float]] = {}


async def _all_parked(store: Any, n: int, workers: Workers) -> None:
    deadline = time.monotonic() + 60
    while True:
        entries = await store.list_runs()
        if len(entries) == n and all(entry.status == "parked" for entry in entries):
            return
        workers.check_alive()
        if time.monotonic() > deadline:
            statuses = sorted({entry.status for entry in entries})
            raise BenchmarkError(f"the runs were not all parked in time: {statuses}")
        await anyio.sleep(0.02)


async def _resumed_at(store: Any, run_id: str, serializer: Any, workers: Workers) -> float:
    """The stamp of the run's ``Resumed`` event, read from its stream (every 2 ms)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for item in await store.read_stream(run_id):
            event = serializer.from_record(item.event)
            if isinstance(event, Resumed):
                return float(event.at)
        workers.check_alive()
        await anyio.sleep(0.002)
    entry = await store.get_run(run_id)
    inbox = await store.read_inbox(run_id)
    logs = "\n".join(workers.log_of(proc) for proc in workers.procs)
    raise BenchmarkError(
        f"run {run_id} did not resume within 30 s of its send: {entry}, inbox {inbox}; "
        f"the worker's log:\n{logs}"
    )


async def wake_latencies(store: Any, store_args: list[str], n: int, jitter: float) -> list[float]:
    """Park n runs on one worker process, wake them one by one; the latencies.

    Each send comes after a random pause of up to ``jitter`` seconds, so that sends do
    not all fall at the same moment of the worker's poll cycle.  The bench reads the
    stream itself, every 2 ms, so that its own polling adds nothing to the figure.
    """
    from tickwork.serde.serializers import JsonSerializer

    serializer = JsonSerializer()
    pauses = random.Random(n)
    with Workers(store_args, "--idle-release", "0", "--grace", "1") as workers:
        workers.start(1)
        await workers.ready(store, 1)
        workflow = Wake(journal=store, timeout=None)
        handlers = [await workflow.submit(run_id=f"w{i}", index=i) for i in range(n)]
        await _all_parked(store, n, workers)
        latencies = []
        for i, handler in enumerate(handlers):
            await anyio.sleep(pauses.uniform(0, jitter))
            await handler.send_event(Ping(), idempotency_key=f"ping-{i}")
            sent = time.time()
            stamp = await _resumed_at(store, handler.run_id, serializer, workers)
            latencies.append(stamp - sent)
        with anyio.fail_after(30):
            results = [await handler for handler in handlers]
    expect("results", results, list(range(n)))
    return latencies


def scenario_for(
    name: str,
    open_store: Callable[[], Any],
    requires: Callable[[], str | None],
    goal: str,
    sizes: tuple[int, ...],
    jitter: float,
    max_size: int | None = None,
) -> Scenario:
    """The parked_wake scenario over the store ``open_store`` gives (a context manager
    yielding ``(store, worker store arguments)``), with pauses of up to ``jitter``
    seconds between the wakes."""

    async def timed(n: int) -> float:
        with open_store() as (store, store_args):
            latencies = await wake_latencies(store, store_args, n, jitter)
        _latencies.setdefault((name, n), []).extend(latencies)
        return sum(latencies)

    def note(n: int, median: float) -> str:
        samples = sorted(_latencies.get((name, n), []))
        if not samples:
            return ""
        p90 = samples[int(0.9 * (len(samples) - 1))]
        return (
            f"send -> step: median {statistics.median(samples) * 1e3:.1f} ms, "
            f"p90 {p90 * 1e3:.1f} ms, max {samples[-1] * 1e3:.1f} ms over {len(samples)} wakes"
        )

    return Scenario(
        name=name,
        summary="send to a parked run -> its step runs again on a worker process",
        unit="wake",
        sizes=sizes,
        quick_sizes=(3,),
        max_size=max_size,
        tiny=3,
        measure=lambda n: run_timed(timed, n),
        vs_baseline=False,
        note=note,
        requires=requires,
        goal=goal,
    )


class _PostgresStore:
    def __enter__(self) -> tuple[Any, list[str]]:
        from tickwork.journal import PostgresJournal

        self._schema = _postgres.fresh_schema()
        schema = self._schema.__enter__()
        self.store = PostgresJournal(_postgres.dsn(), schema=schema)
        self.store.check()
        return self.store, ["--dsn", _postgres.dsn(), "--schema", schema]

    def __exit__(self, *exc: Any) -> None:
        self.store.close()
        self._schema.__exit__(*exc)


class SqliteStore:
    """A SQLite journal in a temporary directory, shared with the worker process."""

    def __enter__(self) -> tuple[Any, list[str]]:
        from tickwork.journal import SqliteJournal

        self._folder = tempfile.TemporaryDirectory()
        path = Path(self._folder.name) / "runs.db"
        self.store = SqliteJournal(path)
        return self.store, ["--journal", str(path)]

    def __exit__(self, *exc: Any) -> None:
        self.store.close()
        self._folder.cleanup()


SCENARIO = scenario_for(
    "parked_wake",
    _PostgresStore,
    _postgres.postgres_missing,
    "<= 100 ms from a send to the step (LISTEN/NOTIFY)",
    (20,),
    0.1,
)
