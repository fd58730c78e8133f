"""Durability: journal stores and the recovery of unfinished runs.

``Workflow(journal=SqliteJournal("runs.db"))`` journals every run of the workflow;
``await recover_runs(MyFlow(journal=store))`` at start-up resumes the runs that were
interrupted by a crash.  The stores live in ``tickwork.stores`` and are re-exported
here with the recovery functions, which sit above workflows and handlers.

Every name is imported on first use (PEP 562), so ``from tickwork.journal import
InMemoryJournal`` does not load SQLite.  ``PostgresJournal`` is here too: it needs the
optional ``tickwork[postgres]`` dependencies, which ``import tickwork`` must not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tickwork._lazy import lazy_exports

if TYPE_CHECKING:
    from tickwork.journal.recovery import RecoveryResult as RecoveryResult
    from tickwork.journal.recovery import load_run as load_run
    from tickwork.journal.recovery import recover_runs as recover_runs
    from tickwork.journal.recovery import resume_run as resume_run
    from tickwork.stores.memory import InMemoryJournal as InMemoryJournal
    from tickwork.stores.postgres import PostgresJournal as PostgresJournal
    from tickwork.stores.sqlite import SqliteJournal as SqliteJournal
    from tickwork.stores.store import JournalError as JournalError
    from tickwork.stores.store import JournalStore as JournalStore
    from tickwork.stores.store import RunEntry as RunEntry
    from tickwork.stores.store import SnapshotAppendingStore as SnapshotAppendingStore
    from tickwork.stores.store import StatePatch as StatePatch

__all__ = [
    "InMemoryJournal",
    "JournalError",
    "JournalStore",
    "RecoveryResult",
    "RunEntry",
    "SnapshotAppendingStore",
    "SqliteJournal",
    "StatePatch",
    "load_run",
    "recover_runs",
    "resume_run",
]

# Run time only: type checkers read the imports above; a module __getattr__ would
# have them accept any name, a typo included, as ``Any``.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "RecoveryResult": "tickwork.journal.recovery",
            "load_run": "tickwork.journal.recovery",
            "recover_runs": "tickwork.journal.recovery",
            "resume_run": "tickwork.journal.recovery",
            "InMemoryJournal": "tickwork.stores.memory",
            "PostgresJournal": "tickwork.stores.postgres",
            "SqliteJournal": "tickwork.stores.sqlite",
            "JournalError": "tickwork.stores.store",
            "JournalStore": "tickwork.stores.store",
            "RunEntry": "tickwork.stores.store",
            "SnapshotAppendingStore": "tickwork.stores.store",
            "StatePatch": "tickwork.stores.store",
        },
    )
