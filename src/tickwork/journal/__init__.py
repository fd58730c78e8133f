"""Durability: journal stores and the recovery of unfinished runs.

``Workflow(journal=SqliteJournal("runs.db"))`` journals every run of the workflow;
``await recover_runs(MyFlow(journal=store))`` at start-up resumes the runs that were
interrupted by a crash.  The stores live in ``tickwork.stores`` and are re-exported
here with the recovery functions, which sit above workflows and handlers.

``PostgresJournal`` is here too, but imported only when first used: it needs the
optional ``tickwork[postgres]`` dependencies, which ``import tickwork`` must not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tickwork.journal.recovery import RecoveryResult, load_run, recover_runs, resume_run
from tickwork.stores.memory import InMemoryJournal
from tickwork.stores.sqlite import SqliteJournal
from tickwork.stores.store import JournalError, JournalStore, RunEntry, StatePatch

if TYPE_CHECKING:
    from tickwork.stores.postgres import PostgresJournal as PostgresJournal

__all__ = [
    "InMemoryJournal",
    "JournalError",
    "JournalStore",
    "RecoveryResult",
    "RunEntry",
    "SqliteJournal",
    "StatePatch",
    "load_run",
    "recover_runs",
    "resume_run",
]


def __getattr__(name: str) -> Any:
    """``PostgresJournal``, imported on first access (it needs psycopg)."""
    if name == "PostgresJournal":
        from tickwork.stores.postgres import PostgresJournal

        return PostgresJournal
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
