"""The SQLite journal's schema version 4: the claim index's condition written without
an ``IN`` list, claims still scanning that index, and a file of version 3 (the
schema of tickwork before it) upgraded in place with its runs resumable.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from tests.durability.test_journal_stores import (
    TIMEOUT,
    AskFlow,
    Chain,
    Reply,
    hard_abort,
    wait_for_ask,
    wait_until_settled,
)

from tickwork.journal import SqliteJournal, recover_runs
from tickwork.stores import sqlite_schema
from tickwork.stores.records import FINISHED, UNFINISHED
from tickwork.stores.sqlite_fleet import claim_query
from tickwork.stores.sqlite_schema import SCHEMA_VERSION, UNFINISHED_SQL

from .helpers import submit

pytestmark = pytest.mark.anyio


def _sql(path: Path, statement: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        return conn.execute(statement).fetchall()
    finally:
        conn.close()


def _index_sql(path: Path) -> str:
    [(text,)] = _sql(path, "SELECT sql FROM sqlite_master WHERE name = 'runs_claim_order'")
    return str(text)


def _plan(path: Path, query: str, params: dict[str, object]) -> list[str]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        rows = conn.execute(f"EXPLAIN QUERY PLAN {query}", {**params, "limit": 5}).fetchall()
    finally:
        conn.close()
    return [str(row[-1]) for row in rows]


def test_the_index_condition_selects_the_unfinished_runs() -> None:
    conn = sqlite3.connect(":memory:")
    statuses = (*UNFINISHED, *FINISHED)
    selected = {
        status
        for status in statuses
        if conn.execute(f"SELECT {UNFINISHED_SQL} FROM (SELECT ? AS status)", (status,)).fetchone()[
            0
        ]
    }
    conn.close()
    assert selected == set(UNFINISHED)
    assert " IN " not in UNFINISHED_SQL.upper()


@pytest.mark.parametrize("queues", [None, ("a",), ("a", "b")])
def test_claims_scan_the_claim_index(tmp_path: Path, queues: tuple[str, ...] | None) -> None:
    path = tmp_path / "plan.db"
    store = SqliteJournal(path)
    store.check()  # opens (and creates) the file
    store.close()
    assert "IN (" not in _index_sql(path)
    query, params = claim_query(("wf", "other"), queues, 1.0)
    plan = _plan(path, query, params)
    assert plan[0] == "SCAN runs USING INDEX runs_claim_order", plan


async def test_a_file_of_version_3_is_upgraded_and_its_runs_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "v3.db"
    # The store as tickwork with schema version 3 wrote it: steps 1 to 3 are unchanged.
    with monkeypatch.context() as patched:
        patched.setattr(sqlite_schema, "MIGRATIONS", sqlite_schema.MIGRATIONS[:3])
        patched.setattr(sqlite_schema, "SCHEMA_VERSION", 3)
        old = SqliteJournal(path)
        assert await Chain(journal=old).run(run_id="done") == 3
        handler = AskFlow(timeout=TIMEOUT, journal=old).run(run_id="asking")
        await wait_for_ask(handler)
        await wait_until_settled(handler, old, "asking")
        await hard_abort(handler)
        assert await submit(old, "queued", workflow="AskFlow")
        old.close()
    assert _sql(path, "PRAGMA user_version") == [(3,)]
    assert "status IN ('queued', 'running', 'parked')" in _index_sql(path)

    store = SqliteJournal(path)
    assert sorted(e.run_id for e in await store.list_unfinished()) == ["asking", "queued"]
    assert _sql(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)] == [(4,)]
    assert UNFINISHED_SQL in _index_sql(path)
    # The new index holds the unfinished runs, as the old one did.
    indexed = f"SELECT run_id FROM runs INDEXED BY runs_claim_order WHERE {UNFINISHED_SQL}"
    assert sorted(_sql(path, indexed)) == [("asking",), ("queued",)]
    query, params = claim_query(("AskFlow",), None, 0.0)
    assert _plan(path, query, params)[0] == "SCAN runs USING INDEX runs_claim_order"

    handlers = await recover_runs(AskFlow(timeout=TIMEOUT, journal=store))
    assert list(handlers) == ["asking"]
    handlers["asking"].ctx.send_event(Reply(text="again"))
    assert await handlers["asking"] == "hello again"
    claims = await store.claim_runs("w1", ["AskFlow"], limit=5)
    assert [c.lease.run_id for c in claims] == ["queued"]
    done = await store.get_run("done")
    assert done is not None and done.status == "completed"
    assert [e.run_id for e in await store.list_unfinished()] == ["queued"]
    store.close()
