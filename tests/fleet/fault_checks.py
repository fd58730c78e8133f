"""The checks of the fleet fault tests: what happened against what must have happened.

They read what :func:`tests.fleet.fault_support.install_audit` recorded (every journal
record as it was written, status changes, snapshot writes), the runs' streams, and the
side log of step executions that :mod:`tests.fleet.trial_child` writes.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fleet.fault_support import Followed, Written, audited, query, run_history
from tests.fleet.trial_child import reference_result

from tickwork.events import StopEvent


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
    return _event_values(written, "add_event", qualified_name)


def published(written: Sequence[Written], qualified_name: str) -> list[dict[str, Any]]:
    """The values of the events named ``qualified_name`` that records publish."""
    return _event_values(written, "publish_event", qualified_name)


def _event_values(
    written: Sequence[Written], record_type: str, qualified_name: str
) -> list[dict[str, Any]]:
    found = []
    for w in written:
        event = w.data.get("event")
        if (
            w.data["type"] == record_type
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
    lost_sessions: Iterable[tuple[int, str]] = (),
    unlogged_results: Iterable[str] = ("join",),
) -> collections.Counter[str]:
    """Step bodies ran once per journaled result, except those in flight in a worker
    that was killed (or fenced: ``interrupted_pids``) or in a session that lost its
    run's lease (``lost_sessions``: ``(pid, run id)``): only those may have run and left
    no result, or run again.  Returns how many executions were repeated, per step."""
    lost = set(lost_sessions)
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
        survivors = [
            e for e in runs if e.pid not in interrupted_pids and (e.pid, e.run_id) not in lost
        ]
        assert len(survivors) <= results, (
            f"run {key[0]}, invocation {key[1]} ran {len(runs)} times ({runs}) for "
            f"{results} journaled result(s); only a killed or fenced worker, or a session "
            "that lost its lease, may run a body that leaves no result"
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


def check_trial_runs(
    dsn: str,
    schema: str,
    seen: Mapping[str, Followed],
    shapes: Mapping[str, tuple[int, int]],
    context: str,
) -> dict[str, list[Written]]:
    """Every Trial run of ``shapes`` (run id -> its width and factor) ended with the
    reference result, and nothing of it was lost or doubled: its journal, its stream and
    what its follower saw.  Returns the audited journals, for further checks."""
    journals = audited(dsn, schema)
    streams = stream_rows(dsn, schema)
    last_seqs = dict(query(dsn, "SELECT run_id, last_seq FROM {s}.runs", schema=schema))
    for run_id, (width, factor) in shapes.items():
        assert seen[run_id].result == reference_result(width, factor), context
        check_journal(run_id, journals[run_id], last_seqs[run_id])
        check_trial_journal(run_id, journals[run_id], width, streams[run_id])
        check_stream(seen[run_id], streams[run_id])
    return journals


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
    histories = "\n".join(f"{row[0]}:\n{run_history(dsn, schema, row[0])}" for row in behind[:3])
    assert killed or not behind, (
        f"finished runs without their final snapshot: {behind[:10]}\n{histories}"
    )
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


def wait_compacted(dsn: str, schema: str, timeout: float = 20.0) -> float:
    """Wait until every finished run has its final snapshot (written just after its
    last append, so a moment after its caller saw the result); on timeout fail with
    what the database's sessions were doing."""
    began = time.monotonic()
    deadline = began + timeout
    statement = (
        "SELECT r.run_id FROM {s}.runs AS r JOIN {s}.snapshots AS s USING (run_id) "
        "WHERE s.seq <> r.last_seq + 1 AND r.status IN "
        "('completed', 'failed', 'timed_out', 'cancelled')"
    )
    while True:
        behind = [row[0] for row in query(dsn, statement, schema=schema)]
        if not behind:
            return time.monotonic() - began
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    activity = query(
        dsn,
        "SELECT pid, application_name, state, wait_event_type, wait_event, "
        "now() - xact_start, left(query, 160) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()",
        schema=schema,
    )
    locks = query(
        dsn,
        "SELECT l.pid, l.locktype, l.relation::regclass::text, l.mode, l.granted "
        "FROM pg_locks AS l JOIN pg_stat_activity AS a USING (pid) "
        "WHERE a.datname = current_database() AND l.locktype IN ('relation', 'tuple', "
        "'transactionid') AND (NOT l.granted OR l.locktype <> 'relation')",
        schema=schema,
    )
    workers = query(dsn, "SELECT worker_id, runs FROM {s}.workers", schema=schema)
    histories = "\n".join(f"{run_id}:\n{run_history(dsn, schema, run_id)}" for run_id in behind[:3])
    raise AssertionError(
        f"workers: {workers}\n"
        f"finished runs still without their final snapshot after {timeout} s: {behind}\n"
        f"{histories}\nsessions:\n"
        + "\n".join(map(str, activity))
        + "\nlocks:\n"
        + "\n".join(map(str, locks))
    )
