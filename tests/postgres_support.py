"""PostgreSQL fixtures for the tests marked ``postgres``.

The server comes from outside the test run: ``TW_PG_DSN`` names it (``.ci/run`` starts a
throwaway cluster and sets it; by hand, ``source .ci/postgres.sh && pg_start``). Without a
reachable server these tests skip and say why, unless ``TW_REQUIRE_POSTGRES=1`` (set by CI),
which turns that into a failure so a broken setup cannot pass as green.

Each test that needs tables takes ``pg_schema``: a fresh, uniquely named schema that is
dropped with everything in it after the test, so tests never see each other's rows.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple, NoReturn

import pytest

DSN_VARIABLE = "TW_PG_DSN"
REQUIRE_VARIABLE = "TW_REQUIRE_POSTGRES"
SCHEMA_PREFIX = "tw_test_"
CONNECT_TIMEOUT_S = 10
START_HINT = "start one with `source .ci/postgres.sh && pg_start`"


class PgSchema(NamedTuple):
    """A test's database: the server's DSN and the name of the schema it owns."""

    dsn: str
    schema: str


def postgres_required() -> bool:
    """True when a missing or unreachable server must fail the test instead of skipping."""
    return os.environ.get(REQUIRE_VARIABLE, "") == "1"


def unavailable(reason: str) -> NoReturn:
    """Skip the test for ``reason``, or fail it when ``TW_REQUIRE_POSTGRES=1``."""
    if postgres_required():
        pytest.fail(f"{reason} ({REQUIRE_VARIABLE}=1 makes this a failure)", pytrace=False)
    pytest.skip(reason)


def check_server(dsn: str) -> None:
    """Connect once and run a query; raise ``psycopg.Error`` when the server is unusable."""
    import psycopg

    with psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
        conn.execute("SELECT 1").fetchone()


@contextmanager
def fresh_schema(dsn: str) -> Iterator[str]:
    """Create a uniquely named empty schema; drop it with all its objects on exit."""
    import psycopg
    from psycopg import sql

    name = f"{SCHEMA_PREFIX}{uuid.uuid4().hex[:16]}"
    with psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        # A fresh connection: the test may have left the first one's server busy or broken.
        with psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """The DSN of a reachable PostgreSQL server (``TW_PG_DSN``), checked once per session."""
    dsn = os.environ.get(DSN_VARIABLE, "").strip()
    if not dsn:
        unavailable(f"{DSN_VARIABLE} is not set; {START_HINT}")
    try:
        import psycopg
    except ImportError:
        unavailable('psycopg is not installed; pip install -e ".[postgres]"')
    try:
        check_server(dsn)
    except psycopg.Error as exc:
        unavailable(f"cannot reach PostgreSQL at {DSN_VARIABLE}={dsn}: {exc}; {START_HINT}")
    return dsn


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[PgSchema]:
    """A fresh schema for one test, dropped (CASCADE) after it: yields ``(dsn, schema)``."""
    with fresh_schema(pg_dsn) as name:
        yield PgSchema(pg_dsn, name)
