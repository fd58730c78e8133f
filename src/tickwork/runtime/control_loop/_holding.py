"""Reducer bookkeeping for events kept for waiters that are not there yet (api.md §23.1).

A waiter exists for the reducer only once the step's suspension is reduced, but from the
step's point of view it waits from the moment it calls ``wait_for_event``.  Two gaps
between those views are closed here, so that no event is ever lost to the ordering of
tasks:

* **Unclaimed events.**  An added event that reaches no step and no waiter while some
  step is queued or running is kept (``keep_unclaimed``): that step may be just about
  to wait for it.  Every matching waiter registered before the run is quiescent again
  takes it, once per work item (``take_unclaimed``), as if the waiter had existed when
  it arrived.  At quiescence the events nobody took are dropped (``drop_unclaimed``):
  logged through a ``ReportDropped`` command and remembered for the timeout message.
* **Blind waiters.**  A waiter restored from a snapshot that could not store its
  requirements matches nothing until its step runs again and registers them.  Events of
  its type are held back meanwhile (``hold_back``), in arrival order, and delivered
  once no blind waiter of their type is left (``_routing.release_held_events``).

Everything here is O(1) per tick while nothing is kept, which is the usual case.
"""

from __future__ import annotations

from typing import Any

from tickwork.runtime.control_loop._tx import Tx
from tickwork.runtime.types.commands import ReportDropped
from tickwork.runtime.types.evolve import evolve as replace
from tickwork.runtime.types.persistent import PList, PMap
from tickwork.runtime.types.state import (
    NO_HOLDINGS,
    HeldEvent,
    Holdings,
    UnclaimedEvent,
    Waiter,
)

__all__ = [
    "DROPPED_KEPT",
    "QUESTIONS_KEPT",
    "forget_questions",
    "remember_question",
    "take_releasable",
    "add_blind",
    "blocks",
    "describe_dropped",
    "drop_unclaimed",
    "hold_back",
    "keep_unclaimed",
    "remove_blind",
    "take_unclaimed",
]

DROPPED_KEPT = 8
"""How many dropped events a run remembers for its timeout message (the latest ones)."""


def _normalized(holdings: Holdings) -> Holdings:
    """The shared empty record when nothing is kept (the hot paths test identity)."""
    if (
        not holdings.unclaimed
        and holdings.blind.size == 0
        and not holdings.held
        and not holdings.dropped
        and not holdings.questions
    ):
        return NO_HOLDINGS
    return holdings


def keep_unclaimed(tx: Tx, event: Any, producer: str | None) -> None:
    """Keep an event that reached no step and no waiter, until the run is quiescent."""
    holdings = tx.holdings
    tx.holdings = replace(
        holdings, unclaimed=holdings.unclaimed.append(UnclaimedEvent(event, producer))
    )


def take_unclaimed(tx: Tx, work_item_id: str, waiter: Waiter) -> Any:
    """The earliest kept event ``waiter`` matches and its work item has not taken yet.

    Marks it as taken by that work item; ``None`` when there is none.  O(kept events).
    """
    holdings = tx.holdings
    kept = holdings.unclaimed.to_list()
    for position, unclaimed in enumerate(kept):
        if work_item_id in unclaimed.taken_by or not waiter.matches(unclaimed.event):
            continue
        kept[position] = replace(unclaimed, taken_by=unclaimed.taken_by | {work_item_id})
        tx.holdings = replace(holdings, unclaimed=PList.of(kept))
        return unclaimed.event
    return None


def drop_unclaimed(tx: Tx) -> None:
    """At quiescence: forget the kept events; report those no waiter took."""
    holdings = tx.holdings
    dropped = list(holdings.dropped)
    for unclaimed in holdings.unclaimed:
        if unclaimed.taken_by:
            continue
        name = type(unclaimed.event).__name__
        tx.commands.append(ReportDropped(name, unclaimed.producer))
        origin = f"step {unclaimed.producer!r}" if unclaimed.producer else "the caller"
        dropped.append(f"{name} from {origin}")
    tx.holdings = _normalized(
        replace(holdings, unclaimed=PList(), dropped=tuple(dropped[-DROPPED_KEPT:]))
    )


QUESTIONS_KEPT = 16
"""How many unanswered questions a run remembers (the latest ones)."""


def remember_question(tx: Tx, question: Any) -> None:
    """A step returned an ``InputRequiredEvent``: remember it until the caller sends."""
    holdings = tx.holdings
    questions = (*holdings.questions, question)[-QUESTIONS_KEPT:]
    tx.holdings = replace(holdings, questions=questions)


def forget_questions(tx: Tx) -> None:
    """The caller sent an event: the questions asked before are answered (or moot)."""
    if tx.holdings.questions:
        tx.holdings = _normalized(replace(tx.holdings, questions=()))


def describe_dropped(holdings: Holdings) -> str:
    """The events dropped unclaimed, latest last (``""`` when none were)."""
    return ", ".join(holdings.dropped)


def add_blind(tx: Tx, step: str, waiter: Waiter) -> None:
    """Record a waiter whose requirements are unknown (it is not indexed)."""
    holdings = tx.holdings
    tx.holdings = replace(holdings, blind=holdings.blind.set((step, waiter.waiter_id), waiter))


def remove_blind(tx: Tx, step: str, waiter_id: str) -> None:
    """Forget a blind waiter (re-registered, deleted or timed out)."""
    holdings = tx.holdings
    key = (step, waiter_id)
    if key in holdings.blind:
        tx.holdings = _normalized(replace(holdings, blind=holdings.blind.delete(key)))


def blocks(blind: PMap[tuple[str, str], Waiter], event: Any) -> bool:
    """Whether a blind waiter might want ``event`` (its type matches; requirements unknown)."""
    event_type = type(event)
    return any(waiter.awaits_type(event_type) for waiter in blind.values())


def hold_back(tx: Tx, held: HeldEvent) -> None:
    """Hold an event until no blind waiter of its type is left."""
    holdings = tx.holdings
    tx.holdings = replace(holdings, held=holdings.held.append(held))


def take_releasable(tx: Tx) -> list[HeldEvent]:
    """The held events no blind waiter blocks any more, in arrival order (removed)."""
    holdings = tx.holdings
    if holdings.blind.size == 0:
        released = holdings.held.to_list()
        kept: list[HeldEvent] = []
    else:
        released, kept = [], []
        for held in holdings.held:
            (kept if blocks(holdings.blind, held.event) else released).append(held)
    if released:
        tx.holdings = _normalized(replace(holdings, held=PList.of(kept)))
    return released
