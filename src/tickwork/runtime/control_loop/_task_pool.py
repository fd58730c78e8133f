"""The backend-specific part of the control loop: worker tasks and the loop's wake-up.

``AsyncioPool`` uses plain asyncio tasks and a future per wait;
``TrioPool`` uses children of a trio nursery, each in its own cancel scope.  The
runner picks one with ``running_asyncio`` when a run starts.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Awaitable, Coroutine
from contextvars import Context
from typing import Any

from tickwork._event_loop import running_asyncio_loop

__all__ = ["TaskPool", "AsyncioPool", "TrioPool", "running_asyncio"]


# asyncio's create_task() takes the task's context from Python 3.11 on.
_TASK_CONTEXT_ARGUMENT = sys.version_info >= (3, 11)


class TaskPool:
    """The backend-specific part of the loop: worker tasks (each cancellable on its own)
    and the wake-up of the waiting loop.  Going to each backend's own primitives instead
    of a generic task group, a cancel scope per invocation and an ``Event`` per wait
    roughly halved the framework's cost per step."""

    __slots__ = ()

    def spawn(self, key: str, worker: Coroutine[Any, Any, None], context: Context) -> None:
        """Start ``worker`` as the task of worker ``key`` in a copy of ``context``.

        The task is named ``key`` (the invocation id): a task made without a name gets
        one formatted from a counter (``Task-<n>``, eagerly in asyncio before Python
        3.12: about 1,400 machine instructions per step), and the invocation id, a
        string that exists already, also says which invocation the task runs.
        """
        raise NotImplementedError

    def done(self, key: str) -> None:
        """The worker ``key`` finished (its task may forget it)."""

    def cancel(self, key: str) -> bool:
        """Cancel the worker ``key``; return whether it will never begin (a worker that
        begins, even cancelled, first takes itself off the loop's unstarted count)."""
        raise NotImplementedError

    def cancel_all(self) -> None:
        raise NotImplementedError

    def idle(self) -> bool:
        """Whether no worker task is left (the run may park)."""
        raise NotImplementedError

    def wake(self) -> None:
        raise NotImplementedError

    def wait(self, delay: float | None) -> Awaitable[None]:
        """What to await: done when woken, or after ``delay`` seconds (``None``: no
        limit)."""
        raise NotImplementedError


def _plain_task_factory(loop: Any) -> bool:
    """Whether ``loop`` keeps its task factory as asyncio's ``BaseEventLoop`` does, in
    its ``_task_factory`` attribute (not so in uvloop, say)."""
    import asyncio

    base = asyncio.BaseEventLoop
    kind = type(loop)
    return (
        isinstance(loop, base)
        and kind.get_task_factory is base.get_task_factory
        and kind.set_task_factory is base.set_task_factory
    )


class AsyncioPool(TaskPool, dict[str, Any]):
    """Plain asyncio tasks and a future per wait.

    The pool is its own task map (worker key -> its task, until the worker posts its
    outcome, when it pops itself, or is cancelled): one object per live run rather than
    two.
    """

    __slots__ = ("_loop", "_task", "_waiter")

    def __init__(self) -> None:
        import asyncio

        super().__init__()
        self._loop = asyncio.get_running_loop()
        self._task: Any = asyncio.Task
        self._waiter: Any = None

    @property
    def tasks(self) -> dict[str, Any]:
        """Worker key -> its task (the pool itself)."""
        return self

    def spawn(self, key: str, worker: Coroutine[Any, Any, None], context: Context) -> None:
        # No done-callback: each one costs a scheduled handle; the worker calls done().
        task: Any
        loop = self._loop
        if not _TASK_CONTEXT_ARGUMENT:  # Python 3.10: a task copies the current context
            task = context.run(loop.create_task, worker, name=key)
        elif loop.get_task_factory() is None:
            # What create_task() does with no task factory, minus its checks and frame.
            task = self._task(worker, loop=loop, context=context.copy(), name=key)
        else:
            task = loop.create_task(
                worker,
                context=context.copy(),  # type: ignore[call-arg]
                name=key,
            )
        self[key] = task

    def task_maker(self) -> tuple[Any, Any]:
        """``(task class, event loop)``, with which a caller starts a worker as ``spawn``
        does while the loop has no task factory (and stores the task under its key
        itself); ``(None, None)`` where ``spawn`` cannot be done so (Python 3.10), or
        where the loop's task factory is not asyncio's own attribute.

        The caller reads the factory as ``loop._task_factory`` (what asyncio's
        ``get_task_factory`` returns, without its frame: one per step), so the pair is
        given only for a loop whose factory methods are ``BaseEventLoop``'s."""
        if not _TASK_CONTEXT_ARGUMENT or not _plain_task_factory(self._loop):
            return None, None
        return self._task, self._loop

    def done(self, key: str) -> None:
        self.pop(key, None)

    def cancel(self, key: str) -> bool:
        task = self.pop(key, None)
        if task is None:
            return False  # it reported (or was cancelled) already: it began
        # A task cancelled before its first step never runs its coroutine's body.
        never = _not_begun(task.get_coro())
        task.cancel()
        return never

    def cancel_all(self) -> None:
        for task in list(self.values()):
            task.cancel()
        self.clear()

    def idle(self) -> bool:
        # A cancelled task is forgotten at once: it unwinds on its own and reports
        # nothing, so it does not keep a run from parking.
        return not self

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def wait(self, delay: float | None) -> Awaitable[None]:
        waiter = self._waiter = self._loop.create_future()
        if delay is None:
            # The future itself, not a coroutine awaiting it: a waiting run holds one
            # object less.  It stays ``_waiter`` once done, which ``wake`` skips.
            return waiter
        return self._wait_at_most(waiter, delay)

    async def _wait_at_most(self, waiter: Any, delay: float) -> None:
        handle = self._loop.call_later(delay, self.wake)
        try:
            await waiter
        finally:
            handle.cancel()


