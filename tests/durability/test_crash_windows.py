"""SIGKILL at the exact moments issue #12 names, then recovery in a fresh process.

Each test runs ``crash_windows_child.py`` in a child process that kills itself with
SIGKILL at one precise point (right after ``run()`` registered the run, while a human
is awaited, right after a durable send returned) and recovers in another child:

* a run killed right after it was registered restarts from its own (typed) start event;
* a waiter's deadline is wall-clock: it is never moved by a crash, and one that passed
  while no process ran fires promptly after the recovery;
* the alive time a waiting run spends survives the crash (heartbeats), so repeated
  crashes cannot renew the run's budget;
* an event whose ``await handler.send_event(...)`` returned survives the crash.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

CHILD = Path(__file__).with_name("crash_windows_child.py")
CHILD_TIMEOUT = 30.0


def child(
    mode: str, db: Path, *, env: dict[str, str] | None = None, backend: str = "asyncio"
) -> tuple[int, list[str], str]:
    """Run the child to its end (or its SIGKILL); its exit code, stdout lines, stderr."""
    proc = subprocess.run(
        [sys.executable, str(CHILD), mode, str(db), backend],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        env={**os.environ, **(env or {})},
    )
    return proc.returncode, proc.stdout.splitlines(), proc.stderr


def tagged(lines: list[str], tag: str) -> list[Any]:
    return [json.loads(line[len(tag) + 1 :]) for line in lines if line.startswith(tag + " ")]


def killed(code: int, stderr: str) -> None:
    assert code == -signal.SIGKILL, f"the child was expected to die by SIGKILL: {stderr}"


def recover(db: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    code, lines, stderr = child("recover", db, env=env)
    assert code == 0, stderr
    assert tagged(lines, "FAILED") == []
    (result,) = tagged(lines, "RESULT")
    return dict(result)


def recovered_state(db: Path, env: dict[str, str]) -> dict[str, Any]:
    """The run's state as recovery would rebuild it (snapshot + journal tail)."""
    code, lines, stderr = child("state", db, env=env)
    assert code == 0, stderr
    (state,) = tagged(lines, "STATE")
    return dict(state)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_run_killed_right_after_registration_restarts_from_its_start_event(
    tmp_path: Path, backend: str
) -> None:
    db = tmp_path / "runs.db"
    code, _lines, stderr = child("register", db, backend=backend)
    killed(code, stderr)
    env = {"WAIT_SECONDS": "0.2"}  # nobody answers: the waiter times out
    result = recover(db, env)
    assert result["outcome"] == "3 tea: no answer"  # the typed start event was kept


def test_a_waiter_deadline_survives_crashes_unmoved_and_fires_after_downtime(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    # Long enough that the deadline cannot pass during the three child processes before
    # the last recovery, even on a loaded machine (each one starts a Python interpreter).
    env = {"WAIT_SECONDS": "10", "DIE_AFTER": "0.2"}
    code, lines, stderr = child("wait", db, env=env)
    killed(code, stderr)
    assert "ASKED" in lines
    (deadline,) = recovered_state(db, env)["deadlines"]
    # Crash again while recovered: the deadline must not move.
    code, _lines, stderr = child("recover-then-die", db, env=env)
    killed(code, stderr)
    assert time.time() < deadline, "the machine is too slow for this test's 10 s deadline"
    assert recovered_state(db, env)["deadlines"] == [deadline]
    # Let the deadline pass while no process runs: it fires at once after recovery.
    time.sleep(max(0.0, deadline - time.time()) + 0.2)
    result = recover(db, env)
    assert result["outcome"] == "3 tea: no answer"
    assert result["seconds"] < 2.0  # not a fresh 4 s wait


def test_the_alive_time_a_waiting_run_spends_survives_a_crash(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    env = {"RUN_TIMEOUT": "60", "DIE_AFTER": "2.6"}
    code, lines, stderr = child("wait", db, env=env)
    killed(code, stderr)
    assert "ASKED" in lines
    state = recovered_state(db, env)
    # Heartbeats recorded about every second while it waited (it journaled nothing).
    assert state["elapsed_alive"] >= 1.5, state


def test_a_send_whose_await_returned_survives_a_crash(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    code, lines, stderr = child("answer", db)
    killed(code, stderr)
    assert "ASKED" in lines
    result = recover(db)
    assert result["outcome"] == "3 tea: yes"
