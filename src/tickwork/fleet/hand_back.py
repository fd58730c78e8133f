"""Giving a journaled run back to its store when this process stops running it.

A worker parks the runs that only wait and hands the others back when it shuts down;
the command line does the same when it leaves a run (waiting for an answer, or
interrupted).  Either way the run must not stay owned by a process that no longer runs
it: a lease that nobody renews would keep every other worker (and every ``send``) away
from the run until it expires.
"""

from __future__ import annotations

import logging
from typing import Literal

from tickwork._otel import span
from tickwork.runtime.session import RunSession
from tickwork.runtime.types.state import RunState
from tickwork.stores import metrics
from tickwork.stores.records import JournalError, Lease, LeaseLost

__all__ = ["earliest_deadline", "hand_back", "parkable", "span_attributes", "stop_and_hand_back"]

_log = logging.getLogger("tickwork.worker")

HandedBack = Literal["parked", "queued"]


def span_attributes(lease: Lease) -> dict[str, str | int]:
    """What the fleet's spans say about a run."""
    return {
        "tickwork.run_id": lease.run_id,
        "tickwork.epoch": lease.epoch,
        "tickwork.owner": lease.owner,
    }


def parkable(state: RunState) -> bool:
    """Only waiting: live, nothing queued (delayed retries included), nothing running."""
    return state.status == "running" and state.queued == 0 and state.running == 0


def earliest_deadline(state: RunState) -> float | None:
    """The earliest deadline of the run's pending waiters (when a parked run is due)."""
    deadlines = [
        waiter.deadline
        for step in state.steps.values()
        for waiter in step.waiters.values()
        if waiter.pending and waiter.deadline is not None
    ]
    return min(deadlines) if deadlines else None


async def hand_back(
    session: RunSession, *, park: bool, lease: Lease | None = None
) -> HandedBack | None:
    """Give a *stopped* session's run back to its store: ``parked`` when ``park`` and it
    only waits (after a compacting snapshot, claimable again at its earliest deadline or
    when its inbox gets an item), else ``queued`` (claimable at once).

    ``lease``: the lease to release when the session holds none of its own.  Returns
    what the run became; ``None`` when there was nothing to give back (the run ended and
    recorded its outcome, or it is not owned) or the store refused (logged: another
    worker took the run meanwhile, or the store failed and the lease simply expires).
    """
    state = session.state
    writer = session.writer
    if session.ownership is not None and session.ownership.lease is not None:
        lease = session.ownership.lease
    if lease is None or writer is None or state.finished:
        return None  # a run that ended recorded its outcome: it is not given back
    status: HandedBack = "parked" if park and parkable(state) and writer.settled else "queued"
    try:
        name = "tickwork.fleet.park" if park else "tickwork.fleet.release"
        with span(name, span_attributes(lease)):
            if status == "parked":
                await writer.write_compacting_snapshot(state)
                await writer.store.release_run(
                    lease, status="parked", wake_at=earliest_deadline(state)
                )
                metrics.add("tickwork.fleet.parked")
            else:
                await writer.store.release_run(lease, status="queued")
    except LeaseLost as error:
        _log.warning("run %s was taken over before it was put back: %s", lease.run_id, error)
        return None
    except JournalError as error:
        # Its lease is no longer renewed: another worker claims it once it expires.
        _log.warning("run %s could not be put back: %s", lease.run_id, error)
        return None
    return status


async def stop_and_hand_back(session: RunSession, *, park: bool) -> HandedBack | None:
    """Stop ``session`` without ending its run, then ``hand_back`` the run.  Nothing to
    do for a session that is done (its run ended, or it already stopped)."""
    if session.done.is_set():
        return None
    session.stop_here()
    await session.host_done.wait()
    return await hand_back(session, park=park)
