"""The ``tickwork`` command: run, draw and inspect workflows from a shell.

Commands::

    tickwork run MODULE:WORKFLOW [key=value ...] [--journal PATH] [--timeout S]
                 [--backend asyncio|trio] [--quiet]
    tickwork draw MODULE:WORKFLOW [-o FILE.mmd|FILE.html]
    tickwork runs list --journal PATH [--json]
    tickwork runs show RUN_ID --journal PATH [--json]
    tickwork runs resume RUN_ID --journal PATH --workflow MODULE:WORKFLOW [--timeout S]
                 [--backend asyncio|trio] [--quiet]

``MODULE`` is a dotted module name (importable from the current directory too) or a
path to a ``.py`` file; ``WORKFLOW`` names a Workflow class, which the command
instantiates, or a ready Workflow instance.  ``key=value`` arguments become the start
event's fields: a value that parses as JSON is used as such (``count=3``,
``tags='["a","b"]'``, ``ok=true``), anything else is a string (``name=Ada``).

Output: the run's result goes to **stdout** (as JSON when it can be encoded, else its
``repr``); progress goes to **stderr**: steps starting and finishing, events the steps
write to the stream, and ``k/n`` progress of fan-out streams that a ``list[E]`` step
joins.  When a step asks for input (an ``InputRequiredEvent``) the command prompts on
stderr and reads the answer, as JSON, from stdin.

Exit status: 0 on success; 1 when the run (or the workflow's own code) fails; 2 when the
command line cannot be acted on (bad syntax, a module, attribute or run that does not
exist, something that is not a workflow, a bad ``key=value``, a journal that cannot be
opened, read or written); 130 on Ctrl-C.  Every
error is reported as one line on stderr, starting with ``tickwork: error:``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import anyio.to_thread
from pydantic import BaseModel

from tickwork._cli.console import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Console,
    one_line,
)
from tickwork._cli.db import add_db_command
from tickwork._cli.journal_view import (
    entry_dict,
    get_entry,
    guarded,
    journal_problem,
    open_journal,
    open_journal_for_run,
    run_summary,
    runs_table,
    show_data,
    show_text,
)
from tickwork._cli.loading import load_target, parse_assignments, workflow_instance
from tickwork._cli.progress import ProgressReporter
from tickwork.errors import WorkflowCancelledByUser, WorkflowTimeoutError
from tickwork.events import Event, HumanResponseEvent, InputRequiredEvent, WorkflowFailedEvent
from tickwork.handler import WorkflowHandler
from tickwork.journal import JournalError, RunEntry, SqliteJournal, resume_run
from tickwork.representation.draw import draw_workflow, to_mermaid
from tickwork.runtime.verbose import summarize
from tickwork.workflow import Workflow

__all__ = ["CliError", "main", "parse_assignments"]

_FINISHED_STATUSES = ("completed", "failed", "timed_out")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tickwork`` command with ``argv`` (default ``sys.argv[1:]``); return its status."""
    args = _parser().parse_args(argv)
    console = Console(sys.stderr, quiet=bool(getattr(args, "quiet", False)))
    command: Callable[[argparse.Namespace, Console], int] = args.command
    try:
        return command(args, console)
    except CliError as error:
        console.error(str(error))
        return error.status
    except JournalError as error:  # one the commands did not word themselves
        error_line = journal_problem(error)
        console.error(str(error_line))
        return error_line.status
    except KeyboardInterrupt:
        console.error("interrupted")
        return EXIT_INTERRUPTED


# --- the command line --------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tickwork", description="Run, draw and inspect tickwork workflows."
    )
    commands = parser.add_subparsers(dest="command_name", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run a workflow and print its result")
    run.add_argument("target", metavar="MODULE:WORKFLOW")
    run.add_argument("assignments", nargs="*", metavar="key=value", help="start event fields")
    run.add_argument("--journal", metavar="PATH", help="journal the run to this SQLite file")
    _add_run_options(run)
    run.set_defaults(command=_command_run)

    draw = commands.add_parser("draw", help="draw a workflow as Mermaid or HTML")
    draw.add_argument("target", metavar="MODULE:WORKFLOW")
    draw.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write FILE.mmd or FILE.html (default: Mermaid to stdout)",
    )
    draw.set_defaults(command=_command_draw)

    runs = commands.add_parser("runs", help="inspect and resume journaled runs")
    runs_commands = runs.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
    listing = runs_commands.add_parser("list", help="list the runs of a journal")
    show = runs_commands.add_parser("show", help="show one run and its latest snapshot")
    show.add_argument("run_id", metavar="RUN_ID")
    resume = runs_commands.add_parser("resume", help="resume an interrupted or cancelled run")
    resume.add_argument("run_id", metavar="RUN_ID")
    resume.add_argument("--workflow", metavar="MODULE:WORKFLOW", help="the workflow to resume with")
    _add_run_options(resume)
    for sub in (listing, show, resume):
        sub.add_argument("--journal", metavar="PATH", required=True, help="the SQLite journal")
    for sub in (listing, show):
        sub.add_argument("--json", action="store_true", help="print JSON instead of text")
    listing.set_defaults(command=_command_runs_list)
    show.set_defaults(command=_command_runs_show)
    resume.set_defaults(command=_command_runs_resume)
    add_db_command(commands)
    return parser


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        metavar="S",
        type=_timeout_value,
        default=argparse.SUPPRESS,
        help="the run's timeout in seconds, or none (default: the workflow's own)",
    )
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")


