"""Fleet crash trials (scale-out.md §7.4): workers SIGKILLed at random, nothing lost.

Three ``tickwork worker`` processes (two on asyncio, one on trio) serve a shared Postgres
schema.  The test submits N :class:`~tests.fleet.trial_child.Trial` runs (a fan-out of
sends, a join, a step that fails twice before it succeeds, events written to the
stream, and a question answered by the test through the run's inbox) while it SIGKILLs
a random worker at random moments and starts a new one in its place.  Then:

* every run completes with the result of an uninterrupted run;
* each run's journal (audited as it was written: finished runs keep only their final
  snapshot) is contiguous, written once per seq and never under an older epoch;
* no event was lost or doubled: each Item sent once, one Answer (sent twice under one
  idempotency key), each Progress in the stream exactly as the journal publishes it;
* the caller saw each run's whole stream once, in order, across owner changes;
* step bodies ran once per journaled result, except invocations in flight in a killed
  worker;
* no lease, inbox item or uncompacted record is left.

In CI: 10 runs and 3 kills.  ``TW_FLEET_FULL=1`` (``nox -s fleet``): 30 runs, 10 kills.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.fleet.fault_support import (
    Fleet,
    Followed,
    audited,
    check_executions,
    check_journal,
    check_settled,
    check_stream,
    check_trial_journal,
    executions,
    follow_trial,
    full_size,
    install_audit,
    query,
    running_fleet,
    stream_rows,
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


async def _kill_at_random(
    fleet: Fleet, kills: int, rng: random.Random, finished: anyio.Event, log: list[str]
) -> None:
    """SIGKILL a random worker every 1-2.5 s (and start a new one) while runs go on."""
    for _ in range(kills):
        with anyio.move_on_after(rng.uniform(1.0, 2.5)):
            await finished.wait()
        if finished.is_set():
            return
        index = rng.randrange(len(BACKENDS))
        pid = fleet.workers[index].pid
        fleet.restart(index)
        log.append(f"{time.monotonic():.2f} killed worker {index} (pid {pid})")


async def _trial(fleet: Fleet, dsn: str, schema: str, runs: int, kills: int, seed: int) -> Any:
    from tickwork.stores.postgres import PostgresJournal

    rng = random.Random(seed)
    store = PostgresJournal(dsn, schema)
    seen = {f"trial-{n}": Followed(f"trial-{n}") for n in range(runs)}
    finished = anyio.Event()
    kill_log: list[str] = []
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_kill_at_random, fleet, kills, rng, finished, kill_log)
            async with anyio.create_task_group() as callers:
                for number in range(runs):
                    run_id = f"trial-{number}"
                    flow = Trial(journal=store, timeout=None)
                    handler = await flow.submit(run_id=run_id, width=_width(number), pause=0.4)
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


def _run_trials(pg_schema: PgSchema, tmp_path: Path, runs: int, kills: int) -> None:
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
            with anyio.fail_after(45 if runs <= 10 else 150):
                return await _trial(fleet, dsn, schema, runs, kills, seed)

        try:
            seen, kill_log = anyio.run(main)
        except BaseException as error:
            raise AssertionError(f"seed {seed}: {error!r}\n{fleet.logs()}") from error
    context = f"seed {seed}, kills: {kill_log}"
    assert len(kill_log) >= 1, context
    journals = audited(dsn, schema)
    streams = stream_rows(dsn, schema)
    last_seqs = dict(query(dsn, "SELECT run_id, last_seq FROM {s}.runs", schema=schema))
    for number in range(runs):
        run_id = f"trial-{number}"
        followed = seen[run_id]
        assert followed.result == reference_result(_width(number), _factor(number)), context
        check_journal(run_id, journals[run_id], last_seqs[run_id])
        check_trial_journal(run_id, journals[run_id], _width(number), streams[run_id])
        check_stream(followed, streams[run_id])
    repeated = check_executions(journals, executions(side_log), fleet.killed_pids)
    uncompacted = check_settled(dsn, schema, killed=True)
    print(
        f"\n{runs} runs, {len(kill_log)} kills in {time.monotonic() - began:.1f} s; "
        f"bodies run again after a kill: {dict(repeated)}; finished without their final "
        f"snapshot (killed in between): {uncompacted}; {context}"
    )


def test_runs_survive_workers_killed_at_random(pg_schema: PgSchema, tmp_path: Path) -> None:
    if full_size():
        _run_trials(pg_schema, tmp_path, runs=30, kills=10)
    else:
        _run_trials(pg_schema, tmp_path, runs=10, kills=3)
