"""Following a started or resumed run: progress, questions, and how it ended.

``follow`` prints the run's progress on stderr, answers its questions from stdin
(when the command reads answers), and returns the run's result, or ``WAITING`` when
the command stops at the first quiescence (``runs send``), leaving the run resumable.
Every way a run ends badly becomes one ``CliError`` line.
"""

from __future__ import annotations

import functools
import json
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from pydantic import BaseModel

from tickwork._cli.console import EXIT_FAILURE, EXIT_USAGE, CliError, Console, one_line
from tickwork._cli.progress import ProgressReporter
from tickwork._cli.questions import NoAnswer, Question, pending_questions, question_for_event
from tickwork._cli.questions import read_answer as read_answer_from
from tickwork._cli.watch import StepWatch
from tickwork.errors import WorkflowCancelledByUser, WorkflowTimeoutError
from tickwork.events import Event, InputRequiredEvent, WorkflowFailedEvent, WorkflowIdleEvent
from tickwork.fleet.hand_back import stop_and_hand_back
from tickwork.handler import WorkflowHandler
from tickwork.journal import JournalError
from tickwork.workflow import Workflow

__all__ = ["WAITING", "Follow", "ResumeHint", "in_daemon_thread", "print_result", "run_backend"]

HAND_BACK_SECONDS = 10.0
"""How long the command waits for its store to take back a run it leaves."""

WAITING: Any = object()
"""What ``follow`` returns when it left a run waiting (it was not finished)."""

ANSWER_POLL_SECONDS = 0.05
"""How often the command looks whether the line it waits for has been read."""

T = TypeVar("T")


async def in_daemon_thread(fn: Callable[[], T]) -> T:
    """``fn()``, a blocking read, run in a daemon thread of its own.

    Not a worker thread of anyio: a cancelled wait (Ctrl-C) abandons the read, and a
    worker thread still blocked in ``readline`` would keep the interpreter from exiting
    until stdin closed.  Waiting for a human, the command looks for the line every
    ``ANSWER_POLL_SECONDS``, which works alike under asyncio and trio.
    """
    box: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()

    def read() -> None:
        try:
            box.put((True, fn()))
        except BaseException as error:  # handed to the waiting task, raised there
            box.put((False, error))

    threading.Thread(target=read, name="tickwork answer reader", daemon=True).start()
    while box.empty():
        await anyio.sleep(ANSWER_POLL_SECONDS)
    ok, value = box.get()
    if not ok:
        raise value
    result: T = value
    return result


@dataclass(frozen=True)
class ResumeHint:
    """Where a journaled run is kept, to tell the user how to come back to it."""

    run_id: str
    store: str
    """The options naming the run's store (``--journal PATH`` or ``--dsn DSN``)."""
    workflow: str

    def resume(self) -> str:
        """The command that resumes the run."""
        return f"tickwork runs resume {self.run_id} {self.store} --workflow {self.workflow}"

    def send(self, question: Question | None = None) -> str:
        """The command that sends an answer to the run (for ``question``, when given)."""
        kind = (
            question.response_types[0].__name__
            if question and question.response_types
            else "EVENT_TYPE"
        )
        return (
            f"tickwork runs send {self.run_id} {kind} JSON {self.store} --workflow {self.workflow}"
        )


