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
