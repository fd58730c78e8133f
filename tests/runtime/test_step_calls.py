"""How the runtime calls a step body: by position when the body's own parameters are
exactly its event (and context), by keyword otherwise, with the same bindings either
way; and the ids the reducer mints keep the formats of ``step_id``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.runtime.control_loop._tx import mint_work_item, open_tx, start_invocation
from tickwork.runtime.control_loop.reduce import initial_state
from tickwork.runtime.step_worker import (
    CONTEXT_FIRST,
    EVENT_FIRST,
    EVENT_ONLY,
    NO_POSITIONAL,
    StepInvokers,
)
from tickwork.runtime.types.commands import RunWorker
from tickwork.runtime.types.state import WorkItem
from tickwork.runtime.types.step_id import invocation_id, work_item_id


class Ping(Event):
    n: int


def keywords_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A ``(*args, **kwargs)`` wrapper that records what reached it by keyword."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        seen.append(sorted(kwargs))
        return await fn(*args, **kwargs)

    return wrapper


seen: list[list[str]] = []


class Shapes(Workflow):
    @step
    async def start(self, ev: StartEvent) -> Ping:
        return Ping(n=1)

    @step
    async def ctx_first(self, ctx: Context, ev: Ping) -> StopEvent:
        await ctx.store.set("first", ev.n)
        return StopEvent(result=(type(ctx).__name__, ev.n))


class EventFirst(Workflow):
    @step
    async def start(self, ev: StartEvent, ctx: Context) -> StopEvent:
        await ctx.store.set("x", 1)
        return StopEvent(result=(type(ev).__name__, await ctx.store.get("x")))


class Wrapped(Workflow):
    @step
    @keywords_only
    async def start(self, ev: StartEvent) -> StopEvent:
        return StopEvent(result="wrapped")


def _shapes(workflow: Workflow) -> dict[str, int]:
    config = workflow._reducer_config()
    invokers = StepInvokers(workflow._step_table, config)
    return {name: invokers[name].positional for name in config.steps}


def test_call_shapes_follow_the_body_signature() -> None:
    assert _shapes(Shapes(timeout=None)) == {"start": EVENT_ONLY, "ctx_first": CONTEXT_FIRST}
    assert _shapes(EventFirst(timeout=None)) == {"start": EVENT_FIRST}
    # A wrapper's own signature is (*args, **kwargs): it is called by keyword.
    assert _shapes(Wrapped(timeout=None)) == {"start": NO_POSITIONAL}


@pytest.mark.anyio
async def test_positional_calls_bind_the_event_and_the_context() -> None:
    assert await Shapes(timeout=None).run() == ("Context", 1)
    assert await EventFirst(timeout=None).run() == ("StartEvent", 1)


@pytest.mark.anyio
async def test_a_keyword_wrapper_still_gets_keywords() -> None:
    seen.clear()
    assert await Wrapped(timeout=None).run() == "wrapped"
    assert seen == [["ev"]]


def test_minted_ids_keep_the_step_id_formats() -> None:
    tx = open_tx(initial_state(Shapes(timeout=None)._reducer_config()), 0.0)
    assert [mint_work_item(tx), mint_work_item(tx)] == [work_item_id(0), work_item_id(1)]
    start_invocation(tx, "start", WorkItem(mint_work_item(tx), "start", StartEvent()))
    (command,) = tx.commands
    assert isinstance(command, RunWorker)
    assert command.invocation.invocation_id == invocation_id(0)
