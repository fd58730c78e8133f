"""Crash recovery of journaled runs (quality.md §2): SIGKILL at random points, recover.

A child process (``crash_child.py``) runs a journaled ``CrashFlow`` on a SQLite journal:
a fan-out of 8 items, a retried flaky step, a ``@catch_error`` recovery, a ``list[E]``
join and a human-in-the-loop wait (answered by the child, or left to time out).  Every
step execution appends ``step,key`` to a side log.  The test kills the child with
SIGKILL at random moments, recovers the run in a fresh child with ``recover_runs`` and
checks that:

* the result equals the uninterrupted run's result (so no event reached the join twice
  and no branch was lost);
* every execution of the uninterrupted run happened, none more than twice, and the only
  executions that ran again are ones whose outcome was **not** durably journaled at the
  crash (the recovering child folds the journal before recovering and reports the
  executions the journal had finished);
* the waiter survives the crash, and its timeout budget still fires.

The kill delays are drawn from the measured duration of an uninterrupted run; the seed
is in every failure message.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

CHILD = Path(__file__).with_name("crash_child.py")
SCENARIOS = ("answer", "timeout")
TRIALS = 16
CHILD_TIMEOUT = 40.0


@dataclass
class ChildRun:
    """What one child process printed."""

    lines: list[str]
    returncode: int
    stderr: str

    def tagged(self, tag: str) -> list[Any]:
        return [json.loads(line[len(tag) + 1 :]) for line in self.lines if line.startswith(tag)]

    @property
    def result(self) -> Any:
        results = self.tagged("RESULT")
        assert len(results) == 1, f"expected one RESULT line, got {self.lines}: {self.stderr}"
        return results[0]


@dataclass
class Baseline:
    result: Any
    executions: Counter[str]
    duration: float


@dataclass
class Trial:
    scenario: str
    backend: str
    delay: float
    killed: ChildRun
    recovered: ChildRun
    executions: Counter[str]
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def progress(self) -> dict[str, Any] | None:
        found = self.recovered.tagged("PROGRESS")
        assert len(found) == 1, self.recovered
        progress: dict[str, Any] | None = found[0]
        return progress


def _spawn(mode: str, db: Path, log: Path, scenario: str, backend: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), mode, str(db), str(log), scenario, backend],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen[str], first: list[str]) -> ChildRun:
    out, err = proc.communicate(timeout=CHILD_TIMEOUT)
    return ChildRun(first + out.splitlines(), proc.returncode, err)


def _read_until(proc: subprocess.Popen[str], tag: str) -> list[str]:
    """Lines printed up to and including the first line starting with ``tag``."""
    assert proc.stdout is not None
    lines: list[str] = []
    while True:
        line = proc.stdout.readline()
        if not line:
            _, err = proc.communicate(timeout=CHILD_TIMEOUT)
            raise AssertionError(f"child ended before printing {tag}: {lines} {err}")
        lines.append(line.rstrip("\n"))
        if line.startswith(tag):
            return lines


def _executions(log: Path) -> Counter[str]:
    if not log.exists():
        return Counter()
    return Counter(log.read_text().splitlines())


def _run_uninterrupted(workdir: Path, scenario: str, backend: str) -> Baseline:
    db, log = workdir / f"base-{scenario}.db", workdir / f"base-{scenario}.log"
    proc = _spawn("run", db, log, scenario, backend)
    first = _read_until(proc, "READY")
    started = time.perf_counter()
    run = _finish(proc, first)
    duration = time.perf_counter() - started
    assert run.returncode == 0, run.stderr
    return Baseline(run.result, _executions(log), duration)


def _crash_and_recover(
    workdir: Path,
    name: str,
    scenario: str,
    backend: str,
    delay: float,
    *,
    kill_after: str = "READY",
) -> Trial:
    db, log = workdir / f"{name}.db", workdir / f"{name}.log"
    proc = _spawn("run", db, log, scenario, backend)
    first = _read_until(proc, kill_after)
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    killed = _finish(proc, first)
    recover = _spawn("recover", db, log, scenario, backend)
    recovered = _finish(recover, [])
    return Trial(scenario, backend, delay, killed, recovered, _executions(log))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("crash")


@pytest.fixture(scope="module")
def baselines(workdir: Path) -> dict[str, Baseline]:
    return {scenario: _run_uninterrupted(workdir, scenario, "asyncio") for scenario in SCENARIOS}


def _check_trial(trial: Trial, baseline: Baseline, context: str) -> None:
    """The recovery invariants of one crash trial."""
    where = f"{context}: {trial.scenario}/{trial.backend} killed after {trial.delay:.3f}s"
    recovered = trial.recovered
    assert recovered.returncode == 0, f"{where}: recovery failed: {recovered.stderr}"
    assert "Traceback" not in recovered.stderr, f"{where}: {recovered.stderr}"
    assert recovered.result == baseline.result, where

    counts = trial.executions
    assert set(counts) == set(baseline.executions), (
        f"{where}: executions differ from the uninterrupted run: {counts}"
    )
    assert max(counts.values()) <= 2, f"{where}: an execution ran more than twice: {counts}"
    repeated = {key for key, n in counts.items() if n > 1}
    progress = trial.progress
    if trial.killed.tagged("RESULT") or progress is None:
        # The run had already finished durably, or was never registered (killed before
        # its first commit, so nothing ran): recovery must not re-run anything.
        assert not repeated, f"{where}: re-executed {repeated} (progress={progress})"
        return
    finished = set(progress["finished"])
    assert len(progress["finished"]) == len(finished), f"{where}: {progress}"
    assert not repeated & finished, (
        f"{where}: executions the journal had finished ran again: {repeated & finished}"
    )


def test_an_uninterrupted_run_is_the_reference(baselines: dict[str, Baseline]) -> None:
    rows = [[i, -1 if i == 5 else i * i] for i in range(8)]
    assert baselines["answer"].result == {"rows": rows, "answer": 42}
    assert baselines["timeout"].result == {"rows": rows, "answer": "timed out"}
    for scenario, baseline in baselines.items():
        counts = baseline.executions
        assert set(counts.values()) == {1}, counts
        # Items 1, 4, 7 fail their first attempt and are retried; item 5 is recovered.
        assert {key for key in counts if key.startswith("process,")} == {
            *(f"process,{i}:0" for i in range(8)),
            "process,1:1",
            "process,4:1",
            "process,7:1",
        }
        assert counts["recover,5"] == 1
        assert counts[f"approve,{'answered' if scenario == 'answer' else 'timed_out'}"] == 1


def test_sigkill_at_random_points_recovers_the_same_result(
    workdir: Path, baselines: dict[str, Baseline]
) -> None:
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    plans = []
    for i in range(TRIALS):
        scenario = SCENARIOS[i % 2]
        backend = "trio" if (i // 2) % 2 else "asyncio"
        # Stratified over the run so early, middle and late crashes all occur.
        span = baselines[scenario].duration * 1.05
        delay = span * (i + rng.random()) / TRIALS
        plans.append((f"trial{i}", scenario, backend, delay))
    with ThreadPoolExecutor(max_workers=3) as pool:
        trials = list(
            pool.map(lambda plan: _crash_and_recover(workdir, *plan), plans)  # type: ignore[misc]
        )
    for trial in trials:
        _check_trial(trial, baselines[trial.scenario], f"seed={seed}")
    # The matrix must actually have interrupted work in flight, not only finished runs.
    interrupted = [t for t in trials if t.progress is not None and t.progress["in_flight"]]
    assert len(interrupted) >= 3, f"seed={seed}: too few crashes hit in-flight work"
    rerun = [t for t in trials if any(n > 1 for n in t.executions.values())]
    assert rerun, f"seed={seed}: no crash ever interrupted a running step"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_crash_while_waiting_for_the_human_keeps_the_waiter(
    workdir: Path, baselines: dict[str, Baseline], scenario: str, backend: str
) -> None:
    # Timeout scenario: killed 0.1 s after the request was published, well inside the
    # 0.4 s waiter budget, so the waiter and its budget must survive.  Answer scenario:
    # killed as soon as the request is seen (the child answers ~50 ms later).
    delay = 0.1 if scenario == "timeout" else 0.0
    trial = _crash_and_recover(
        workdir, f"wait-{scenario}-{backend}", scenario, backend, delay, kill_after="ASKED"
    )
    _check_trial(trial, baselines[scenario], "kill while waiting")
    progress = trial.progress
    assert progress is not None
    if scenario == "timeout":
        assert not trial.killed.tagged("RESULT")
        # Nobody answers: the journal holds the unresolved waiter, and after recovery
        # its remaining budget fires, the step sees TimeoutError and finishes.
        assert progress["waiting"] is True, progress
        assert trial.recovered.result["answer"] == "timed out"
        assert trial.executions["approve,timed_out"] == 1
    else:
        assert trial.recovered.result["answer"] == 42
        assert trial.executions["approve,answered"] == 1
    # The join ran exactly once over the whole crash and recovery.
    assert trial.executions["gather,all"] == 1
