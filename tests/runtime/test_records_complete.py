"""Records the hot path builds field by field (``new_record``) have every field set.

The loop's ticks, the states and the commands a run's reductions produce are walked
down to their leaves: a field left unset by a site that builds its record without the
class call would be missing here (an ``AttributeError`` later, on a rarer path).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.runtime.control_loop import runner
from tickwork.runtime.types.persistent import PMap, PQueue


class Ping(Event):
    n: int


class Item(Event):
    n: int


class Pings(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> Ping:
        return Ping(n=0)

    @step
    async def ping(self, ev: Ping) -> Ping | Item | None:
        return Ping(n=ev.n + 1) if ev.n < 2 else Item(n=ev.n)

    @step(num_workers=1)
    async def fan(self, ctx: Context, ev: Item) -> StopEvent | None:
        if ev.n < 6:  # the single worker is busy: these queue
            ctx.send_event(Item(n=ev.n + 1))
            ctx.send_event(Item(n=ev.n + 2))
            return None
        return StopEvent(result=ev.n)


class Result(Event):
    n: int


class Members(Workflow):
    """A fan-out whose members join a ``list[E]`` batch while the next ones queue (the
    member phase of ``_routing.join_member_and_refill``)."""

    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=n) for n in range(10)]

    @step(num_workers=2)
    async def work(self, ev: Item) -> Result:
        return Result(n=ev.n)

    @step
    async def join(self, events: list[Result]) -> StopEvent:
        return StopEvent(result=sum(ev.n for ev in events))


def unset_fields(obj: Any, path: str, seen: set[int], out: list[str]) -> None:
    """Append to ``out`` the path of every unset field of a record under ``obj``."""
    if id(obj) in seen or obj is None or isinstance(obj, (str, int, float, type)):
        return
    seen.add(id(obj))
    if dataclasses.is_dataclass(obj):
        for field in dataclasses.fields(obj):
            if not hasattr(obj, field.name):
                out.append(f"{path}.{field.name}")
            else:
                unset_fields(getattr(obj, field.name), f"{path}.{field.name}", seen, out)
    elif isinstance(obj, (PMap, dict)):
        for key, value in obj.items():
            unset_fields(value, f"{path}[{key!r}]", seen, out)
    elif isinstance(obj, (PQueue, list, tuple)):
        for index, value in enumerate(obj):
            unset_fields(value, f"{path}[{index}]", seen, out)


@pytest.mark.anyio
@pytest.mark.parametrize(("flow", "result"), [(Pings, 6), (Members, 45)])
async def test_ticks_states_and_commands_have_every_field(
    monkeypatch: pytest.MonkeyPatch, flow: type[Workflow], result: int
) -> None:
    unset: list[str] = []
    reduced: list[str] = []
    reduce = runner.reduce

    def checking_reduce(state: Any, tick: Any) -> Any:
        new_state, commands = reduce(state, tick)
        seen: set[int] = set()
        unset_fields(tick, type(tick).__name__, seen, unset)
        unset_fields(new_state, "state", seen, unset)
        unset_fields(commands, "commands", seen, unset)
        reduced.append(type(tick).__name__)
        return new_state, commands

    monkeypatch.setattr(runner, "reduce", checking_reduce)
    assert await flow(timeout=None).run() == result
    assert unset == []
    assert reduced.count("StepResult") >= 6  # the step results went through the check