class TrioPool(TaskPool):
    """Children of a trio nursery, each in its own ``trio.CancelScope``.

    The nursery is the loop task's, given by ``attach``; a worker spawned before that (a
    parked run's loop reducing a tick in the posting task) starts once it is attached.
    With ``wake_when_idle``, the exit of the last worker wakes the waiting loop, which
    may then park its run (a trio worker counts until its task has exited).
    """

    def __init__(self, wake_when_idle: bool = False) -> None:
        import trio

        self._trio = trio
        self._wake_when_idle = wake_when_idle
        self._nursery: Any = None
        # Worker key -> its cancel scope once its task has begun, ``None`` before.
        self._scopes: dict[str, Any] = {}
        self._sleeper: Any = None  # the loop's task while it waits (see ``wait``)
        self._live = 0  # children not exited yet (cancelled ones included)
        # Workers spawned before ``attach`` (made when one is: most pools never have any,
        # and each list a live run holds is one more object for the collector to scan).
        self._deferred: list[tuple[str, Coroutine[Any, Any, None], Context]] | None = None

    def attach(self, nursery: Any) -> None:
        """Spawn into ``nursery`` from now on (and the workers spawned before)."""
        self._nursery = nursery
        deferred, self._deferred = self._deferred, None
        for key, worker, context in deferred or ():
            self._start(nursery, key, worker, context)

    def spawn(self, key: str, worker: Coroutine[Any, Any, None], context: Context) -> None:
        self._live += 1
        if self._nursery is None:
            if self._deferred is None:
                self._deferred = []
            self._deferred.append((key, worker, context))
            return
        self._start(self._nursery, key, worker, context)

    def _start(
        self, nursery: Any, key: str, worker: Coroutine[Any, Any, None], context: Context
    ) -> None:
        """Start ``worker`` in ``nursery``; until its task begins, its key maps to
        ``None`` (a cancel then drops it: see ``_run``)."""
        self._scopes[key] = None
        context.run(nursery.start_soon, self._run, key, worker, name=key)

    async def _run(self, key: str, worker: Coroutine[Any, Any, None]) -> None:
        try:
            if key not in self._scopes:
                # Cancelled after its start in the nursery, before its task began: it
                # never begins (as an asyncio task cancelled before its first step).
                worker.close()
                return
            with self._trio.CancelScope() as scope:
                self._scopes[key] = scope
                await worker
        finally:
            self._scopes.pop(key, None)
            self._live -= 1
            if not self._live and self._wake_when_idle:
                self.wake()

    def cancel(self, key: str) -> bool:
        scopes = self._scopes
        if key in scopes:
            scope = scopes.pop(key)
            if scope is None:
                return True  # started, not begun: its task finds it gone and ends
            scope.cancel()
            return False  # its scope exists once the worker has begun
        deferred = self._deferred or []
        for index, (deferred_key, worker, _) in enumerate(deferred):
            if deferred_key == key:
                del deferred[index]
                worker.close()
                self._live -= 1
                return True
        return False  # it ended already

    def cancel_all(self) -> None:
        for scope in list(self._scopes.values()):
            if scope is not None:  # a worker not begun finds its key gone and ends
                scope.cancel()
        self._scopes.clear()
        deferred, self._deferred = self._deferred, None
        for _, worker, _ in deferred or ():
            worker.close()
            self._live -= 1
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def idle(self) -> bool:
        return not self._live

    def wake(self) -> None:
        task = self._sleeper
        if task is not None:
            self._sleeper = None
            self._trio.lowlevel.reschedule(task)

    def wait(self, delay: float | None) -> Awaitable[None]:
        # The loop's task sleeps in trio's own primitive until ``wake`` reschedules it:
        # no ``Event`` (with its set of tasks, its coroutine and its abort closure), no
        # coroutine of ours when there is no limit, for every live run.
        if delay is not None:
            return self._wait_at_most(delay)
        lowlevel = self._trio.lowlevel
        self._sleeper = lowlevel.current_task()
        sleep: Awaitable[None] = lowlevel.wait_task_rescheduled(self._abort)
        return sleep

    async def _wait_at_most(self, delay: float) -> None:
        lowlevel = self._trio.lowlevel
        with self._trio.move_on_after(delay):
            self._sleeper = lowlevel.current_task()
            await lowlevel.wait_task_rescheduled(self._abort)

    def _abort(self, raise_cancel: Any) -> Any:
        """The sleeping loop is cancelled (or its limit is up): it is no longer there to
        wake."""
        self._sleeper = None
        return self._trio.lowlevel.Abort.SUCCEEDED


def _not_begun(coro: Any) -> bool:
    """Whether ``coro`` (a task's coroutine) has not begun to run."""
    return (
        getattr(coro, "cr_frame", None) is not None
        and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED
    )


def running_asyncio() -> bool:
    """Whether this thread runs an asyncio event loop."""
    return running_asyncio_loop() is not None
