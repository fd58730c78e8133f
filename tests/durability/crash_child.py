"""The child process of the crash-recovery tests (``test_crash_recovery.py``).

It runs (or recovers) one journaled run of :class:`CrashFlow` on a SQLite journal.  The
parent SIGKILLs it at random points and starts a fresh child in ``recover`` mode.

Usage::

    python crash_child.py run|recover <db path> <log path> answer|timeout [backend]

Every step execution appends one ``"step,key"`` line to the log file (``O_APPEND``, one
``write`` per line, so lines from killed processes are never torn or interleaved).  The
child prints ``READY`` right before the run starts, ``ASKED`` when the human is asked
(fresh runs only: a resumed run does not publish the request again) and
``RESULT <json>`` at the end.

The workflow fans out ``N_ITEMS`` items to ``process`` (4 workers, retried with a fixed
delay).  Items with ``id % 3 == 1`` fail deterministically on their first attempt;
item ``FATAL_ID`` always fails with an error the policy does not retry, and the
``@catch_error`` handler turns it into a placeholder.  A ``list[Checked]`` join gathers
the results, then ``approve`` waits for a human: in the ``answer`` scenario the child
sends the answer itself (whenever its snapshot shows an unresolved waiter), in the
``timeout`` scenario nobody answers and the waiter's alive-time budget must fire.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio

from tickwork import (
    Context,
    Event,
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
    Workflow,
    catch_error,
    step,
)
from tickwork.events import StepFailedEvent
from tickwork.journal import SqliteJournal, load_run, recover_runs
from tickwork.retry_policy import (
    retry_if_exception_type,
    retry_policy,
    stop_after_attempt,
    wait_fixed,
)
from tickwork.runtime.control_loop import rebuild_state_from_ticks

RUN_ID = "crash-run"
N_ITEMS = 8
FATAL_ID = 5
ANSWER = 42
WAIT_TIMEOUT = {"answer": 20.0, "timeout": 0.4}
STEP_DELAY = 0.03


class Flaky(Exception):
    """A failure the retry policy retries."""


class Fatal(Exception):
    """A failure the retry policy does not retry (goes to ``@catch_error``)."""


class Item(Event):
    id: int


class Checked(Event):
    id: int
    value: int


class Gathered(Event):
    rows: list[list[int]]


class Ask(InputRequiredEvent):
    prompt: str


class Answer(HumanResponseEvent):
    value: int


def log(step_name: str, key: object) -> None:
    """Append one execution record to the side log (atomic single write)."""
    path = os.environ["CRASH_LOG"]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{step_name},{key}\n".encode())
    finally:
        os.close(fd)


class CrashFlow(Workflow):
    def __init__(self, scenario: str, **kwargs: Any) -> None:
        kwargs.setdefault("timeout", 30)
        super().__init__(**kwargs)
        self.scenario = scenario

    @step
    async def produce(self, ev: StartEvent) -> list[Item]:
        log("produce", "start")
        await anyio.sleep(STEP_DELAY)
        return [Item(id=i) for i in range(N_ITEMS)]

    @step(
        num_workers=4,
        retry_policy=retry_policy(
            retry=retry_if_exception_type(Flaky), wait=wait_fixed(0.05), stop=stop_after_attempt(3)
        ),
    )
    async def process(self, ctx: Context, ev: Item) -> Checked:
        attempt = ctx.retry_info().retry_number
        log("process", f"{ev.id}:{attempt}")
        await anyio.sleep(STEP_DELAY * (1 + ev.id % 3))
        if ev.id == FATAL_ID:
            raise Fatal(f"item {ev.id} is broken")
        if ev.id % 3 == 1 and attempt == 0:
            raise Flaky(f"item {ev.id} failed its first attempt")
        return Checked(id=ev.id, value=ev.id * ev.id)

    @catch_error
    async def recover(self, ev: StepFailedEvent) -> Checked:
        item = ev.input_event
        assert isinstance(item, Item)
        log("recover", item.id)
        await anyio.sleep(STEP_DELAY)
        return Checked(id=item.id, value=-1)

    @step
    async def gather(self, evs: list[Checked]) -> Gathered:
        log("gather", "all")
        await anyio.sleep(STEP_DELAY)
        return Gathered(rows=[[e.id, e.value] for e in sorted(evs, key=lambda e: e.id)])

    @step
    async def approve(self, ctx: Context, ev: Gathered) -> StopEvent:
        try:
            answer = await ctx.wait_for_event(
                Answer,
                waiter_event=Ask(prompt="approve?"),
                timeout=WAIT_TIMEOUT[self.scenario],
            )
            outcome: Any = answer.value
            log("approve", "answered")
        except TimeoutError:
            outcome = "timed out"
            log("approve", "timed_out")
        result = {"rows": ev.rows, "answer": outcome}
        await ctx.store.set("result", result)
        return StopEvent(result=result)


async def answer_when_asked(handler: Any) -> None:
    """Send the answer once this process sees an unresolved waiter in ``approve``."""
    while not handler.is_done():
        snap = handler.ctx.to_dict(include_state=False)
        waiters = snap["workers"]["approve"]["collected_waiters"]
        if any(w["resolved_event"] is None and not w["timed_out"] for w in waiters):
            await anyio.sleep(0.05)
            handler.ctx.send_event(Answer(value=ANSWER))
            return
        await anyio.sleep(0.02)


async def announce_ask(handler: Any) -> None:
    """Print ``ASKED`` when the waiter event is published (the parent may kill then)."""
    async for ev in handler.stream_events():
        if isinstance(ev, Ask):
            print("ASKED", flush=True)


async def finish(handler: Any, scenario: str, *, fresh: bool) -> Any:
    async with anyio.create_task_group() as tg:
        if scenario == "answer":
            tg.start_soon(answer_when_asked, handler)
        if fresh:
            tg.start_soon(announce_ask, handler)
        result = await handler
        tg.cancel_scope.cancel()
    return result


def _key(step_name: str, item: Any, scenario: str) -> str | None:
    """The side-log key an execution of ``item`` by ``step_name`` writes."""
    if step_name == "produce":
        return "start"
    if step_name == "process":
        return f"{item.event.id}:{item.attempts}"
    if step_name == "recover":
        return str(item.event.input_event.id)
    if step_name == "gather":
        return "all"
    if step_name == "approve":
        return "answered" if scenario == "answer" else "timed_out"
    return None


async def durable_progress(wf: Any, store: Any, scenario: str) -> dict[str, Any]:
    """What the journal says before recovery: finished and in-flight executions.

    Folds the durable records one by one with the public replay facade and, before each
    ``step_result`` that completed or failed an invocation, maps that invocation to its
    side-log key.  Those executions are durably finished and must never run again.
    """
    found = await store.read_snapshot(RUN_ID)
    assert found is not None
    seq, snapshot = found
    state = Context.from_dict(wf, snapshot)._current_run_state()
    finished: list[str] = []
    async for record in store.read(RUN_ID, seq):
        data = record.data
        if data["type"] == "step_result" and data["outcome"]["kind"] != "suspended":
            inv = state.steps[data["step"]].in_progress[data["invocation_id"]]
            key = _key(data["step"], inv.item, scenario)
            if key is not None:
                finished.append(f"{data['step']},{key}")
        state = rebuild_state_from_ticks(state, [record])
    in_flight = [
        f"{name},{_key(name, inv.item, scenario)}"
        for name, st in state.steps.items()
        for inv in st.in_progress.values()
    ]
    waiting = any(
        w.resolved_event is None and not w.timed_out
        for st in state.steps.values()
        for w in st.waiters.values()
    )
    return {"finished": finished, "in_flight": in_flight, "waiting": waiting}


def emit(kind: str, result: Any) -> None:
    print(f"{kind} {json.dumps(result, sort_keys=True)}", flush=True)


async def main(mode: str, db: str, scenario: str) -> None:
    store = SqliteJournal(db)
    wf = CrashFlow(scenario, journal=store)
    if mode == "run":
        print("READY", flush=True)
        emit("RESULT", await finish(wf.run(run_id=RUN_ID), scenario, fresh=True))
        return
    entry = await store.get_run(RUN_ID)
    if entry is None:  # killed before the run was registered: start it afresh
        emit("PROGRESS", None)
        emit("RESULT", await finish(wf.run(run_id=RUN_ID), scenario, fresh=True))
        return
    emit("PROGRESS", await durable_progress(wf, store, scenario))
    handlers = await recover_runs(wf)
    if RUN_ID in handlers:
        emit("RESULT", await finish(handlers[RUN_ID], scenario, fresh=False))
        return
    # The run had already finished durably: its result is in the final state section.
    ctx = await load_run(wf, RUN_ID)
    emit("RESULT", await ctx.store.get("result"))


if __name__ == "__main__":
    _, mode_arg, db_arg, log_arg, scenario_arg, *rest = sys.argv
    os.environ["CRASH_LOG"] = log_arg
    anyio.run(main, mode_arg, db_arg, scenario_arg, backend=rest[0] if rest else "asyncio")
