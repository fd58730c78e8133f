"""Under asyncio, a step's worker task is made by the event loop's task factory when it
has one, set before the run or while it goes on (the loop reads the factory per worker:
on asyncio's own loops from its ``_task_factory`` attribute, on any other loop through
``get_task_factory()``).

A task factory is asyncio's alone: under trio these tests are skipped.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

from tickwork import Event, StartEvent, StopEvent, Workflow, step
from tickwork.runtime.control_loop._task_pool import AsyncioPool

pytestmark = pytest.mark.anyio

_var: contextvars.ContextVar[str] = contextvars.ContextVar("tickwork_factory_var", default="unset")


class Hop(Event):
    hop: int
    limit: int


class Hops(Workflow):
    """``hops`` steps in a row; each records the context variable it sees."""

    seen: list[str]

    @step
    async def begin(self, ev: StartEvent) -> Hop:
        return Hop(hop=0, limit=ev.hops)

    @step
    async def hop(self, ev: Hop) -> Hop | StopEvent:
        self.seen.append(_var.get())
        if ev.hop + 1 >= ev.limit:
            return StopEvent(result=ev.hop + 1)
        return Hop(hop=ev.hop + 1, limit=ev.limit)


class _Counting:
    """A task factory that counts the tasks it makes (asyncio's ``Task`` underneath)."""

    def __init__(self) -> None:
        self.made = 0

    def __call__(self, loop: Any, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        self.made += 1
        return asyncio.Task(coro, loop=loop, **kwargs)


def _skip_unless_asyncio(anyio_backend: str) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("a task factory is asyncio's")


async def test_a_task_factory_set_before_the_run_makes_every_worker(anyio_backend: str) -> None:
    _skip_unless_asyncio(anyio_backend)
    loop = asyncio.get_running_loop()
    factory = _Counting()
    workflow = Hops(timeout=None)
    workflow.seen = []
    token = _var.set("run")
    loop.set_task_factory(factory)
    try:
        assert await workflow.run(hops=5) == 5
    finally:
        loop.set_task_factory(None)
        _var.reset(token)
    # begin and five hops, each in a task of the factory's (the run's own task too).
    assert factory.made >= 6
    assert workflow.seen == ["run"] * 5


class _SetsFactory(Workflow):
    """The first step sets a task factory: the steps after it run in its tasks."""

    factory: _Counting

    @step
    async def begin(self, ev: StartEvent) -> Hop:
        asyncio.get_running_loop().set_task_factory(self.factory)
        return Hop(hop=0, limit=ev.hops)

    @step
    async def hop(self, ev: Hop) -> Hop | StopEvent:
        if ev.hop + 1 >= ev.limit:
            return StopEvent(result=ev.hop + 1)
        return Hop(hop=ev.hop + 1, limit=ev.limit)


async def test_a_task_factory_set_during_the_run_makes_the_later_workers(
    anyio_backend: str,
) -> None:
    _skip_unless_asyncio(anyio_backend)
    workflow = _SetsFactory(timeout=None)
    workflow.factory = _Counting()
    try:
        assert await workflow.run(hops=4) == 4
    finally:
        asyncio.get_running_loop().set_task_factory(None)
    assert workflow.factory.made == 4  # the four hops, not the first step


class _OwnFactoryLoop(asyncio.SelectorEventLoop):
    """A loop that keeps its task factory its own way (as uvloop does, say)."""

    def __init__(self) -> None:
        super().__init__()
        self.own_factory: Any = None

    def set_task_factory(self, factory: Any) -> None:
        self.own_factory = factory

    def get_task_factory(self) -> Any:
        return self.own_factory

    def create_task(self, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        if self.own_factory is None:
            return super().create_task(coro, **kwargs)
        context = kwargs.pop("context", None)
        task = self.own_factory(self, coro, context=context)
        if kwargs.get("name") is not None:
            task.set_name(kwargs["name"])
        return task  # type: ignore[no-any-return]


def test_a_loop_keeping_its_own_factory_gets_its_workers_from_it() -> None:
    loop = _OwnFactoryLoop()
    factory = _Counting()

    async def main() -> Any:
        assert AsyncioPool().task_maker() == (None, None)  # not read as an attribute
        workflow = Hops(timeout=None)
        workflow.seen = []
        loop.set_task_factory(factory)
        return await workflow.run(hops=3)

    try:
        assert loop.run_until_complete(main()) == 3
    finally:
        loop.close()
    assert factory.made >= 4  # begin and three hops


async def test_asyncio_s_own_loop_is_read_as_an_attribute(anyio_backend: str) -> None:
    _skip_unless_asyncio(anyio_backend)
    task_class, loop = AsyncioPool().task_maker()
    assert task_class is asyncio.Task
    assert loop is asyncio.get_running_loop()
