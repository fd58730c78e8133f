"""Which event loop runs here: asyncio's, or another (trio).

tickwork runs under asyncio and trio through anyio; a few hot paths use asyncio's own
futures and handles when asyncio runs them, for less work per wake-up.  This leaf module
tells them, without importing asyncio in a program that never did.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["running_asyncio_loop"]


def running_asyncio_loop() -> Any:
    """The asyncio event loop running in this thread, or ``None`` (trio, or no loop).

    Asks asyncio's low-level ``_get_running_loop`` (which answers ``None`` instead of
    raising): under trio, ``get_running_loop`` would raise and catch an exception on
    every call, and these calls sit on a durable run's every append.
    """
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return None
    return asyncio._get_running_loop()
