"""The command line over a fleet's store: ``runs ... --dsn``, ``runs cancel``,
``tickwork worker`` and ``tickwork workers`` (scale-out.md §6).

The SQLite tests run everywhere; the Postgres ones need a server (``postgres`` mark).
A worker process is started with ``tickwork worker`` and stopped with SIGTERM, which
hands its runs back.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.cli_fixtures.commands import ROOT, command_env, tickwork
from tests.cli_fixtures.flows import Echo, Interview, Reply

from tickwork.journal import SqliteJournal

FLOWS = "tests.cli_fixtures.flows"


def _store_args(store: Any, where: Any) -> list[str]:
    if isinstance(where, Path):
        return ["--journal", str(where)]
    dsn, schema = where
    return ["--dsn", dsn, "--schema", schema]


def _open(where: Any) -> Any:
    if isinstance(where, Path):
        return SqliteJournal(where)
    from tickwork.stores.postgres import PostgresJournal

    dsn, schema = where
    return PostgresJournal(dsn, schema=schema)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "sqlite":
        return tmp_path / "fleet.db"
    return request.getfixturevalue("pg_schema")


def test_runs_list_show_and_cancel_work_on_either_store(where: Any) -> None:
    store = _open(where)

    async def submit() -> None:
        await Interview(journal=store, timeout=None).submit(run_id="iv-1", topic="tea")

    anyio.run(submit)
    args = _store_args(store, where)
    listed = tickwork("runs", "list", *args, "--json")
    assert listed.returncode == 0, listed.stderr
    (entry,) = json.loads(listed.stdout)
    assert (entry["run_id"], entry["status"]) == ("iv-1", "queued")
    cancelled = tickwork("runs", "cancel", "iv-1", *args)
    assert cancelled.returncode == 0, cancelled.stderr

    async def inbox() -> list[Any]:
        return await store.read_inbox("iv-1")

    assert [item.kind for item in anyio.run(inbox)] == ["cancel"]
    missing = tickwork("runs", "cancel", "nope", *args)
    assert missing.returncode == 2 and "nope" in missing.stderr
    store.close()


def test_a_worker_process_runs_submitted_runs_and_hands_back_on_sigterm(where: Any) -> None:
    store = _open(where)

    async def submit() -> Any:
        echo = await Echo(journal=store).submit(run_id="echo-1", text="hi")
        interview = await Interview(journal=store, timeout=None).submit(run_id="iv-2", topic="tea")
        return echo, interview

    echo, interview = anyio.run(submit)
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tickwork.cli",
            "worker",
            f"{FLOWS}:FLEET",
            *_store_args(store, where),
            "--lease",
            "3",
            "--idle-release",
            "30",
        ],
        cwd=ROOT,
        env=command_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        async def follow() -> Any:
            with anyio.fail_after(60):
                result = await echo
                async for _event in interview.stream_events():
                    break  # the question: the run waits on the worker now
                return result

        assert anyio.run(follow) == {"text": ["str", "hi"]}
        workers = tickwork("workers", *_store_args(store, where))
        assert workers.returncode == 0, workers.stderr
        assert "iv-2" in workers.stdout
    finally:
        worker.send_signal(signal.SIGTERM)
        _out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert "handing the runs back" in err

    async def after() -> Any:
        entry = await store.get_run("iv-2")
        await interview.send_event(Reply(topic="tea", text="yes"))
        return entry

    entry = anyio.run(after)
    # Handed back at once (nobody holds it); a run that only waits is parked, so the
    # answer just sent makes it claimable by any worker.
    assert entry.status in ("queued", "parked") and entry.lease_until is None
    store.close()


def test_a_run_the_command_leaves_waiting_is_parked_and_wakes_for_any_worker(where: Any) -> None:
    """``runs resume`` with no answer and ``runs send`` both leave the run waiting: it is
    parked and unowned at once (not held until the command's lease expires), so a send
    makes it claimable by any worker."""
    store = _open(where)

    async def submit() -> None:
        await Interview(journal=store, timeout=None).submit(run_id="iv-3", topic="tea", rounds=2)

    anyio.run(submit)
    args = _store_args(store, where)
    unanswered = tickwork("runs", "resume", "iv-3", *args)
    assert unanswered.returncode == 1 and "needs an answer" in unanswered.stderr
    sent = tickwork("runs", "send", "iv-3", "Reply", '{"text": "green"}', *args)
    assert sent.returncode == 0, sent.stderr
    assert "iv-3 waits for input" in sent.stderr

    async def after() -> Any:
        entry = await store.get_run("iv-3")
        # what a worker claims: nothing while the run is parked with nothing due ...
        early = await store.claim_runs("another-worker", [entry.workflow_name])
        handler = await store.attach("iv-3")
        await handler.send_event(Reply(topic="tea", text="black"))
        # ... and the run as soon as its inbox has an item (the command's lease, had it
        # been kept, would have kept every worker away for 30 s)
        return entry, early, await store.claim_runs("another-worker", [entry.workflow_name])

    entry, early, claims = anyio.run(after)
    assert (entry.status, entry.owner, entry.lease_until) == ("parked", None, None)
    assert early == []
    assert [claim.lease.run_id for claim in claims] == ["iv-3"]
    store.close()
