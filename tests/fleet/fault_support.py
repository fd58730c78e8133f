"""What the fleet fault tests share: worker processes, a journal audit, a caller.

* :class:`Fleet` runs ``tickwork worker`` processes (through :mod:`tests.fleet.trial_child`,
  which exits with the test process) serving :data:`~tests.fleet.trial_child.FLOWS`, and
  kills, restarts and stops them.  Their stderr goes to one log file each, quoted in
  failure messages.
* :func:`install_audit` adds a trigger to a test schema that copies every journal record
  when it is inserted, with the owner and epoch of the run at that moment and the
  writer's ``application_name`` (and the runs' status changes and snapshot writes).
  Finished runs keep only their final snapshot (their records are compacted away), so
  the audit is what shows the whole history a fleet wrote: each seq written once and in
  order, no write under an epoch older than one before it.
* :func:`follow_trial` is the caller of one :class:`~tests.fleet.trial_child.Trial` run:
  it follows the run's stream from another process's point of view, answers its
  question through the inbox (twice, with one idempotency key) and reads its result.

The checks are in :mod:`tests.fleet.fault_checks`.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import psycopg
from psycopg import sql
from tests.fleet.trial_child import LOG_VARIABLE, Answer, Question

from tickwork.stores.records import JournalError
from tickwork.stores.remote import RemoteHandler

ROOT = Path(__file__).resolve().parents[2]
TARGET = "tests.fleet.trial_child:FLOWS"

# -- worker processes ----------------------------------------------------------------------


@dataclass
class WorkerProcess:
    """One ``tickwork worker`` process of a :class:`Fleet` (restarts get a new one)."""

    index: int
    backend: str
    dsn: str
    process: subprocess.Popen[bytes]
    log_path: Path
    started_at: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def worker_id(self) -> str | None:
        """The owner id the worker announced (``[worker] <id> serving ...``)."""
        for line in self.log().splitlines():
            if line.startswith("[worker] ") and " serving " in line:
                return line.split()[1]
        return None


class Fleet:
    """Worker processes on one store (a DSN and a schema), started on :meth:`start`."""

    def __init__(
        self,
        dsn: str,
        schema: str,
        directory: Path,
        *,
        lease: float = 2.0,
        idle_release: float = 0.5,
        grace: float = 1.0,
        concurrency: int = 16,
        side_log: Path | None = None,
    ) -> None:
        self.dsn = dsn
        self.schema = schema
        self.directory = directory
        self.options = [
            "--lease",
            str(lease),
            "--idle-release",
            str(idle_release),
            "--grace",
            str(grace),
            "--concurrency",
            str(concurrency),
        ]
        self.side_log = side_log
        self.workers: dict[int, WorkerProcess] = {}
        self.retired: list[WorkerProcess] = []
        self.killed_pids: set[int] = set()
        self._spawned = 0

    def start(
        self,
        index: int,
        *,
        backend: str = "asyncio",
        dsn: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        """Start worker ``index`` (on another DSN than the fleet's, e.g. through a proxy;
        with ``env`` added to its environment)."""
        self._spawned += 1
        log_path = self.directory / f"worker-{index}-{self._spawned}.log"
        env = {**os.environ, **(env or {})}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
        env["PYTHONUNBUFFERED"] = "1"
        if self.side_log is not None:
            env[LOG_VARIABLE] = str(self.side_log)
        command = [
            sys.executable,
            "-m",
            "tests.fleet.trial_child",
            "worker",
            TARGET,
            "--dsn",
            dsn or self.dsn,
            "--schema",
            self.schema,
            "--backend",
            backend,
            *self.options,
        ]
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        self.workers[index] = WorkerProcess(index, backend, dsn or self.dsn, process, log_path)

    def wait_serving(self, indexes: Iterable[int] | None = None, timeout: float = 60.0) -> None:
        """Block until the workers announced that they serve (or fail naming the log)."""
        deadline = time.monotonic() + timeout
        for index in self.workers if indexes is None else indexes:
            worker = self.workers[index]
            while worker.worker_id() is None:
                if worker.process.poll() is not None:
                    raise AssertionError(f"worker {index} exited early:\n{worker.log()}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"worker {index} did not start:\n{worker.log()}")
                time.sleep(0.05)

    def kill(self, index: int) -> int:
        """SIGKILL worker ``index`` and reap it; its pid."""
        worker = self.workers.pop(index)
        worker.process.send_signal(signal.SIGKILL)
        worker.process.wait(timeout=10)
        self.killed_pids.add(worker.pid)
        self.retired.append(worker)
        return worker.pid

    def restart(self, index: int) -> None:
        """Kill worker ``index`` and start a new one in its place (same backend, DSN)."""
        worker = self.workers[index]
        self.kill(index)
        self.start(index, backend=worker.backend, dsn=worker.dsn)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM every worker (they hand their runs back), SIGKILL the ones that hang."""
        for worker in self.workers.values():
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for worker in self.workers.values():
            try:
                worker.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait(timeout=10)
        self.retired.extend(self.workers.values())
        self.workers.clear()

    def dump_stacks(self) -> None:
        """Have every live worker write its threads' stacks to its log (SIGUSR1)."""
        for worker in self.workers.values():
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGUSR1)
        time.sleep(0.5)

    def all_workers(self) -> list[WorkerProcess]:
        return [*self.retired, *self.workers.values()]

    def logs(self, tail: int = 40) -> str:
        """The last lines of every worker's log (for failure messages)."""
        parts = []
        for worker in self.all_workers():
            lines = worker.log().splitlines()[-tail:]
            parts.append(f"--- worker {worker.index} pid {worker.pid} ({worker.backend})")
            parts.extend(lines)
        return "\n".join(parts)

    def lost_sessions(self) -> set[tuple[int, str]]:
        """``(pid, run id)`` of every session a worker stopped because it lost the run's
        lease (it logs ``run <id> stopped here: ...``)."""
        found = set()
        for worker in self.all_workers():
            for line in worker.log().splitlines():
                if line.startswith("run ") and " stopped here: " in line:
                    found.add((worker.pid, line.split()[1]))
        return found

    def owner_pids(self) -> dict[str, int]:
        """Worker (owner) id -> pid, for every worker that announced itself."""
        return {w.worker_id() or f"?{w.pid}": w.pid for w in self.all_workers()}


