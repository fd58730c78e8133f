"""parked_wake_poll: :mod:`bench.parked_wake` over SQLite, where nothing notifies.

The worker is another process sharing the journal file, so it learns about a send only
at its next poll (every second): quality.md wants at most 1.5 s from the send to the
step.  Skipped, with a note, when this tickwork's ``SqliteJournal`` does not implement
the fleet contract.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio

from bench.parked_wake import SqliteStore, scenario_for


def sqlite_fleet_missing() -> str | None:
    """Why a SQLite journal cannot serve a fleet in this build (``None`` if it can)."""
    from tickwork.journal import SqliteJournal

    async def probe(store: SqliteJournal) -> None:
        await store.list_workers()

    with tempfile.TemporaryDirectory() as folder:
        store = SqliteJournal(Path(folder) / "probe.db")
        try:
            anyio.run(probe, store)
        except NotImplementedError:
            return "this SqliteJournal has no fleet contract (workers, claims, inbox) yet"
        finally:
            store.close()
    return None


SCENARIO = scenario_for(
    "parked_wake_poll",
    SqliteStore,
    sqlite_fleet_missing,
    "<= 1.5 s from a send to the step (no notifications: polling)",
    (5,),
    1.0,
    max_size=5,  # about a second per wake
)
