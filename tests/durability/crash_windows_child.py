"""The child process of ``test_crash_windows.py``: a run killed at one exact moment.

Usage::

    python crash_windows_child.py MODE DB [backend]

Modes that end with the process killing itself with SIGKILL (no cleanup of any kind):

* ``register``: start a journaled run with a typed start event and die right after
  ``run()`` returned, before the run processed anything;
* ``wait``: start a run whose step waits for a human (a waiter with a wall-clock
  deadline of ``WAIT_SECONDS``, the run with an alive-time budget of ``RUN_TIMEOUT``),
  and die ``DIE_AFTER`` seconds after the question was asked;
* ``answer``: start the same run, answer it with ``await handler.send_event(...)`` and
  die the moment that call returned.

``recover-then-die`` resumes the run and dies ``DIE_AFTER`` seconds later.
``recover`` resumes every interrupted run with ``recover_runs`` and prints
``RESULT <json>`` (``{"outcome": ..., "seconds": <how long the resumed run took>}``) and
``FAILED <json>`` for runs it could not resume.  ``state`` prints the recovered state's
alive time and pending waiter deadlines without resuming anything.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

import anyio

from tickwork import Context, Event, InputRequiredEvent, StartEvent, StopEvent, Workflow, step
from tickwork.errors import WorkflowTimeoutError
from tickwork.journal import SqliteJournal, load_run, recover_runs

RUN_ID = "window-run"
WAIT_SECONDS = float(os.environ.get("WAIT_SECONDS", "1000"))
RUN_TIMEOUT = float(os.environ.get("RUN_TIMEOUT", "60"))
DIE_AFTER = float(os.environ.get("DIE_AFTER", "0"))


class Order(StartEvent):
    """A typed start event: recovering it as a plain StartEvent would fail."""

    item: str
    quantity: int


class Ask(InputRequiredEvent):
    prompt: str


class Answer(Event):
    value: str


class Shop(Workflow):
    @step
    async def take(self, ctx: Context, ev: Order) -> StopEvent:
        try:
            answer = await ctx.wait_for_event(
                Answer,
                waiter_event=Ask(prompt=f"ship {ev.quantity} {ev.item}?"),
                timeout=WAIT_SECONDS,
            )
        except TimeoutError:
            return StopEvent(result=f"{ev.quantity} {ev.item}: no answer")
        return StopEvent(result=f"{ev.quantity} {ev.item}: {answer.value}")


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


async def asked(handler: Any) -> None:
    async for ev in handler.stream_events():
        if isinstance(ev, Ask):
            print("ASKED", flush=True)
            return


async def main(mode: str, db: str) -> None:
    store = SqliteJournal(db)
    workflow = Shop(journal=store, timeout=RUN_TIMEOUT)
    if mode == "register":
        workflow.run(run_id=RUN_ID, start_event=Order(item="tea", quantity=3))
        die()
    if mode in ("wait", "answer"):
        handler = workflow.run(run_id=RUN_ID, start_event=Order(item="tea", quantity=3))
        await asked(handler)
        if mode == "answer":
            await handler.send_event(Answer(value="yes"))
            die()
        await anyio.sleep(DIE_AFTER)
        die()
    if mode == "state":
        ctx = await load_run(workflow, RUN_ID)
        state = ctx._current_run_state()
        deadlines = [
            w.deadline for st in state.steps.values() for w in st.waiters.values() if w.pending
        ]
        found = {"elapsed_alive": state.elapsed_alive, "deadlines": deadlines}
        print("STATE", json.dumps(found), flush=True)
        return
    assert mode in ("recover", "recover-then-die"), mode
    began = time.monotonic()
    result = await recover_runs(workflow)
    if mode == "recover-then-die":
        await anyio.sleep(DIE_AFTER)
        die()
    for run_id, error in result.failed.items():
        print("FAILED", json.dumps({"run_id": run_id, "error": str(error)}), flush=True)
    for _run_id, handler in result.items():
        try:
            outcome: Any = await handler
        except WorkflowTimeoutError as error:
            outcome = f"timed out: {error}"
        seconds = time.monotonic() - began
        print("RESULT", json.dumps({"outcome": outcome, "seconds": seconds}), flush=True)


if __name__ == "__main__":
    _, mode_arg, db_arg, *rest = sys.argv
    anyio.run(main, mode_arg, db_arg, backend=rest[0] if rest else "asyncio")
