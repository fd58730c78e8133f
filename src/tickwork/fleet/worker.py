"""A worker of a fleet: claims runs from a shared journal store and runs them.

``tickwork worker MODULE:OBJ --dsn DSN`` (or ``--journal FILE``) runs one ``Worker``
(scale-out.md §4).  It registers itself in the store, then loops:

1. claim up to ``concurrency`` runs of the workflows it serves (queued runs, parked runs
   that are due or have inbox items, runs whose owner's lease expired);
2. rebuild each from its snapshot and journal tail and run it under the claim's lease
   (the lease is renewed from a thread; a lost lease stops the run here at once);
3. park the runs that only wait (no running or queued work) for ``idle_release``
   seconds: a compacting snapshot, then ``parked`` with ``wake_at`` set to the earliest
   waiter deadline.  A parked run holds no memory in any worker; an inbox item or a
   passed ``wake_at`` makes it claimable by any worker;
4. sleep until the store notifies a change, or for a second.

A run that cannot be loaded (its steps or events no longer exist, its journal is
damaged) is failed with an error naming it; it never blocks the other runs.  On
``Worker.stop`` (SIGTERM in the command), the worker stops claiming, lets running
steps finish for ``grace`` seconds, then hands its runs back (``queued``, no owner) so that
other workers take them at once.  Runs are never cancelled by a shutdown.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskGroup

from tickwork._otel import span
from tickwork._serde_fields import dump_exception
from tickwork.fleet.hand_back import earliest_deadline, hand_back, parkable, span_attributes
from tickwork.handler import WorkflowHandler
from tickwork.journal.recovery import resume_claimed
from tickwork.runtime.session import RunSession
from tickwork.stores import metrics
from tickwork.stores.leases import process_owner
from tickwork.stores.records import (
    Claim,
    JournalError,
    LeaseLost,
    RunOutcome,
    StoreUnavailable,
)
from tickwork.stores.store import DEFAULT_LEASE_SECONDS, DEFAULT_MAX_CLAIMS, JournalStore

__all__ = ["Worker", "WorkerOptions"]

_log = logging.getLogger("tickwork.worker")


@dataclass(frozen=True)
class WorkerOptions:
    """How a worker claims and keeps runs (the ``tickwork worker`` options)."""

    queues: Sequence[str] | None = None
    concurrency: int = 16
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    idle_release: float = 60.0
    poll_seconds: float = 1.0
    max_claims: int = DEFAULT_MAX_CLAIMS
    grace: float = 30.0


@dataclass
class _Active:
    claim: Claim
    handler: WorkflowHandler
    since: float
    """When this worker took the run (idle time counts from then at the earliest)."""

    @property
    def session(self) -> RunSession:
        session: RunSession = self.handler._session
        return session


class Worker:
    """Claims and runs the runs of ``workflows`` found in ``store`` (see the module)."""

    def __init__(
        self,
        workflows: Iterable[Any],
        store: JournalStore,
        options: WorkerOptions | None = None,
        *,
        worker_id: str | None = None,
    ) -> None:
        self.workflows: Mapping[str, Any] = {wf.workflow_name: wf for wf in workflows}
        if not self.workflows:
            raise ValueError("a worker needs at least one workflow to serve")
        self.store = store
        self.options = options or WorkerOptions()
        self.worker_id = worker_id or process_owner()
        self.active: dict[str, _Active] = {}
        self._stopping = False
        self._stopped = anyio.Event()
        self._watchers: TaskGroup | None = None
        self._sleeping: anyio.CancelScope | None = None
        self._ended = False
        self.claimed = 0
        self.parked = 0
        self.lost = 0

    # -- the loop ----------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until ``stop``; then hand the remaining runs back."""
        await self.store.register_worker(
            self.worker_id,
            {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "workflows": sorted(self.workflows),
                "queues": list(self.options.queues or ()),
                "concurrency": self.options.concurrency,
            },
        )
        try:
            async with anyio.create_task_group() as watchers:
                self._watchers = watchers
                while not self._stopping:
                    try:
                        # Forget the runs that ended first, so that their slots are
                        # claimed again in this same pass.
                        await self._tend()
                        await self._claim()
                        await self.store.touch_worker(self.worker_id, sorted(self.active))
                    except JournalError as error:
                        # The store retried and gave up (the database is down for
                        # longer): keep serving, the runs here go on, and try again at
                        # the next poll.
                        _log.warning("worker %s: the store failed: %s", self.worker_id, error)
                    await self._sleep()
                watchers.cancel_scope.cancel()
            self._watchers = None
            await self._shut_down()
        finally:
            try:
                await self.store.unregister_worker(self.worker_id)
            except JournalError as error:
                _log.warning("worker %s: unregistering failed: %s", self.worker_id, error)
            self._stopped.set()

    async def _sleep(self) -> None:
        """Until the store reports a change, one of this worker's runs ends (its slot is
        free), or ``poll_seconds`` pass."""
        if self._ended:
            self._ended = False
            return
        with anyio.move_on_after(self.options.poll_seconds) as scope:
            self._sleeping = scope
            await self.store.wait_for_change(self.options.poll_seconds)
        self._sleeping = None
        self._ended = False

    async def _watch(self, session: RunSession) -> None:
        """Wake the loop when ``session`` ends: a run's end frees a slot, and nothing may
        notify the store about it (or the notice comes before the session is done)."""
        await session.done.wait()
        self._ended = True
        if self._sleeping is not None:
            self._sleeping.cancel()

    def stop(self) -> None:
        """Stop claiming; ``run`` then hands the remaining runs back and returns."""
        self._stopping = True
        if self._sleeping is not None:
            self._sleeping.cancel()

    async def _claim(self) -> None:
        free = self.options.concurrency - len(self.active)
        if free <= 0:
            return
        claims = await self.store.claim_runs(
            self.worker_id,
            list(self.workflows),
            queues=self.options.queues,
            limit=free,
            lease_seconds=self.options.lease_seconds,
            max_claims=self.options.max_claims,
        )
        for claim in claims:
            self.claimed += 1
            metrics.add("tickwork.fleet.claims", workflow=claim.entry.workflow_name)
            await self._start(claim)

    async def _start(self, claim: Claim) -> None:
        """Resume a claimed run here (in a ``tickwork.fleet.claim`` span, which the run's
        span is a child of)."""
        with span("tickwork.fleet.claim", span_attributes(claim.lease)):
            await self._resume(claim)

    async def _resume(self, claim: Claim) -> None:
        run_id = claim.lease.run_id
        workflow = self.workflows[claim.entry.workflow_name]
        stale = self.active.pop(run_id, None)
        if stale is not None:
            await self._drop_stale(stale, claim)
        try:
            handler = await resume_claimed(
                workflow, claim, lease_seconds=self.options.lease_seconds
            )
        except LeaseLost as error:
            _log.warning("run %s was taken over while it was loaded: %s", run_id, error)
            return
        except StoreUnavailable as error:
            # Nothing is wrong with the run: its claim's lease (not renewed) expires and
            # it is claimed again.
            _log.warning("run %s could not be loaded, the store is unavailable: %s", run_id, error)
            return
        except Exception as error:
            _log.error("run %s cannot be loaded, it fails: %s", run_id, error, exc_info=error)
            await self._fail(claim, error)
            return
        handler._session.discard_stream()
        self.active[run_id] = _Active(claim, handler, time.time())
        if self._watchers is not None:
            self._watchers.start_soon(self._watch, handler._session)

    async def _drop_stale(self, stale: _Active, claim: Claim) -> None:
        """This worker claimed again a run it still runs: its lease had expired (its
        renewals were late or failing) and the claim raised the epoch, so the old
        session's writes would all be refused.  Stop it, publishing nothing, before the
        run resumes from the journal under the new lease."""
        session = stale.session
        self.lost += 1
        session.lose_lease(
            LeaseLost(
                f"run {claim.lease.run_id!r}: its lease expired and this worker claimed it "
                f"again (epoch {claim.lease.epoch}); the session of epoch "
                f"{stale.claim.lease.epoch} stops"
            )
        )
        await session.host_done.wait()

    async def _fail(self, claim: Claim, error: BaseException) -> None:
        failure = JournalError(f"run {claim.lease.run_id!r} cannot be run: {error}")
        try:
            await self.store.mark_finished(
                claim.lease.run_id,
                "failed",
                lease=claim.lease,
                outcome=RunOutcome(error=dump_exception(failure)),
            )
        except JournalError as stored:
            _log.error("run %s: recording its failure failed: %s", claim.lease.run_id, stored)

    async def _tend(self) -> None:
        """Forget the runs that ended here; park the ones that only wait."""
        now = time.time()
        for run_id, active in list(self.active.items()):
            session = active.session
            if session.done.is_set():
                if session.exit is not None and session.exit.kind == "lost":
                    self.lost += 1
                del self.active[run_id]
                continue
            if await self._idle(run_id, active, now):
                await self._park(run_id, active)

    async def _idle(self, run_id: str, active: _Active, now: float) -> bool:
        """Whether a run only waits, has done so for ``idle_release`` seconds, and has
        nothing to get to: no passed deadline, no inbox item (a run is usually claimed
        for one of those, before its session could take it)."""
        state = active.session.state
        # Its last input may be older than this claim (the run was parked).
        last = max(state.last_alive_stamp or now, active.since)
        if not parkable(state) or now - last < self.options.idle_release:
            return False
        deadline = earliest_deadline(state)
        if deadline is not None and deadline <= now:
            return False
        if await self.store.read_inbox(run_id):
            return False
        # The run may have moved on while its inbox was read (an item came and was
        # consumed; it may even be writing its final records): not idle after all.
        return active.session.state is state and not active.session.done.is_set()

    async def _park(self, run_id: str, active: _Active) -> None:
        session = active.session
        session.stop_here()
        await session.host_done.wait()
        del self.active[run_id]
        await self._put_back(session, active.claim, park=True)

    async def _put_back(self, session: RunSession, claim: Claim, *, park: bool) -> None:
        """Park a stopped session's run (or hand it back when it is not only waiting).
        A run that ended meanwhile is left as it is: its final records are written, and
        handing it back would have it run again."""
        if await hand_back(session, park=park, lease=claim.lease) == "parked":
            self.parked += 1

    async def _shut_down(self) -> None:
        """Let running steps finish for ``grace`` seconds, then hand every run back."""
        with anyio.move_on_after(self.options.grace):
            while any(a.session.state.running for a in self.active.values()):
                await anyio.sleep(0.05)
        for run_id, active in list(self.active.items()):
            session = active.session
            if session.state.finished:  # ending: let it write its last records
                with anyio.move_on_after(self.options.grace):
                    await session.done.wait()
            if session.done.is_set():
                continue
            session.stop_here()
            await session.host_done.wait()
            await self._put_back(session, active.claim, park=parkable(session.state))
            del self.active[run_id]
