"""Reducer phases for ``wait_for_event`` waiters: register, resolve, time out, forget."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

from tickwork.runtime.control_loop._holding import add_blind, remove_blind, take_unclaimed
from tickwork.runtime.control_loop._tx import (
    Tx,
    dispatch_or_queue,
    put_step,
    waiter_order,
)
from tickwork.runtime.types.commands import (
    PublishEvent,
    ScheduleWaiterTimeout,
)
from tickwork.runtime.types.evolve import evolve as replace
from tickwork.runtime.types.results import Suspended
from tickwork.runtime.types.state import (
    Invocation,
    Waiter,
)
from tickwork.runtime.types.ticks import (
    WaiterTimeout,
)


def rerun_waiters_with_requirements(tx: Tx) -> None:
    """Re-run the steps of blind waiters (requirements a snapshot could not store), so
    that they register their requirements again; until then they match nothing."""
    blind = tx.holdings.blind
    if blind.size:
        for step, _waiter_id in sorted(blind.keys()):
            dispatch_or_queue(tx, step, blind[(step, _waiter_id)].item)


def arm_waiter_timeouts(tx: Tx) -> None:
    """Schedule the deadline of every pending waiter that has one.

    Deadlines are wall-clock times, so one that passed while the run was not alive
    (snapshotted, crashed, parked) is due at once.
    """
    for step in tuple(tx.steps):
        for waiter in sorted(tx.steps[step].waiters.values(), key=waiter_order):
            if waiter.deadline is not None and waiter.pending:
                tx.commands.append(ScheduleWaiterTimeout(waiter.deadline, step, waiter.waiter_id))


NONE_WOKEN: frozenset[str] = frozenset()


def resolve_waiters(tx: Tx, event: Any) -> AbstractSet[str]:
    """Resolve every waiter ``event`` matches; re-deliver their work items.

    Returns the names of the steps woken this way (they do not also receive the event).
    """
    index = tx.waiter_index
    if index.empty:
        return NONE_WOKEN
    woken: set[str] = set()
    # Sorted: the index iterates in hash order, and resolution order decides dispatch
    # order, which must not depend on the process (replay elsewhere must agree).
    for step, waiter_id in sorted(set(index.candidates(event))):
        waiter = tx.steps[step].waiters.get(waiter_id)
        if waiter is None or not waiter.matches(event):
            continue
        _resolve(tx, step, waiter, event)
        woken.add(step)
    return woken


def _resolve(tx: Tx, step: str, waiter: Waiter, event: Any) -> None:
    """Resolve ``waiter`` with ``event`` and re-deliver its work item."""
    current = tx.steps[step]
    resolved = replace(waiter, resolved_event=event)
    put_step(tx, step, replace(current, waiters=current.waiters.set(waiter.waiter_id, resolved)))
    _unindex_waiter(tx, step, waiter)
    dispatch_or_queue(tx, step, waiter.item)


def _index_waiter(tx: Tx, step: str, waiter: Waiter) -> None:
    """Make a pending waiter findable by the events that resolve it (a blind one is
    tracked apart: it matches nothing, but holds back the events of its type)."""
    if waiter.blind:
        add_blind(tx, step, waiter)
        return
    tx.waiter_index = tx.waiter_index.add(
        waiter.event_type, waiter.requirements, (step, waiter.waiter_id)
    )


def _unindex_waiter(tx: Tx, step: str, waiter: Waiter) -> None:
    if waiter.blind:
        remove_blind(tx, step, waiter.waiter_id)
        return
    tx.waiter_index = tx.waiter_index.remove(
        waiter.event_type, waiter.requirements, (step, waiter.waiter_id)
    )


def register_waiter(tx: Tx, invocation: Invocation, outcome: Suspended) -> None:
    """Record a suspension: keep an existing deadline, publish ``waiter_event`` once."""
    request = outcome.waiter
    step = invocation.step
    current = tx.steps[step]
    existing = current.waiters.get(request.waiter_id)
    waiter = Waiter(
        waiter_id=request.waiter_id,
        item=invocation.work_item(),  # the waiter outlives the invocation
        event_type=request.event_type,
        requirements=request.requirements,
        waiter_event=request.waiter_event,
        timeout=request.timeout,
        deadline=(
            existing.deadline
            if existing is not None
            else None
            if request.timeout is None
            else tx.now + request.timeout
        ),
        subclass_mode=tx.config.steps[step].subclass_mode,
        has_requirements=bool(request.requirements) or request.has_requirements,
    )
    item_id = invocation.work_item_id
    _forget_superseded(tx, step, item_id, request.waiter_id)
    current = tx.steps[step]
    by_item = current.waiters_by_item.get(item_id, frozenset()) | {request.waiter_id}
    put_step(
        tx,
        step,
        replace(
            current,
            waiters=current.waiters.set(request.waiter_id, waiter),
            waiters_by_item=current.waiters_by_item.set(item_id, by_item),
        ),
    )
    if existing is not None:
        _unindex_waiter(tx, step, existing)
    _index_waiter(tx, step, waiter)
    if existing is None:
        if request.waiter_event is not None:
            tx.commands.append(PublishEvent(request.waiter_event))
        if waiter.deadline is not None:
            tx.commands.append(ScheduleWaiterTimeout(waiter.deadline, step, request.waiter_id))
    if tx.holdings.unclaimed:  # an event it waits for may have come before it
        kept = take_unclaimed(tx, item_id, waiter)
        if kept is not None:
            _resolve(tx, step, waiter, kept)


def _forget_superseded(tx: Tx, step: str, item_id: str, waiter_id: str) -> None:
    """A body suspends at its first unresolved wait, so a work item has at most one
    pending waiter: one with another id was not asked for again by this pass (the step's
    code changed, or a waiter restored blind got a new implicit id) and is dropped."""
    ids = tx.steps[step].waiters_by_item.get(item_id)
    if not ids or ids == {waiter_id}:
        return
    waiters = tx.steps[step].waiters
    stale = tuple(wid for wid in sorted(ids) if wid != waiter_id and waiters[wid].pending)
    if stale:
        delete_waiters(tx, step, item_id, stale)


def delete_waiters(tx: Tx, step: str, item_id: str, only: tuple[str, ...] | None) -> None:
    """Forget the waiters of a work item (all of them, or the ``only`` ids)."""
    current = tx.steps[step]
    ids = current.waiters_by_item.get(item_id)
    if not ids:
        return
    doomed = ids if only is None else ids & frozenset(only)
    if not doomed:
        return
    waiters = current.waiters
    for waiter_id in doomed:
        waiter = waiters.get(waiter_id)
        if waiter is not None:
            if waiter.resolved_event is None and not waiter.timed_out:
                _unindex_waiter(tx, step, waiter)
            waiters = waiters.delete(waiter_id)
    left = ids - doomed
    by_item = (
        current.waiters_by_item.set(item_id, left)
        if left
        else current.waiters_by_item.delete(item_id)
    )
    put_step(tx, step, replace(tx.steps[step], waiters=waiters, waiters_by_item=by_item))


def process_waiter_timeout(tx: Tx, tick: WaiterTimeout) -> None:
    """A waiter's deadline may have passed: time it out (or re-arm an early timer)."""
    if not tx.live:
        return
    current = tx.steps[tick.step]
    waiter = current.waiters.get(tick.waiter_id)
    if waiter is None or not waiter.pending or waiter.deadline is None:
        return  # a stale timer: resolved, timed out, or registered again without a timeout
    if waiter.deadline - tx.now > 1e-9:
        tx.commands.append(ScheduleWaiterTimeout(waiter.deadline, tick.step, tick.waiter_id))
        return
    timed_out = replace(waiter, timed_out=True)
    put_step(
        tx, tick.step, replace(current, waiters=current.waiters.set(waiter.waiter_id, timed_out))
    )
    _unindex_waiter(tx, tick.step, waiter)
    dispatch_or_queue(tx, tick.step, waiter.item)


def describe_pending_waiters(tx: Tx) -> str:
    """The pending waiters of the run, for a timeout message: awaited type, requirements
    and step, sorted (``""`` when there are none).  O(waiters)."""
    described = []
    for step in sorted(tx.steps):
        for waiter in sorted(tx.steps[step].waiters.values(), key=waiter_order):
            if not waiter.pending:
                continue
            what = waiter.event_type.__name__
            if waiter.requirements:
                what += f" with {dict(waiter.requirements)!r}"
            elif waiter.blind:
                what += " with requirements not registered again yet"
            described.append(f"{what} in step {step!r}")
    return ", ".join(described)
