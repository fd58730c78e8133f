"""Run the benchmark scenarios and print one table.

    python -m bench                      # every scenario, full sizes, 5 repetitions
    python -m bench --quick              # smaller sizes, 3 repetitions
    python -m bench --only chain,trio    # some scenarios (plus what they are compared with)
    python bench/run.py --list           # also works as a script

For each scenario and size the table shows the median, min and max of the repetitions, the
time per item (hop, task, run or event), that time as a multiple of the raw-asyncio hop of
the ``baseline`` scenario, and for size sweeps the growth exponent
``log(t2/t1) / log(n2/n1)`` between consecutive sizes (1.0 is linear). Every scenario checks
its own result; one that fails is reported and makes the exit status 1, never skipped.
The Postgres scenarios run on a throwaway cluster with fsync on that the bench starts
itself and stops at the end (``bench/_postgres.py``; ``TW_BENCH_PG_DSN`` names another
server, or ``off``). A scenario that needs something this machine lacks gets a row saying
so.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.metadata
import math
import platform
import statistics
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

if not __package__:
    # Run as ``python bench/run.py``: import ``bench`` from the repository root, and keep
    # the bench/ directory itself off sys.path so its modules shadow nothing.
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench import _postgres
from bench._harness import Scenario

# Scenario name -> module defining ``SCENARIO``, in the order they run.
SCENARIO_MODULES = {
    "baseline": "bench.baseline",
    "chain_floor": "bench.chain_floor",
    "chain": "bench.chain",
    "fanout_floor": "bench.fanout_floor",
    "fanout_collect": "bench.fanout_collect",
    "send_collect": "bench.send_collect",
    "retry": "bench.retry",
    "baseline_runs": "bench.baseline_runs",
    "concurrent_runs": "bench.concurrent_runs",
    "stream_raw": "bench.stream_raw",
    "stream": "bench.stream",
    "stream_runs": "bench.stream_runs",
    "trio": "bench.trio_chain",
    "parked_runs": "bench.parked_runs",
    "snapshot_off": "bench.snapshot_off",
    "snapshot": "bench.snapshot",
    "replay": "bench.replay",
    "durable_chain": "bench.durable_chain",
    "import": "bench.import_time",
    "durable_chain_pg": "bench.durable_chain_pg",
    "fleet": "bench.fleet",
    "failover": "bench.failover",
    "parked_wake": "bench.parked_wake",
    "parked_wake_poll": "bench.parked_wake_poll",
    "worker_parked": "bench.worker_parked",
    "durable_concurrent": "bench.durable_concurrent",
}
BASELINE = "baseline"
DEFAULT_REPS = 5
QUICK_REPS = 3


@dataclass
class Row:
    """The repetitions of one scenario at one size."""

    scenario: Scenario
    n: int
    seconds: list[float]
    extra: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def per_item_us(self) -> float:
        return self.median / self.n * 1e6


@dataclass
class Outcome:
    name: str
    rows: list[Row]
    error: str | None = None
    skipped: str | None = None  # why the scenario could not run here


def growth_exponent(n1: int, t1: float, n2: int, t2: float) -> float:
    """``log(t2/t1) / log(n2/n1)``: 1.0 means time grows linearly with n, 2.0 quadratically."""
    return math.log(t2 / t1) / math.log(n2 / n1)


def load_scenario(name: str) -> Scenario:
    scenario = importlib.import_module(SCENARIO_MODULES[name]).SCENARIO
    assert isinstance(scenario, Scenario) and scenario.name == name, SCENARIO_MODULES[name]
    return scenario


def _parse_names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in SCENARIO_MODULES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown scenario {', '.join(unknown)}; choose from {', '.join(SCENARIO_MODULES)}"
        )
    return names


def _parse_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes must be integers, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be >= 1, got {text!r}")
    return sizes


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"smaller sizes and {QUICK_REPS} repetitions"
    )
    parser.add_argument(
        "--only",
        type=_parse_names,
        metavar="NAME[,NAME]",
        help="run only these scenarios (and the ones they are compared with)",
    )
    parser.add_argument("--reps", type=int, help="repetitions per size (at least 1)")
    parser.add_argument(
        "--sizes", type=_parse_sizes, metavar="N[,N]", help="use these sizes for every scenario"
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    return parser


def _selected(only: list[str] | None) -> list[str]:
    """The scenarios to run, in table order: the chosen ones and those they compare with."""
    if not only:
        return list(SCENARIO_MODULES)
    chosen = set(only)
    for name in only:
        try:
            scenario = load_scenario(name)
        except Exception:
            continue  # reported when the scenario runs
        if scenario.vs_baseline:
            chosen.add(BASELINE)
        if scenario.vs_scenario:
            chosen.add(scenario.vs_scenario)
    return [name for name in SCENARIO_MODULES if name in chosen]


def measure(
    scenario: Scenario,
    sizes: Sequence[int],
    reps: int,
    log: Callable[[str], None],
) -> list[Row]:
    rows = []
    for n in sizes:
        seconds = []
        for rep in range(reps):
            log(f"{scenario.name}: n={n:,} repetition {rep + 1}/{reps}")
            gc.collect()
            seconds.append(scenario.measure(n))
        row = Row(scenario, n, seconds)
        if scenario.extra_pass is not None:
            log(f"{scenario.name}: n={n:,} extra pass")
            row.extra = scenario.extra_pass(n)
        rows.append(row)
    return rows


def _closest(rows: Sequence[Row], n: int) -> Row | None:
    if not rows:
        return None
    return min(rows, key=lambda row: abs(math.log(row.n / n)))


def render_table(outcomes: Sequence[Outcome]) -> str:
    by_name = {outcome.name: outcome.rows for outcome in outcomes}
    baseline_rows = by_name.get(BASELINE, [])
    header = ("scenario", "N", "median ms", "min ms", "max ms", "us/item", "x hop", "exp", "notes")
    table: list[tuple[str, ...]] = [header]
    for outcome in outcomes:
        if outcome.error is not None:
            table.append((outcome.name, "-", "-", "-", "-", "-", "-", "-", "FAILED, see below"))
            continue
        if outcome.skipped is not None:
            table.append(
                (outcome.name, "-", "-", "-", "-", "-", "-", "-", f"skipped: {outcome.skipped}")
            )
            continue
        previous: Row | None = None
        for row in outcome.rows:
            scenario = row.scenario
            ratio = "-"
            base = _closest(baseline_rows, row.n)
            if scenario.vs_baseline and base is not None:
                ratio = f"{row.per_item_us / base.per_item_us:.2f}"
            exponent = "-"
            if previous is not None:
                exponent = f"{growth_exponent(previous.n, previous.median, row.n, row.median):.2f}"
            notes = [f"us/{scenario.unit}"]
            if scenario.note is not None:
                notes.append(scenario.note(row.n, row.median))
            if row.extra:
                notes.append(row.extra)
            if scenario.vs_scenario:
                other = [r for r in by_name.get(scenario.vs_scenario, []) if r.n == row.n]
                if other:
                    notes.append(f"{row.median / other[0].median:.2f}x {scenario.vs_scenario}")
            table.append(
                (
                    scenario.name,
                    f"{row.n:,}",
                    f"{row.median * 1e3:.2f}",
                    f"{min(row.seconds) * 1e3:.2f}",
                    f"{max(row.seconds) * 1e3:.2f}",
                    f"{row.per_item_us:.2f}",
                    ratio,
                    exponent,
                    ", ".join(notes),
                )
            )
            previous = row
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = []
    for index, line in enumerate(table):
        cells = [
            cell.ljust(width) if i in (0, len(header) - 1) else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _environment(reps: int) -> str:
    def version(package: str) -> str:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    return (
        f"tickwork {version('tickwork')}, Python {platform.python_version()} "
        f"({platform.python_implementation()}), anyio {version('anyio')}, "
        f"trio {version('trio')}, {platform.platform()}; {reps} repetitions per size"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        for name in SCENARIO_MODULES:
            try:
                scenario = load_scenario(name)
                print(f"{name:16} {scenario.summary}; goal: {scenario.goal}")
            except Exception as exc:
                print(f"{name:16} cannot be loaded: {exc}")
        return 0
    reps = args.reps if args.reps is not None else QUICK_REPS if args.quick else DEFAULT_REPS
    if reps < 1:
        build_parser().error("--reps must be at least 1")

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    print(_environment(reps), flush=True)
    try:
        return _run(args, reps, log)
    finally:
        _postgres.shutdown()  # the cluster of the Postgres scenarios, if one was started


def _run(args: argparse.Namespace, reps: int, log: Callable[[str], None]) -> int:
    """Run the selected scenarios, print the table; the exit status."""
    outcomes: list[Outcome] = []
    for name in _selected(args.only):
        try:
            scenario = load_scenario(name)
            reason = scenario.unavailable()
            if reason is not None:
                log(f"{name}: skipped: {reason}")
                outcomes.append(Outcome(name, [], skipped=reason))
                continue
            sizes = args.sizes or (scenario.quick_sizes if args.quick else scenario.sizes)
            outcomes.append(Outcome(name, measure(scenario, scenario.fit(sizes), reps, log)))
        except Exception:
            outcomes.append(Outcome(name, [], traceback.format_exc()))
    print()
    print(render_table(outcomes))
    goals = [outcome.rows[0].scenario for outcome in outcomes if outcome.rows]
    if goals:
        print("\ngoals (quality.md):")
        for scenario in goals:
            print(f"  {scenario.name:16} {scenario.goal}")
    failed = [outcome for outcome in outcomes if outcome.error is not None]
    for outcome in failed:
        print(f"\nFAILED {outcome.name}:\n{outcome.error}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
