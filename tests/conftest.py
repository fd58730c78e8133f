"""Shared test configuration.

Every async test runs under asyncio and trio, and every test starts with tickwork's
once-per-process deprecation warnings unused, so a test that expects a warning sees it
whatever ran before. The PostgreSQL fixtures (``pg_dsn``, ``pg_schema``) live in
``postgres_support``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from postgres_support import pg_dsn, pg_schema
from tickwork import _deprecation

__all__ = ["pg_dsn", "pg_schema"]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Parametrize every ``@pytest.mark.anyio`` test over both anyio backends."""
    return str(request.param)


@pytest.fixture(autouse=True)
def _fresh_deprecation_warnings() -> Iterator[None]:
    """Forget which deprecated members have warned, before and after each test."""
    _deprecation._reset_warned()
    yield
    _deprecation._reset_warned()