def drive(main: Callable[[], Awaitable[None]], seconds: float, fleet: Fleet) -> None:
    """Run the test's coroutine ``main`` in an event loop of its own, failing after
    ``seconds``; any failure carries the workers' logs."""

    async def bounded() -> None:
        with anyio.fail_after(seconds):
            await main()

    try:
        anyio.run(bounded)
    except BaseException as error:
        raise AssertionError(f"{error!r}\n{fleet.logs()}") from error


@contextmanager
def running_fleet(fleet: Fleet) -> Iterator[Fleet]:
    """``fleet``, stopped (and every process reaped) however the block ends."""
    try:
        yield fleet
    finally:
        fleet.stop()


# -- the journal audit -----------------------------------------------------------------------


def connect(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, connect_timeout=10)


def install_audit(dsn: str, schema: str) -> None:
    """Migrate ``schema`` and copy every record inserted from now on to ``audit``."""
    from tickwork.stores.postgres import PostgresJournal

    PostgresJournal(dsn, schema).migrate()
    s = sql.Identifier(schema)
    with connect(dsn) as conn:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {}.audit (id bigserial PRIMARY KEY, run_id text, seq bigint, "
                "data json, owner text, epoch bigint, client text, "
                "at timestamptz DEFAULT clock_timestamp())"
            ).format(s)
        )
        conn.execute(
            sql.SQL(
                "CREATE FUNCTION {s}.audit_record() RETURNS trigger LANGUAGE plpgsql AS $$ "
                "BEGIN INSERT INTO {s}.audit (run_id, seq, data, owner, epoch, client) "
                "SELECT NEW.run_id, NEW.seq, NEW.data, r.owner, r.epoch, "
                "current_setting('application_name') "
                "FROM {s}.runs AS r WHERE r.run_id = NEW.run_id; RETURN NEW; END $$"
            ).format(s=s)
        )
        conn.execute(
            sql.SQL(
                "CREATE TRIGGER audit AFTER INSERT ON {s}.records "
                "FOR EACH ROW EXECUTE FUNCTION {s}.audit_record()"
            ).format(s=s)
        )
        # Snapshot writes, for the failure messages of the checks.
        conn.execute(
            sql.SQL(
                "CREATE TABLE {}.snapshot_history (id bigserial PRIMARY KEY, run_id text, "
                "seq bigint, owner text, epoch bigint, client text, "
                "at timestamptz DEFAULT clock_timestamp())"
            ).format(s)
        )
        conn.execute(
            sql.SQL(
                "CREATE FUNCTION {s}.audit_snapshot() RETURNS trigger LANGUAGE plpgsql AS $$ "
                "BEGIN INSERT INTO {s}.snapshot_history (run_id, seq, owner, epoch, client) "
                "SELECT NEW.run_id, NEW.seq, r.owner, r.epoch, "
                "current_setting('application_name') "
                "FROM {s}.runs AS r WHERE r.run_id = NEW.run_id; RETURN NEW; END $$"
            ).format(s=s)
        )
        conn.execute(
            sql.SQL(
                "CREATE TRIGGER audit_snapshot AFTER INSERT OR UPDATE ON {s}.snapshots "
                "FOR EACH ROW EXECUTE FUNCTION {s}.audit_snapshot()"
            ).format(s=s)
        )
        # Status changes of the runs, for the failure messages of the checks.
        conn.execute(
            sql.SQL(
                "CREATE TABLE {}.run_history (id bigserial PRIMARY KEY, run_id text, "
                "status text, owner text, epoch bigint, last_seq bigint, client text, "
                "at timestamptz DEFAULT clock_timestamp())"
            ).format(s)
        )
        conn.execute(
            sql.SQL(
                "CREATE FUNCTION {s}.audit_run() RETURNS trigger LANGUAGE plpgsql AS $$ "
                "BEGIN IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status "
                "OR NEW.owner IS DISTINCT FROM OLD.owner OR NEW.epoch <> OLD.epoch THEN "
                "INSERT INTO {s}.run_history (run_id, status, owner, epoch, last_seq, client) "
                "VALUES (NEW.run_id, NEW.status, NEW.owner, NEW.epoch, NEW.last_seq, "
                "current_setting('application_name')); END IF; RETURN NEW; END $$"
            ).format(s=s)
        )
        conn.execute(
            sql.SQL(
                "CREATE TRIGGER audit_run AFTER INSERT OR UPDATE ON {s}.runs "
                "FOR EACH ROW EXECUTE FUNCTION {s}.audit_run()"
            ).format(s=s)
        )


