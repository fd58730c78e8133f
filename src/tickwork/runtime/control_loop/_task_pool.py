"""The backend-specific part of the control loop: worker tasks and the loop's wake-up.

``AsyncioPool`` uses plain asyncio tasks and a future per wait;
``TrioPool`` uses children of a trio nursery, each in its own cancel scope.  The
runner picks one with ``running_asyncio`` when a run starts.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Coroutine, Generator
from contextvars import Context
from typing import Any

__all__ = ["TaskPool", "AsyncioPool", "TrioPool", "running_asyncio"]


# asyncio's create_task() takes the task's context from Python 3.11 on.
_TASK_CONTEXT_ARGUMENT = sys.version_info >= (3, 11)
# Task.cancelling() (a cancellation requested and not withdrawn) is new in Python 3.11.
_CANCELLING = sys.version_info >= (3, 11)


class TaskPool:
    """The backend-specific part of the loop: worker tasks (each cancellable on its own)
    and the wake-up of the waiting loop.  Going to each backend's own primitives instead
    of a generic task group, a cancel scope per invocation and an ``Event`` per wait
    roughly halved the framework's cost per step."""

    def spawn(self, key: str, worker: Coroutine[Any, Any, None], context: Context) -> None:
        """Start ``worker`` as the task of worker ``key`` in a copy of ``context``."""
        raise NotImplementedError

    def done(self, key: str) -> None:
        """The worker ``key`` finished (its task may forget it)."""

    def cancel(self, key: str) -> None:
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


class _Worker(Coroutine[Any, Any, None]):
    """One pooled asyncio worker task: it runs the invocation it was started for, then
    each invocation handed to it while it reported (``AsyncioPool.spawn``).

    A task's context is fixed when it is made, so the task's coroutine is this object,
    which drives each invocation's coroutine itself, every step of it inside the invocation's
    own context: what the coroutine yields (a future, or ``None``) goes to the task, and
    what the task sends or throws in (a cancellation) goes back to it.  Between two
    invocations it yields once to the event loop, as the first step of a new task would:
    a chain of steps must not starve other tasks.
    """

    __slots__ = ("context", "coro", "next_context", "next_coro", "next_key", "pool", "task")

    def __init__(
        self, pool: AsyncioPool, coro: Coroutine[Any, Any, None], context: Context
    ) -> None:
        self.pool = pool
        self.task: Any = None
        self.coro: Any = coro
        """The invocation running (``None`` between two)."""
        self.context: Any = context
        """Its context (``None`` between two)."""
        self.next_key: str | None = None
        """The invocation handed to this worker and not begun (``None``: none)."""
        self.next_coro: Any = None
        self.next_context: Any = None

    def __await__(self) -> Generator[Any, None, None]:
        return self  # type: ignore[return-value]

    @property
    def cr_await(self) -> Any:
        """The invocation's coroutine, for what walks a task's awaits (debuggers)."""
        return self.coro

    def __next__(self) -> Any:
        # ``send(None)``, which is how a task resumes its coroutine, without a call more.
        coro = self.coro
        if coro is None:  # resumed after the yield between two invocations
            if self.next_key is None:  # dropped meanwhile (cancelled)
                self.task = None
                raise StopIteration
            coro = self.coro = self.next_coro
            self.context = self.next_context
            self.next_key = self.next_coro = self.next_context = None
        try:
            # ``next`` with a default, on the coroutine's iterator: a coroutine that
            # returns raises no StopIteration then (``send`` does).
            yielded = self.context.run(next, coro.__await__(), _RETURNED)
        except BaseException:
            self.task = None  # the task ends: no cycle left between it and its coroutine
            raise
        if yielded is not _RETURNED:
            return yielded
        self.coro = self.context = None
        if self.next_key is None:
            self.task = None
            raise StopIteration
        return None

    def send(self, message: Any) -> Any:
        if message is None:
            return self.__next__()
        coro = self.coro
        assert coro is not None  # a value is sent only to a coroutine that awaits
        try:
            return self.context.run(coro.send, message)
        except StopIteration:
            return self._finished()
        except BaseException:
            self.task = None
            raise

    def throw(self, error: Any, value: Any = None, traceback: Any = None) -> Any:
        if value is not None:
            error = value
        coro = self.coro
        if coro is None:
            # Cancelled from outside between two invocations (a step that cancelled its
            # own task): the next one gets a task of its own, as it would have.
            self.pool.restart_next(self)
            self.task = None
            raise error
        try:
            return self.context.run(coro.throw, error)
        except StopIteration:
            return self._finished()
        except BaseException:
            self.task = None
            raise

    def close(self) -> None:
        coro = self.coro
        if coro is not None:
            self.coro = None
            self.context.run(coro.close)
        self.pool.drop_next(self)
        self.task = None

    def _finished(self) -> None:
        """The invocation returned: yield before the next one, if any, else stop."""
        self.coro = self.context = None
        if self.next_key is None:
            self.task = None
            raise StopIteration
        return None

    def cancel(self, key: str) -> None:
        """Cancel invocation ``key`` of this worker: drop it if it has not begun (its
        coroutine is closed), else cancel the task (a cancelled task is not reused)."""
        if self.next_key == key:
            coro = self.next_coro
            self.next_key = self.next_coro = self.next_context = None
            coro.close()
        elif self.task is not None:
            self.task.cancel()


