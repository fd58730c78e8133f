"""Journal stores: the store protocol and its in-memory and SQLite implementations.

Users import these names from :mod:`tickwork.journal`, which also offers the recovery
functions; this package holds only the stores, so that the runtime, which writes to a
store, never imports the layers above it (recovery needs workflows and handlers).
"""

from __future__ import annotations

from tickwork.stores.memory import InMemoryJournal
from tickwork.stores.sqlite import SqliteJournal
from tickwork.stores.store import JournalError, JournalStore, RunEntry, StatePatch

__all__ = [
    "InMemoryJournal",
    "JournalError",
    "JournalStore",
    "RunEntry",
    "SqliteJournal",
    "StatePatch",
]
