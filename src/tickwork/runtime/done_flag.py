"""A one-shot flag that allocates what its waiters wait on only when someone waits: a
run's end (``RunSession`` is one), and its task's full stop (``host_done``)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import anyio

from tickwork._event_loop import running_asyncio_loop

__all__ = ["DoneFlag"]


async def _nothing() -> None:
    """What a wait for a flag already set awaits."""


class DoneFlag:
    """A one-shot event that allocates what its waiters wait on only when someone waits.

    Most runs are awaited once or not at all while they are live (a parked run waiting
    for a human usually has no awaiter); an eager ``anyio.Event`` per run costs about a
    kilobyte that such runs never use.  Under asyncio each waiter awaits a future of its
    own (what ``asyncio.Event`` does, without its two coroutine layers and anyio's
    wrapper: every live run that someone awaits holds these), the first one kept
    without a list; under trio, an ``anyio.Event``.
    """

    __slots__ = ("_event", "_set", "_waiter")

    def __init__(self) -> None:
        self._set = False
        # Under asyncio: the first waiter's future, and the further ones in a list (most
        # runs have one waiter at most: no list).  Under trio: an ``anyio.Event``.
        self._waiter: Any = None
        self._event: anyio.Event | list[Any] | None = None

    def is_set(self) -> bool:
        """Whether ``set`` was called."""
        return self._set

    def set(self) -> None:
        """Set the flag and wake every waiter."""
        self._set = True
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        waiters, self._event = self._event, None
        if isinstance(waiters, list):
            for future in waiters:
                if not future.done():
                    future.set_result(None)
        elif waiters is not None:
            waiters.set()

    def wait(self) -> Awaitable[None]:
        """What to await until the flag is set.

        Under asyncio, a future of the waiter's own, awaited directly rather than through
        a coroutine of ours (every awaited live run would hold that coroutine).  The
        cancellation of a waiter cancels its future, which the next waiter (or ``set``)
        drops.
        """
        if self._set:
            return _nothing()
        loop = running_asyncio_loop()
        if loop is None:
            event = self._event
            if event is None:
                event = self._event = anyio.Event()
            assert not isinstance(event, list)
            return event.wait()
        future: Awaitable[None] = loop.create_future()
        first = self._waiter
        if first is None or first.done():  # no waiter, or a cancelled one
            self._waiter = future
            return future
        waiters = self._event
        if waiters is None:
            waiters = self._event = []
        else:
            assert isinstance(waiters, list)
            if waiters:  # drop the futures of cancelled waiters
                waiters[:] = [waiter for waiter in waiters if not waiter.done()]
        waiters.append(future)
        return future
