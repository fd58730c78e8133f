"""What the fleet fault tests share: worker processes, a journal audit, and the checks.

* :class:`Fleet` runs ``tickwork worker`` processes (through :mod:`tests.fleet.trial_child`,
  which exits with the test process) serving :data:`~tests.fleet.trial_child.FLOWS`, and
  kills, restarts and stops them.  Their stderr goes to one log file each, quoted in
  failure messages.
* :func:`install_audit` adds a trigger to a test schema that copies every journal record
  when it is inserted, with the owner and epoch of the run at that moment and the
  writer's ``application_name``.  Finished runs keep only their final snapshot (their records are
  compacted away), so the audit is what shows the whole history a fleet wrote: each
  seq written once and in order, no write under an epoch older than one before it.
* :func:`follow_trial` is the caller of one :class:`~tests.fleet.trial_child.Trial` run:
  it follows the run's stream from another process's point of view, answers its
  question through the inbox (twice, with one idempotency key) and reads its result.
* ``check_*`` compare what happened with what must have happened.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import psycopg
from psycopg import sql
from tests.fleet.trial_child import LOG_VARIABLE, Answer, Question

from tickwork.events import StopEvent
from tickwork.stores.records import JournalError
from tickwork.stores.remote import RemoteHandler

ROOT = Path(__file__).resolve().parents[2]
TARGET = "tests.fleet.trial_child:FLOWS"
FULL_VARIABLE = "TW_FLEET_FULL"


def full_size() -> bool:
    """Whether the slow, full-size versions run (``TW_FLEET_FULL=1``, nox -s fleet)."""
    return os.environ.get(FULL_VARIABLE, "") == "1"


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

    def start(self, index: int, *, backend: str = "asyncio", dsn: str | None = None) -> None:
        """Start worker ``index`` (on another DSN than the fleet's, e.g. through a proxy)."""
        self._spawned += 1
        log_path = self.directory / f"worker-{index}-{self._spawned}.log"
        env = dict(os.environ)
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

    def wait_serving(self, indexes: Iterable[int] | None = None, timeout: float = 30.0) -> None:
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

    def owner_pids(self) -> dict[str, int]:
        """Worker (owner) id -> pid, for every worker that announced itself."""
        return {w.worker_id() or f"?{w.pid}": w.pid for w in self.all_workers()}


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
    """The status changes of ``run_id`` (one per line), for failure messages."""
    rows = query(
        dsn,
        "SELECT to_char(at, 'HH24:MI:SS.MS'), status, owner, epoch, last_seq, client "
        "FROM {s}.run_history WHERE run_id = %s ORDER BY id",
        run_id,
        schema=schema,
    )
    return "\n".join(" ".join(str(part) for part in row) for row in rows)


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
    handler: RemoteHandler, factor: int, rng: random.Random, seen: Followed
) -> None:
    """Follow a Trial run's stream to its end, answer its question (after a random
    pause, twice under one key: one delivery), then read its result."""
    key = f"{handler.run_id}:answer"
    async for event in handler.stream_events(after=-1):
        seen.positions.append(handler.position)
        seen.events.append(event)
        if isinstance(event, Question) and not seen.answers:
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


# -- checks ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Execution:
    """A line of the side log: a step body started."""

    step: str
    run_id: str
    invocation_id: str
    attempt: int
    pid: int
    at: float


def executions(path: Path) -> list[Execution]:
    """The side log's lines (``step,run:invocation:attempt,pid,time``)."""
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        step_name, key, pid, at = line.split(",")
        run_id, invocation_id, attempt = key.rsplit(":", 2)
        found.append(Execution(step_name, run_id, invocation_id, int(attempt), int(pid), float(at)))
    return found


def check_journal(run_id: str, written: Sequence[Written], last_seq: int) -> None:
    """Each seq 0..``last_seq`` written exactly once, in order, never under an epoch
    older than an earlier write's (a stale owner's write), and one result per invocation."""
    seqs = [w.seq for w in written]
    assert seqs == list(range(last_seq + 1)), f"run {run_id}: journal seqs {seqs}"
    epochs = [w.epoch for w in written]
    assert epochs == sorted(epochs), f"run {run_id}: a write under an older epoch: {epochs}"
    results = collections.Counter(
        w.data["invocation_id"] for w in written if w.data["type"] == "step_result"
    )
    doubled = [inv for inv, count in results.items() if count > 1]
    assert not doubled, f"run {run_id}: invocations with several results: {doubled}"


def events_of(written: Sequence[Written], qualified_name: str) -> list[dict[str, Any]]:
    """The values of the events named ``qualified_name`` that records of one run add."""
    found = []
    for w in written:
        event = w.data.get("event")
        if (
            w.data["type"] == "add_event"
            and isinstance(event, dict)
            and event.get("qualified_name") == qualified_name
        ):
            found.append(event.get("value", {}))
    return found


def published(written: Sequence[Written], qualified_name: str) -> list[dict[str, Any]]:
    """The values of the events named ``qualified_name`` that records publish."""
    found = []
    for w in written:
        event = w.data.get("event")
        if (
            w.data["type"] == "publish_event"
            and isinstance(event, dict)
            and event.get("qualified_name") == qualified_name
        ):
            found.append(event.get("value", {}))
    return found