def _timeout_value(text: str) -> float | None:
    if text.lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds or 'none', got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


# --- tickwork run / runs resume ----------------------------------------------------------


def _command_run(args: argparse.Namespace, console: Console) -> int:
    start_fields = parse_assignments(args.assignments)
    target = load_target(args.target)
    store = open_journal_for_run(args.journal) if args.journal else None
    options = _run_options(args, store)
    workflow = workflow_instance(args.target, target, options)
    try:
        result = _run_backend(args.backend, _start_and_follow, workflow, start_fields, console)
    finally:
        if store is not None:
            store.close()
    _print_result(result)
    return EXIT_OK


def _command_runs_resume(args: argparse.Namespace, console: Console) -> int:
    if not args.workflow:
        raise CliError("runs resume needs --workflow MODULE:WORKFLOW to resume the run with")
    lookup = open_journal(args.journal)
    try:
        entry: RunEntry = _run_backend("asyncio", get_entry, lookup, args.run_id, args.journal)
    finally:
        lookup.close()
    if entry.status in _FINISHED_STATUSES:
        raise CliError(f"run {entry.run_id!r} already finished ({entry.status}); nothing to resume")
    # A fresh store for the run: a store's worker-thread limiter belongs to the event loop
    # (and backend) that first used it.
    store = open_journal_for_run(args.journal)
    try:
        target = load_target(args.workflow)
        if isinstance(target, Workflow):
            raise CliError(
                f"runs resume needs a Workflow class, but {args.workflow} is an instance "
                "(the command creates it with this journal)"
            )
        workflow = workflow_instance(args.workflow, target, _run_options(args, store))
        if workflow.workflow_name != entry.workflow_name:
            raise CliError(
                f"run {entry.run_id!r} belongs to workflow {entry.workflow_name}, "
                f"not {workflow.workflow_name}"
            )
        result = _run_backend(args.backend, _resume_and_follow, workflow, entry.run_id, console)
    finally:
        store.close()
    _print_result(result)
    return EXIT_OK


def _run_options(args: argparse.Namespace, store: SqliteJournal | None) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if store is not None:
        options["journal"] = store
    if "timeout" in args:  # given on the command line (``none`` gives None)
        options["timeout"] = args.timeout
    return options


def _run_backend(backend: str, func: Callable[..., Any], *args: Any) -> Any:
    try:
        return anyio.run(func, *args, backend=backend)
    except ModuleNotFoundError as error:
        if backend != "asyncio" and error.name == backend:
            raise CliError(
                f"backend {backend!r} is not installed (pip install {backend})"
            ) from None
        raise


async def _start_and_follow(workflow: Workflow, fields: dict[str, Any], console: Console) -> Any:
    try:
        handler = workflow.run(**fields)
    except JournalError as error:
        raise journal_problem(error) from None
    except Exception as error:
        raise CliError(
            f"cannot start {workflow.workflow_name}: {one_line(error)}", EXIT_FAILURE
        ) from None
    return await _follow(workflow, handler, console, "started")


async def _resume_and_follow(workflow: Workflow, run_id: str, console: Console) -> Any:
    try:
        handler = await resume_run(workflow, run_id)
    except JournalError as error:
        raise CliError(f"cannot resume run {run_id!r}: {journal_problem(error)}") from None
    except Exception as error:
        raise CliError(f"cannot resume run {run_id!r}: {one_line(error)}", EXIT_FAILURE) from None
    return await _follow(workflow, handler, console, "resumed")


