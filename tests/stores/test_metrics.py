"""``tickwork.stores.metrics``: a durable run skips measuring its commits while no
meter provider would receive the value, and records them once one is installed.

The provider is process-global and can be set once, so the check runs in a child
interpreter (under asyncio and trio there).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

_CHILD = """
import sys, tempfile
from pathlib import Path
import anyio
from tickwork import StartEvent, StopEvent, Workflow, step
from tickwork.journal import SqliteJournal
from tickwork.stores import metrics

NAME = "tickwork.journal.append_latency"


class Two(Workflow):
    @step
    async def only(self, ev: StartEvent) -> StopEvent:
        return StopEvent(result=ev.value + 1)


async def main(folder: str, name: str) -> None:
    store = SqliteJournal(Path(folder) / (name + ".db"))
    try:
        assert await Two(timeout=None, journal=store).run(value=1) == 2
    finally:
        store.close()


folder = tempfile.mkdtemp()
assert not metrics.recording(NAME)  # no provider yet: the API would drop the value
anyio.run(main, folder, "before", backend="asyncio")

from opentelemetry import metrics as api
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

reader = InMemoryMetricReader()
api.set_meter_provider(MeterProvider(metric_readers=[reader]))
assert metrics.recording(NAME)
for backend in ("asyncio", "trio"):
    anyio.run(main, folder, backend, backend=backend)
points = [
    point
    for resource in reader.get_metrics_data().resource_metrics
    for scope in resource.scope_metrics
    for metric in scope.metrics
    if metric.name == NAME
    for point in metric.data.data_points
]
# Two runs of two appends each (the session's start, then the step's result).
assert sum(point.count for point in points) == 4, points
print("ok")
"""


def test_commit_latency_is_recorded_once_a_meter_provider_is_installed(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk.metrics")
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
