"""``num_concurrent_runs``: a FIFO limit on the active runs of one workflow instance.

A ticket is taken synchronously when ``run()`` is called, so runs start in the order
their ``run()`` calls were made.  (A semaphore acquired by the runs' own tasks would
grant slots in task-scheduling order, which trio deliberately randomizes.)
"""

from __future__ import annotations

import contextlib
from collections import deque

import anyio

__all__ = ["RunSlots"]


class RunSlots:
    """Hands out ``limit`` slots in the order tickets were taken."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0
        self._waiting: deque[anyio.Event] = deque()

    def take_ticket(self) -> anyio.Event | None:
        """A slot now (``None``), or an event that is set when this ticket's turn comes."""
        if self.active < self.limit and not self._waiting:
            self.active += 1
            return None
        turn = anyio.Event()
        self._waiting.append(turn)
        return turn

    def release(self) -> None:
        """Give a finished run's slot to the oldest waiting ticket."""
        if self._waiting:
            self._waiting.popleft().set()
        else:
            self.active -= 1

    def forfeit(self, turn: anyio.Event) -> None:
        """A run gave up before its turn (hard abort): drop or pass on its ticket."""
        if turn.is_set():
            self.release()
        else:
            with contextlib.suppress(ValueError):
                self._waiting.remove(turn)
