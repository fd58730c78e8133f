"""Stream writes accounted in batches (``_Loop.write``) leave the run's state as if each
write had been reduced on its own: the same journal sequence, alive time and last stamp,
seen from a snapshot taken at any point, and the same events in the same order.

A run that keeps its journal (``journal=True``) reduces every write as a tick, so it is
the reference: the same workflow without a journal must agree with it.
"""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import pytest

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.runtime import step_worker
from tickwork.runtime.control_loop import runner

WRITES = 40


class Tick(Event):
    number: int


class Half(Event):
    pass


class Writer(Workflow):
    """Writes a batch, lets the caller look, writes another batch, then ends."""

    @step
    async def write(self, ctx: Context, ev: StartEvent) -> Half:
        for number in range(WRITES):
            ctx.write_event_to_stream(Tick(number=number))
        ctx.write_event_to_stream(Half())
        await anyio.sleep(0.05)  # the caller snapshots while this step is still running
        for number in range(WRITES, 2 * WRITES):
            ctx.write_event_to_stream(Tick(number=number))
        return Half()

    @step
    async def finish(self, ev: Half) -> StopEvent:
        return StopEvent(result="done")


_FIELDS = ("journal_seq", "elapsed_alive", "last_alive_stamp")


async def _observe(journal: bool) -> tuple[list[int], dict[str, Any], dict[str, Any]]:
    handler = Writer(timeout=None, journal=journal).run()
    numbers: list[int] = []
    middle: dict[str, Any] = {}
    async for ev in handler.stream_events():
        if isinstance(ev, Tick):
            numbers.append(ev.number)
        elif isinstance(ev, Half) and not middle:
            snapshot = handler.ctx.to_dict()
            middle = {name: snapshot[name] for name in _FIELDS}
    assert await handler == "done"
    await handler._session.host_done.wait()  # the run's task has stopped reading the clock
    final = handler.ctx.to_dict()
    return numbers, middle, {name: final[name] for name in _FIELDS}


@pytest.mark.anyio
async def test_batched_writes_read_back_like_ticks() -> None:
    numbers, middle, final = await _observe(journal=False)
    assert numbers == list(range(2 * WRITES))
    # SessionStart, the start event, then one sequence number per write.
    assert middle["journal_seq"] == 2 + WRITES + 1
    reference = await _observe(journal=True)
    assert reference[0] == numbers
    assert reference[1]["journal_seq"] == middle["journal_seq"]
    assert reference[2]["journal_seq"] == final["journal_seq"]


class _Clock:
    """A wall clock for the runner that moves in small steps, sometimes backwards."""

    def __init__(self) -> None:
        self._count = itertools.count()

    def time(self) -> float:
        i = next(self._count)
        return 1_000.0 + i * 0.001 - (0.0025 if i % 7 == 3 else 0.0)

    def __getattr__(self, name: str) -> Any:
        import time

        return getattr(time, name)


def _use_clock(monkeypatch: pytest.MonkeyPatch, clock: _Clock) -> None:
    """Make ``clock`` the runner's, and the step worker's (it stamps step results)."""
    monkeypatch.setattr(runner, "time", clock)
    monkeypatch.setattr(step_worker, "time", clock)


@pytest.mark.anyio
async def test_batched_writes_accrue_alive_time_as_ticks_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the same stamps (including stamps that go back), a batch accrues exactly the
    alive time and last stamp that reducing each write gives."""
    _use_clock(monkeypatch, _Clock())
    batched = await _observe(journal=False)
    _use_clock(monkeypatch, _Clock())
    reference = await _observe(journal=True)
    assert batched[1] == reference[1]
    assert batched[2] == reference[2]


class Paced(Workflow):
    """Writes one event, waits for the caller to see it, writes the next: a batch left
    open while the caller waits for more (nothing is reduced between the writes)."""

    seen: list[anyio.Event]

    @step
    async def write(self, ctx: Context, ev: StartEvent) -> StopEvent:
        for number in range(3):
            ctx.write_event_to_stream(Tick(number=number))
            await self.seen[number].wait()
        return StopEvent(result="done")


@pytest.mark.anyio
async def test_a_batched_write_wakes_a_waiting_reader() -> None:
    workflow = Paced(timeout=None)
    workflow.seen = [anyio.Event() for _ in range(3)]
    handler = workflow.run()
    numbers: list[int] = []
    with anyio.fail_after(5):  # a write that did not wake the reader would hang here
        async for ev in handler.stream_events():
            if isinstance(ev, Tick):
                numbers.append(ev.number)
                workflow.seen[ev.number].set()
        assert await handler == "done"
    assert numbers == [0, 1, 2]


class Stopping(Workflow):
    """Writes events and then a stop event to the stream, in one batch, and waits."""

    release: anyio.Event

    @step
    async def write(self, ctx: Context, ev: StartEvent) -> StopEvent:
        for number in range(3):
            ctx.write_event_to_stream(Tick(number=number))
        ctx.write_event_to_stream(StopEvent(result="streamed"))
        await self.release.wait()
        return StopEvent(result="done")


@pytest.mark.anyio
async def test_a_stop_event_written_in_a_batch_is_the_stream_s_terminal_event() -> None:
    workflow = Stopping(timeout=None)
    workflow.release = anyio.Event()
    handler = workflow.run()
    seen = [ev async for ev in handler.stream_events()]
    assert [type(ev).__name__ for ev in seen] == ["Tick", "Tick", "Tick", "StopEvent"]
    assert seen[-1].result == "streamed"
    # Recorded as the terminal event when pushed, as any stop event published.
    assert handler._session.stream.terminal_event is seen[-1]
    workflow.release.set()
    assert await handler == "done"
