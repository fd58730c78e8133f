"""Durability: journal stores and the recovery of unfinished runs.

``Workflow(journal=SqliteJournal("runs.db"))`` journals every run of the workflow;
``await recover_runs(MyFlow(journal=store))`` at start-up resumes the runs that were
interrupted by a crash.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tickwork.journal.memory import InMemoryJournal
from tickwork.journal.sqlite import SqliteJournal
from tickwork.journal.store import JournalError, JournalStore, RunEntry, StatePatch

if TYPE_CHECKING:
    from tickwork.journal.recovery import load_run, recover_runs, resume_run

_RECOVERY = {"load_run", "recover_runs", "resume_run"}


def __getattr__(name: str) -> Any:
    # Recovery sits above the runtime (it builds Contexts and starts runs), while the
    # runtime itself imports the store protocol from this package: load it lazily.
    if name in _RECOVERY:
        from tickwork.journal import recovery

        return getattr(recovery, name)
    raise AttributeError(f"module 'tickwork.journal' has no attribute {name!r}")


__all__ = [
    "InMemoryJournal",
    "JournalError",
    "JournalStore",
    "RunEntry",
    "SqliteJournal",
    "StatePatch",
    "load_run",
    "recover_runs",
    "resume_run",
]
