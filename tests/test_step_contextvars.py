"""Contextvars across a run's invocations (api.md §19.3), and cancelling a run mid-chain.

Each invocation runs in its own copy of the context captured by ``run()``, whichever
worker task runs it: under asyncio, a step whose result dispatches the next step hands
it to its own task (see ``AsyncioPool``), so these tests chain many steps.

Every async test runs under asyncio and trio (see ``conftest.py``).
"""

from __future__ import annotations

import contextlib
import contextvars

import anyio
import pytest

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.errors import WorkflowCancelledByUser

pytestmark = pytest.mark.anyio

_var: contextvars.ContextVar[str] = contextvars.ContextVar("tickwork_test_var", default="unset")


class Hop(Event):
    hop: int
    limit: int


class ToA(Hop):
    pass


class ToB(Hop):
    pass


class Part(Event):
    index: int


class Parts(Event):
    seen: list[str]


class Relay(Workflow):
    """``a`` and ``b`` take turns: each records the value it sees, then sets its own
    (before and after an await), then starts a task that records what it sees."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.seen: list[tuple[str, int, str]] = []

    async def _visit(self, name: str, ev: Hop) -> None:
        self.seen.append((name, ev.hop, _var.get()))
        _var.set(f"{name}{ev.hop}")
        await anyio.sleep(0)
        self.seen.append((name + "-after-await", ev.hop, _var.get()))

        async def child() -> None:
            self.seen.append((name + "-child", ev.hop, _var.get()))
            _var.set("set-by-child")

        async with anyio.create_task_group() as group:
            group.start_soon(child)
        self.seen.append((name + "-after-child", ev.hop, _var.get()))

    @step
    async def begin(self, ev: StartEvent) -> ToA:
        self.seen.append(("begin", -1, _var.get()))
        _var.set("begin")
        return ToA(hop=0, limit=ev.hops)

    @step
    async def a(self, ev: ToA) -> ToB | StopEvent:
        await self._visit("a", ev)
        return ToB(hop=ev.hop + 1, limit=ev.limit) if ev.hop + 1 < ev.limit else StopEvent()

    @step
    async def b(self, ev: ToB) -> ToA | StopEvent:
        await self._visit("b", ev)
        return ToA(hop=ev.hop + 1, limit=ev.limit) if ev.hop + 1 < ev.limit else StopEvent()


async def _relay(value: str | None, hops: int) -> list[tuple[str, int, str]]:
    workflow = Relay(timeout=10)
    token = _var.set(value) if value is not None else None
    try:
        handler = workflow.run(hops=hops)
    finally:
        if token is not None:
            _var.reset(token)
    await handler
    return workflow.seen


@pytest.mark.parametrize("outer", [None, "outer"])
async def test_each_step_of_a_chain_sees_the_run_context_not_the_previous_step(
    outer: str | None,
) -> None:
    seen = await _relay(outer, hops=6)
    expected = outer or "unset"
    entries = [(name, hop, value) for name, hop, value in seen if "-" not in name]
    assert [name for name, _, _ in entries] == ["begin", "a", "b", "a", "b", "a", "b"]
    # What one invocation set never leaks into the next: each sees run()'s context.
    assert all(value == expected for _, _, value in entries)
    for name, hop, value in seen:
        if name.endswith("-after-await"):
            assert value == f"{name[0]}{hop}"  # its own value survives its awaits
        elif name.endswith("-child"):
            assert value == f"{name[0]}{hop}"  # a task it starts inherits its context
        elif name.endswith("-after-child"):
            assert value == f"{name[0]}{hop}"  # and what that task sets stays there
    assert _var.get() == "unset"


class Spread(Workflow):
    """A fan-out from a step's result: several invocations dispatched by one result."""

    @step
    async def begin(self, ev: StartEvent) -> Parts:
        _var.set("begin")
        return Parts(seen=[])

    @step
    async def spread(self, ev: Parts) -> list[Part]:
        _var.set("spread")
        return [Part(index=index) for index in range(4)]

    @step(num_workers=4)
    async def part(self, ctx: Context, ev: Part) -> StopEvent | None:
        before = _var.get()
        _var.set(f"part{ev.index}")
        await anyio.sleep(0.01)
        after = _var.get()
        events = ctx.collect_events(ev, [Part] * 4)
        ctx.write_event_to_stream(Parts(seen=[before, after]))
        if events is None:
            return None
        return StopEvent(result=sorted(event.index for event in events))


async def test_invocations_dispatched_by_one_result_each_have_their_own_context() -> None:
    token = _var.set("outer")
    try:
        handler = Spread(timeout=10).run()
    finally:
        _var.reset(token)
    pairs = [event.seen async for event in handler.stream_events() if isinstance(event, Parts)]
    assert await handler == [0, 1, 2, 3]
    assert {tuple(pair) for pair in pairs} == {("outer", f"part{index}") for index in range(4)}


class Stuck(Workflow):
    """``a`` -> ``b`` -> ``c``; ``c`` waits until it is cancelled."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.entered: list[str] = []
        self.cancelled: list[str] = []

    @step
    async def a(self, ev: StartEvent) -> ToA:
        self.entered.append("a")
        return ToA(hop=0, limit=3)

    @step
    async def b(self, ev: ToA) -> ToB:
        self.entered.append("b")
        return ToB(hop=1, limit=3)

    @step
    async def c(self, ev: ToB) -> StopEvent:
        self.entered.append("c")
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            self.cancelled.append("c")
            raise
        raise AssertionError("unreachable")  # pragma: no cover


async def test_cancelling_a_run_mid_chain_cancels_the_running_step() -> None:
    workflow = Stuck(timeout=10)
    handler = workflow.run()
    with anyio.fail_after(5):
        while workflow.entered != ["a", "b", "c"]:
            await anyio.sleep(0.005)
    await handler.cancel_run()
    with pytest.raises(WorkflowCancelledByUser):
        await handler
    with anyio.fail_after(5):
        while workflow.cancelled != ["c"]:
            await anyio.sleep(0.005)


class SelfCancelling(Workflow):
    """A step that cancels its own asyncio task and swallows it, or returns at once."""

    @step
    async def a(self, ev: StartEvent) -> ToA:
        import asyncio

        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        if ev.swallow:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0)
        return ToA(hop=0, limit=2)

    @step
    async def b(self, ev: ToA) -> StopEvent:
        import asyncio

        await asyncio.sleep(0)  # a cancellation left on its task would end it here
        return StopEvent(result="b ran")


@pytest.mark.parametrize("swallow", [False, True])
async def test_a_step_cancelling_its_own_task_does_not_cancel_the_next_step(
    anyio_backend: str, swallow: bool
) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("cancels its asyncio task")
    with anyio.fail_after(5):
        assert await SelfCancelling(timeout=10).run(swallow=swallow) == "b ran"
