"""``WorkflowHandler``: the handle ``Workflow.run()`` returns.

Await it for the result, iterate ``stream_events()`` for progress, ``send_event()`` to
answer a human-in-the-loop request, ``cancel_run()`` to stop gracefully.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator
from typing import TYPE_CHECKING, Any

import anyio

from tickwork._deprecation import warn_once
from tickwork.errors import WorkflowCancelledByUser
from tickwork.events import Event, StopEvent

if TYPE_CHECKING:
    from tickwork.context.context import Context
    from tickwork.runtime.session import RunSession
    from tickwork.types import JournalRecord

__all__ = ["WorkflowHandler"]


def _deprecated(name: str, instead: str) -> None:
    """Warn, once per process, that ``WorkflowHandler.<name>()`` is deprecated."""
    warn_once(
        f"WorkflowHandler.{name}",
        f"WorkflowHandler.{name}() is deprecated; use {instead}",
        stacklevel=3,
    )


class WorkflowHandler:
    """The handle of one run.  Users get it from ``Workflow.run()``."""

    def __init__(self, ctx: Context[Any] | None, session: RunSession) -> None:
        # ``None`` for a run started without a Context: its handler face is built when
        # first asked for (``ctx``), so that a live run nobody asks holds none.
        self._ctx = ctx
        self._session = session

    @property
    def ctx(self) -> Context[Any]:
        """The run's Context (handler face); the one passed to ``run(ctx=...)`` if any."""
        ctx = self._ctx
        if ctx is None:
            from tickwork.context.context import Context

            ctx = self._ctx = Context._for_handler(self._session)
        return ctx

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self._session.run_id

    def is_done(self) -> bool:
        """Whether the run has ended."""
        return not self._session.live

    # -- awaiting ----------------------------------------------------------------------

    async def _outcome(self) -> StopEvent:
        session = self._session
        if not session.done.is_set():
            try:
                await session.done.wait()
            except anyio.get_cancelled_exc_class():
                session.abort()
                raise
        return self._ended()

    def _ended(self) -> StopEvent:
        """The terminal event of the ended run, or raise its outcome."""
        session = self._session
        if session.exit is None or session.hard_aborted:
            if _backend_is_asyncio():
                import asyncio

                raise asyncio.CancelledError(f"run {session.run_id} was aborted")
            raise WorkflowCancelledByUser(f"run {session.run_id} was aborted")
        if session.exit.kind == "complete":
            stop: StopEvent = session.exit.stop_event
            return stop
        assert session.exit.exception is not None
        raise session.exit.exception

    def __await__(self) -> Generator[Any, None, Any]:
        # A generator, not a coroutine's ``__await__``: every awaited live run holds it,
        # one object where a coroutine and its wrapper were two.  Under asyncio it hands
        # the run's future to the awaiting task itself, as the future's own iterator
        # would, which is one object less again (``_outcome``'s wait otherwise).
        session = self._session
        done = session.done
        if not done.is_set():
            waiting: Any = done.wait()
            try:
                if getattr(waiting, "_asyncio_future_blocking", None) is not None:
                    if not waiting.done():
                        waiting._asyncio_future_blocking = True  # the task waits for it
                        yield waiting
                    waiting.result()  # raises the cancellation of a cancelled wait
                else:
                    yield from waiting.__await__()
            except anyio.get_cancelled_exc_class():
                session.abort()
                raise
        stop = self._ended()
        return stop.result if type(stop) is StopEvent else stop

    async def stop_event_result(self) -> StopEvent:
        """Wait for the end of the run and return its terminal ``StopEvent``."""
        return await self._outcome()

    def get_stop_event(self) -> StopEvent | None:
        """The published terminal event, or ``None`` while live or after a hard abort."""
        return self._session.stop_event()

    # -- streaming and sending ------------------------------------------------------------

    def stream_events(self, expose_internal: bool = False) -> AsyncIterator[Event]:
        """Published events up to and including the terminal event (single consumer).

        Iterating a stream whose terminal event was already handed out raises
        ``WorkflowRuntimeError`` (at the first ``__anext__``).
        """
        return self._session.stream.iterate(
            expose_internal,
            consumed_error=(
                f"all events of run {self.run_id} were already consumed: the stream can "
                "only be iterated once"
            ),
        )

    async def send_event(self, event: Event, step: str | None = None) -> None:
        """Same as ``handler.ctx.send_event(event, step)``.

        In a journaled run it returns only once the event is in the journal, so it
        survives a crash from then on; an event that cannot be journaled, or a send to a
        run that has ended, raises ``WorkflowRuntimeError``.
        """
        session = self._session
        if session.durable:
            # The runtime is loaded by now (this run's session exists); a durable send
            # waits for the journal, so the import statement is lost in the noise.
            from tickwork.runtime.step_scope import check_send_target

            check_send_target(session.config.steps, event, step)
            await session.send_durably(event, step)
            return
        self.ctx.send_event(event, step)

    async def cancel_run(self, *, timeout: float = 5.0) -> None:
        """Cancel gracefully and wait up to ``timeout`` seconds for the run to end."""
        if not self._session.live:
            return
        try:
            self._session.request_cancel()
            with anyio.move_on_after(timeout):
                await self._session.done.wait()
        except Exception:
            pass

    def journal(self) -> AsyncIterator[JournalRecord]:
        """The run's journal records (needs ``Workflow(journal=True)``)."""
        from tickwork.runtime.journal_view import iterate_journal  # the record codec, on demand

        return iterate_journal(self._session)

    # -- deprecated ------------------------------------------------------------------------

    def done(self) -> bool:
        """Deprecated alias of ``is_done``."""
        _deprecated("done", "is_done()")
        return self.is_done()

    def cancel(self) -> None:
        """Deprecated: hard-abort the run."""
        _deprecated("cancel", "cancel_run()")
        self._session.abort()

    def exception(self) -> BaseException | None:
        """Deprecated: the failure exception once the run has ended."""
        _deprecated("exception", "await handler")
        session = self._session
        if session.live or session.exit is None or session.exit.kind == "complete":
            return None
        return session.exit.exception

    def cancelled(self) -> bool:
        """Deprecated: whether the run was cancelled or aborted."""
        _deprecated("cancelled", "the stream's WorkflowCancelledEvent")
        session = self._session
        return session.hard_aborted or (session.exit is not None and session.exit.kind == "cancel")

    def __str__(self) -> str:
        return (
            f"WorkflowHandler(workflow={self._session.config.workflow_name}, "
            f"run_id={self.run_id}, stop_event={self.get_stop_event()!r})"
        )


def _backend_is_asyncio() -> bool:
    from tickwork.runtime.session import detect_backend

    try:
        return detect_backend() == "asyncio"
    except RuntimeError:
        return False
