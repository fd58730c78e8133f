"""The worker's fast paths agree with the slow ones they stand for.

- A step's worker task is named after its invocation id, whichever way it was started.
"""

from __future__ import annotations

import asyncio

import anyio
import pytest

from tickwork import Event, StartEvent, StopEvent, Workflow, step
from tickwork.runtime.step_scope import CURRENT_SCOPE, StepScope

pytestmark = pytest.mark.anyio


class Ping(Event):
    n: int


def _scope() -> StepScope:
    ref = CURRENT_SCOPE.get()
    scope = ref() if ref is not None else None
    assert scope is not None
    return scope


class Named(Workflow):
    names: list[tuple[str, str]]

    def _record(self) -> None:
        self.names.append((anyio.get_current_task().name, _scope().invocation.invocation_id))

    @step
    async def begin(self, ev: StartEvent) -> Ping:
        self._record()
        return Ping(n=0)

    @step
    async def hop(self, ev: Ping) -> Ping | StopEvent:
        self._record()
        if ev.n >= 2:
            return StopEvent(result=ev.n)
        return Ping(n=ev.n + 1)


async def test_a_step_task_is_named_after_its_invocation(anyio_backend: str) -> None:
    workflow = Named(timeout=None)
    workflow.names = []
    assert await workflow.run() == 2
    assert len(workflow.names) == 4
    assert all(name == invocation_id for name, invocation_id in workflow.names)
    if anyio_backend != "asyncio":
        return
    # Through the pool (a task factory), as through the loop's own start.
    loop = asyncio.get_running_loop()
    loop.set_task_factory(lambda loop, coro, **kwargs: asyncio.Task(coro, loop=loop, **kwargs))
    try:
        workflow.names = []
        assert await workflow.run() == 2
    finally:
        loop.set_task_factory(None)
    assert len(workflow.names) == 4
    assert all(name == invocation_id for name, invocation_id in workflow.names)
