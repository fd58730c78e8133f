"""The reducer's hot-path shortcuts give what the general code gives.

Each shortcut here (a table lookup for a returned value's kind, an id's digits formatted
once, a returned list's stop found once per class) has a slower general form; these
tests drive both and compare.
"""

from __future__ import annotations

from typing import Any

from tickwork import Event, StartEvent, StopEvent, Workflow, step
from tickwork.events import HumanResponseEvent, InputRequiredEvent
from tickwork.runtime.control_loop._tx import (
    FRESH_STEP,
    finish_invocation,
    open_tx,
    start_invocation,
)
from tickwork.runtime.types.commands import CompleteRun, PublishStepState, RunWorker
from tickwork.runtime.types.kinds import (
    IS_INPUT_REQUIRED,
    IS_STOP,
    RETURNED,
    RETURNED_EVENT,
    RETURNED_INPUT_REQUIRED,
    RETURNED_LIST,
    RETURNED_NONE,
    RETURNED_STOP,
    ReturnedTable,
)
from tickwork.runtime.types.state import NOTHING_HELD, WorkItem
from tickwork.runtime.types.step_id import invocation_id, work_item_id
from tickwork.testing import ReducerKit

from .reducer_helpers import fingerprint


class A(Event):
    n: int = 0


class Done(StopEvent):
    pass


class Ask(InputRequiredEvent):
    pass


class B(Event):
    pass


class Events(list[Any]):
    pass


def _checked_kind(value: Any) -> int:
    """The kind as the reducer told it before the table: ``isinstance(value, list)``,
    then ``IS_STOP``, then ``value is None``, then ``IS_INPUT_REQUIRED``."""
    if isinstance(value, list):
        return RETURNED_LIST
    if IS_STOP[type(value)]:
        return RETURNED_STOP
    if value is None:
        return RETURNED_NONE
    if IS_INPUT_REQUIRED[type(value)]:
        return RETURNED_INPUT_REQUIRED
    return RETURNED_EVENT


def test_the_returned_table_tells_the_kinds_the_checks_told() -> None:
    values = [
        A(),
        StopEvent(),
        Done(),
        None,
        Ask(),
        HumanResponseEvent(),
        [],
        [A()],
        Events([Done()]),
        3,
        "text",
    ]
    for value in values:
        assert RETURNED[type(value)] == _checked_kind(value), value
        assert ReturnedTable()[type(value)] == _checked_kind(value), value  # a fresh one


class Chain(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> A:
        return A()

    @step
    async def hop(self, ev: A) -> A | Done:
        return A(n=ev.n + 1)


class Fan(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> list[A]:
        return [A(n=n) for n in range(3)]

    @step(num_workers=1)
    async def hop(self, ev: A) -> B | None:
        return None

    @step
    async def side(self, ev: B) -> Done | None:
        return None


def _started(kit: ReducerKit, commands: list[Any]) -> list[tuple[str, str]]:
    return [
        (c.invocation.work_item_id, c.invocation.invocation_id)
        for c in commands
        if isinstance(c, RunWorker)
    ]


def test_a_hop_takes_its_ids_from_the_run_s_counters() -> None:
    """A chain's hop mints its work item and its invocation from the same number (its
    digits formatted once); after a fan-out the numbers differ and each id still takes
    its own counter's."""
    kit = ReducerKit(Chain(timeout=None))
    kit.start()
    for _ in range(5):
        (running,) = kit.running()
        before = kit.state
        started = _started(kit, kit.complete(running, A(n=1)))
        assert before.work_item_seq == before.invocation_seq
        assert started == [
            (work_item_id(before.work_item_seq), invocation_id(before.invocation_seq))
        ]

    kit = ReducerKit(Fan(timeout=None))
    kit.start()
    (begin,) = kit.running("begin")
    kit.complete(begin, [A(n=n) for n in range(3)])
    (hop,) = kit.running("hop")
    before = kit.state
    # hop's next items are queued; the B it returns goes to a free step: its work item
    # number is ahead of the invocation number.
    started = _started(kit, kit.complete(hop, B()))
    assert before.work_item_seq != before.invocation_seq
    assert started[0] == (
        work_item_id(before.work_item_seq),
        invocation_id(before.invocation_seq),
    )


class Lister(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> list[A | Done]:
        return []

    @step
    async def hop(self, ev: A) -> None:
        return None


def test_a_returned_list_ends_the_run_with_its_first_stop() -> None:
    first, second = Done(result=1), Done(result=2)
    for events, stop in [
        ([A(), first, A(), second], first),
        ([second, first], second),
        ([A(), A()], None),
    ]:
        kit = ReducerKit(Lister(timeout=None))
        kit.start()
        (begin,) = kit.running("begin")
        commands = kit.complete(begin, events)
        completed = [c.stop_event for c in commands if isinstance(c, CompleteRun)]
        if stop is None:
            assert kit.state.status == "running"
            assert completed == []
        else:
            assert kit.state.status == "completed"
            assert len(completed) == 1 and completed[0] is stop


def test_a_hop_frees_its_step_as_finish_invocation_does() -> None:
    """A hop's step held nothing but the invocation that finished: the step-result
    processor spells out ``finish_invocation``'s first case (the step fresh again, one
    invocation fewer running, its NOT_RUNNING first); it gives what the function gives."""
    kit = ReducerKit(Chain(timeout=None))
    kit.start()
    for value in [A(n=1), A(n=2), None]:
        (running,) = kit.running()
        before = kit.state
        commands = kit.complete(running, value)
        tx = open_tx(before, 0.0)
        held = finish_invocation(tx, running, True, type(value), True, value)
        assert held is NOTHING_HELD and tx.steps["hop"] is FRESH_STEP
        assert isinstance(commands[0], PublishStepState)
        assert fingerprint(commands[0]) == fingerprint(tx.commands[0])
        if value is None:  # nothing started after it: the same step and counts
            assert kit.state.steps["hop"] is FRESH_STEP
            assert (kit.state.running, kit.state.queued) == (tx.running, tx.queued)
        else:  # the A it returned started the step again, from fresh
            assert kit.state.running == tx.running + 1


def test_a_hop_starts_its_step_as_start_invocation_does() -> None:
    """The event a hop returns goes to an idle, empty step: ``deliver_event`` spells out
    ``start_invocation``'s first case (the step's one-entry in-flight map, slot 0, its
    RUNNING); it gives what the function gives for the same work item."""
    kit = ReducerKit(Chain(timeout=None))
    kit.start()
    for n in range(3):
        kit.advance(1.5)
        (running,) = kit.running()
        before = kit.state
        commands = kit.complete(running, A(n=n))
        (started,) = [c.invocation for c in commands if isinstance(c, RunWorker)]
        tx = open_tx(before, kit.now)
        finish_invocation(tx, running, True, A, True, None)
        assert tx.steps["hop"] is FRESH_STEP
        tx.work_item_seq += 1  # the work item deliver_event minted
        item = WorkItem(work_item_id=started.work_item_id, step="hop", event=started.event)
        start_invocation(tx, "hop", item)
        assert fingerprint(kit.state.steps["hop"]) == fingerprint(tx.steps["hop"])
        assert fingerprint(commands[-1]) == fingerprint(tx.commands[-1])
        assert (kit.state.running, kit.state.invocation_seq, kit.state.work_item_seq) == (
            tx.running,
            tx.invocation_seq,
            tx.work_item_seq,
        )
