"""The workflows the fleet fault tests run, and the worker process that runs them.

``python -m tests.fleet.trial_child worker tests.fleet.trial_child:FLOWS --dsn DSN ...``
is ``tickwork worker`` (the real command line, :func:`tickwork.cli.main`) plus a
watchdog: the worker exits at once when the test process that started it dies, so a
crashed or interrupted test never leaves workers behind writing to the database.

Every step body appends one line ``step,idempotency-key,pid,time`` to the file named by
``TW_TRIAL_LOG`` (when set) with a single ``O_APPEND`` write, before doing anything
else (``work.end`` when a ``work`` body ends): the tests compare these executions with the
journal (only invocations in flight when their worker was killed or fenced may have run
more than once).

:class:`Trial` has everything a run of a fleet can do: sends between steps (a fan-out of
``Item`` events, joined by ``collect_events``), a step that fails twice and succeeds on
its third attempt (a retry policy), events written to the stream, and a human in the
loop (``wait_for_event`` with a ``Question``, answered from the test through the run's
inbox).  Its result depends only on its start event and the answer, never on timing or
on which worker ran what, so every run's result can be compared with an uninterrupted
reference run.  :class:`Blip` is a short run (a send between two steps, and one event
from the caller) for the soak test.
"""

from __future__ import annotations

import faulthandler
import os
import random
import signal
import sys
import threading
import time
from typing import Any

import anyio

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.events import HumanResponseEvent, InputRequiredEvent
from tickwork.retry_policy import retry_policy, stop_after_attempt, wait_fixed

LOG_VARIABLE = "TW_TRIAL_LOG"
"""The side log every step execution appends a line to (no log when unset)."""

SKEW_VARIABLE = "TW_TRIAL_CLOCK_SKEW"
"""Seconds added to this process's wall clock (``time.time``), to run a worker on a
machine whose clock is wrong."""

FLAKY_FAILURES = 2
"""How many attempts of ``Trial.check`` fail before one succeeds."""


def log_execution(step_name: str, ctx: Context) -> None:
    """Append ``step,idempotency-key,pid,time`` to the side log: one ``O_APPEND`` write,
    so lines of concurrent processes never interleave, and a SIGKILL loses no written
    line."""
    path = os.environ.get(LOG_VARIABLE)
    if not path:
        return
    line = f"{step_name},{ctx.idempotency_key},{os.getpid()},{time.time():.3f}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


class TrialStart(StartEvent):
    width: int
    pause: float = 0.2


class Item(Event):
    index: int
    pause: float


class Progress(Event):
    index: int


class Done(Event):
    index: int
    value: int


class Joined(Event):
    indexes: list[int]
    total: int


class Checked(Event):
    total: int
    attempts: int


class Question(InputRequiredEvent):
    total: int


class Answer(Event):
    factor: int


class Trial(Workflow):
    """Fan-out, join, a flaky step with retries, then a question to a human."""

    @step
    async def fan_out(self, ctx: Context, ev: TrialStart) -> Item | None:
        log_execution("fan_out", ctx)
        await ctx.store.set("width", ev.width)
        for index in range(ev.width):
            ctx.send_event(Item(index=index, pause=ev.pause))
        return None

    @step(num_workers=3)
    async def work(self, ctx: Context, ev: Item) -> Done:
        log_execution("work", ctx)
        # A random duration: kills land in the middle of some bodies, not between them.
        await anyio.sleep(ev.pause * random.uniform(0.5, 1.5))
        log_execution("work.end", ctx)  # the body was not cancelled (a fenced worker's is)
        ctx.write_event_to_stream(Progress(index=ev.index))
        return Done(index=ev.index, value=ev.index * ev.index + 1)

    @step
    async def join(self, ctx: Context, ev: Done) -> Joined | None:
        width = await ctx.store.get("width")
        done = ctx.collect_events(ev, [Done] * width)
        if done is None:
            return None
        log_execution("join", ctx)
        indexes = [d.index for d in done]  # type: ignore[attr-defined]
        total = sum(d.value for d in done)  # type: ignore[attr-defined]
        return Joined(indexes=sorted(indexes), total=total)

    @step(
        retry_policy=retry_policy(wait=wait_fixed(0.2), stop=stop_after_attempt(FLAKY_FAILURES + 1))
    )
    async def check(self, ctx: Context, ev: Joined) -> Checked:
        log_execution("check", ctx)
        attempt = ctx.retry_info().retry_number
        if attempt < FLAKY_FAILURES:
            raise RuntimeError(f"flaky: attempt {attempt} fails")
        if ev.indexes != list(range(len(ev.indexes))):
            raise AssertionError(f"the join lost or doubled items: {ev.indexes}")
        return Checked(total=ev.total, attempts=attempt + 1)

    @step
    async def ask(self, ctx: Context, ev: Checked) -> StopEvent:
        log_execution("ask", ctx)
        answer = await ctx.wait_for_event(
            Answer, waiter_event=Question(total=ev.total), timeout=None
        )
        return StopEvent(
            result={
                "total": ev.total,
                "attempts": ev.attempts,
                "factor": answer.factor,
                "product": ev.total * answer.factor,
            }
        )


class BlipStart(StartEvent):
    number: int


class Half(Event):
    number: int


class Nudge(HumanResponseEvent):
    value: int


class Blip(Workflow):
    """A short run: one step sends an event to another, which ends the run once the
    caller's ``Nudge`` (sent through the inbox, before or after the run started) is in."""

    @step
    async def first(self, ctx: Context, ev: BlipStart) -> Half | None:
        log_execution("first", ctx)
        ctx.send_event(Half(number=ev.number))
        return None

    @step
    async def second(self, ctx: Context, ev: Half | Nudge) -> StopEvent | None:
        both = ctx.collect_events(ev, [Half, Nudge])
        if both is None:
            return None
        log_execution("second", ctx)
        half, nudge = both
        return StopEvent(result=half.number * 2 + nudge.value)  # type: ignore[attr-defined]


FLOWS = [Trial, Blip]
"""What the fleet's workers serve (``tests.fleet.trial_child:FLOWS``)."""


def reference_result(width: int, factor: int) -> dict[str, Any]:
    """The result of an uninterrupted :class:`Trial` run (checked against a real one in
    the tests): what every run must end with, however often its workers died."""
    total = sum(index * index + 1 for index in range(width))
    return {
        "total": total,
        "attempts": FLAKY_FAILURES + 1,
        "factor": factor,
        "product": total * factor,
    }


def _exit_with_parent(parent: int) -> None:
    """A daemon thread's loop: leave at once (no clean-up) when ``parent`` is gone."""
    while True:
        if os.getppid() != parent:
            os._exit(70)
        time.sleep(0.2)


def main(argv: list[str]) -> int:
    """``tickwork`` with ``argv``, ended when the process that started this one ends."""
    from tickwork.cli import main as tickwork_main

    # The tests ask a worker that looks stuck for its threads' stacks (quoted from its log).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    skew = float(os.environ.get(SKEW_VARIABLE, "0") or 0)
    if skew:
        real_time = time.time
        time.time = lambda: real_time() + skew
    watchdog = threading.Thread(
        target=_exit_with_parent, args=(os.getppid(),), name="parent-watchdog", daemon=True
    )
    watchdog.start()
    return tickwork_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
