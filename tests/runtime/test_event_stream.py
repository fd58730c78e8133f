"""The stream buffer's step-state records (``tickwork.runtime.event_stream``)."""

from __future__ import annotations

import functools
import gc
import sys

import anyio
import pytest

from tickwork import Event, StopEvent
from tickwork.events import StepState, StepStateChanged
from tickwork.runtime import event_stream
from tickwork.runtime.event_stream import (
    FINISHED_RECORDS,
    RUNNING_RECORDS,
    EventStream,
    finished_record,
    materialize,
    running_record,
    step_state_record,
)
from tickwork.runtime.types.commands import PublishStepState, RunWorker
from tickwork.runtime.types.state import Invocation, WorkItem


class Ping(Event):
    n: int = 0


class Pong(Event):
    pass


def _run_worker(slot: int = 3) -> RunWorker:
    item = WorkItem("wi-1", "echo", Ping(n=1))
    return RunWorker(Invocation("inv-1", "echo", slot, item, 1.0))


def test_a_record_reads_back_as_the_event_model_construct_would_build() -> None:
    finished = PublishStepState("echo", "not_running", "3", Ping, Pong, True, Pong())
    for command, expected in [
        (
            _run_worker(),
            StepStateChanged.model_construct(
                name="echo",
                step_state=StepState.RUNNING,
                worker_id="3",
                input_event_name="Ping",
                output_event_name=None,
            ),
        ),
        (
            finished,
            StepStateChanged.model_construct(
                name="echo",
                step_state=StepState.NOT_RUNNING,
                worker_id="3",
                input_event_name=str(Ping),
                output_event_name=str(Pong),
            ),
        ),
    ]:
        event = materialize(step_state_record(command))
        assert type(event) is StepStateChanged
        assert event == expected
        assert event.model_fields_set == expected.model_fields_set
        assert event.model_dump() == expected.model_dump()
        assert materialize(command) == expected  # commands read back the same way


def test_buffered_records_hold_no_invocation_and_are_not_tracked_by_the_gc() -> None:
    stream = EventStream()
    stream.push(_run_worker())
    stream.push(PublishStepState("echo", "preparing", "<enqueued>", Ping))
    gc.collect()
    records = list(stream._items)
    assert all(type(r) is tuple and not gc.is_tracked(r) for r in records)
    assert not any(isinstance(part, (Invocation, WorkItem, Event)) for r in records for part in r)


def test_user_tuples_pass_through_untouched() -> None:
    stream = EventStream()
    stream.push(("a", "b", "c", "d", "e", "f"))  # six items, like a record, but not one
    assert materialize(stream._items[0]) == ("a", "b", "c", "d", "e", "f")


def test_equal_step_state_changes_share_one_record() -> None:
    stream = EventStream()
    first, second = _run_worker(slot=2), _run_worker(slot=2)
    assert first.invocation is not second.invocation
    finished = PublishStepState("echo", "not_running", "2", Ping, Pong, True, Pong())
    for command in (first, second, finished, finished, _run_worker(slot=5)):
        stream.push(command)
    running_a, running_b, done_a, done_b, other_slot = stream._items
    assert running_a is running_b and done_a is done_b  # a pointer per change, no new tuple
    assert other_slot is not running_a and materialize(other_slot).worker_id == "5"
    assert materialize(running_b) == materialize(first)


def test_the_record_tables_give_what_the_functions_build() -> None:
    """The loop reads the RUNNING and NOT_RUNNING records from the tables itself (one
    subscript per field); the functions fill them, and both give the same record."""
    RUNNING_RECORDS.clear()
    FINISHED_RECORDS.clear()
    running = running_record("echo", 3, Ping)
    assert running == (event_stream._RECORD, "running", "echo", "3", "Ping", None)
    assert RUNNING_RECORDS["echo"][3][Ping] is running is running_record("echo", 3, Ping)
    with_output = finished_record("echo", "3", Ping, Pong, True)
    without = finished_record("echo", "3", Ping, Pong, False)
    assert with_output[-1] == str(Pong) and without[-1] is None
    assert with_output[:-1] == without[:-1]
    assert FINISHED_RECORDS["echo"]["3"][Ping][Pong][True] is with_output
    assert FINISHED_RECORDS["echo"]["3"][Ping][Pong][False] is without
    assert finished_record("echo", "3", Ping, None, False) is not without  # no output class
    assert materialize(with_output) == materialize(
        PublishStepState("echo", "not_running", "3", Ping, Pong, True, Pong())
    )


def test_the_record_tables_are_bounded() -> None:
    """Event classes made on the fly do not stay alive through the tables."""
    RUNNING_RECORDS.clear()
    FINISHED_RECORDS.clear()
    event_stream._remembered = 0
    classes = [type(f"E{n}", (Ping,), {}) for n in range(event_stream._MAX_RECORDS + 10)]
    for cls in classes:
        running_record("echo", 0, cls)
        finished_record("echo", "0", cls, None, False)
    held = len(RUNNING_RECORDS["echo"][0]) + len(FINISHED_RECORDS["echo"]["0"])
    assert held <= event_stream._MAX_RECORDS
    assert running_record("echo", 0, classes[-1]) == running_record("echo", 0, classes[-1])


