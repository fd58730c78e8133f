"""Shared test configuration: every async test runs under asyncio and trio."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Parametrize every ``@pytest.mark.anyio`` test over both anyio backends."""
    return str(request.param)
