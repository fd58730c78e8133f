"""Snapshots of a live run taken one after another (each reusing what the previous ones
encoded) equal snapshots taken fresh, whatever the caller did to the earlier ones.

The run has a fan-out in flight, a join buffering results, a state store written by the
steps and a step parked on a waiter, so every part of a snapshot changes along the way.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.events import StepState, StepStateChanged
from tickwork.serde.snapshot import encode_snapshot


class Part(Event):
    number: int
    label: str = ""
    flag: bool | None = None


class Made(Event):
    number: int
    weight: float = 0.5  # not a plain field: written by pydantic


class Watch(Event):
    pass


class Reply(Event):
    text: str


class Mixed(Workflow):
    @step
    async def split(self, ctx: Context, ev: StartEvent) -> list[Part] | Watch:
        await ctx.store.set("size", ev.size)
        ctx.send_event(Watch())
        return [Part(number=i, label=f"é{i}", flag=i % 2 == 0) for i in range(ev.size)]

    @step(num_workers=3)
    async def work(self, ctx: Context, ev: Part) -> Made:
        await ctx.store.set("last", ev.number)
        return Made(number=ev.number, weight=ev.number / 3)

    @step
    async def join(self, ctx: Context, made: list[Made]) -> StopEvent:
        reply = await ctx.wait_for_event(Reply, waiter_id="ready", timeout=None)
        return StopEvent(result=(sum(m.number for m in made), reply.text))

    @step
    async def watch(self, ctx: Context, ev: Watch) -> None:
        await ctx.wait_for_event(Reply, waiter_id="watch", timeout=None)
        return None


def _fresh(ctx: Context[Any]) -> dict[str, Any]:
    """The snapshot of the run's current state, encoded without a cache."""
    ser = ctx._serializer
    return encode_snapshot(ctx._current_run_state(), ser, ctx.store.to_dict(ser))


def _vandalize(snapshot: dict[str, Any]) -> None:
    """What a caller may do to a snapshot it holds: change its own maps."""
    snapshot["workers"].pop("work", None)
    snapshot["workers"]["split"] = {}
    snapshot["streams"].clear()
    snapshot["collection_release_states"]["junk"] = {}
    snapshot["deliveries"].append("junk")
    snapshot["state"] = None
    snapshot.pop("journal_seq")
    snapshot["is_running"] = "junk"


@pytest.mark.anyio
async def test_snapshots_taken_after_many_others_equal_fresh_ones() -> None:
    wf = Mixed(timeout=None)
    handler = wf.run(size=30)
    checked = frames = 0
    waiting = False
    held: list[tuple[dict[str, Any], str]] = []
    async for event in handler.stream_events(expose_internal=True):
        if not (isinstance(event, StepStateChanged) and event.step_state is StepState.NOT_RUNNING):
            continue
        ctx = handler.ctx
        for attempt in range(2):  # the second of the same state is made from the first's
            snap = ctx.to_dict()
            fresh = _fresh(ctx)
            assert snap == fresh
            assert json.dumps(snap) == json.dumps(fresh)
            if attempt == 0:
                _vandalize(snap)
            else:
                held.append((snap, json.dumps(snap)))
        checked += 1
        state = ctx._current_run_state()
        if checked == 8:
            assert state.steps["watch"].waiters and not state.steps["join"].waiters
            ctx.send_event(Reply(text="early"))  # the fan-out goes on without waiters
        if not (state.steps["watch"].waiters or state.steps["join"].waiters):
            frames += 1  # the second snapshot was made from the first's maps
        if state.steps["join"].waiters:
            waiting = True
            last = ctx.to_dict()
            assert last["state"] is not None and last["workers"]["join"]["collected_waiters"]
            restored = Context.from_dict(wf, json.loads(json.dumps(last)))
            assert restored.to_dict() == last
            handler.ctx.send_event(Reply(text="go"))
    assert await handler == (sum(range(30)), "go")
    assert waiting and checked > 30 and frames > 10
    # Later snapshots did not change the parts earlier ones share with them.
    for snap, text in held:
        assert json.dumps(snap) == text


@pytest.mark.anyio
async def test_editing_a_snapshot_leaves_the_next_one_of_the_same_state_whole() -> None:
    wf = Mixed(timeout=None)
    handler = wf.run(size=5)
    replied = False
    async for event in handler.stream_events(expose_internal=True):
        if isinstance(event, StepStateChanged) and event.step_state is StepState.NOT_RUNNING:
            ctx = handler.ctx
            first = ctx.to_dict()
            text = json.dumps(first)
            _vandalize(first)
            second = ctx.to_dict()
            assert json.dumps(second) == text
            assert second == _fresh(ctx)
            state = ctx._current_run_state()
            if state.steps["watch"].waiters and not replied:
                replied = True
                ctx.send_event(Reply(text="early"))
            if state.steps["join"].waiters:
                ctx.send_event(Reply(text="go"))
    assert await handler == (sum(range(5)), "go")
