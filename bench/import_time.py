"""import: what ``python -c "import tickwork"`` costs next to ``import pydantic, anyio``.

One repetition at size n starts 2n fresh interpreters, alternating the two commands so
that a change of machine load hits both alike, and returns the total wall time of the n
``import tickwork`` ones; the note gives the ratio to the reference commands of the same
repetitions (quality.md: at most 2x).  The extra pass reruns both commands, and
``from tickwork import Context, Workflow, step`` (what a program that runs a workflow
imports), under ``python -X importtime`` and compares the medians of the time spent in
the imports themselves, without the interpreter's start-up.

The interpreters import the tickwork this process imported, with bytecode cached (in a
directory of their own, written by a warm-up run) as it is for an installed package.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from functools import cache
from pathlib import Path

import tickwork
from bench._harness import BenchmarkError, Scenario

TICKWORK = "import tickwork"
REFERENCE = "import pydantic, anyio"
WORKFLOW = "from tickwork import Context, Workflow, step"
# Checks that a child imports the tickwork under test, not another copy.
_WHERE = "import tickwork, sys; sys.stdout.write(tickwork.__file__)"

_reference_seconds: dict[int, list[float]] = {}


@cache
def _environment() -> dict[str, str]:
    """The children's environment: this tickwork first on the path, bytecode cached."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="tickwork-bench-pyc-")
    source = str(Path(tickwork.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
    where = _python(_WHERE, env)
    if Path(where).resolve() != Path(tickwork.__file__).resolve():
        raise BenchmarkError(f"the children import {where}, not {tickwork.__file__}")
    for code in (TICKWORK, REFERENCE, WORKFLOW):  # warm-up: writes the bytecode
        _python(code, env)
    return env


def _python(code: str, env: dict[str, str], *options: str) -> str:
    """Run ``python [options] -c code``; its stdout and stderr (raises if it fails)."""
    proc = subprocess.run(
        [sys.executable, *options, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise BenchmarkError(f"python -c {code!r} failed:\n{proc.stderr}")
    return proc.stdout + proc.stderr


def _wall(code: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    _python(code, env)
    return time.perf_counter() - started


def measure(n: int) -> float:
    env = _environment()
    ours = reference = 0.0
    for _ in range(n):
        ours += _wall(TICKWORK, env)
        reference += _wall(REFERENCE, env)
    _reference_seconds.setdefault(n, []).append(reference)
    return ours


def _note(n: int, median: float) -> str:
    reference = statistics.median(_reference_seconds[n])
    return f"{median / reference:.2f}x `{REFERENCE}` ({reference / n * 1e3:.0f} ms)"


def import_seconds(report: str) -> float:
    """The time ``-X importtime`` reports for the top-level imports of the ``-c`` code,
    without what the interpreter imports at start-up (``site`` and what it pulls in)."""
    total = 0
    startup = True
    for line in report.splitlines():
        if not line.startswith("import time:") or "[us]" in line:
            continue
        _, cumulative, name = line.split("|")
        if startup and name.strip() == "site":
            startup = False  # the start-up imports end with ``site``
            continue
        if not startup and not name.startswith("  "):
            total += int(cumulative)
    if startup:
        raise BenchmarkError("no `site` line in the -X importtime report")
    return total / 1e6


def _extra(n: int) -> str:
    env = _environment()
    seconds: dict[str, list[float]] = {TICKWORK: [], REFERENCE: [], WORKFLOW: []}
    for _ in range(max(n, 3)):
        for code, runs in seconds.items():
            runs.append(import_seconds(_python(code, env, "-X", "importtime")))
    ours, reference, workflow = (statistics.median(runs) for runs in seconds.values())
    return (
        f"importtime {ours * 1e3:.1f} ms = {ours / reference:.2f}x "
        f"({reference * 1e3:.0f} ms); `{WORKFLOW}` {workflow / reference:.2f}x"
    )


SCENARIO = Scenario(
    name="import",
    summary=f"`python -c '{TICKWORK}'` next to `python -c '{REFERENCE}'`, fresh interpreters",
    unit="interpreter",
    sizes=(10,),
    quick_sizes=(4,),
    measure=measure,
    vs_baseline=False,
    extra_pass=_extra,
    note=_note,
    goal=f"<= 2x `python -c '{REFERENCE}'`",
    tiny=1,  # each unit starts two interpreters
)
