"""``tickwork runs list | show | resume | send``: journaled runs from the command line.

* ``list`` reads the store's run entries; ``show`` a run's entry, its latest snapshot and,
  when the run's workflow can be imported (or ``--workflow`` names it), its current state.
* ``resume`` continues a run under its own id and with its **original** options (its
  timeout, ``none`` included: never the workflow's default).  A run that waits for a
  human has its questions asked first, and answered from stdin, before it is resumed:
  a bad answer leaves the run untouched.  The run then goes on to its end, with every
  new question asked as ``tickwork run`` asks them.
* ``send`` builds one event, resumes the run, sends the event (it returns once the event
  is journaled), and follows the run until it is quiescent again (waiting for the next
  input) or finished; it then exits, leaving a waiting run resumable.  It answers no
  question itself.

The workflow comes from ``--workflow MODULE:WORKFLOW`` or, when that is not given, from
the workflow name recorded with the run (``module.Class``), imported like a class.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from typing import Any

from tickwork._cli.console import EXIT_OK, EXIT_USAGE, CliError, Console, one_line
from tickwork._cli.follow import (
    WAITING,
    Follow,
    ResumeHint,
    in_daemon_thread,
    print_result,
    run_backend,
)
from tickwork._cli.journal_view import (
    entry_dict,
    get_entry,
    guarded,
    journal_problem,
    open_runs_store,
    run_summary,
    runs_table,
    show_data,
    show_text,
    store_label,
    store_option,
)
from tickwork._cli.loading import check_run_workflow, run_workflow_class, workflow_instance
from tickwork._cli.questions import Question, answer_problem, parse_answer, pending_questions
from tickwork._cli.run_view import current_text, current_view, failure_text
from tickwork._cli.watch import attach_watch
from tickwork._serde_fields import qualified_name
from tickwork.events import Event
from tickwork.journal import JournalError, RunEntry, load_run, resume_run
from tickwork.runtime.types.state import RunState
from tickwork.runtime.verbose import summarize
from tickwork.workflow import Workflow

__all__ = ["command_runs_list", "command_runs_resume", "command_runs_send", "command_runs_show"]

_FINISHED_STATUSES = ("completed", "failed", "timed_out")


def command_runs_list(args: argparse.Namespace, console: Console) -> int:
    """``runs list``: one line (or JSON object) per run, newest first."""
    store = open_runs_store(args)
    try:
        entries: list[RunEntry] = run_backend(
            "asyncio", guarded, store.list_runs, store_label(args)
        )
    finally:
        store.close()
    if args.json:
        sys.stdout.write(json.dumps([entry_dict(e) for e in entries], indent=2) + "\n")
    elif entries:
        sys.stdout.write(runs_table(entries))
    else:
        console.progress("runs", f"no runs in {store_label(args)}")
    return EXIT_OK


def command_runs_show(args: argparse.Namespace, console: Console) -> int:
    """``runs show``: the run's entry, current state (or snapshot summary) and error."""
    store = open_runs_store(args)
    try:
        entry, found, tail = run_backend(
            "asyncio", show_data, store, args.run_id, store_label(args)
        )
    finally:
        store.close()
    summary = run_summary(entry, found, tail)
    summary["error"] = failure_text(found[1].get("failure")) if found else None
    try:
        workflow_class = run_workflow_class(entry, args.workflow, "runs show")
    except CliError as error:
        if args.workflow is not None:
            raise
        workflow_class = None
        summary["current_unavailable"] = str(error)
    summary["current"] = None
    if workflow_class is not None:
        summary["current"] = _current(args, workflow_class, entry, console)
    if args.json:
        sys.stdout.write(json.dumps(summary, indent=2, default=repr) + "\n")
    else:
        current = current_text(summary["current"]) if summary["current"] is not None else None
        sys.stdout.write(show_text(summary, current))
    return EXIT_OK


def _current(
    args: argparse.Namespace, workflow_class: type[Workflow], entry: RunEntry, console: Console
) -> dict[str, Any]:
    store = open_runs_store(args)
    try:
        spec = args.workflow or entry.workflow_name
        workflow = workflow_instance(spec, workflow_class, {"journal": store})
        with check_run_workflow(workflow, entry, console):
            view: dict[str, Any] = run_backend("asyncio", _load_view, workflow, entry)
    finally:
        store.close()
    return view


async def _load_view(workflow: Workflow, entry: RunEntry) -> dict[str, Any]:
    try:
        return await current_view(workflow, entry)
    except JournalError as error:
        raise journal_problem(error) from None


def command_runs_resume(args: argparse.Namespace, console: Console) -> int:
    """``runs resume``: answer the run's questions, resume it, follow it to its end."""
    return _act_on_run(args, console, "runs resume")


def command_runs_send(args: argparse.Namespace, console: Console) -> int:
    """``runs send``: deliver one event, follow the run until it waits again or ends."""
    return _act_on_run(args, console, "runs send")


def _act_on_run(args: argparse.Namespace, console: Console, command: str) -> int:
    lookup = open_runs_store(args)
    try:
        entry: RunEntry = run_backend("asyncio", get_entry, lookup, args.run_id, store_label(args))
    finally:
        lookup.close()
    if entry.status in _FINISHED_STATUSES:
        raise CliError(f"run {entry.run_id!r} already finished ({entry.status}); nothing to resume")
    workflow_class = run_workflow_class(entry, args.workflow, command)
    # A fresh store for the run: a store's worker-thread limiter belongs to the event loop
    # (and backend) that first used it.
    store = open_runs_store(args, for_run=True)
    try:
        spec = args.workflow or _spec_of(workflow_class)
        workflow = workflow_instance(spec, workflow_class, {"journal": store})
        with check_run_workflow(workflow, entry, console):
            follow = Follow(
                workflow,
                console,
                None if console.quiet else attach_watch(workflow),
                hint=ResumeHint(entry.run_id, store_option(args), spec),
                answers=command == "runs resume",
                stop_when_quiescent=command == "runs send",
                interactive=sys.stdin.isatty(),
            )
            if command == "runs send":
                result = run_backend(args.backend, _send, workflow, entry, args, follow)
            else:
                result = run_backend(args.backend, _resume, workflow, entry, follow)
    finally:
        store.close()
    if result is not WAITING:
        print_result(result)
    return EXIT_OK


