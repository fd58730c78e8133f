"""The ``store`` fixture of the store contract suite: every store, one contract.

Each test gets a fresh, empty store of each kind: ``InMemoryJournal``, a
``SqliteJournal`` on a file in ``tmp_path`` and a ``PostgresJournal`` in a schema of its
own (marked ``postgres``; skipped, with the reason, when no server is reachable or the
Postgres store does not exist yet).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tickwork.stores.memory import InMemoryJournal
from tickwork.stores.sqlite import SqliteJournal

STORES = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def _postgres(request: pytest.FixtureRequest) -> Any:
    dsn, schema = request.getfixturevalue("pg_schema")
    try:
        from tickwork.stores.postgres import PostgresJournal
    except ModuleNotFoundError as error:
        if error.name != "tickwork.stores.postgres":
            raise
        pytest.skip("tickwork.stores.postgres does not exist yet (PostgresJournal)")
    return PostgresJournal(dsn, schema=schema)


@pytest.fixture(params=STORES)
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str
) -> AsyncIterator[Any]:
    """A fresh store of each kind, closed after the test."""
    if request.param == "memory":
        made: Any = InMemoryJournal()
    elif request.param == "sqlite":
        made = SqliteJournal(tmp_path / "journal.db")
    else:
        made = _postgres(request)
    yield made
    close = getattr(made, "close", None)
    if close is not None:
        result = close()
        if inspect.isawaitable(result):
            await result