@dataclass
class Follow:
    """How the command follows one run.

    ``answers``: read answers to the run's questions from stdin (else questions are
    only listed); ``stop_when_quiescent``: return ``WAITING`` once the run is
    quiescent (``runs send``); ``hint``: the journal that keeps the run (``None``: the
    run is not journaled).
    """

    workflow: Workflow
    console: Console
    watch: StepWatch | None
    hint: ResumeHint | None = None
    answers: bool = True
    stop_when_quiescent: bool = False
    readline: Callable[[], str] | None = None
    """Reads one answer line (default: ``sys.stdin.readline``)."""
    interactive: bool = False
    asked: set[str] = field(default_factory=set)

    async def run(self, handler: WorkflowHandler, verb: str) -> Any:
        """``begin``, then ``follow``."""
        self.begin(handler, verb)
        return await self.follow(handler)

    def begin(self, handler: WorkflowHandler, verb: str) -> None:
        """Say which run is followed (``verb``: started, resumed), and what becomes of
        it if the command is interrupted."""
        self.console.resume_hint = self._interrupt_hint(handler.run_id)
        self.console.progress("run", f"{handler.run_id} {verb}: {self.workflow.workflow_name}")
        if self.watch is not None:
            self.watch.state_of = handler.ctx._current_run_state

    async def follow(self, handler: WorkflowHandler) -> Any:
        """Print the run's progress while it runs, answer its questions, return its
        result (or ``WAITING``).  A journaled run the command leaves unfinished (waiting,
        unanswered, interrupted) is handed back to its store on the way out."""
        try:
            return await self._follow(handler)
        finally:
            if self.hint is not None:
                await _hand_back(handler)

    async def _follow(self, handler: WorkflowHandler) -> Any:
        began = time.monotonic()
        reporter = None
        if self.watch is not None:
            reporter = ProgressReporter.of(self.workflow, self.watch, self.console)
        async for event in handler.stream_events(expose_internal=True):
            if isinstance(event, InputRequiredEvent) and self.answers:
                state = handler.ctx._current_run_state()
                await self._answer(handler, [question_for_event(state, event)])
            elif isinstance(event, WorkflowIdleEvent):
                # Questions the run asked before this session (not published again),
                # and waits that asked nothing, are answered once the run is idle.
                state = handler.ctx._current_run_state()
                unasked = [q for q in pending_questions(state) if q.key not in self.asked]
                if self.answers and unasked:
                    await self._answer(handler, unasked)
                elif self.stop_when_quiescent and state.quiescent:
                    self._left_waiting(handler.run_id, pending_questions(state))
                    return WAITING
            elif reporter is not None:
                reporter.on_event(event)
        result = await self._outcome(handler)
        elapsed = time.monotonic() - began
        self.console.progress("run", f"{handler.run_id} completed in {elapsed:.2f}s")
        return result

    async def _answer(self, handler: WorkflowHandler, questions: list[Question]) -> None:
        for question in questions:
            self.asked.add(question.key)
            answer = await in_daemon_thread(
                functools.partial(self.read_answer, question, handler.run_id)
            )
            await handler.send_event(answer)

    def read_answer(self, question: Question, run_id: str) -> Event:
        """The answer to ``question`` from stdin; a missing or bad one ends the command
        (with the run kept waiting in its journal, when it has one)."""
        readline = self.readline or sys.stdin.readline
        try:
            return read_answer_from(question, self.console, readline, self.interactive)
        except NoAnswer:
            raise CliError(
                f"run {run_id} needs an answer ({question.answer_hint}) but stdin gave none; "
                + self._kept(),
                EXIT_FAILURE,
            ) from None
        except CliError as error:
            raise CliError(f"{error}; {self._kept()}", EXIT_USAGE) from None

    def _kept(self) -> str:
        if self.hint is None:
            return "run abandoned (it is not journaled)"
        return f"the run waits in its journal: {self.hint.resume()}"

    def _interrupt_hint(self, run_id: str) -> str:
        if self.hint is None:
            return f"run {run_id} is lost (it is not journaled: --journal PATH keeps runs)"
        return f"run {run_id} is kept; resume it with {self.hint.resume()}"

    def _left_waiting(self, run_id: str, questions: list[Question]) -> None:
        for question in questions:
            self.console.progress("input", f"{question.text} (answer with {question.answer_hint})")
        send = self.hint.send(questions[0] if questions else None) if self.hint else ""
        what = "waits for input" if questions else "is quiescent"
        self.console.progress(
            "run", f"{run_id} {what}; it stays resumable" + (f": {send}" if send else "")
        )

    async def _outcome(self, handler: WorkflowHandler) -> Any:
        """The run's result; every way it ended badly as one error line."""
        run_id = handler.run_id
        try:
            return await handler
        except WorkflowTimeoutError as error:
            raise CliError(f"run {run_id} timed out: {one_line(error)}", EXIT_FAILURE) from None
        except WorkflowCancelledByUser:
            raise CliError(f"run {run_id} was cancelled", EXIT_FAILURE) from None
        except Exception as error:
            terminal = handler.get_stop_event()
            where = (
                f" in step {terminal.step_name}"
                if isinstance(terminal, WorkflowFailedEvent)
                else ""
            )
            # The journal failing (a full disk, a damaged file) is not the workflow's failure.
            status = EXIT_USAGE if isinstance(error, JournalError) else EXIT_FAILURE
            raise CliError(f"run {run_id} failed{where}: {one_line(error)}", status) from None


async def _hand_back(handler: WorkflowHandler) -> None:
    """Give the run back to its store, parked when it only waits (queued when it has
    work left): without this its lease would keep every worker, and every ``send``,
    away from it until it expires.  Shielded (the command may be leaving because it was
    interrupted) and bounded: a store that does not answer lets the lease expire."""
    with anyio.CancelScope(shield=True, deadline=anyio.current_time() + HAND_BACK_SECONDS):
        await stop_and_hand_back(handler._session, park=True)


def run_backend(backend: str, func: Callable[..., Any], *args: Any) -> Any:
    """``anyio.run(func, *args)`` under ``backend``; a missing trio is a usage error."""
    try:
        return anyio.run(func, *args, backend=backend)
    except ModuleNotFoundError as error:
        if backend != "asyncio" and error.name == backend:
            raise CliError(
                f"backend {backend!r} is not installed (pip install {backend})"
            ) from None
        raise


def print_result(result: Any) -> None:
    """The result on stdout: JSON when it can be encoded, else its ``repr``."""
    try:
        if isinstance(result, BaseModel):
            text = result.model_dump_json()
        else:
            text = json.dumps(result, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(result)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
