"""The simulator: scripted step outcomes, a virtual clock, crash-and-resume at tick k."""

from __future__ import annotations

import time

import pytest

from tickwork import Event, StartEvent, StopEvent, Workflow, step
from tickwork.errors import WorkflowTimeoutError
from tickwork.retry_policy import retry_policy, stop_after_attempt, wait_fixed
from tickwork.testing import Scripted, Simulator, fail_times


class Hop(Event):
    n: int


class Item(Event):
    n: int


class Done(Event):
    n: int


class Fifty(Workflow):
    """A 50-step sequential workflow: ``hop`` runs 50 times."""

    @step
    async def begin(self, ev: StartEvent) -> Hop:
        return Hop(n=0)

    @step(retry_policy=retry_policy(wait=wait_fixed(1), stop=stop_after_attempt(3)))
    async def hop(self, ev: Hop) -> Hop | StopEvent:
        if ev.n == 49:
            return StopEvent(result=ev.n + 1)
        return Hop(n=ev.n + 1)


class Fan(Workflow):
    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=i) for i in range(ev.count)]

    @step(num_workers=3)
    async def work(self, ev: Item) -> Done:
        return Done(n=ev.n * 2)

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        return StopEvent(result=sorted(e.n for e in events))


def test_a_50_step_workflow_with_3_crash_points_finishes_with_the_same_result() -> None:
    started = time.perf_counter()
    plain = Simulator(Fifty(timeout=None)).run()
    crashed = Simulator(Fifty(timeout=None)).run(crash_after=[10, 30, 45])
    assert plain.result == crashed.result == 50
    assert crashed.crashes == 3
    assert plain.crashes == 0
    # Only the invocation in flight at each crash runs again.
    assert crashed.executions["hop"] <= plain.executions["hop"] + 3
    assert time.perf_counter() - started < 5  # generous; it takes milliseconds


def test_scripted_durations_drive_the_virtual_clock() -> None:
    sim = Simulator(Fan(timeout=None)).script("work", lambda ev: Done(n=ev.n), seconds=2.0)
    outcome = sim.run(count=6)
    assert outcome.result == [0, 1, 2, 3, 4, 5]
    # 6 items, 3 workers, 2 virtual seconds each: two waves.
    assert outcome.elapsed == pytest.approx(4.0)


def test_scripted_failures_go_through_the_retry_policy_in_virtual_time() -> None:
    sim = Simulator(Fifty(timeout=None))
    sim.script("hop", fail_times(2, ValueError("flaky"), then=lambda ev: StopEvent(result="ok")))
    outcome = sim.run()
    assert outcome.result == "ok"
    assert outcome.executions["hop"] == 3
    assert outcome.elapsed == pytest.approx(2.0)  # two retries, 1 virtual second each


def test_exhausted_retries_fail_the_run_with_the_scripted_error() -> None:
    sim = Simulator(Fifty(timeout=None)).script("hop", Scripted(error=ValueError("down")))
    outcome = sim.run()
    with pytest.raises(ValueError, match="down"):
        _ = outcome.result
    assert type(outcome.published[-1]).__name__ == "WorkflowFailedEvent"


def test_the_run_timeout_fires_in_virtual_time() -> None:
    sim = Simulator(Fan(timeout=10)).script("work", lambda ev: Done(n=ev.n), seconds=30)
    outcome = sim.run(count=2)
    with pytest.raises(WorkflowTimeoutError):
        _ = outcome.result
    assert outcome.elapsed == pytest.approx(10.0)


def test_fan_out_survives_crashes_at_every_tick() -> None:
    expected = Simulator(Fan(timeout=None)).run(count=5).result
    for k in range(1, 25):
        assert Simulator(Fan(timeout=None)).run(count=5, crash_after=[k]).result == expected
