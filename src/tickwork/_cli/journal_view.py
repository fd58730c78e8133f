"""``tickwork runs list`` and ``runs show``: read a SQLite journal and summarize it.

Everything here reads through the journal-store API (``list_runs``, ``get_run``,
``read_snapshot``, ``read``) and the normative snapshot format (api.md §10.3); nothing
is written.  Store errors become ``CliError`` lines.
"""

from __future__ import annotations

import re
import shlex
import sqlite3
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from tickwork._cli.console import CliError, one_line
from tickwork.journal import JournalError, RunEntry, SqliteJournal
from tickwork.stores.store import JournalStore

__all__ = [
    "entry_dict",
    "get_entry",
    "guarded",
    "journal_problem",
    "local_time",
    "open_journal",
    "open_journal_for_run",
    "run_summary",
    "runs_table",
    "show_data",
    "show_text",
    "snapshot_summary",
]


def journal_problem(error: JournalError) -> CliError:
    """The usage error (status 2) for a journal that cannot be used; the store's message
    already names the path, the run and the seq."""
    return CliError(" ".join(str(error).split()))


def store_label(args: Any) -> str:
    """How messages name the store of ``--journal`` or ``--dsn``."""
    if getattr(args, "dsn", None):
        return f"{redact_dsn(args.dsn)} (schema {args.schema})"
    return str(args.journal)


def store_option(args: Any) -> str:
    """The options that name the same store again, for hints (``--journal PATH``...)."""
    if getattr(args, "dsn", None):
        option = f"--dsn {shlex.quote(args.dsn)}"
        return option if args.schema == "tickwork" else f"{option} --schema {args.schema}"
    return f"--journal {shlex.quote(str(args.journal))}"


def open_runs_store(args: Any, *, for_run: bool = False) -> Any:
    """The store ``--journal`` or ``--dsn`` names (``for_run``: a fresh one to run in)."""
    if getattr(args, "dsn", None):
        try:
            from tickwork.stores.postgres import PostgresJournal
        except ImportError as error:
            raise CliError(
                f'--dsn needs the Postgres extra: pip install "tickwork[postgres]" ({error})'
            ) from None
        try:
            store = PostgresJournal(args.dsn, schema=args.schema)
            store.check()
        except JournalError as error:
            raise journal_problem(error) from None
        return store
    return open_journal_for_run(args.journal) if for_run else open_journal(args.journal)


def redact_dsn(dsn: str) -> str:
    """``dsn`` without its password."""
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", dsn)


def open_journal(path: str) -> SqliteJournal:
    """The journal at ``path``, which must exist (opening would create an empty one)."""
    if not Path(path).exists():
        raise CliError(f"no journal at {path!r}")
    try:
        return SqliteJournal(path)  # a directory, an unreadable file... is refused here
    except JournalError as error:
        raise journal_problem(error) from None


def open_journal_for_run(path: str) -> SqliteJournal:
    """The journal at ``path`` for ``run --journal``, opened (and created) now, so a path
    that cannot hold one fails before the workflow is built."""
    try:
        store = SqliteJournal(path)
        store.check()
    except JournalError as error:
        raise journal_problem(error) from None
    return store


def runs_table(entries: list[RunEntry]) -> str:
    """The runs as an aligned text table with a header line (times in local time)."""
    rows = [("RUN ID", "WORKFLOW", "STATUS", "STARTED", "LAST ACTIVITY", "LAST SEQ")]
    rows += [
        (
            e.run_id,
            e.workflow_name,
            e.status,
            local_time(e.created_at),
            local_time(e.updated_at),
            str(e.last_seq),
        )
        for e in entries
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        + "\n"
        for row in rows
    )


def run_summary(
    entry: RunEntry, found: tuple[int, dict[str, Any]] | None, tail: dict[str, int]
) -> dict[str, Any]:
    """What ``runs show`` prints: the run entry, its snapshot summary and the tail count."""
    return {
        **entry_dict(entry),
        "snapshot": snapshot_summary(*found) if found is not None else None,
        "records_after_snapshot": tail,
    }


async def guarded(call: Callable[[], Any], path: str) -> Any:
    """``await call()``, with a journal that cannot be read reported as a usage error."""
    try:
        return await call()
    except JournalError as error:
        raise journal_problem(error) from None
    except sqlite3.Error as error:  # a store always wraps these; kept for safety
        raise CliError(f"cannot read journal {path!r}: {one_line(error)}") from None


async def get_entry(store: JournalStore, run_id: str, path: str) -> RunEntry:
    entry: RunEntry | None = await guarded(lambda: store.get_run(run_id), path)
    if entry is None:
        raise CliError(f"no run {run_id!r} in journal {path!r}")
    return entry