async def _follow(workflow: Workflow, handler: WorkflowHandler, console: Console, verb: str) -> Any:
    """Print the run's progress while it runs, answer its input requests, return its result."""
    began = time.monotonic()
    console.progress("run", f"{handler.run_id} {verb}: {workflow.workflow_name}")
    reporter = ProgressReporter(workflow, handler, console)
    async for event in handler.stream_events(expose_internal=True):
        if isinstance(event, InputRequiredEvent):
            await _answer_input(workflow, handler, event, console)
        else:
            reporter.on_event(event)
    try:
        result = await handler
    except WorkflowTimeoutError as error:
        raise CliError(f"run {handler.run_id} timed out: {one_line(error)}", EXIT_FAILURE) from None
    except WorkflowCancelledByUser:
        raise CliError(f"run {handler.run_id} was cancelled", EXIT_FAILURE) from None
    except Exception as error:
        terminal = handler.get_stop_event()
        where = (
            f" in step {terminal.step_name}" if isinstance(terminal, WorkflowFailedEvent) else ""
        )
        # The journal failing (a full disk, a damaged file) is not the workflow's failure.
        status = EXIT_USAGE if isinstance(error, JournalError) else EXIT_FAILURE
        raise CliError(f"run {handler.run_id} failed{where}: {one_line(error)}", status) from None
    console.progress("run", f"{handler.run_id} completed in {time.monotonic() - began:.2f}s")
    return result


async def _answer_input(
    workflow: Workflow, handler: WorkflowHandler, event: InputRequiredEvent, console: Console
) -> None:
    """Prompt for the workflow's one ``HumanResponseEvent`` type, read it as JSON on stdin."""
    responses = [t for t in workflow.events if issubclass(t, HumanResponseEvent)]
    console.progress("input", f"{summarize(event)}")
    if len(responses) != 1:
        await handler.cancel_run()
        names = ", ".join(t.__name__ for t in responses) or "none"
        raise CliError(
            f"run {handler.run_id} needs input, but the command can only answer a workflow "
            f"with exactly one HumanResponseEvent type (found: {names}); run cancelled",
            EXIT_FAILURE,
        )
    response_type = responses[0]
    fields = ", ".join(response_type.model_fields) or "no fields"
    interactive = sys.stdin.isatty()
    while True:
        question = f"answer with {response_type.__name__} as JSON ({fields})"
        if interactive:
            console.prompt(f"{question}: ")
        else:
            console.progress("input", f"reading the {question} from stdin")
        line = await anyio.to_thread.run_sync(sys.stdin.readline)
        if not line.strip():
            await handler.cancel_run()
            raise CliError(
                f"run {handler.run_id} needs an answer ({response_type.__name__}) but stdin "
                "gave none; run cancelled",
                EXIT_FAILURE,
            )
        try:
            answer = _response_event(response_type, line)
        except ValueError as error:  # pydantic's ValidationError is a ValueError
            if not interactive:
                await handler.cancel_run()
                raise CliError(
                    f"invalid answer: {one_line(error)}; run cancelled",
                    EXIT_FAILURE,
                ) from None
            console.progress("input", f"invalid answer: {one_line(error)}")
            continue
        await handler.send_event(answer)
        return


def _response_event(response_type: type[Event], line: str) -> Event:
    data = json.loads(line)
    if not isinstance(data, dict):
        names = list(response_type.model_fields)
        if len(names) != 1:
            raise ValueError(f"expected a JSON object with the fields {', '.join(names)}")
        data = {names[0]: data}
    answer: Event = response_type.model_validate(data)
    return answer


def _print_result(result: Any) -> None:
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


# --- progress ----------------------------------------------------------------------------


# --- tickwork draw -----------------------------------------------------------------------


def _command_draw(args: argparse.Namespace, console: Console) -> int:
    target = load_target(args.target)
    if args.output is None:
        sys.stdout.write(to_mermaid(target))
        return EXIT_OK
    try:
        draw_workflow(target, args.output)
    except ValueError as error:
        raise CliError(str(error)) from None
    except OSError as error:
        raise CliError(f"cannot write {args.output!r}: {error.strerror or error}") from None
    console.progress("draw", f"wrote {args.output}")
    return EXIT_OK


# --- tickwork runs list / show -----------------------------------------------------------


# --- output ------------------------------------------------------------------------------


# --- tickwork runs list / show -----------------------------------------------------------


def _command_runs_list(args: argparse.Namespace, console: Console) -> int:
    store = open_journal(args.journal)
    try:
        entries: list[RunEntry] = _run_backend("asyncio", guarded, store.list_runs, args.journal)
    finally:
        store.close()
    if args.json:
        sys.stdout.write(json.dumps([entry_dict(e) for e in entries], indent=2) + "\n")
    elif entries:
        sys.stdout.write(runs_table(entries))
    else:
        console.progress("runs", f"no runs in {args.journal}")
    return EXIT_OK


def _command_runs_show(args: argparse.Namespace, console: Console) -> int:
    store = open_journal(args.journal)
    try:
        entry, found, tail = _run_backend("asyncio", show_data, store, args.run_id, args.journal)
    finally:
        store.close()
    summary = run_summary(entry, found, tail)
    sys.stdout.write(json.dumps(summary, indent=2) + "\n" if args.json else show_text(summary))
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
