"""The PostgreSQL test setup works: a server is reachable, a test gets a schema of its own
that is dropped afterwards, and row locks with SKIP LOCKED behave as the run claims
(spec: scale-out §3) will rely on."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.rows import TupleRow

from postgres_support import SCHEMA_PREFIX, PgSchema, fresh_schema

pytestmark = pytest.mark.postgres


def _schema_exists(dsn: str, name: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s", (name,)
        ).fetchone()
    assert row is not None
    return bool(row[0])


def _create_items(conn: psycopg.Connection[TupleRow], schema: str, n: int) -> None:
    """Create ``<schema>.items(id, label)`` holding rows 1..n, and commit."""
    conn.execute(
        sql.SQL("CREATE TABLE {}.items (id int PRIMARY KEY, label text NOT NULL)").format(
            sql.Identifier(schema)
        )
    )
    with conn.cursor() as cur:
        cur.executemany(
            sql.SQL("INSERT INTO {}.items (id, label) VALUES (%s, %s)").format(
                sql.Identifier(schema)
            ),
            [(i, f"item-{i}") for i in range(1, n + 1)],
        )
    conn.commit()


def test_round_trip_in_own_schema(pg_schema: PgSchema) -> None:
    dsn, schema = pg_schema
    assert schema.startswith(SCHEMA_PREFIX)
    with psycopg.connect(dsn) as conn:
        _create_items(conn, schema, 1)
        row = conn.execute(
            sql.SQL("SELECT id, label FROM {}.items").format(sql.Identifier(schema))
        ).fetchall()
        table = conn.execute(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = 'items'"
            " AND table_schema = %s",
            (schema,),
        ).fetchall()
    assert row == [(1, "item-1")]
    assert table == [(schema,)]


def test_skip_locked_skips_a_row_another_transaction_holds(pg_schema: PgSchema) -> None:
    dsn, schema = pg_schema
    items = sql.Identifier(schema, "items")
    with psycopg.connect(dsn) as holder, psycopg.connect(dsn) as claimer:
        _create_items(holder, schema, 3)
        # The holder's transaction stays open (no autocommit), keeping row 1 locked.
        locked = holder.execute(
            sql.SQL("SELECT id FROM {} WHERE id = 1 FOR UPDATE").format(items)
        ).fetchall()
        assert locked == [(1,)]

        claimed = claimer.execute(
            sql.SQL("SELECT id FROM {} ORDER BY id FOR UPDATE SKIP LOCKED").format(items)
        ).fetchall()
        assert claimed == [(2,), (3,)]
        claimer.rollback()

        # The lock is real: asking for row 1 without waiting is refused.
        with pytest.raises(errors.LockNotAvailable):
            claimer.execute(
                sql.SQL("SELECT id FROM {} WHERE id = 1 FOR UPDATE NOWAIT").format(items)
            )
        claimer.rollback()

        holder.commit()
        claimed = claimer.execute(
            sql.SQL("SELECT id FROM {} ORDER BY id FOR UPDATE SKIP LOCKED").format(items)
        ).fetchall()
        assert claimed == [(1,), (2,), (3,)]
        claimer.rollback()


def test_fresh_schema_is_unique_and_dropped_with_its_tables(pg_dsn: str) -> None:
    with fresh_schema(pg_dsn) as first, fresh_schema(pg_dsn) as second:
        assert first != second
        with psycopg.connect(pg_dsn) as conn:
            _create_items(conn, first, 2)
        assert _schema_exists(pg_dsn, first)
        assert _schema_exists(pg_dsn, second)
    assert not _schema_exists(pg_dsn, first)
    assert not _schema_exists(pg_dsn, second)


def test_fresh_schema_is_dropped_when_the_test_body_raises(pg_dsn: str) -> None:
    with pytest.raises(RuntimeError, match="boom"), fresh_schema(pg_dsn) as name:
        raise RuntimeError("boom")
    assert not _schema_exists(pg_dsn, name)