_RETURNED = object()
"""What ``_Worker`` gets from ``next`` once an invocation's coroutine returned."""


class AsyncioPool(TaskPool):
    """Plain asyncio tasks and a future per wait.

    A worker task runs one invocation, then the next one if its own result, reduced
    inline while it reported (see ``runner._Loop._report``), dispatched one: a chain of
    steps then runs in one task, each invocation in its own copy of the run's context,
    instead of creating, scheduling, registering and freeing a task per step.
    """

    def __init__(self) -> None:
        import asyncio

        self._loop = asyncio.get_running_loop()
        self._task: Any = asyncio.Task
        self.tasks: dict[str, Any] = {}
        """Worker key -> its task (or its ``_Worker``), until it reports (the loop pops
        it then) or is cancelled."""
        self.finishing: Any = None
        """The task (or ``_Worker``) of the worker reporting its result, while it does
        (set by the loop)."""
        self._waiter: Any = None

    def spawn(self, key: str, worker: Coroutine[Any, Any, None], context: Context) -> None:
        finishing = self.finishing
        if finishing is None:
            # Not while a worker reports (the loop's task dispatching): a plain task.
            # No done-callback: each one costs a scheduled handle; the worker calls done().
            task: Any
            loop = self._loop
            if not _TASK_CONTEXT_ARGUMENT:  # Python 3.10: a task copies the current context
                task = context.run(loop.create_task, worker)
            elif loop.get_task_factory() is None:
                # What create_task() does with no task factory, minus its checks and frame.
                task = self._task(worker, loop=loop, context=context.copy())
            else:
                task = loop.create_task(worker, context=context.copy())  # type: ignore[call-arg]
            self.tasks[key] = task
            return
        # While a worker reports, its result reduced inline: the next step of a chain.
        # Not for a task with a cancellation pending or swallowed (by a step that
        # cancelled its own task): the next invocation would see it.
        if type(finishing) is _Worker and not (_CANCELLING and finishing.task.cancelling()):
            # The worker runs this invocation next.  A second one dispatched by the same
            # result takes the previous one's place, which gets a task of its own:
            # workers begin in the order they were spawned.
            if finishing.next_key is not None:
                self.restart_next(finishing)
            finishing.next_key = key
            finishing.next_coro = worker
            finishing.next_context = context.copy()
            self.tasks[key] = finishing
            return
        # A worker task that may run the next step of its chain in turn: only the first
        # one spawned while this worker reports (a chain spawns one; the workers a join
        # or a batch releases rarely find the loop idle when they report).
        self.finishing = None
        self._start(key, worker, context.copy())

    def _start(self, key: str, coro: Coroutine[Any, Any, None], context: Context) -> None:
        """Run ``coro`` in ``context`` (a copy) in a new ``_Worker`` task."""
        worker = _Worker(self, coro, context)
        loop = self._loop
        # The task's own context: nothing runs in it but the worker, which runs each
        # invocation in the invocation's (so that none keeps another's values alive).
        # Not shared between tasks: a task enters its context while it runs, and one task
        # may run inside another's step (an event loop run from a step, as nest_asyncio
        # allows).
        own = Context()
        if not _TASK_CONTEXT_ARGUMENT:
            worker.task = own.run(loop.create_task, worker)
        elif loop.get_task_factory() is None:
            worker.task = self._task(worker, loop=loop, context=own)
        else:
            worker.task = loop.create_task(worker, context=own)  # type: ignore[call-arg]
        self.tasks[key] = worker

    def drop_next(self, worker: _Worker) -> None:
        """``worker`` is going away: close the invocation handed to it, if any."""
        key = worker.next_key
        if key is not None:
            self.tasks.pop(key, None)
            worker.cancel(key)

    def restart_next(self, worker: _Worker) -> None:
        """Start the invocation handed to ``worker``, if any, in a new task."""
        key = worker.next_key
        if key is not None:
            coro, context = worker.next_coro, worker.next_context
            worker.next_key = worker.next_coro = worker.next_context = None
            self._start(key, coro, context)

    def done(self, key: str) -> None:
        self.tasks.pop(key, None)

    def cancel(self, key: str) -> None:
        task = self.tasks.pop(key, None)
        if type(task) is _Worker:
            task.cancel(key)
        elif task is not None:
            task.cancel()

    def cancel_all(self) -> None:
        tasks = list(self.tasks.items())
        self.tasks.clear()
        for key, task in tasks:
            if type(task) is _Worker:
                task.cancel(key)
            else:
                task.cancel()

    def idle(self) -> bool:
        # A cancelled task is forgotten at once: it unwinds on its own and reports
        # nothing, so it does not keep a run from parking.
        return not self.tasks

    def wake(self) -> None:
        finishing = self.finishing
        if type(finishing) is _Worker and finishing.next_key is not None:
            # The loop's task must not run before the invocation handed over begins, as
            # it would not before a task of its own (the loop ending the run would
            # cancel a worker that had begun, but drop one that had not): it gets one.
            self.restart_next(finishing)
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
        self._scopes: dict[str, Any] = {}
        self._event: Any = None
        self._live = 0  # children not exited yet (cancelled ones included)
        self._deferred: list[tuple[str, Coroutine[Any, Any, None], Context]] = []

    def attach(self, nursery: Any) -> None:
        """Spawn into ``nursery`` from now on (and the workers spawned before)."""
        self._nursery = nursery
        deferred, self._deferred = self._deferred, []
        for key, worker, context in deferred:
            context.run(nursery.start_soon, self._run, key, worker)

    def spawn(self, key: str, worker: Coroutine[Any, Any, None], context: Context) -> None:
        self._live += 1
        if self._nursery is None:
            self._deferred.append((key, worker, context))
            return
        context.run(self._nursery.start_soon, self._run, key, worker)

    async def _run(self, key: str, worker: Coroutine[Any, Any, None]) -> None:
        try:
            with self._trio.CancelScope() as scope:
                self._scopes[key] = scope
                await worker
        finally:
            self._scopes.pop(key, None)
            self._live -= 1
            if not self._live and self._wake_when_idle:
                self.wake()

    def cancel(self, key: str) -> None:
        scope = self._scopes.pop(key, None)
        if scope is not None:
            scope.cancel()
            return
        for index, (deferred_key, worker, _) in enumerate(self._deferred):
            if deferred_key == key:
                del self._deferred[index]
                worker.close()
                self._live -= 1
                return

    def cancel_all(self) -> None:
        for scope in list(self._scopes.values()):
            scope.cancel()
        self._scopes.clear()
        for _, worker, _ in self._deferred:
            worker.close()
            self._live -= 1
        self._deferred.clear()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def idle(self) -> bool:
        return not self._live

    def wake(self) -> None:
        if self._event is not None:
            self._event.set()

    async def wait(self, delay: float | None) -> None:
        event = self._event = self._trio.Event()
        try:
            if delay is None:
                await event.wait()
            else:
                with self._trio.move_on_after(delay):
                    await event.wait()
        finally:
            self._event = None


def running_asyncio_loop() -> Any:
    """The asyncio event loop running in this thread, or ``None`` (trio, or no loop)."""
    if "asyncio" not in sys.modules:
        return None
    import asyncio

    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def running_asyncio() -> bool:
    """Whether this thread runs an asyncio event loop."""
    return running_asyncio_loop() is not None
