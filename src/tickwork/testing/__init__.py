"""Testing helpers: run workflows in tests, and unit-test the reducer without a loop."""

from __future__ import annotations

from tickwork.testing.reducer_kit import ReducerKit
from tickwork.testing.runner import WorkflowTestResult, WorkflowTestRunner

__all__ = ["ReducerKit", "WorkflowTestResult", "WorkflowTestRunner"]