def check_executions(
    journals: dict[str, list[Written]],
    ran: Sequence[Execution],
    interrupted_pids: set[int],
    *,
    unlogged_results: Iterable[str] = ("join",),
) -> collections.Counter[str]:
    """Step bodies ran once per journaled result, except those in flight in a worker
    that was killed (or fenced): only those may have run and left no result, or run
    again elsewhere.  Returns how many executions were repeated, per step."""
    repeated: collections.Counter[str] = collections.Counter()
    by_invocation: dict[tuple[str, str], list[Execution]] = collections.defaultdict(list)
    for execution in ran:
        if execution.step.endswith(".end"):
            continue
        by_invocation[(execution.run_id, execution.invocation_id)].append(execution)
    journaled: dict[tuple[str, str], str] = {}
    for run_id, written in journals.items():
        for w in written:
            if w.data["type"] == "step_result":
                journaled[(run_id, w.data["invocation_id"])] = w.data["step"]
    for key, runs in by_invocation.items():
        results = 1 if key in journaled else 0
        survivors = [e for e in runs if e.pid not in interrupted_pids]
        assert len(survivors) <= results, (
            f"run {key[0]}, invocation {key[1]} ran {len(runs)} times ({runs}) for "
            f"{results} journaled result(s); only a killed or fenced worker may run a body "
            "that leaves no result"
        )
        repeated[runs[0].step] += len(runs) - results
    for key, step_name in journaled.items():
        if step_name not in unlogged_results:
            assert key in by_invocation, f"run {key[0]}: {step_name} {key[1]} never ran"
    return repeated


def check_stream(seen: Followed, stream: Sequence[tuple[int, dict[str, Any]]]) -> None:
    """The caller saw the run's whole stream, in order, each position once, ending with
    one terminal event."""
    positions = [position for position, _ in stream]
    assert seen.positions == positions, (
        f"run {seen.run_id}: the caller saw positions {seen.positions}, the stream has {positions}"
    )
    assert len(set(positions)) == len(positions)
    stops = [e for e in seen.events if isinstance(e, StopEvent)]
    assert len(stops) == 1 and seen.events[-1] is stops[0], f"run {seen.run_id}: {seen.events}"


def stream_rows(dsn: str, schema: str) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    """Each run's stream: ``(position, event record)`` in order."""
    found: dict[str, list[tuple[int, dict[str, Any]]]] = collections.defaultdict(list)
    for run_id, seq, event in query(
        dsn, "SELECT run_id, seq, event FROM {s}.stream ORDER BY run_id, seq", schema=schema
    ):
        found[run_id].append((int(seq), event))
    return found


def check_trial_journal(
    run_id: str, written: Sequence[Written], width: int, stream: Sequence[tuple[int, Any]]
) -> None:
    """No event of a Trial run lost or doubled: each Item sent once, one Answer, each
    Progress published by a journal record exactly as the stream holds it."""
    items = sorted(value["index"] for value in events_of(written, _name("Item")))
    assert items == list(range(width)), f"run {run_id}: items journaled {items}"
    answers = events_of(written, _name("Answer"))
    assert len(answers) == 1, f"run {run_id}: answers journaled {answers}"
    journal_progress = sorted(v["index"] for v in published(written, _name("Progress")))
    stream_progress = sorted(
        event["value"]["index"]
        for _, event in stream
        if isinstance(event, dict) and event.get("qualified_name") == _name("Progress")
    )
    assert journal_progress == stream_progress, (
        f"run {run_id}: journal publishes {journal_progress}, stream has {stream_progress}"
    )
    assert set(stream_progress) == set(range(width)), f"run {run_id}: {stream_progress}"


def _name(event: str) -> str:
    return f"tests.fleet.trial_child.{event}"


def check_settled(dsn: str, schema: str, *, killed: bool = False) -> list[str]:
    """Nothing left over: no run unfinished or holding a lease, no unconsumed inbox
    item, every finished run's records compacted into its final snapshot.

    A worker killed between a run's last append and its final snapshot leaves that run
    finished and uncompacted (the snapshot is a second write): with ``killed``, such
    runs are returned instead of failing the check.
    """
    leftover = query(
        dsn,
        "SELECT run_id, status, owner, lease_until FROM {s}.runs "
        "WHERE status NOT IN ('completed', 'failed', 'timed_out', 'cancelled') "
        "OR lease_until IS NOT NULL",
        schema=schema,
    )
    histories = "\n".join(f"{row[0]}:\n{run_history(dsn, schema, row[0])}" for row in leftover[:3])
    assert not leftover, f"runs left unfinished or leased: {leftover[:10]}\n{histories}"
    pending = query(
        dsn,
        "SELECT run_id, idempotency_key FROM {s}.inbox WHERE consumed_seq IS NULL",
        schema=schema,
    )
    assert not pending, f"inbox items never consumed: {pending[:10]}"
    behind = query(
        dsn,
        "SELECT r.run_id, r.last_seq, s.seq FROM {s}.runs AS r "
        "JOIN {s}.snapshots AS s USING (run_id) WHERE s.seq <> r.last_seq + 1",
        schema=schema,
    )
    assert killed or not behind, f"finished runs without their final snapshot: {behind[:10]}"
    uncompacted = {row[0] for row in behind}
    stale = query(
        dsn,
        "SELECT r.run_id, r.seq, s.seq FROM {s}.records AS r "
        "LEFT JOIN {s}.snapshots AS s USING (run_id) WHERE s.seq IS NULL OR r.seq < s.seq",
        schema=schema,
    )
    stale = [row for row in stale if row[0] not in uncompacted]
    assert not stale, f"records older than their run's snapshot: {stale[:10]}"
    return sorted(uncompacted)


def dump(value: Any) -> str:
    return json.dumps(value, default=str)[:2000]