@dataclass(frozen=True)
class Written:
    """One record as it was inserted (see :func:`install_audit`)."""

    run_id: str
    seq: int
    data: dict[str, Any]
    owner: str | None
    epoch: int
    client: str | None
    at: float


def audited(dsn: str, schema: str) -> dict[str, list[Written]]:
    """Every record each run's writers inserted, in insertion order."""
    query = sql.SQL(
        "SELECT run_id, seq, data, owner, epoch, client, extract(epoch FROM at)::float8 "
        "FROM {}.audit ORDER BY id"
    ).format(sql.Identifier(schema))
    found: dict[str, list[Written]] = collections.defaultdict(list)
    with connect(dsn) as conn:
        for row in conn.execute(query):
            found[row[0]].append(Written(*row))
    return found


def run_history(dsn: str, schema: str, run_id: str) -> str:
    """The status changes and snapshot writes of ``run_id`` (one per line, in time
    order), for failure messages."""
    rows = query(
        dsn,
        "SELECT at, to_char(at, 'HH24:MI:SS.MS'), status, owner, epoch, last_seq, client "
        "FROM {s}.run_history WHERE run_id = %s UNION ALL "
        "SELECT at, to_char(at, 'HH24:MI:SS.MS'), 'snapshot ' || seq, owner, epoch, NULL, "
        "client FROM {s}.snapshot_history WHERE run_id = %s ORDER BY 1",
        run_id,
        run_id,
        schema=schema,
    )
    return "\n".join(" ".join(str(part) for part in row[1:]) for row in rows)


def takeover_delays(dsn: str, schema: str, owner: str, since: float) -> list[float]:
    """For each run ``owner`` held (running) at ``since`` (wall clock), how long after
    that another worker claimed it."""
    rows = query(
        dsn,
        "SELECT run_id, extract(epoch FROM at)::float8, status, owner "
        "FROM {s}.run_history ORDER BY id",
        schema=schema,
    )
    history: dict[str, list[tuple[float, str, str | None]]] = collections.defaultdict(list)
    for run_id, at, status, holder in rows:
        history[run_id].append((at, status, holder))
    delays = []
    for changes in history.values():
        before = [change for change in changes if change[0] <= since]
        if not before or before[-1][1:] != ("running", owner):
            continue
        for at, status, holder in changes:
            if at > since and status == "running" and holder not in (None, owner):
                delays.append(at - since)
                break
    return delays


def query(dsn: str, statement: str, *params: Any, schema: str) -> list[tuple[Any, ...]]:
    """Rows of ``statement``, whose ``{s}`` is the quoted ``schema``."""
    text = sql.SQL(statement).format(s=sql.Identifier(schema))
    with connect(dsn) as conn:
        return conn.execute(text, params).fetchall()


# -- following a run as a caller ------------------------------------------------------------


@dataclass
class Followed:
    """What the caller of one run saw: its stream (positions and events) and result."""

    run_id: str
    positions: list[int] = field(default_factory=list)
    events: list[Any] = field(default_factory=list)
    answers: int = 0
    result: Any = None


async def follow_trial(
    handler: RemoteHandler,
    factor: int,
    rng: random.Random,
    seen: Followed,
    gate: anyio.Event | None = None,
) -> None:
    """Follow a Trial run's stream to its end, answer its question (after a random
    pause, and once ``gate`` is set; twice under one key: one delivery), then read its
    result."""
    key = f"{handler.run_id}:answer"
    async for event in handler.stream_events(after=-1):
        seen.positions.append(handler.position)
        seen.events.append(event)
        if isinstance(event, Question) and not seen.answers:
            if gate is not None:
                await gate.wait()
            await anyio.sleep(rng.uniform(0.0, 0.6))
            assert await handler.send_event(Answer(factor=factor), idempotency_key=key)
            seen.answers += 1
            try:
                again = await handler.send_event(Answer(factor=-1), idempotency_key=key)
            except JournalError as error:  # the run may already have finished
                assert "finished" in str(error), error
            else:
                assert not again, "a second send under one key was delivered"
    seen.result = await handler
