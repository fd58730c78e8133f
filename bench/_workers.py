"""Worker processes for the fleet scenarios: ``tickwork worker`` as an operator runs it.

:class:`Workers` starts ``python -m tickwork.cli worker bench.fleet_flows:FLOWS ...``
processes (with this tickwork and this repository importable), waits until they have
registered in the store, reads their CPU time from ``/proc`` and stops them: SIGTERM
(graceful hand-back) or SIGKILL (a crash).  A worker that dies early, or does not come
up, raises :class:`~bench._harness.BenchmarkError` with the end of its log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import anyio

import tickwork
from bench._harness import BenchmarkError

ROOT = Path(__file__).resolve().parents[1]
TARGET = "bench.fleet_flows:FLOWS"
START_TIMEOUT = 60.0
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds of process ``pid`` (``None`` without ``/proc``)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; the fields after it are plain numbers.
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def _environment() -> dict[str, str]:
    paths = [str(Path(tickwork.__file__).resolve().parents[1]), str(ROOT)]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


class Workers:
    """Worker processes serving ``bench.fleet_flows``; a context manager that stops them."""

    def __init__(self, store_args: list[str], *options: str) -> None:
        self.store_args = store_args
        self.options = list(options)
        self.procs: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []

    def start(self, count: int = 1) -> list[subprocess.Popen[bytes]]:
        """Start ``count`` more workers (use :meth:`ready` to wait for them)."""
        started = []
        for _ in range(count):
            log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
            command = [sys.executable, "-m", "tickwork.cli", "worker", TARGET]
            proc = subprocess.Popen(
                [*command, *self.store_args, *self.options],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=_environment(),
                cwd=ROOT,
            )
            self.procs.append(proc)
            self._logs.append(log)
            started.append(proc)
        return started

    def log_of(self, proc: subprocess.Popen[bytes]) -> str:
        """The end of a worker's stderr."""
        log = self._logs[self.procs.index(proc)]
        log.seek(0)
        return log.read().decode(errors="replace")[-2000:]

    def check_alive(self) -> None:
        """Raise if a worker exited that was not stopped on purpose."""
        for proc in self.procs:
            if proc.poll() is not None and proc.returncode not in (0, -signal.SIGKILL):
                raise BenchmarkError(
                    f"worker {proc.pid} exited with {proc.returncode}:\n{self.log_of(proc)}"
                )

    async def ready(self, store: Any, count: int) -> dict[int, str]:
        """Wait until ``count`` workers are registered; their ids by pid."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            self.check_alive()
            workers = await store.list_workers()
            if len(workers) >= count:
                return {int(w.info["pid"]): w.worker_id for w in workers}
            if time.monotonic() > deadline:
                logs = "\n".join(self.log_of(proc) for proc in self.procs)
                raise BenchmarkError(f"{count} workers did not register in time:\n{logs}")
            await anyio.sleep(0.05)

    def cpu(self) -> float | None:
        """The CPU seconds the live workers have used so far (``None`` without /proc)."""
        total = 0.0
        for proc in self.procs:
            if proc.poll() is None:
                seconds = cpu_seconds(proc.pid)
                if seconds is None:
                    return None
                total += seconds
        return total

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL one worker (a crash) and reap it."""
        proc.kill()
        proc.wait()

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM every live worker (they hand their runs back) and wait for them."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in self._logs:
            log.close()

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
