"""What the Postgres scenarios share: the server, a throwaway schema, the server's settings.

The server comes from outside (``TW_PG_DSN``), as for the tests marked ``postgres``; the
figures in docs/performance.md come from a cluster started with fsync on (see there).
Every measurement gets a fresh schema, dropped with everything in it afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

DSN_VARIABLE = "TW_PG_DSN"


def postgres_missing() -> str | None:
    """Why the Postgres scenarios cannot run here (``None`` when they can)."""
    if not os.environ.get(DSN_VARIABLE, "").strip():
        return (
            f"{DSN_VARIABLE} is unset (start a server: see the Fleet section of "
            "docs/performance.md)"
        )
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'tickwork[postgres]')"
    return None


def dsn() -> str:
    """The server's DSN (``TW_PG_DSN``)."""
    return os.environ[DSN_VARIABLE].strip()


@contextmanager
def fresh_schema() -> Iterator[str]:
    """A new, uniquely named schema name; the schema is dropped (CASCADE) on exit.

    The store creates it on first use (``PostgresJournal(..., migrate=True)``).
    """
    import psycopg
    from psycopg import sql

    name = f"tw_bench_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        with psycopg.connect(dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def durability() -> str:
    """The server's fsync and synchronous_commit settings, for the notes."""
    import psycopg

    with psycopg.connect(dsn(), autocommit=True) as conn:
        fsync = conn.execute("SHOW fsync").fetchone()
        sync = conn.execute("SHOW synchronous_commit").fetchone()
    return f"fsync {fsync[0] if fsync else '?'}, synchronous_commit {sync[0] if sync else '?'}"


def backend_pids() -> list[int]:
    """The process ids of the server's backends and background processes."""
    import psycopg

    with psycopg.connect(dsn(), autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity").fetchall()
    return [int(row[0]) for row in rows]
