"""Fleet crash trials (scale-out.md §7.4): workers SIGKILLed at random, nothing lost.

Three ``tickwork worker`` processes (two on asyncio, one on trio) serve a shared Postgres
schema.  The test submits N :class:`~tests.fleet.trial_child.Trial` runs (a fan-out of
sends, a join, a step that fails twice before it succeeds, events written to the
stream, and a question answered by the test through the run's inbox) while it SIGKILLs
a random worker (among those holding running runs) at random moments and starts a new
one in its place.  Then:

* every run completes with the result of an uninterrupted run;
* each run's journal (audited as it was written: finished runs keep only their final
  snapshot) is contiguous, written once per seq and never under an older epoch;
* no event was lost or doubled: each Item sent once, one Answer (sent twice under one
  idempotency key), each Progress in the stream exactly as the journal publishes it;
* the caller saw each run's whole stream once, in order, across owner changes;
* step bodies ran once per journaled result, except invocations in flight in a killed
  worker;
* no lease or inbox item is left, and every finished run is compacted into its final
  snapshot, except runs whose worker was killed between their last append and that
  snapshot (reported).

The default run has a short trial (5 runs, 2 kills); the full one (30 runs, 10 kills)
is marked ``fleet_slow`` (``nox -s fleet``).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.fleet.fault_checks import (
    check_executions,
    check_settled,
    check_trial_runs,
    executions,
)
from tests.fleet.fault_support import (
    Fleet,
    Followed,
    follow_trial,
    install_audit,
    query,
    running_fleet,
    takeover_delays,
)
from tests.fleet.trial_child import Answer, Question, Trial, reference_result

from postgres_support import PgSchema
from tickwork.fleet import Worker, WorkerOptions
from tickwork.journal import InMemoryJournal

pytestmark = pytest.mark.postgres

BACKENDS = ("asyncio", "trio", "asyncio")


def _width(number: int) -> int:
    return 3 + number % 4


def _factor(number: int) -> int:
    return number + 2


def test_the_reference_result_is_what_an_uninterrupted_run_returns() -> None:
    """The expected results of the trials come from this one, run in one process."""

    async def main() -> Any:
        store = InMemoryJournal()
        handler = await Trial(journal=store, timeout=None).submit(run_id="ref", width=5, pause=0)
        options = WorkerOptions(poll_seconds=0.05, idle_release=0.1)
        worker = Worker([Trial(journal=store, timeout=None)], store, options)
        async with anyio.create_task_group() as group:
            group.start_soon(worker.run)
            with anyio.fail_after(20):
                async for event in handler.stream_events():
                    if isinstance(event, Question):
                        await handler.send_event(Answer(factor=7), idempotency_key="a")
                result = await handler
            worker.stop()
        return result

    assert anyio.run(main) == reference_result(5, 7)


@dataclass(frozen=True)
class Kill:
    at: float  # wall clock, as the database's timestamps
    index: int
    pid: int
    worker_id: str | None

    def __str__(self) -> str:
        return f"{self.at:.2f} killed worker {self.index} (pid {self.pid})"


async def _kill_at_random(
    fleet: Fleet, kills: int, rng: random.Random, finished: anyio.Event, log: list[Kill]
) -> None:
    """SIGKILL a random worker every 0.6-1.8 s (and start a new one) while runs go on:
    one that holds running runs, when any does (killing an idle one proves little)."""
    for _ in range(kills):
        with anyio.move_on_after(rng.uniform(0.6, 1.8)):
            await finished.wait()
        if finished.is_set():
            return
        rows = await anyio.to_thread.run_sync(
            lambda: query(
                fleet.dsn,
                "SELECT DISTINCT owner FROM {s}.runs WHERE status = 'running'",
                schema=fleet.schema,
            )
        )
        holders = {owner for (owner,) in rows}
        busy = [i for i, w in sorted(fleet.workers.items()) if w.worker_id() in holders]
        index = rng.choice(busy) if busy else rng.randrange(len(BACKENDS))
        worker = fleet.workers[index]
        worker_id = worker.worker_id()
        at = time.time()
        fleet.restart(index)
        log.append(Kill(at, index, worker.pid, worker_id))


async def _trial(
    fleet: Fleet, dsn: str, schema: str, runs: int, kills: int, seed: int, pause: float
) -> Any:
    from tickwork.stores.postgres import PostgresJournal

    rng = random.Random(seed)
    store = PostgresJournal(dsn, schema)
    seen = {f"trial-{n}": Followed(f"trial-{n}") for n in range(runs)}
    finished = anyio.Event()
    kill_log: list[Kill] = []
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_kill_at_random, fleet, kills, rng, finished, kill_log)
            async with anyio.create_task_group() as callers:
                for number in range(runs):
                    run_id = f"trial-{number}"
                    flow = Trial(journal=store, timeout=None)
                    handler = await flow.submit(run_id=run_id, width=_width(number), pause=pause)
                    callers.start_soon(
                        follow_trial,
                        handler,
                        _factor(number),
                        random.Random(seed + number),
                        seen[run_id],
                    )
                    await anyio.sleep(rng.uniform(0.1, 0.4))
            finished.set()
    finally:
        store.close()
    return seen, kill_log


def _run_trials(pg_schema: PgSchema, tmp_path: Path, runs: int, kills: int, pause: float) -> None:
    dsn, schema = pg_schema
    install_audit(dsn, schema)
    side_log = tmp_path / "executions.log"
    seed = random.randrange(1 << 30)
    began = time.monotonic()
    fleet = Fleet(dsn, schema, tmp_path, lease=2.0, idle_release=0.5, side_log=side_log)
    with running_fleet(fleet):
        for index, backend in enumerate(BACKENDS):
            fleet.start(index, backend=backend)
        fleet.wait_serving()

        async def main() -> Any:
            # Generous: restarted workers take seconds to start on a busy machine.
            with anyio.fail_after(120 if runs <= 10 else 400):
                return await _trial(fleet, dsn, schema, runs, kills, seed, pause)

        try:
            seen, kill_log = anyio.run(main)
        except BaseException as error:
            raise AssertionError(f"seed {seed}: {error!r}\n{fleet.logs()}") from error
    context = f"seed {seed}, kills: {[str(kill) for kill in kill_log]}"
    assert len(kill_log) >= max(1, kills // 2), context
    shapes = {f"trial-{number}": (_width(number), _factor(number)) for number in range(runs)}
    journals = check_trial_runs(dsn, schema, seen, shapes, context)
    # A live worker may lose a lease too, when its renewals come late on a busy machine
    # (its session stops; the run is claimed again, here or elsewhere).
    lost = fleet.lost_sessions()
    repeated = check_executions(
        journals, executions(side_log), fleet.killed_pids, lost_sessions=lost
    )
    uncompacted = check_settled(dsn, schema, killed=True)
    delays = sorted(
        delay
        for kill in kill_log
        if kill.worker_id is not None
        for delay in takeover_delays(dsn, schema, kill.worker_id, kill.at)
    )
    print(
        f"\n{runs}/{runs} runs completed, 0 lost, 0 duplicated; {len(kill_log)} kills in "
        f"{time.monotonic() - began:.1f} s; runs of killed workers taken over after "
        f"{[round(d, 1) for d in delays]} s; bodies run again after a kill: "
        f"{dict(repeated)}; sessions of live workers that lost their lease: {len(lost)}; "
        f"finished without their final snapshot (killed in between): "
        f"{uncompacted}; {context}"
    )


def test_runs_survive_workers_killed_at_random(pg_schema: PgSchema, tmp_path: Path) -> None:
    _run_trials(pg_schema, tmp_path, runs=5, kills=2, pause=0.4)


@pytest.mark.fleet_slow
def test_thirty_runs_survive_ten_workers_killed_at_random(
    pg_schema: PgSchema, tmp_path: Path
) -> None:
    _run_trials(pg_schema, tmp_path, runs=30, kills=10, pause=0.8)
