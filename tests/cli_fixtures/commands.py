"""Running the ``tickwork`` command in tests, as users run it, and reading its errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _pytest.capture import CaptureResult

ROOT = Path(__file__).resolve().parents[2]
FLOWS = "tests.cli_fixtures.flows"
COMMAND_DEADLINE_SECONDS = 120


def command_env() -> dict[str, str]:
    """The environment of a command under test: this checkout's ``src`` first (not an
    installed tickwork), the repository root for ``tests.cli_fixtures``, no colour."""
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
    env.pop("NO_COLOR", None)
    return env


def tickwork(
    *arguments: str, stdin: str | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m tickwork.cli`` with ``arguments``; never raises on a bad status."""
    return subprocess.run(
        [sys.executable, "-m", "tickwork.cli", *arguments],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=COMMAND_DEADLINE_SECONDS,
        cwd=cwd,
        env=command_env(),
        check=False,
    )


def single_error(output: subprocess.CompletedProcess[str] | CaptureResult[str]) -> str:
    """The one error line of a failed command (and nothing else on stderr or stdout).

    ``output`` is a finished subprocess or pytest's captured output (``out``, ``err``).
    """
    if isinstance(output, subprocess.CompletedProcess):
        stderr, stdout = output.stderr, output.stdout
    else:
        stderr, stdout = output.err, output.out
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("tickwork: error: "), lines[0]
    assert stdout == ""
    return str(lines[0].removeprefix("tickwork: error: "))


def last_error(output: subprocess.CompletedProcess[str]) -> str:
    """The error line that ends a command's progress (the only error line on stderr)."""
    errors = [line for line in output.stderr.splitlines() if line.startswith("tickwork: error:")]
    assert len(errors) == 1, output.stderr
    assert output.stderr.splitlines()[-1] == errors[0], output.stderr
    return errors[0].removeprefix("tickwork: error: ")
