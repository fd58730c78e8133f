"""Keep the benchmark scripts working: every scenario runs once at a tiny size.

These tests time nothing (quality.md: figures come from ``nox -s bench``, never from timed
assertions). They only check that each scenario still runs, checks its result and feeds
the table. Scenarios that need the runtime are skipped until ``tickwork.Workflow`` exists.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tickwork

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # ``bench`` lives at the repository root, not under src/
    sys.path.insert(0, str(ROOT))

from bench import import_time, run  # noqa: E402
from bench._harness import BenchmarkError, Scenario, expect  # noqa: E402

TINY = 10
# ``import`` starts two fresh interpreters per unit of size: one is enough here.
RUNTIME_SCENARIOS = [name for name in run.SCENARIO_MODULES if name != run.BASELINE]
needs_runtime = pytest.mark.skipif(
    not hasattr(tickwork, "Workflow"),
    reason="tickwork.Workflow is not importable yet (the runtime has not landed)",
)


@pytest.fixture(autouse=True)
def _bench_postgres(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Postgres scenarios use the test server (``TW_PG_DSN``), or are skipped: the
    cluster with fsync on that the bench starts for itself takes seconds to start."""
    monkeypatch.setenv("TW_BENCH_PG_DSN", os.environ.get("TW_PG_DSN", "").strip() or "off")


def test_baseline_runs_and_checks_its_result() -> None:
    seconds = run.load_scenario("baseline").measure(TINY)
    assert seconds > 0


@needs_runtime
@pytest.mark.parametrize("name", RUNTIME_SCENARIOS)
def test_scenario_runs_at_a_tiny_size(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = run.load_scenario(name)
    reason = scenario.unavailable()
    if reason is not None:  # e.g. the Postgres scenarios without TW_PG_DSN
        pytest.skip(reason)
    module = importlib.import_module(run.SCENARIO_MODULES[name])
    if hasattr(module, "RUNS"):  # the fleet's batch of runs, whatever the worker count
        monkeypatch.setattr(module, "RUNS", 20)
    n = scenario.tiny or TINY
    assert scenario.measure(n) > 0
    if scenario.extra_pass is not None:
        assert scenario.extra_pass(n)


@needs_runtime
def test_runner_prints_a_row_for_every_scenario(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The scenarios with a tiny size of their own start processes or wait for leases:
    # test_scenario_runs_at_a_tiny_size measures them; here they only need their row.
    load = run.load_scenario

    def light(name: str) -> Scenario:
        scenario = load(name)
        if scenario.tiny is None:
            return scenario
        return dataclasses.replace(scenario, measure=lambda n: 1e-3, extra_pass=None, note=None)

    monkeypatch.setattr(run, "load_scenario", light)
    assert run.main(["--sizes", f"{TINY},{TINY * 2}", "--reps", "1"]) == 0
    out = capsys.readouterr().out
    for name in run.SCENARIO_MODULES:
        assert f"\n{name} " in out, f"no row for {name}:\n{out}"
    assert "FAILED" not in out


def test_the_import_row_gives_both_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    assert run.main(["--only", "import", "--sizes", "1", "--reps", "1"]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("import ")]
    assert re.search(r"\d+\.\d\dx `import pydantic, anyio` \(\d+ ms\)", row), row
    assert re.search(r"importtime [\d.]+ ms = \d+\.\d\dx", row), row


def test_importtime_reports_are_read_without_the_start_up() -> None:
    report = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:       300 |        500 | encodings",
            "import time:       100 |        200 |   _distutils_hack",
            "import time:      1000 |       9000 | site",
            "import time:       400 |       1500 | pydantic",
            "import time:      1100 |       1100 |   pydantic_core",
            "import time:       250 |        250 | anyio",
            "something a child printed",
        ]
    )
    assert import_time.import_seconds(report) == pytest.approx(1750e-6)
    with pytest.raises(BenchmarkError, match="site"):
        import_time.import_seconds("import time:       400 |       1500 | pydantic")


def test_a_scenario_that_cannot_run_here_gets_a_row_saying_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def never(n: int) -> float:
        raise AssertionError("an unavailable scenario is not measured")

    absent = Scenario("baseline", "needs a server", "hop", (1,), (1,), never)
    absent = dataclasses.replace(absent, requires=lambda: "no server here")
    monkeypatch.setattr(run, "load_scenario", lambda name: absent)
    assert run.main(["--only", "baseline", "--reps", "1"]) == 0
    out = capsys.readouterr().out
    assert "skipped: no server here" in out and "FAILED" not in out


def test_sizes_are_lowered_to_a_scenarios_limit() -> None:
    scenario = Scenario("x", "", "worker", (1, 2, 4), (1,), lambda n: 1.0, max_size=4)
    assert scenario.fit((1, 2, 4)) == (1, 2, 4)
    assert scenario.fit((10, 20)) == (4,)
    assert dataclasses.replace(scenario, max_size=None).fit((10, 20)) == (10, 20)


def test_runner_table_for_the_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    assert run.main(["--only", "baseline", "--sizes", "10,100", "--reps", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines if line.startswith("baseline ")]
    assert [row[1] for row in rows] == ["10", "100"]
    # The growth exponent column: a number from the second size on. Its value is a
    # timing (10 hops against 100 on a shared machine), so only its presence is checked.
    assert rows[0][7] == "-" and math.isfinite(float(rows[1][7]))


def test_a_failing_scenario_is_reported_not_skipped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def wrong(n: int) -> float:
        expect("result", n + 1, n)
        return 1.0

    broken = Scenario("baseline", "always wrong", "hop", (1,), (1,), wrong)
    monkeypatch.setattr(run, "load_scenario", lambda name: broken)
    assert run.main(["--only", "baseline", "--reps", "1"]) == 1
    captured = capsys.readouterr()
    assert "FAILED" in captured.out and BenchmarkError.__name__ in captured.err


def test_only_rejects_unknown_names(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run.main(["--only", "chain,nope"])
    assert "unknown scenario nope" in capsys.readouterr().err


def test_comparisons_pull_in_what_they_compare_with() -> None:
    if not hasattr(tickwork, "Workflow"):
        pytest.skip("tickwork.Workflow is not importable yet (the runtime has not landed)")
    assert run._selected(["trio"]) == ["baseline", "chain", "trio"]


def test_growth_exponent() -> None:
    assert run.growth_exponent(1_000, 1.0, 10_000, 10.0) == pytest.approx(1.0)
    assert run.growth_exponent(1_000, 1.0, 10_000, 100.0) == pytest.approx(2.0)
    assert math.isclose(run.growth_exponent(10, 2.0, 20, 2.0), 0.0)


def test_bench_runs_as_a_module_and_as_a_script() -> None:
    for command in (["-m", "bench"], [str(ROOT / "bench" / "run.py")]):
        proc = subprocess.run(
            [sys.executable, *command, "--only", "baseline", "--sizes", "10", "--reps", "1"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "\nbaseline " in proc.stdout


@needs_runtime
@pytest.mark.parametrize("name", ["chain", "fanout_collect"])
def test_reducer_cost_records_every_tick_of_a_run(name: str) -> None:
    # bench/reducer_cost.py replays the (state, tick) pairs its driver records by
    # wrapping the runner's ``reduce``: if the loop stopped calling it through that
    # name, nothing would be recorded and the figure would be meaningless.
    from bench import reducer_cost

    ticks = reducer_cost._ticks(name, TINY)
    assert ticks >= TINY  # one step result per hop or item, at least
