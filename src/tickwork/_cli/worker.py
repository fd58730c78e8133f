"""``tickwork worker`` and ``tickwork workers``: run a worker of a fleet, list them.

``tickwork worker MODULE:OBJ (--dsn DSN | --journal FILE) [--queue Q]... [--concurrency N]
[--lease S] [--idle-release S] [--max-claims N]`` serves the workflows ``OBJ`` names (a
Workflow class or instance, or a list, tuple or dict of them) until SIGTERM or Ctrl-C,
then hands its runs back to the fleet.  ``tickwork workers (--dsn DSN | --journal FILE)``
lists the workers that are alive and the runs they own.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Iterable
from typing import Any

import anyio
from anyio.abc import TaskStatus

from tickwork._cli.console import CliError
from tickwork._cli.journal_view import open_runs_store
from tickwork._cli.loading import _import_module
from tickwork.fleet.worker import Worker, WorkerOptions
from tickwork.stores.store import DEFAULT_MAX_CLAIMS, JournalStore
from tickwork.workflow import Workflow

__all__ = ["add_parsers", "open_store"]


def add_parsers(commands: Any) -> None:
    """Add ``worker`` and ``workers`` to the command line's subparsers."""
    worker = commands.add_parser(
        "worker",
        help="run a worker of a fleet: claim journaled runs and run them",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    worker.add_argument("target", metavar="MODULE:OBJ", help="the workflow(s) to serve")
    _store_arguments(worker)
    worker.add_argument(
        "--queue", action="append", dest="queues", metavar="Q", help="serve only these queues"
    )
    worker.add_argument(
        "--concurrency", type=int, default=16, metavar="N", help="runs at once (16)"
    )
    worker.add_argument("--lease", type=float, default=30.0, metavar="S", help="lease time (30 s)")
    worker.add_argument(
        "--idle-release",
        type=float,
        default=60.0,
        metavar="S",
        help="park a run that only waits for this long (60 s; 0: at once)",
    )
    worker.add_argument(
        "--grace", type=float, default=30.0, metavar="S", help="shutdown grace (30 s)"
    )
    worker.add_argument(
        "--max-claims",
        type=_positive_int,
        default=DEFAULT_MAX_CLAIMS,
        metavar="N",
        help=f"fail a run claimed N times without progress (a poison run; {DEFAULT_MAX_CLAIMS})",
    )
    worker.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    worker.set_defaults(command=run_worker)
    workers = commands.add_parser("workers", help="list the workers of a fleet and their runs")
    _store_arguments(workers)
    workers.set_defaults(command=list_workers)


def _positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _store_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--dsn", help="a PostgreSQL connection string (the fleet's store)")
    group.add_argument("--journal", metavar="FILE", help="a SQLite journal file (one machine)")
    parser.add_argument("--schema", default="tickwork", help="the Postgres schema (tickwork)")


def open_store(args: argparse.Namespace) -> JournalStore:
    """The store ``--dsn`` or ``--journal`` names (a one-line error if it cannot be used)."""
    store: JournalStore = open_runs_store(args, for_run=True)
    return store


def _workflows(spec: str, store: JournalStore) -> list[Workflow]:
    module_name, sep, attribute = spec.rpartition(":")
    if not sep or not module_name or not attribute:
        raise CliError(f"expected MODULE:OBJ, got {spec!r} (for example myapp.flows:MyFlow)")
    target: Any = _import_module(module_name)
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise CliError(f"module {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    items: Iterable[Any]
    if isinstance(target, dict):
        items = target.values()
    elif isinstance(target, (list, tuple)):
        items = target
    else:
        items = [target]
    workflows = [_served(spec, item, store) for item in items]
    if not workflows:
        raise CliError(f"{spec} names no workflow")
    return workflows


def _served(spec: str, item: Any, store: JournalStore) -> Workflow:
    if isinstance(item, type) and issubclass(item, Workflow):
        return item(journal=store, timeout=None)
    if isinstance(item, Workflow):
        item._journal = store  # the fleet's store, whatever the module configured
        return item
    raise CliError(f"{spec} holds {type(item).__name__} {item!r:.60}, not a Workflow")


def run_worker(args: argparse.Namespace, console: Any) -> int:
    """``tickwork worker``: serve until SIGTERM/SIGINT, then hand the runs back."""
    store = open_store(args)
    workflows = _workflows(args.target, store)
    options = WorkerOptions(
        queues=args.queues,
        concurrency=args.concurrency,
        lease_seconds=args.lease,
        idle_release=args.idle_release,
        grace=args.grace,
        max_claims=args.max_claims,
    )
    worker = Worker(workflows, store, options)

    async def main() -> None:
        async with anyio.create_task_group() as group:
            # Serving is announced once a SIGTERM would hand the runs back.
            await group.start(_stop_on_signal, worker)
            print(
                f"[worker] {worker.worker_id} serving {', '.join(sorted(worker.workflows))}",
                file=sys.stderr,
                flush=True,
            )
            await worker.run()
            group.cancel_scope.cancel()
        print(
            f"[worker] {worker.worker_id} stopped: claimed {worker.claimed}, parked "
            f"{worker.parked}, lost {worker.lost}",
            file=sys.stderr,
            flush=True,
        )

    anyio.run(main, backend=args.backend)
    return 0


async def _stop_on_signal(
    worker: Worker, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for _signum in signals:
            print("[worker] stopping: handing the runs back", file=sys.stderr, flush=True)
            worker.stop()
            return


def list_workers(args: argparse.Namespace, console: Any) -> int:
    """``tickwork workers``: who is alive and what they own."""
    store = open_store(args)

    async def main() -> list[Any]:
        return await store.list_workers()

    now = time.time()
    for entry in anyio.run(main):
        seen = now - entry.last_seen
        runs = ", ".join(entry.runs) if entry.runs else "no runs"
        print(f"{entry.worker_id}  seen {seen:.0f} s ago  {runs}")
    return 0
