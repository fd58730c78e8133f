"""Testing helpers: run workflows in tests, and unit-test the reducer without a loop."""

from __future__ import annotations

from tickwork.testing.reducer_kit import ReducerKit
from tickwork.testing.runner import WorkflowTestResult, WorkflowTestRunner
from tickwork.testing.simulator import Scripted, SimulationOutcome, Simulator, fail_times

__all__ = [
    "ReducerKit",
    "Scripted",
    "SimulationOutcome",
    "Simulator",
    "WorkflowTestResult",
    "WorkflowTestRunner",
    "fail_times",
]