def _spec_of(workflow_class: type[Workflow]) -> str:
    """``module:Class`` for a class found by its recorded name."""
    module, _, name = qualified_name(workflow_class).rpartition(".")
    return f"{module}:{name}"


async def _load_state(workflow: Workflow, run_id: str) -> RunState:
    """The run's current state (usage error when its journal cannot be loaded)."""
    try:
        ctx = await load_run(workflow, run_id)
    except JournalError as error:
        raise CliError(f"cannot resume run {run_id!r}: {journal_problem(error)}") from None
    return ctx._current_run_state()


async def _start(workflow: Workflow, run_id: str) -> Any:
    try:
        return await resume_run(workflow, run_id)
    except JournalError as error:
        raise CliError(f"cannot resume run {run_id!r}: {journal_problem(error)}") from None
    except Exception as error:
        raise CliError(f"cannot resume run {run_id!r}: {one_line(error)}", 1) from None


async def _resume(workflow: Workflow, entry: RunEntry, follow: Follow) -> Any:
    state = await _load_state(workflow, entry.run_id)
    answers: list[Event] = []
    now = time.time()
    questions = [
        q
        for q in ([] if _has_work(state) else pending_questions(state))
        if q.deadline is None or q.deadline > now  # else it times out once resumed
    ]
    if questions:
        # Waiting for a human: the questions are not published again once resumed.
        count = f"{len(questions)} question{'s' if len(questions) > 1 else ''}"
        follow.console.progress("run", f"{entry.run_id} waits for input ({count})")
        for question in questions:
            follow.asked.add(question.key)
            answer = await in_daemon_thread(
                functools.partial(follow.read_answer, question, entry.run_id)
            )
            answers.append(answer)
    handler = await _start(workflow, entry.run_id)
    follow.begin(handler, "resumed")
    for answer in answers:
        await handler.send_event(answer)
    return await follow.follow(handler)


async def _send(
    workflow: Workflow, entry: RunEntry, args: argparse.Namespace, follow: Follow
) -> Any:
    state = await _load_state(workflow, entry.run_id)
    event = _event_to_send(workflow, state, args.event_type, args.payload)
    handler = await _start(workflow, entry.run_id)
    follow.begin(handler, "resumed")
    await handler.send_event(event)
    follow.console.progress("send", f"{summarize(event)} is journaled")
    return await follow.follow(handler)


def _has_work(state: RunState) -> bool:
    """Whether the run has queued or interrupted invocations to go on with."""
    return any(step.queue or step.in_progress for step in state.steps.values())


def _event_to_send(workflow: Workflow, state: RunState, type_name: str, payload: str) -> Event:
    """The event ``runs send`` delivers; a pending waiter of its type has its
    requirements filled in when it is the only one."""
    event_type = _event_type(workflow, state, type_name)
    waiting = [
        q
        for q in pending_questions(state)
        if q.step is not None and q.response_types[0] is event_type
    ]
    prefilled = waiting[0].prefilled if len(waiting) == 1 else {}
    question = Question(
        key="send",
        asked=None,
        response_types=(event_type,),
        prefilled=prefilled,
        step=waiting[0].step if len(waiting) == 1 else None,
    )
    try:
        return parse_answer(question, payload)
    except ValueError as error:
        raise CliError(
            f"invalid {event_type.__name__}: {answer_problem(error)}", EXIT_USAGE
        ) from None


def _event_type(workflow: Workflow, state: RunState, name: str) -> type[Event]:
    candidates: dict[type[Event], None] = dict.fromkeys(workflow.events)
    for step in state.steps.values():
        for waiter in step.waiters.values():
            candidates[waiter.event_type] = None
    found = [t for t in candidates if name in (t.__name__, t.__qualname__, qualified_name(t))]
    if len(found) == 1:
        return found[0]
    if found:
        names = ", ".join(qualified_name(t) for t in found)
        raise CliError(f"event type {name!r} is ambiguous ({names}); give its full name")
    known = ", ".join(sorted(t.__name__ for t in candidates)) or "none"
    raise CliError(
        f"workflow {workflow.workflow_name} has no event type {name!r} (its events: {known})"
    )


def command_runs_cancel(args: argparse.Namespace, console: Console) -> int:
    """``runs cancel``: ask the run to stop gracefully, through its inbox.

    Returns once the request is durable.  The run's owner (a worker of a fleet, or the
    process running it) consumes it like a ``cancel_run()``; a run nobody runs now
    (parked, or interrupted) is cancelled when it is next claimed or resumed.
    """
    store = open_runs_store(args)
    label = store_label(args)
    try:
        entry: RunEntry = run_backend("asyncio", get_entry, store, args.run_id, label)
        if entry.status in _FINISHED_STATUSES or entry.status == "cancelled":
            raise CliError(f"run {entry.run_id!r} already finished ({entry.status})")
        run_backend("asyncio", guarded, lambda: store.send(entry.run_id, "cancel"), label)
    finally:
        store.close()
    console.progress("runs", f"asked run {args.run_id!r} to stop; it ends as cancelled")
    return EXIT_OK
