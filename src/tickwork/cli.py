"""The ``tickwork`` command: run, draw and inspect workflows from a shell.

Commands::

    tickwork run MODULE:WORKFLOW [key=value ...] [--journal PATH] [--timeout S]
                 [--backend asyncio|trio] [--quiet]
    tickwork draw MODULE:WORKFLOW [-o FILE.mmd|FILE.html]
    tickwork runs list --journal PATH [--json]
    tickwork runs show RUN_ID --journal PATH [--workflow MODULE:WORKFLOW] [--json]
    tickwork runs resume RUN_ID --journal PATH [--workflow MODULE:WORKFLOW]
                 [--backend asyncio|trio] [--quiet]
    tickwork runs send RUN_ID EVENT_TYPE JSON --journal PATH [--workflow MODULE:WORKFLOW]
    tickwork runs cancel RUN_ID --journal PATH
    (every ``runs`` action takes ``--dsn DSN [--schema S]`` instead of ``--journal``)
    tickwork worker MODULE:OBJ (--dsn DSN | --journal PATH) [--concurrency N] ...
    tickwork workers (--dsn DSN | --journal PATH)
    tickwork db migrate --dsn DSN [--schema S]
                 [--backend asyncio|trio] [--quiet]
    tickwork --version

``MODULE`` is a dotted module name (importable from the current directory too) or a
path to a ``.py`` file; ``WORKFLOW`` names a Workflow class, which the command
instantiates, or a ready Workflow instance.  ``key=value`` arguments become the start
event's fields: a value that parses as JSON is used as such (``count=3``,
``tags='["a","b"]'``, ``ok=true``), anything else is a string (``name=Ada``).  The
``runs`` commands find a run's workflow by the name recorded with it when
``--workflow`` is not given (see ``tickwork._cli.runs``).

Output: the run's result goes to **stdout** (as JSON when it can be encoded, else its
``repr``); progress goes to **stderr**: steps starting and finishing (or failing, with
the exception and the retry decision), events the steps write to the stream, and ``k/n``
progress of fan-out streams that a ``list[E]`` step joins.  When the run asks a human
(a step returns an ``InputRequiredEvent`` or waits with ``ctx.wait_for_event``) the
command prompts on stderr and reads the answer, as JSON, from stdin.

Exit status: 0 on success; 1 when the run (or the workflow's own code) fails, or a
question gets no answer; 2 when the command line cannot be acted on (bad syntax, a
module, attribute, run or event type that does not exist, something that is not a
workflow, a bad ``key=value`` or answer, a journal that cannot be opened, read or
written); 130 on Ctrl-C, which says how to resume a journaled run.  Every error is
reported as one line on stderr, starting with ``tickwork: error:``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from tickwork._cli.console import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    CliError,
    Console,
    one_line,
)
from tickwork._cli.db import add_db_command
from tickwork._cli.follow import Follow, ResumeHint, print_result, run_backend
from tickwork._cli.journal_view import journal_problem, open_journal_for_run
from tickwork._cli.loading import load_target, parse_assignments, workflow_instance
from tickwork._cli.runs import (
    command_runs_cancel,
    command_runs_list,
    command_runs_resume,
    command_runs_send,
    command_runs_show,
)
from tickwork._cli.watch import attach_watch
from tickwork._cli.worker import add_parsers as add_fleet_parsers
from tickwork._version import __version__
from tickwork.journal import JournalError, SqliteJournal
from tickwork.representation.draw import draw_workflow, to_mermaid
from tickwork.workflow import Workflow

__all__ = ["CliError", "main", "parse_assignments"]


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
        hint = f"; {console.resume_hint}" if console.resume_hint else ""
        console.error(f"interrupted{hint}")
        return EXIT_INTERRUPTED


# --- the command line --------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tickwork", description="Run, draw and inspect tickwork workflows."
    )
    parser.add_argument("--version", action="version", version=f"tickwork {__version__}")
    commands = parser.add_subparsers(dest="command_name", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run a workflow and print its result")
    run.add_argument("target", metavar="MODULE:WORKFLOW")
    run.add_argument("assignments", nargs="*", metavar="key=value", help="start event fields")
    run.add_argument("--journal", metavar="PATH", help="journal the run to this SQLite file")
    run.add_argument(
        "--timeout",
        metavar="S",
        type=_timeout_value,
        default=argparse.SUPPRESS,
        help="the run's timeout in seconds, or none (default: the workflow's own)",
    )
    _add_follow_options(run)
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

    runs = commands.add_parser("runs", help="inspect, resume and answer journaled runs")
    runs_commands = runs.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
    listing = runs_commands.add_parser("list", help="list the runs of a journal")
    show = runs_commands.add_parser("show", help="show a run's current state")
    resume = runs_commands.add_parser(
        "resume", help="resume a run (answering its questions) and follow it to its end"
    )
    send = runs_commands.add_parser(
        "send", help="send an event to a run, and follow it until it waits again or ends"
    )
    for sub in (show, resume, send):
        sub.add_argument("run_id", metavar="RUN_ID")
    send.add_argument("event_type", metavar="EVENT_TYPE", help="the event class's name")
    send.add_argument("payload", metavar="JSON", help="the event's fields as JSON")
    cancel = runs_commands.add_parser(
        "cancel", help="ask a run to stop gracefully (delivered through its inbox)"
    )
    cancel.add_argument("run_id", metavar="RUN_ID")
    for sub in (listing, show, resume, send, cancel):
        where = sub.add_mutually_exclusive_group(required=True)
        where.add_argument("--journal", metavar="PATH", help="the SQLite journal")
        where.add_argument("--dsn", help="the PostgreSQL store (a connection string)")
        sub.add_argument("--schema", default="tickwork", help="the Postgres schema (tickwork)")
    for sub in (show, resume, send):
        sub.add_argument(
            "--workflow",
            metavar="MODULE:WORKFLOW",
            help="the run's workflow class (default: the one its recorded name imports)",
        )
    for sub in (listing, show):
        sub.add_argument("--json", action="store_true", help="print JSON instead of text")
    for sub in (resume, send):
        _add_follow_options(sub)
    listing.set_defaults(command=command_runs_list)
    show.set_defaults(command=command_runs_show)
    resume.set_defaults(command=command_runs_resume)
    send.set_defaults(command=command_runs_send)
    cancel.set_defaults(command=command_runs_cancel)
    add_fleet_parsers(commands)
    add_db_command(commands)
    return parser


def _add_follow_options(parser: argparse.ArgumentParser) -> None:
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


# --- tickwork run ------------------------------------------------------------------------


def _command_run(args: argparse.Namespace, console: Console) -> int:
    start_fields = parse_assignments(args.assignments)
    target = load_target(args.target)
    store = open_journal_for_run(args.journal) if args.journal else None
    options = _run_options(args, store)
    workflow = workflow_instance(args.target, target, options)
    follow = Follow(
        workflow,
        console,
        None if console.quiet else attach_watch(workflow),
        interactive=sys.stdin.isatty(),
    )
    try:
        result = run_backend(args.backend, _start_and_follow, workflow, start_fields, follow, args)
    finally:
        if store is not None:
            store.close()
    print_result(result)
    return EXIT_OK


def _run_options(args: argparse.Namespace, store: SqliteJournal | None) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if store is not None:
        options["journal"] = store
    if "timeout" in args:  # given on the command line (``none`` gives None)
        options["timeout"] = args.timeout
    return options


async def _start_and_follow(
    workflow: Workflow, fields: dict[str, Any], follow: Follow, args: argparse.Namespace
) -> Any:
    try:
        handler = workflow.run(**fields)
    except JournalError as error:
        raise journal_problem(error) from None
    except Exception as error:
        raise CliError(
            f"cannot start {workflow.workflow_name}: {one_line(error)}", EXIT_FAILURE
        ) from None
    if args.journal:
        follow.hint = ResumeHint(handler.run_id, f"--journal {args.journal}", args.target)
    return await follow.run(handler, "started")


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


if __name__ == "__main__":
    raise SystemExit(main())