async def show_data(
    store: JournalStore, run_id: str, path: str
) -> tuple[RunEntry, tuple[int, dict[str, Any]] | None, dict[str, int]]:
    entry = await get_entry(store, run_id, path)
    found = await guarded(lambda: store.read_snapshot(run_id), path)
    tail: dict[str, int] = {}

    async def count_tail() -> None:
        async for record in store.read(run_id, found[0] if found else 0):
            kind = str(record.data.get("type", "?"))
            tail[kind] = tail.get(kind, 0) + 1

    await guarded(count_tail, path)
    return entry, found, tail


def entry_dict(entry: RunEntry) -> dict[str, Any]:
    """A run's entry as JSON-ready data (times as epoch seconds)."""
    return {
        "run_id": entry.run_id,
        "workflow": entry.workflow_name,
        "status": entry.status,
        "created_at": entry.created_at,
        "updated_at": entry.updated_at,
        "options": dict(entry.options),
        "last_seq": entry.last_seq,
    }


def local_time(stamp: float | None) -> str:
    """``2026-12-01 10:00:05`` (local time) for epoch seconds; ``-`` when unknown."""
    if stamp is None:
        return "-"
    return datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M:%S")


def snapshot_summary(seq: int, snapshot: dict[str, Any]) -> dict[str, Any]:
    """The parts of a §10.3 snapshot a human asks about first."""
    steps: dict[str, dict[str, int]] = {}
    for name, worker in sorted((snapshot.get("workers") or {}).items()):
        counts = {
            "queued": len(worker.get("queue") or ()),
            "in_progress": len(worker.get("in_progress") or ()),
            "waiting": len(worker.get("collected_waiters") or ()),
        }
        steps[name] = {k: v for k, v in counts.items() if v}
    streams = {
        stream_id: {
            "producer": stream.get("source_step"),
            "open_work_items": stream.get("open_work_items"),
        }
        for stream_id, stream in (snapshot.get("streams") or {}).items()
    }
    state = snapshot.get("state") or {}
    state_data = (state.get("state_data") or {}).get("_data")
    return {
        "taken_at_seq": seq,
        "version": snapshot.get("version"),
        "is_running": snapshot.get("is_running"),
        "elapsed_alive": snapshot.get("elapsed_alive"),
        "journal_seq": snapshot.get("journal_seq"),
        "steps": steps,
        "open_streams": streams,
        "undelivered_emissions": len(snapshot.get("deliveries") or ()),
        "state_type": state.get("state_type"),
        "state_keys": sorted(state_data) if isinstance(state_data, dict) else None,
    }


def show_text(summary: dict[str, Any], current: list[str] | None) -> str:
    """What ``runs show`` prints: the run's entry, its ``current`` state lines when the
    workflow could be loaded (else a summary of its latest snapshot), its error, and
    where its journal stands."""
    options = summary["options"]
    timeout = options.get("timeout", "default") if isinstance(options, dict) else "default"
    timeout_text = (
        "none"
        if timeout is None
        else f"{timeout:g}s"
        if isinstance(timeout, (int, float))
        else "the workflow's default"
    )
    lines = [
        f"run:           {summary['run_id']}",
        f"workflow:      {summary['workflow']}",
        f"status:        {summary['status']}",
        f"started:       {local_time(summary['created_at'])}",
        f"last activity: {local_time(summary['updated_at'])}",
        f"timeout:       {timeout_text}",
    ]
    snapshot = summary["snapshot"]
    if current is not None:
        lines += current
    else:
        lines.append(f"current state: unknown ({summary['current_unavailable']})")
        if snapshot is not None:
            lines += _snapshot_lines(snapshot)
    if summary.get("error"):
        lines.append(f"error:         {summary['error']}")
    tail = summary["records_after_snapshot"]
    counted = ", ".join(f"{n} {kind}" for kind, n in sorted(tail.items()))
    where = (
        "no snapshot" if snapshot is None else f"snapshot before record {snapshot['taken_at_seq']}"
    )
    lines.append(
        f"journal:       last record {summary['last_seq']}, {where}, "
        f"{sum(tail.values())} records after it" + (f" ({counted})" if counted else "")
    )
    return "\n".join(lines) + "\n"


def _snapshot_lines(snapshot: dict[str, Any]) -> list[str]:
    busy = [
        f"{name} ({_counts_text(counts)})" for name, counts in snapshot["steps"].items() if counts
    ]
    streams = [
        f"{s['producer']} ({s['open_work_items']} open)" for s in snapshot["open_streams"].values()
    ]
    elapsed = snapshot["elapsed_alive"]
    return [
        f"snapshot:      before record {snapshot['taken_at_seq']} (format {snapshot['version']})",
        f"  running:       {'yes' if snapshot['is_running'] else 'no'}",
        f"  alive time:    {elapsed:.3f}s"
        if isinstance(elapsed, (int, float))
        else "  alive time:    ?",
        f"  busy steps:    {', '.join(busy) or 'none'}",
        f"  open streams:  {', '.join(streams) or 'none'}",
        f"  undelivered:   {snapshot['undelivered_emissions']}",
        f"  state:         {snapshot['state_type']} {snapshot['state_keys'] or []}",
    ]


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{number} {what.replace('_', ' ')}" for what, number in counts.items())
