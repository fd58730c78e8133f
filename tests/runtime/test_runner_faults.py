"""A runtime bug (never a step's own failure) ends the run with that error, never a hang.

These tests break tickwork's own machinery on purpose, in the worker and in the reducer,
and check that the run ends at once with exactly one outcome: the bug.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import tickwork.runtime.control_loop.runner as runner
import tickwork.runtime.step_worker as step_worker
from tickwork import Event, StartEvent, StopEvent, Workflow, step
from tickwork.runtime.step_scope import StepScope
from tickwork.runtime.types.ticks import StepResult

pytestmark = pytest.mark.anyio


class Middle(Event):
    n: int


class TwoSteps(Workflow):
    @step
    async def first(self, ev: StartEvent) -> Middle:
        return Middle(n=1)

    @step
    async def second(self, ev: Middle) -> StopEvent:
        return StopEvent(result=ev.n + 1)


class Boom(RuntimeError):
    pass


async def test_a_bug_in_the_worker_machinery_fails_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken_scope(cls: type) -> Any:
        if cls is StepScope:
            raise Boom("the step scope could not be built")
        return object.__new__(cls)  # the worker's other records (its outcome, its tick)

    # The worker builds its step scope with ``new_record`` (``open_scope`` inlined).
    monkeypatch.setattr(step_worker, "new_record", broken_scope)
    with anyio.fail_after(5):
        with pytest.raises(Boom, match="step scope could not be built"):
            await TwoSteps(timeout=None).run()


async def test_a_bug_in_the_reducer_during_an_inline_drain_fails_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_reduce = runner.reduce
    calls: list[str] = []

    def reduce_that_breaks_on_the_second_result(state: Any, tick: Any) -> Any:
        if isinstance(tick, StepResult):
            calls.append(tick.step)
            if tick.step == "second":
                raise Boom("reducer bug")
        return real_reduce(state, tick)

    monkeypatch.setattr(runner, "reduce", reduce_that_breaks_on_the_second_result)
    handler = TwoSteps(timeout=None).run()
    with anyio.fail_after(5):
        with pytest.raises(Boom, match="reducer bug"):
            await handler
    assert calls == ["first", "second"]
    assert handler.is_done()


async def test_runs_work_again_once_the_bug_is_gone() -> None:
    with anyio.fail_after(5):
        assert await TwoSteps(timeout=None).run() == 2
