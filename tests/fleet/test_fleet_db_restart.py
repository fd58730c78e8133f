"""The database restarts under a running fleet (scale-out.md §7.6).

The test starts a throwaway cluster of its own (the recipe of ``.ci/postgres.sh``,
whose functions it calls) so that it may restart it: ``pg_ctl restart -m immediate``
while three workers run :class:`~tests.fleet.trial_child.Trial` runs (every connection
is cut, the server recovers from its WAL).  Then every run finishes with the result of
an uninterrupted run, none is stranded (no run left unfinished or holding a lease, no
inbox item left), each run's journal is written once per seq and in order, and every
worker is still serving.  The stores retry their calls through the restart; a worker
whose lease renewals failed for 0.8 x the lease fences itself, and its runs are
claimed again once the server is back.
"""

from __future__ import annotations

import os
import random
import shlex
import subprocess
import time
from collections.abc import Iterator
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
    ROOT,
    Fleet,
    Followed,
    drive,
    follow_trial,
    install_audit,
    running_fleet,
)
from tests.fleet.trial_child import Answer, Trial, reference_result

from postgres_support import unavailable

pytestmark = [pytest.mark.postgres, pytest.mark.fleet_slow]

SCRIPT = ROOT / ".ci" / "postgres.sh"


def _bash(script: str, timeout: float = 90) -> str:
    """Run ``script`` in bash with ``.ci/postgres.sh`` sourced; its stdout (or raise)."""
    # Not the cluster of the test run (``.ci/run`` exports its directory): ours.
    env = {k: v for k, v in os.environ.items() if k not in ("TW_PG_DIR", "TW_PG_DSN")}
    done = subprocess.run(
        ["bash", "-c", f"source {shlex.quote(str(SCRIPT))} && {script}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{script!r} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout.strip()


class Cluster:
    """A cluster started by ``pg_start`` in a directory of its own."""

    def __init__(self, directory: str, dsn: str) -> None:
        self.directory = directory
        self.dsn = dsn

    def pg_ctl(self, action: str, mode: str = "fast") -> float:
        """``pg_ctl <action> -m <mode>`` (start, stop, restart); how long it took."""
        return self.restart(mode, action)

    def restart(self, mode: str, action: str = "restart") -> float:
        """``pg_ctl restart -m <mode>``; how long it took (seconds).

        The server runs as ``pg_start`` runs it, except with ``synchronous_commit=on``:
        with it off, a commit is acknowledged before its WAL leaves the server's memory,
        and an immediate shutdown loses it, which no client can make up for (fsync stays
        off: the machine does not crash, so what the server wrote survives).
        """
        began = time.monotonic()
        data = shlex.quote(f"{self.directory}/data")
        log = shlex.quote(f"{self.directory}/server.log")
        options = shlex.quote(
            f"-k {self.directory} -c listen_addresses= -c fsync=off -c synchronous_commit=on"
        )
        _bash(
            f'bin="$(pg_find_bin)" && _tw_as_pg "$bin/pg_ctl" -D {data} -l {log} '
            f"-o {options} -m {mode} -w -t 60 {action} >/dev/null"
        )
        return time.monotonic() - began

    def stop(self) -> None:
        _bash(f"TW_PG_DIR={shlex.quote(self.directory)} pg_stop")


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A dedicated throwaway cluster, always stopped and deleted after the test."""
    try:
        _bash("pg_find_bin >/dev/null")
    except RuntimeError:
        unavailable("no PostgreSQL server binaries to start a cluster with (see .ci/postgres.sh)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable('psycopg is not installed; pip install -e ".[postgres]"')
    started = _bash('pg_start >/dev/null && echo "$TW_PG_DIR" && echo "$TW_PG_DSN"')
    directory, dsn = started.splitlines()[-2:]
    own = Cluster(directory, dsn)
    try:
        own.restart("fast")  # with synchronous_commit=on
        yield own
    finally:
        own.stop()


def _alive(fleet: Fleet) -> list[int]:
    return [w.index for w in fleet.workers.values() if w.process.poll() is None]


def test_every_run_finishes_across_an_immediate_database_restart(
    cluster: Cluster, tmp_path: Path
) -> None:
    dsn, schema = cluster.dsn, "tickwork"
    install_audit(dsn, schema)
    side_log = tmp_path / "executions.log"
    fleet = Fleet(dsn, schema, tmp_path, lease=2.0, idle_release=0.5, side_log=side_log)
    runs = 8
    seen = {f"restart-{n}": Followed(f"restart-{n}") for n in range(runs)}
    restarts: list[float] = []
    began = time.monotonic()
    with running_fleet(fleet):
        for index, backend in enumerate(("asyncio", "trio", "asyncio")):
            fleet.start(index, backend=backend)
        fleet.wait_serving()

        async def main() -> None:
            from tickwork.stores.postgres import PostgresJournal

            store = PostgresJournal(dsn, schema)
            try:
                async with anyio.create_task_group() as callers:
                    for number in range(runs):
                        run_id = f"restart-{number}"
                        flow = Trial(journal=store, timeout=None)
                        handler = await flow.submit(run_id=run_id, width=5, pause=1.0)
                        callers.start_soon(
                            follow_trial, handler, number + 2, random.Random(number), seen[run_id]
                        )
                        await anyio.sleep(0.15)
                    # Mid-run: steps are running, questions are being answered.
                    await anyio.sleep(0.8)
                    restarts.append(await anyio.to_thread.run_sync(cluster.restart, "immediate"))
                    await anyio.sleep(2.5)
                    restarts.append(await anyio.to_thread.run_sync(cluster.restart, "immediate"))
            finally:
                store.close()

        drive(main, 180, fleet)
        assert _alive(fleet) == [0, 1, 2], f"a worker died:\n{fleet.logs()}"
    context = f"restarts took {restarts} s\n{fleet.logs()}"
    shapes = {f"restart-{number}": (5, number + 2) for number in range(runs)}
    journals = check_trial_runs(dsn, schema, seen, shapes, context)
    # A worker whose sessions stopped (it fenced itself, or lost a lease during a
    # restart) may leave bodies without results.
    lost = fleet.lost_sessions()
    check_executions(journals, executions(side_log), set(), lost_sessions=lost)
    check_settled(dsn, schema)
    print(
        f"\ndatabase restart: {runs}/{runs} runs completed, 0 lost, 0 duplicated, every "
        f"worker alive; restarts of {[round(r, 2) for r in restarts]} s, "
        f"sessions stopped (a lost lease): {len(lost)}; total {time.monotonic() - began:.1f} s"
    )


def test_workers_outlive_an_outage_longer_than_the_store_retries(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The server is down for 14 s, longer than a store call retries (10 s): the workers
    keep serving, and the runs waiting for their answers finish once it is back."""
    dsn, schema = cluster.dsn, "tickwork"
    install_audit(dsn, schema)
    fleet = Fleet(dsn, schema, tmp_path, lease=2.0, idle_release=0.5)
    runs = 4
    results: list[Any] = []
    with running_fleet(fleet):
        fleet.start(0, backend="asyncio")
        fleet.start(1, backend="trio")
        fleet.wait_serving()

        async def main() -> None:
            from tickwork.stores.postgres import PostgresJournal

            store = PostgresJournal(dsn, schema)
            try:
                flow = Trial(journal=store, timeout=None)
                handlers = [
                    await flow.submit(run_id=f"outage-{n}", width=4, pause=2.0) for n in range(runs)
                ]
                await anyio.sleep(1.5)  # their steps are running
                await anyio.to_thread.run_sync(cluster.pg_ctl, "stop", "immediate")
                await anyio.sleep(14)
                assert _alive(fleet) == [0, 1], f"a worker died:\n{fleet.logs()}"
                await anyio.to_thread.run_sync(cluster.pg_ctl, "start")
                for handler in handlers:
                    await handler.send_event(Answer(factor=3), idempotency_key="answer")
                results.extend([await handler for handler in handlers])
            finally:
                store.close()

        drive(main, 180, fleet)
        assert _alive(fleet) == [0, 1], f"a worker died:\n{fleet.logs()}"
    assert results == [reference_result(4, 3)] * runs
    check_settled(dsn, schema)
    print(f"\noutage of 14 s: {runs}/{runs} runs completed, both workers alive")
