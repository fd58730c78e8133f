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
    """The asyncio event loop running in this thread, or ``None`` (trio, or no loop)."""
    if "asyncio" not in sys.modules:
        return None
    import asyncio

    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
