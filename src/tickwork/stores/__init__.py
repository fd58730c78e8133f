"""Journal stores: the store protocol and its in-memory and SQLite implementations.

Users import these names from ``tickwork.journal``, which also offers the recovery
functions; this package holds only the stores, so that the runtime, which writes to a
store, never imports the layers above it (recovery needs workflows and handlers).

The names below are imported on first use (PEP 562): a run that journals nothing never
loads SQLite or the stores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tickwork._lazy import lazy_exports

if TYPE_CHECKING:
    from tickwork.stores.memory import InMemoryJournal as InMemoryJournal
    from tickwork.stores.sqlite import SqliteJournal as SqliteJournal
    from tickwork.stores.store import JournalError as JournalError
    from tickwork.stores.store import JournalStore as JournalStore
    from tickwork.stores.store import RunEntry as RunEntry
    from tickwork.stores.store import StatePatch as StatePatch

__all__ = [
    "InMemoryJournal",
    "JournalError",
    "JournalStore",
    "RunEntry",
    "SqliteJournal",
    "StatePatch",
]

# Run time only: type checkers read the imports above; a module __getattr__ would
# have them accept any name, a typo included, as ``Any``.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "InMemoryJournal": "tickwork.stores.memory",
            "SqliteJournal": "tickwork.stores.sqlite",
            "JournalError": "tickwork.stores.store",
            "JournalStore": "tickwork.stores.store",
            "RunEntry": "tickwork.stores.store",
            "StatePatch": "tickwork.stores.store",
        },
    )
