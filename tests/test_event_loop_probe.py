"""``running_asyncio_loop``: asyncio's running loop under asyncio, ``None`` elsewhere."""

from __future__ import annotations

import asyncio

import pytest

from tickwork._event_loop import running_asyncio_loop

pytestmark = pytest.mark.anyio


async def test_names_the_running_asyncio_loop_and_nothing_under_trio(anyio_backend: str) -> None:
    found = running_asyncio_loop()
    if anyio_backend == "asyncio":
        assert found is asyncio.get_running_loop()
    else:
        assert found is None


def test_no_loop_outside_an_event_loop() -> None:
    assert running_asyncio_loop() is None
