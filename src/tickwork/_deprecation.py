"""``warn_once``: each deprecated member of tickwork warns once per process.

Deprecated members can sit on hot paths (agents read ``ctx.is_running`` in a loop), and a
warning per call would flood logs and cost a ``warnings.warn`` each time.  So every
``DeprecationWarning`` tickwork emits goes through ``warn_once``, keyed by the member:
the first use warns, later uses cost one set lookup.

This module imports nothing from tickwork, so every layer may use it.
"""

from __future__ import annotations

import warnings

__all__ = ["warn_once"]

# Keys that have warned in this process.  A race between two threads can at worst warn
# twice, which is harmless, so no lock is taken.
_warned: set[str] = set()


def warn_once(key: str, message: str, *, stacklevel: int = 2) -> None:
    """Emit ``DeprecationWarning(message)`` the first time ``key`` is seen in this process.

    ``key`` names the deprecated member (e.g. ``"Context.is_running"``).  ``stacklevel``
    means what it means to ``warnings.warn`` called in place of this function: the default
    2 attributes the warning to the caller of the deprecated member.  The key counts as
    used even when a warnings filter hides the warning.
    """
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel + 1)


def _reset_warned() -> None:
    """Forget which keys have warned: a test hook, so every test sees a first warning."""
    _warned.clear()
