"""Identifiers minted by the reducer from the state's counters.

Ids are deterministic: the same state and ticks always mint the same ids, which is what
makes replay and resume reproducible.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping

__all__ = [
    "WORKER_NAMES",
    "EmissionKey",
    "invocation_id",
    "stream_id",
    "work_item_id",
]

EmissionKey = tuple[str, int]
"""``(invocation id, index)``: sends take 0, 1, ... in call order, then returned events."""


# Bound ``str.format`` methods rather than functions: the reducer mints two ids per step
# execution, and a builtin call skips a Python frame.
work_item_id: Callable[[int], str] = "wi-{}".format
"""The id of the ``seq``-th work item of a run."""

invocation_id: Callable[[int], str] = "inv-{}".format
"""The id of the ``seq``-th invocation of a run."""


class _WorkerNames(dict[int, str]):
    """Worker slot -> its name (``str(slot)``), one shared string per slot."""

    def __missing__(self, slot: int) -> str:
        name = self[slot] = str(slot)
        return name


WORKER_NAMES: Mapping[int, str] = _WorkerNames()
"""The ``worker_id`` text of each worker slot.  Step-state records are buffered for the
whole run, two per step execution: sharing the strings saves one allocation each."""


def stream_id(scope_path: tuple[str, ...], step: str, seq: int) -> str:
    """``"stream-" + 16 hex digits`` derived from the enclosing path, the step and ``seq``."""
    digest = hashlib.sha256(f"{'/'.join(scope_path)}|{step}|{seq}".encode()).hexdigest()
    return "stream-" + digest[:16]
