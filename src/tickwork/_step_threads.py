"""Which threads tickwork started to run sync (``def``) step bodies.

Context calls and ``store.sync`` may come from such a thread (they hand their work to the
event loop and wait), but not from any other thread: a thread the user started has no
step to act for, and blocking the loop's own thread would freeze it.
"""

from __future__ import annotations

import threading

__all__ = ["in_step_thread", "step_thread"]

_local = threading.local()


def in_step_thread() -> bool:
    """Whether the current thread is running a sync step body for tickwork."""
    return bool(getattr(_local, "active", False))


class step_thread:
    """Mark the current thread as a sync-step thread for the duration of the block."""

    def __enter__(self) -> None:
        _local.active = True

    def __exit__(self, *exc: object) -> None:
        _local.active = False