@pytest.mark.anyio
async def test_a_waiting_reader_ends_when_another_takes_the_terminal_event() -> None:
    """The run's task closes the stream only once it has wound down; a reader waiting
    for more must not wait for that when another reader took the terminal event."""
    stream = EventStream()  # never closed in this test
    waited: list[Event] = []
    ended = anyio.Event()

    async def waiting_reader() -> None:
        async for ev in stream.iterate(expose_internal=False):
            waited.append(ev)
        ended.set()

    with anyio.fail_after(2):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiting_reader)
            await anyio.sleep(0.01)  # it waits for the first item
            stream.push(StopEvent(result=1))
            taker = stream.iterate(expose_internal=False)
            terminal = await taker.__anext__()  # taken before the waiting reader runs
            await ended.wait()
    assert isinstance(terminal, StopEvent) and waited == []
    assert stream.consumed and not stream.drained  # consumed, though not closed yet


async def _read(stream: EventStream, count: int) -> list[int]:
    """Read ``count`` events from ``stream`` (each ``Ping``'s ``n``)."""
    reader = stream.iterate(expose_internal=False)
    with anyio.fail_after(2):
        return [(await reader.__anext__()).n for _ in range(count)]


@pytest.mark.anyio
@pytest.mark.parametrize("unread", [0, 1, 3, 8, 9, 40])
async def test_a_shrunk_stream_keeps_every_unread_event_in_order(unread: int) -> None:
    """A parked run's stream lets its buffer go (``shrink``); nothing unread is lost
    or repeated, whether it is read from the kept tuple or after new pushes."""
    stream = EventStream()
    for n in range(unread + 2):
        stream.push(Ping(n=n))
    assert await _read(stream, 2) == [0, 1]
    stream.shrink()
    assert await _read(stream, unread // 2) == list(range(2, 2 + unread // 2))
    stream.push(Ping(n=100))
    stream.shrink()
    stream.push(Ping(n=101))
    rest = [*range(2 + unread // 2, 2 + unread), 100, 101]
    assert await _read(stream, len(rest)) == rest
    stream.close()
    assert stream.drained


async def _read_two(stream: EventStream, got: list[int]) -> None:
    """Read the stream into ``got`` until it holds two items."""
    async for ev in stream.iterate(expose_internal=False):
        got.append(ev.n)
        if len(got) == 2:
            return


@pytest.mark.anyio
async def test_a_reader_waiting_when_the_stream_shrinks_gets_what_was_pushed_before() -> None:
    """An item pushed while a reader waits, then kept by a ``shrink`` before that reader
    runs again, still reaches it (and later pushes too)."""
    stream = EventStream()
    got: list[int] = []

    reader = functools.partial(_read_two, stream, got)

    with anyio.fail_after(2):
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            await anyio.wait_all_tasks_blocked()  # it waits for the first item
            stream.push(Ping(n=1))
            stream.shrink()  # before the reader was scheduled again
            assert not stream.drained
            await anyio.wait_all_tasks_blocked()
            stream.shrink()  # nothing unread now
            stream.push(Ping(n=2))
    assert got == [1, 2]


@pytest.mark.anyio
async def test_quiet_items_is_the_buffer_only_while_no_reader_waits() -> None:
    """``quiet_items`` (where a run's loop appends its steps' writes without ``push``)
    is ``None`` whenever an append there would not wake a waiting reader or would go to
    a buffer let go; an item appended there reads back as a pushed one."""
    stream = EventStream()
    assert stream.quiet_items is stream._items
    got: list[int] = []

    reader = functools.partial(_read_two, stream, got)

    with anyio.fail_after(2):
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            await anyio.wait_all_tasks_blocked()
            assert stream.quiet_items is None  # the reader waits: a push must wake it
            stream.push(Ping(n=1))
            assert stream.quiet_items is stream._items
            await anyio.wait_all_tasks_blocked()
            assert stream.quiet_items is None
            stream.push(Ping(n=2))
    assert got == [1, 2]
    stream.shrink()
    assert stream.quiet_items is None
    stream.push(Ping(n=3))
    assert stream.quiet_items is stream._items
    stream.quiet_items.append(Ping(n=4))
    stream.push(StopEvent())
    assert [getattr(ev, "n", None) async for ev in stream.iterate(False)] == [3, 4, None]


def test_a_shrunk_stream_holds_no_deque() -> None:
    """What shrinking is for: a parked run's stream keeps a small tuple, not a deque
    with its block of 64 slots."""
    stream = EventStream()
    stream.push(Ping(n=1))
    stream.shrink()
    held = [obj for obj in gc.get_referents(stream.__dict__) if type(obj).__name__ == "deque"]
    assert held == []
    assert sys.getsizeof(stream._kept) < 100
