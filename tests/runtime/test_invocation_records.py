"""An ``Invocation`` carries its work item's fields (one record per dispatch), and a
step's rarely-set parts sit in a shared side record (``StepHeld``): neither changes
what a snapshot holds.

``data/snapshot_before_fold.json`` is the snapshot of ``build_state()`` (a run with
invocations in flight, a keyed send recorded, a queued retry, a queued delivery and a
parked waiter) as the code before these changes encoded it: ``json.dumps(encode(
build_state()), indent=1, sort_keys=True)``, this module's name written ``__MODULE__``.
Today's code must encode the same state to the same dictionary, and load that snapshot
back to a state that encodes to it again.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.runtime.types.persistent import PMap, PQueue
from tickwork.runtime.types.state import (
    NOTHING_HELD,
    Invocation,
    RunState,
    StepRunState,
    WorkItem,
)
from tickwork.serde.serializers import JsonSerializer
from tickwork.serde.snapshot import encode_snapshot
from tickwork.serde.snapshot_decode import decode_snapshot
from tickwork.testing.reducer_kit import ReducerKit

FIXTURE = Path(__file__).parent / "data" / "snapshot_before_fold.json"
SER = JsonSerializer()


class Go(Event):
    n: int


class Ask(Event):
    n: int


class Reply(Event):
    n: int


class Flow(Workflow):
    @step
    async def begin(self, ctx: Context, ev: StartEvent) -> None:
        ctx.send_event(Go(n=1))
        ctx.send_event(Go(n=2))
        ctx.send_event(Ask(n=3))
        ctx.send_event(Go(n=4))

    @step(num_workers=1)
    async def work(self, ev: Go) -> StopEvent:
        return StopEvent(result=ev.n)

    @step
    async def ask(self, ctx: Context, ev: Ask) -> StopEvent:
        reply = await ctx.wait_for_event(Reply, requirements={"n": ev.n}, timeout=30)
        return StopEvent(result=reply.n)


def run_kit() -> ReducerKit:
    """The run: ``begin`` sends four events (keyed), ``work`` fails once with a delayed
    retry and takes the next delivery while a third waits for its only slot, ``ask``
    parks in a waiter."""
    kit = ReducerKit(Flow())
    kit.start()
    (begin,) = kit.running("begin")
    kit.advance(1)
    kit.send_from(begin, 0, Go(n=1))
    kit.send_from(begin, 1, Go(n=2))
    kit.send_from(begin, 2, Ask(n=3))
    kit.send_from(begin, 3, Go(n=4))
    (first,) = kit.running("work")
    kit.advance(1)
    kit.fail(first, ValueError("boom"), retry_delay=5.0)
    (ask,) = kit.running("ask")
    kit.advance(1)
    kit.suspend(ask, Reply, "w", waiter_event=None, requirements={"n": 3}, timeout=30)
    return kit


def build_state() -> RunState:
    return run_kit().state


def encode(state: RunState) -> dict[str, Any]:
    """The snapshot of ``state``, as a JSON round trip gives it (tuples become lists)."""
    snapshot: dict[str, Any] = json.loads(json.dumps(encode_snapshot(state, SER, None)))
    return snapshot


def written_before() -> dict[str, Any]:
    """The fixture, its event classes named as this module's (its name depends on how
    the tests are run)."""
    text = FIXTURE.read_text().replace("__MODULE__.", f"{Go.__module__}.")
    written: dict[str, Any] = json.loads(text)
    return written


def test_the_snapshot_is_the_one_the_code_before_wrote() -> None:
    assert encode(build_state()) == written_before()


def test_the_snapshot_the_code_before_wrote_loads_and_encodes_alike() -> None:
    written = written_before()
    kit = run_kit()
    loaded = decode_snapshot(written, kit.config, SER)
    assert encode(loaded) == written
    # the work in flight is what the live run had
    assert {n: set(s.in_progress) for n, s in loaded.steps.items()} == {
        n: set(s.in_progress) for n, s in kit.state.steps.items()
    }


def _records(obj: Any, path: str, out: list[tuple[str, Any]]) -> None:
    """Every record under ``obj`` with its path."""
    if isinstance(obj, StepRunState):
        out.append((path, obj))
        for name in ("queue", "in_progress", "held"):
            _records(getattr(obj, name), f"{path}.{name}", out)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out.append((path, obj))
        for field in dataclasses.fields(obj):
            if field.name != "config":
                _records(getattr(obj, field.name), f"{path}.{field.name}", out)
    elif isinstance(obj, PMap):
        for key, value in obj.items():
            _records(value, f"{path}[{key!r}]", out)
    elif isinstance(obj, PQueue):
        for index, value in enumerate(obj):
            _records(value, f"{path}[{index}]", out)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            _records(value, f"{path}[{key!r}]", out)


def test_only_in_flight_maps_hold_invocations() -> None:
    """A work item that outlives its invocation (a queued retry, a waiter's) is a plain
    ``WorkItem``: a record the state keeps is never an invocation someone may still
    complete in place."""
    kit = run_kit()
    found: list[tuple[str, Any]] = []
    _records(kit.state, "state", found)
    invocations = [path for path, record in found if type(record) is Invocation]
    assert invocations and all(".in_progress[" in path for path in invocations)
    items = [path for path, record in found if type(record) is WorkItem]
    assert any(".queue[" in path for path in items)
    assert any(".waiters[" in path for path in items)
    (retry, queued) = kit.queued("work")
    assert (type(retry), retry.attempts, retry.not_before) == (WorkItem, 1, 1007.0)
    assert (type(queued), queued.event) == (WorkItem, Go(n=4))


def test_an_invocation_gives_its_work_item_as_a_plain_record() -> None:
    kit = run_kit()
    (running,) = kit.running("work")
    item = running.item
    assert type(item) is WorkItem
    assert item == running.work_item()
    assert (item.work_item_id, item.step, item.event) == (
        running.work_item_id,
        "work",
        running.event,
    )


def test_a_step_holding_nothing_shares_the_empty_side_record() -> None:
    kit = run_kit()
    steps = kit.state.steps
    assert steps["work"].held is NOTHING_HELD
    assert steps["ask"].held is not NOTHING_HELD and steps["ask"].waiters.size == 1
    assert StepRunState(queue=steps["work"].queue).held is NOTHING_HELD
