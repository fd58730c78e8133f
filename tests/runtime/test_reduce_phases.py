"""The reducer, phase by phase: exact commands (type, order, fields) and resulting state.

Every test drives :class:`tickwork.testing.ReducerKit` with a virtual clock that starts
at ``1000.0``; the workflows below never run their bodies, the tests decide each
invocation's outcome.  Commands are compared through :func:`summary` (one short tuple
per command) so that a whole command list can be asserted at once.

Spec references are to ``api.md``: routing and dispatch §19, retries §22.2, waiters
§23.1, lifecycle §24, step-state timing §25.2, exactly-once emissions §26.3.
"""

from __future__ import annotations

import gc
from datetime import datetime, timezone

import pytest

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, catch_error, step
from tickwork.errors import WorkflowCancelledByUser, WorkflowTimeoutError
from tickwork.events import (
    HumanResponseEvent,
    InputRequiredEvent,
    StepFailedEvent,
    StepState,
    UnhandledEvent,
    WorkflowCancelledEvent,
    WorkflowIdleEvent,
    WorkflowTimedOutEvent,
)
from tickwork.runtime.control_loop import _routing
from tickwork.runtime.control_loop.reduce import reduce
from tickwork.runtime.control_loop.streams import EMPTY_BUFFER, decide_collect
from tickwork.runtime.event_stream import materialize
from tickwork.runtime.types.commands import CancelWorker, Halt, PublishStepState, RunWorker
from tickwork.runtime.types.evolve import evolve as replace
from tickwork.runtime.types.persistent import PList, PMap
from tickwork.runtime.types.results import Completed, Failed, Suspended, WaiterRequest
from tickwork.runtime.types.state import Invocation, RunState, StepRunState
from tickwork.runtime.types.ticks import AddEvent, SessionStart, StepResult
from tickwork.testing import ReducerKit

from .reducer_helpers import fingerprint, summary

# ---------------------------------------------------------------------------- events


class A(Event):
    n: int = 0


class SubA(A):
    pass


class B(Event):
    n: int = 0


class Orphan(Event):
    """No step accepts it."""

    n: int = 0


class Ask(InputRequiredEvent):
    n: int = 0


class Reply(HumanResponseEvent):
    n: int = 0


class SubReply(Reply):
    pass


class Done(Event):
    n: int = 0


class Base(Event):
    n: int = 0


class Special(Base):
    pass


# ------------------------------------------------------------------------- workflows
# Method steps are discovered in name order; names below are chosen so that name order
# and definition order agree.


class ChainFlow(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> A: ...

    @step
    async def finish(self, ev: B) -> StopEvent: ...

    @step
    async def middle(self, ev: A) -> B: ...


class RoutingFlow(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> StopEvent: ...

    @step
    async def exact(self, ev: A) -> None: ...

    @step(accept_event_subclasses=True)
    async def loose(self, ev: A) -> None: ...

    @step
    async def other(self, ev: A) -> None: ...


class QueueFlow(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> StopEvent: ...

    @step(num_workers=3)
    async def pool(self, ev: A) -> B | None: ...

    @step(num_workers=1)
    async def single(self, ev: B) -> None: ...


class RetryFlow(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> None: ...

    @step(num_workers=1)
    async def flaky(self, ev: A) -> StopEvent | None: ...

    @step
    async def side(self, ev: B) -> None: ...


class CatchFlow(Workflow):
    @step
    async def flaky(self, ev: StartEvent | A) -> StopEvent: ...

    @catch_error
    async def recover(self, ev: StepFailedEvent) -> A | None: ...


class AskFlow(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> Ask: ...

    @step
    async def triage(self, ev: Ask) -> StopEvent: ...


class ListFlow(Workflow):
    @step
    async def fan(self, ev: StartEvent) -> list[A | Ask] | StopEvent: ...

    @step
    async def middle(self, ev: A) -> None: ...


class WideFanFlow(Workflow):
    """A fan-out whose elements go to several plain steps, some of them to two."""

    @step
    async def fan(self, ev: StartEvent) -> list[A | B]: ...

    @step(num_workers=2)
    async def pool(self, ev: A) -> None: ...

    @step(num_workers=1)
    async def second(self, ev: A) -> None: ...

    @step(num_workers=3)
    async def single(self, ev: B) -> StopEvent | None: ...


class HitlFlow(Workflow):
    @step
    async def ask(self, ev: StartEvent | Reply) -> StopEvent | None: ...

    @step
    async def audit(self, ev: Reply) -> None: ...

    @step(accept_event_subclasses=True)
    async def loose(self, ev: Base) -> None: ...


class JoinFlow(Workflow):
    @step
    async def assemble(self, a: A, b: B) -> StopEvent: ...

    @step
    async def begin(self, ev: StartEvent) -> None: ...

    @step(accept_event_subclasses=True)
    async def loose_pair(self, first: Base, second: Special) -> None: ...

    @step
    async def pair(self, x: Done, y: Done) -> None: ...


class CollectFlow(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> None: ...

    @step(num_workers=3)
    async def gather(self, ctx: Context, ev: Done) -> StopEvent | None: ...


class ResumeFlow(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> StopEvent: ...

    @step(num_workers=2)
    async def zeta(self, ev: A) -> None: ...


@step(workflow=ResumeFlow, num_workers=1)
async def alpha(ev: B) -> None:
    """A free-function step: declared after the method steps, first in sorted order."""


# ---------------------------------------------------------------------------- helpers


def quiet(workflow: Workflow) -> ReducerKit:
    """A started run whose ``begin`` step returned ``None`` and whose idle check ran.

    The run is live, quiescent, and has no idle check pending, so the next input that
    leaves it quiescent schedules one (``("idle_check",)`` in a summary).
    """
    kit = ReducerKit(workflow)
    kit.start()
    (begin,) = kit.running("begin")
    kit.complete(begin, None)
    kit.idle_check()
    assert kit.state.quiescent and not kit.state.idle_check_pending
    return kit


def unhandled(event_type: type, *, idle: bool) -> UnhandledEvent:
    return UnhandledEvent(
        event_type=event_type.__name__,
        qualified_name=f"{event_type.__module__}.{event_type.__qualname__}",
        step_name=None,
        idle=idle,
    )


def started(commands: list[object]) -> list[Invocation]:
    return [c.invocation for c in commands if isinstance(c, RunWorker)]


def resolvable(kit: ReducerKit, event: Event) -> set[tuple[str, str]]:
    """The ``(step, waiter_id)`` pairs ``event`` would resolve if it arrived now.

    Computed on the side (``reduce`` is pure): this checks the waiter index through
    behaviour, whatever its representation.
    """
    after, _ = reduce(kit.state, AddEvent(kit.now, event))
    return {
        (name, wid)
        for name, step_state in after.steps.items()
        for wid, waiter in step_state.waiters.items()
        if waiter.resolved_event is event
    }


def assert_cleared(kit: ReducerKit, status: str) -> None:
    """Terminal outcomes (complete, fail, timeout) leave no worker state behind."""
    s = kit.state
    assert (s.status, s.is_running, s.queued, s.running) == (status, False, 0, 0)
    assert not s.waiter_index
    assert len(s.streams) == 0 and len(s.releases) == 0
    assert all(step_state == StepRunState() for step_state in s.steps.values())


# ---------------------------------------------------------------------- session start


def test_session_start_makes_the_run_live_and_arms_the_workflow_timeout() -> None:
    kit = ReducerKit(ChainFlow())
    out = kit.feed(SessionStart(1000.0, "run-1"))
    assert summary(out) == [("timeout", 1045.0)]
    s = kit.state
    assert (s.status, s.is_running, s.journal_seq) == ("running", True, 1)
    assert (s.last_alive_stamp, s.elapsed_alive, s.idle_check_pending) == (1000.0, 0.0, False)


def test_session_start_without_a_workflow_timeout_arms_nothing() -> None:
    kit = ReducerKit(ChainFlow(timeout=None))
    assert kit.feed(SessionStart(1000.0, "run-1")) == []


def test_the_start_event_is_dispatched_to_the_start_step() -> None:
    kit = ReducerKit(ChainFlow())
    out = kit.start()
    assert summary(out) == [
        ("timeout", 1045.0),
        ("running", "begin", "0"),
        ("run", "begin", "wi-0", 0),
    ]
    (inv,) = started(out)
    assert (inv.invocation_id, inv.step, inv.worker_id, inv.dispatched_at) == (
        "inv-0",
        "begin",
        0,
        1000.0,
    )
    assert inv.item.event == StartEvent() and inv.item.attempts == 0
    assert set(inv.received) == set() and kit.state.running == 1


def test_resume_rewinds_in_flight_work_to_the_queue_front_in_sorted_step_order() -> None:
    kit = ReducerKit(ResumeFlow())
    assert kit.config.step_order == ("begin", "zeta", "alpha")
    kit.start()
    (begin,) = kit.running("begin")
    kit.complete(begin, None)
    for n in (1, 2, 3):
        kit.send(A(n=n))  # zeta: A1 -> slot 0, A2 -> slot 1, A3 queued
    kit.send(B(n=1))  # alpha: slot 0
    kit.send(B(n=2))  # alpha: queued
    a1, a2 = kit.running("zeta")
    kit.complete(a1, None)  # A3 -> slot 0
    kit.send(A(n=4))  # queued behind nothing running-wise: zeta is full
    a2_again, a3 = kit.running("zeta")
    assert a2_again is a2 and (a2.worker_id, a3.worker_id) == (1, 0)
    (b1,) = kit.running("alpha")

    kit.cancel()
    kit.advance(100)
    out = kit.feed(SessionStart(kit.now, "run-2"))

    # alpha before zeta (sorted, not declaration order); inside zeta, the older
    # invocation first, each into the smallest free slot; A4, queued before the cancel,
    # stays behind the rewound items.
    assert summary(out) == [
        ("running", "alpha", "0"),
        ("run", "alpha", b1.item.work_item_id, 0),
        ("running", "zeta", "0"),
        ("run", "zeta", a2.item.work_item_id, 0),
        ("running", "zeta", "1"),
        ("run", "zeta", a3.item.work_item_id, 1),
        ("timeout", 1145.0),
    ]
    s = kit.state
    assert (s.status, s.is_running, s.queued, s.running) == ("running", True, 2, 3)
    assert [it.event for it in kit.queued("zeta")] == [A(n=4)]
    assert [it.event for it in kit.queued("alpha")] == [B(n=2)]
    # re-runs after a resume keep their invocation identity (api.md §26.3)
    assert [inv.invocation_id for inv in started(out)] == [
        b1.invocation_id,
        a2.invocation_id,
        a3.invocation_id,
    ]


def test_resume_arms_the_timeout_with_the_remaining_alive_budget() -> None:
    kit = ReducerKit(ChainFlow())
    kit.start()
    kit.advance(30)
    kit.cancel()
    assert kit.state.elapsed_alive == 30.0
    kit.advance(500)  # downtime: not alive time
    out = kit.feed(SessionStart(kit.now, "run-2"))
    assert summary(out) == [
        ("running", "begin", "0"),
        ("run", "begin", "wi-0", 0),
        ("timeout", 1545.0),
    ]
    assert (kit.state.elapsed_alive, kit.state.last_alive_stamp) == (30.0, 1530.0)
    kit.advance(15)
    out = kit.timeout()
    assert summary(out)[-1][:2] == ("halt", "timeout")
    assert kit.state.elapsed_alive == 45.0


def test_resume_arms_waiter_deadlines_as_they_were_and_no_idle_check() -> None:
    """api.md §23.1 (revised): downtime counts, so a deadline that passed while the run
    was down is due at once after the resume (the run's own budget is alive time)."""
    kit = ReducerKit(HitlFlow())
    kit.start()
    (ask,) = kit.running("ask")
    kit.suspend(ask, Reply, "w", timeout=20)
    kit.advance(5)
    kit.cancel()
    kit.advance(100)
    out = kit.feed(SessionStart(kit.now, "run-2"))
    assert summary(out) == [("waiter_timeout", 1020.0, "ask", "w"), ("timeout", 1145.0)]


def test_resume_keeps_invocation_identity_so_routed_sends_are_not_routed_again() -> None:
    """api.md §26.3: a re-run after a resume keeps its identity and its routed sends."""
    kit = ReducerKit(ChainFlow())
    kit.start()
    (begin,) = kit.running("begin")
    kit.send_from(begin, 0, A(n=1))  # routed to middle
    kit.cancel()
    kit.feed(SessionStart(kit.now, "run-2"))
    (rerun,) = kit.running("begin")
    assert (rerun.invocation_id, set(rerun.received)) == (begin.invocation_id, {0})
    assert rerun.item.work_item_id == begin.item.work_item_id
    assert kit.send_from(rerun, 0, A(n=1)) == []  # the same first send: already routed
    out = kit.send_from(rerun, 1, A(n=2))  # a new one is routed
    assert summary(out) == [("running", "middle", "1"), ("run", "middle", "wi-2", 1)]


def test_resume_rearms_the_wakeup_of_a_pending_delayed_retry() -> None:
    """api.md §26.2: delayed retries keep their not_before across a resume."""
    kit = quiet(RetryFlow())
    kit.send(A(n=1))
    (flaky,) = kit.running("flaky")
    kit.fail(flaky, RuntimeError("boom"), retry_delay=10)  # due at 1010
    kit.advance(2)
    kit.cancel()
    kit.advance(3)
    out = kit.feed(SessionStart(kit.now, "run-2"))  # 1005: 2 s of budget spent
    assert summary(out) == [("wakeup", 1010.0, "flaky"), ("timeout", 1048.0)]
    kit.advance(5)
    out = kit.wakeup("flaky")
    assert summary(out) == [("running", "flaky", "0"), ("run", "flaky", flaky.item.work_item_id, 0)]


def test_resume_rearms_a_wakeup_for_every_pending_delayed_retry() -> None:
    """A later delayed retry of the same step must not be left without a wakeup."""
    kit = quiet(RetryFlow())
    kit.send(A(n=1))
    kit.send(A(n=2))
    (first,) = kit.running("flaky")
    kit.fail(first, RuntimeError("one"), retry_delay=10)  # due 1010; A2 starts
    (second,) = kit.running("flaky")
    kit.advance(1)
    kit.fail(second, RuntimeError("two"), retry_delay=20)  # due 1021
    kit.advance(1)
    kit.cancel()
    kit.advance(3)
    out = kit.feed(SessionStart(kit.now, "run-2"))  # 1005
    wakeups = [c for c in summary(out) if c[0] == "wakeup"]
    assert ("wakeup", 1010.0, "flaky") in wakeups
    # whichever way it is armed (all at once, or the next one at each wakeup), the
    # later retry must get its own wakeup by the time the first one is handled
    kit.advance(5)
    out = kit.wakeup("flaky")
    (retry,) = started(out)
    kit.advance(1)
    out += kit.complete(retry, None)
    wakeups += [c for c in summary(out) if c[0] == "wakeup"]
    assert ("wakeup", 1021.0, "flaky") in wakeups


def test_journaled_requirements_survive_the_journal_and_need_no_rerun() -> None:
    """api.md §23.1: requirements the serializer can store are stored, in journals too."""
    from tickwork.serde.journal_codec import decode_tick, encode_tick

    kit = ReducerKit(HitlFlow())
    kit.start()
    (ask,) = kit.running("ask")
    request = WaiterRequest("w", Reply, {"n": 1}, None, None)
    tick = StepResult(kit.now, "ask", ask.invocation_id, Suspended(request))
    kit.feed(decode_tick(encode_tick(tick)))  # what folding the journal does
    assert kit.state.steps["ask"].waiters["w"].requirements == {"n": 1}
    kit.cancel()
    out = kit.feed(SessionStart(kit.now, "run-2"))
    assert not started(out)
    assert resolvable(kit, Reply(n=2)) == set()
    assert resolvable(kit, Reply(n=1)) == {("ask", "w")}


def test_resume_reruns_a_blind_waiter_and_holds_events_of_its_type_until_then() -> None:
    """api.md §23.1 (revised): a waiter whose requirements were not stored matches
    nothing until its step registers them again; events of its type wait meanwhile."""
    kit = ReducerKit(HitlFlow())
    kit.start()
    (ask,) = kit.running("ask")
    blind = WaiterRequest("w", Reply, None, None, None, has_requirements=True)
    kit.feed(StepResult(kit.now, "ask", ask.invocation_id, Suspended(blind)))
    assert kit.state.holdings.blind.size == 1 and not kit.state.waiter_index
    kit.cancel()
    out = kit.feed(SessionStart(kit.now, "run-2"))
    # The step runs again so that it registers its requirements.
    assert summary(out)[:2] == [("running", "ask", "0"), ("run", "ask", ask.item.work_item_id, 0)]
    (rerun,) = started(out)
    # Replies arriving meanwhile are held, undelivered (audit accepts Reply too).
    assert kit.send(Reply(n=2)) == []
    assert kit.send(Reply(n=1)) == []
    assert [h.event for h in kit.state.holdings.held] == [Reply(n=2), Reply(n=1)]
    # The requirements are back, and the held events are judged in arrival order:
    # n=2 is routed normally (ask and audit accept Reply), n=1 resolves the waiter (its
    # work item is re-delivered to ask, which does not also get it as a trigger).
    out = kit.suspend(rerun, Reply, "w", requirements={"n": 1})
    runs = [(c[1], c[2]) for c in summary(out) if c[0] == "run"]
    assert runs == [
        ("ask", "wi-1"),
        ("audit", "wi-2"),
        ("ask", ask.item.work_item_id),
        ("audit", "wi-3"),
    ]
    assert kit.state.steps["ask"].waiters["w"].resolved_event == Reply(n=1)
    assert kit.state.holdings.blind.size == 0 and not kit.state.holdings.held


def test_resume_dispatches_a_past_due_delayed_retry_at_once() -> None:
    kit = quiet(RetryFlow())
    kit.send(A(n=1))
    (flaky,) = kit.running("flaky")
    kit.fail(flaky, RuntimeError("boom"), retry_delay=10)
    kit.cancel()
    kit.advance(100)
    out = kit.feed(SessionStart(kit.now, "run-2"))
    assert summary(out) == [
        ("running", "flaky", "0"),
        ("run", "flaky", flaky.item.work_item_id, 0),
        ("timeout", 1145.0),
    ]


# -------------------------------------------------------------------------- add event


def test_an_event_goes_to_every_accepting_step_in_declaration_order() -> None:
    kit = quiet(RoutingFlow())
    out = kit.send(A(n=1))
    assert summary(out) == [
        ("running", "exact", "0"),
        ("run", "exact", "wi-1", 0),
        ("running", "loose", "0"),
        ("run", "loose", "wi-2", 0),
        ("running", "other", "0"),
        ("run", "other", "wi-3", 0),
    ]
    assert [inv.item.event for inv in started(out)] == [A(n=1)] * 3


def test_a_subclass_instance_reaches_only_subclass_mode_steps() -> None:
    kit = quiet(RoutingFlow())
    out = kit.send(SubA(n=1))
    assert summary(out) == [("running", "loose", "0"), ("run", "loose", "wi-1", 0)]


def test_a_targeted_send_reaches_only_its_target() -> None:
    kit = quiet(RoutingFlow())
    out = kit.send(A(n=1), step="other")
    assert summary(out) == [("running", "other", "0"), ("run", "other", "wi-1", 0)]


def test_an_event_no_step_accepts_is_published_unhandled_with_the_idle_flag() -> None:
    kit = quiet(RoutingFlow())
    out = kit.send(Orphan(n=1))
    # Nothing could still wait for it: it is dropped (and reported) at once.
    assert summary(out) == [
        ("publish", unhandled(Orphan, idle=True)),
        ("dropped", "Orphan", None),
        ("idle_check",),
    ]
    kit.send(A(n=1))  # three steps busy
    out = kit.send(Orphan(n=2))
    # A busy step may still wait for it: kept, not dropped yet.
    assert summary(out) == [("publish", unhandled(Orphan, idle=False))]
    assert [u.event for u in kit.state.holdings.unclaimed] == [Orphan(n=2)]


def test_an_input_required_event_is_never_reported_unhandled() -> None:
    kit = quiet(RoutingFlow())
    out = kit.send(Ask(n=1))
    assert summary(out) == [("idle_check",)]


def test_a_keyed_send_is_routed_once_per_emission_key() -> None:
    kit = ReducerKit(ChainFlow())
    kit.start()
    (begin,) = kit.running("begin")
    out = kit.send_from(begin, 0, A(n=1))
    assert summary(out) == [("running", "middle", "0"), ("run", "middle", "wi-1", 0)]
    assert set(kit.state.steps["begin"].in_progress[begin.invocation_id].received) == {0}

    before = kit.state
    assert kit.send_from(begin, 0, A(n=1)) == []
    assert kit.state.work_item_seq == before.work_item_seq
    assert kit.state.steps["middle"] == before.steps["middle"]

    out = kit.send_from(begin, 1, A(n=2))
    assert summary(out) == [("running", "middle", "1"), ("run", "middle", "wi-2", 1)]
    assert set(kit.state.steps["begin"].in_progress[begin.invocation_id].received) == {0, 1}


def test_a_keyed_send_of_a_finished_invocation_is_dropped() -> None:
    kit = ReducerKit(ChainFlow())
    kit.start()
    (begin,) = kit.running("begin")
    kit.send_from(begin, 0, A(n=1))
    kit.complete(begin, None, sends=1)
    seq = kit.state.work_item_seq
    assert kit.send_from(begin, 1, A(n=2)) == []
    assert kit.send_from(begin, 0, A(n=1)) == []
    assert kit.state.work_item_seq == seq
    assert len(kit.running("middle")) == 1


# --------------------------------------------------------------------------- dispatch


def test_dispatch_takes_the_smallest_free_slot_and_queues_when_all_are_busy() -> None:
    kit = quiet(QueueFlow())
    outs = [kit.send(A(n=n)) for n in (1, 2, 3, 4)]
    assert [summary(o) for o in outs] == [
        [("running", "pool", "0"), ("run", "pool", "wi-1", 0)],
        [("running", "pool", "1"), ("run", "pool", "wi-2", 1)],
        [("running", "pool", "2"), ("run", "pool", "wi-3", 2)],
        [("preparing", "pool", "<enqueued>")],
    ]
    assert (kit.state.queued, kit.state.running) == (1, 3)
    p0, p1, p2 = kit.running("pool")

    out = kit.complete(p1, None)  # slot 1 frees: the queued item takes it
    assert summary(out) == [
        ("not_running", "pool", "1"),
        ("running", "pool", "1"),
        ("run", "pool", "wi-4", 1),
    ]
    assert summary(kit.complete(p0, None)) == [("not_running", "pool", "0")]
    assert summary(kit.complete(p2, None)) == [("not_running", "pool", "2")]
    assert kit.state.steps["pool"].busy_slots == {1}

    assert summary(kit.send(A(n=5)))[0] == ("running", "pool", "0")
    assert summary(kit.send(A(n=6)))[0] == ("running", "pool", "2")
    assert summary(kit.send(A(n=7))) == [("preparing", "pool", "<enqueued>")]


def test_a_freed_slot_drains_the_queue_in_fifo_order() -> None:
    kit = quiet(QueueFlow())
    for n in (1, 2, 3, 4):
        kit.send(B(n=n))
    assert [it.event for it in kit.queued("single")] == [B(n=2), B(n=3), B(n=4)]
    assert kit.state.queued == 3
    order = []
    for _ in range(3):
        (running,) = kit.running("single")
        out = kit.complete(running, None)
        assert summary(out)[:2] == [("not_running", "single", "0"), ("running", "single", "0")]
        order.append(started(out)[0].item.event)
    assert order == [B(n=2), B(n=3), B(n=4)]
    (last,) = kit.running("single")
    assert summary(kit.complete(last, None)) == [("not_running", "single", "0"), ("idle_check",)]
    assert (kit.state.queued, kit.state.running) == (0, 0)


def test_step_state_changes_use_the_documented_field_formats() -> None:
    kit = quiet(QueueFlow())
    for n in (1, 2, 3):
        kit.send(A(n=n))
    (preparing,) = kit.send(A(n=4))
    p0, p1, p2 = kit.running("pool")
    kit.advance(1)
    out = kit.complete(p1, B(n=1))
    assert summary(out) == [
        ("not_running", "pool", "1"),
        ("running", "single", "0"),
        ("run", "single", "wi-5", 0),
        ("running", "pool", "1"),
        ("run", "pool", "wi-4", 1),
    ]
    with_none = kit.complete(p0, None)[0]
    failed = kit.fail(p2, RuntimeError("boom"), None)[0]

    def fields(command: object) -> tuple[object, ...]:
        assert isinstance(command, (PublishStepState, RunWorker))
        ev = materialize(command)
        return (ev.name, ev.step_state, ev.worker_id, ev.input_event_name, ev.output_event_name)

    a_cls, b_cls = str(A), str(B)
    assert fields(preparing) == ("pool", StepState.PREPARING, "<enqueued>", "A", None)
    assert fields(out[0]) == ("pool", StepState.NOT_RUNNING, "1", a_cls, b_cls)
    assert fields(out[1]) == ("single", StepState.RUNNING, "0", "B", None)
    assert fields(with_none) == ("pool", StepState.NOT_RUNNING, "0", a_cls, str(type(None)))
    assert fields(failed) == ("pool", StepState.NOT_RUNNING, "2", a_cls, None)
    assert a_cls == f"<class '{A.__module__}.A'>"


# ------------------------------------------------------------------------ step result


def test_not_running_is_published_before_the_downstream_running() -> None:
    kit = ReducerKit(ChainFlow())
    kit.start()
    (begin,) = kit.running("begin")
    kit.advance(1)
    out = kit.complete(begin, A(n=1))
    assert summary(out) == [
        ("not_running", "begin", "0"),
        ("running", "middle", "0"),
        ("run", "middle", "wi-1", 0),
    ]
    (middle,) = started(out)
    assert middle.item.event == A(n=1) and middle.dispatched_at == 1001.0
    assert (
        kit.state.running == 1 and begin.invocation_id not in kit.state.steps["begin"].in_progress
    )


def test_a_returned_input_required_event_is_published_after_not_running() -> None:
    kit = ReducerKit(RoutingFlow())  # nobody accepts Ask
    kit.start()
    (begin,) = kit.running("begin")
    out = kit.complete(begin, Ask(n=1))
    assert summary(out) == [("not_running", "begin", "0"), ("publish", Ask(n=1)), ("idle_check",)]

    kit = ReducerKit(AskFlow())  # triage accepts Ask: published, then routed
    kit.start()
    (begin,) = kit.running("begin")
    out = kit.complete(begin, Ask(n=2))
    assert summary(out) == [
        ("not_running", "begin", "0"),
        ("publish", Ask(n=2)),
        ("running", "triage", "0"),
        ("run", "triage", "wi-1", 0),
    ]


def test_input_required_fan_out_elements_are_published_before_downstream_running() -> None:
    kit = ReducerKit(ListFlow())
    kit.start()
    (fan,) = kit.running("fan")
    out = kit.complete(fan, [A(n=1), Ask(n=2)])
    # api.md §25.1/§25.2: right after NOT_RUNNING, before any downstream RUNNING
    assert summary(out) == [
        ("not_running", "fan", "0"),
        ("publish", Ask(n=2)),
        ("running", "middle", "0"),
        ("run", "middle", "wi-1", 0),
    ]


def test_a_fan_out_into_plain_steps_dispatches_and_queues_as_one_delivery_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The batched delivery of a fan-out list gives the state and commands of
    delivering its elements one by one (``emit_events``)."""
    elements = [A(n=1), B(n=2), A(n=3), A(n=4), B(n=5), B(n=6), B(n=7), A(n=8)]

    def fan_out() -> tuple[object, list[object]]:
        kit = ReducerKit(WideFanFlow())
        kit.start()
        (fan,) = kit.running("fan")
        out = kit.complete(fan, elements)
        return kit.state, out

    batched_state, batched = fan_out()
    assert summary(batched)[:4] == [
        ("not_running", "fan", "0"),
        ("running", "pool", "0"),
        ("run", "pool", "wi-1", 0),
        ("running", "second", "0"),
    ]
    assert [it.event for it in batched_state.steps["pool"].queue] == [A(n=4), A(n=8)]
    assert [it.event for it in batched_state.steps["second"].queue] == [A(n=3), A(n=4), A(n=8)]
    assert [it.event for it in batched_state.steps["single"].queue] == [B(n=7)]
    assert (batched_state.queued, batched_state.running) == (6, 6)

    monkeypatch.setattr(_routing, "_only_plain_deliveries", lambda tx, events: False)
    one_by_one_state, one_by_one = fan_out()
    assert fingerprint(batched) == fingerprint(one_by_one)
    assert fingerprint(batched_state) == fingerprint(one_by_one_state)


def test_a_stop_event_completes_the_run_cancels_the_rest_and_clears_state() -> None:
    kit = quiet(QueueFlow())
    for n in (1, 2, 3, 4):
        kit.send(A(n=n))  # three running, one queued
    kit.send(B(n=1))
    kit.send(B(n=2))  # one running, one queued
    p0, *others = kit.running()
    assert p0.step == "pool"
    stop = StopEvent(result="done")
    out = kit.complete(p0, stop)
    assert summary(out)[0] == ("not_running", "pool", "0")
    assert summary(out)[-1] == ("complete", stop)
    cancels = out[1:-1]
    assert all(isinstance(c, CancelWorker) for c in cancels)
    assert sorted(c.invocation_id for c in cancels) == sorted(i.invocation_id for i in others)
    assert_cleared(kit, "completed")
    # nothing after the end
    assert kit.complete(others[0], None) == []
    assert kit.send(A(n=9)) == []
    assert kit.idle_check() == []


def test_the_first_stop_event_of_a_returned_list_wins_and_the_rest_is_discarded() -> None:
    kit = ReducerKit(ListFlow())
    kit.start()
    (fan,) = kit.running("fan")
    first, second = StopEvent(result=1), StopEvent(result=2)
    out = kit.complete(fan, [A(n=1), first, second])
    assert summary(out) == [("not_running", "fan", "0"), ("complete", first)]
    assert_cleared(kit, "completed")


def test_an_immediate_retry_runs_again_at_the_front_of_the_queue() -> None:
    kit = quiet(RetryFlow())
    kit.send(A(n=1))
    kit.send(A(n=2))  # queued: flaky has one slot
    (first,) = kit.running("flaky")
    kit.advance(2)
    boom = RuntimeError("boom")
    out = kit.fail(first, boom, retry_delay=0)
    assert summary(out) == [
        ("not_running", "flaky", "0"),
        ("running", "flaky", "0"),
        ("run", "flaky", first.item.work_item_id, 0),
    ]
    (retry,) = started(out)
    assert retry.invocation_id != first.invocation_id
    item = retry.item
    assert (item.event, item.attempts, item.last_exception) == (A(n=1), 1, boom)
    assert (item.first_attempt_at, item.last_failed_at, item.not_before) == (1000.0, 1002.0, None)
    assert [it.event for it in kit.queued("flaky")] == [A(n=2)]


def test_a_delayed_retry_waits_for_its_time_without_holding_a_slot() -> None:
    kit = quiet(RetryFlow())
    kit.send(A(n=1))
    kit.send(A(n=2))
    (first,) = kit.running("flaky")
    out = kit.fail(first, RuntimeError("boom"), retry_delay=5)  # at 1000: due at 1005
    (second,) = started(out)
    assert summary(out) == [
        ("not_running", "flaky", "0"),
        ("wakeup", 1005.0, "flaky"),
        ("running", "flaky", "0"),
        ("run", "flaky", second.item.work_item_id, 0),
    ]
    assert second.item.event == A(n=2)
    assert [(it.event, it.not_before, it.attempts) for it in kit.queued("flaky")] == [
        (A(n=1), 1005.0, 1)
    ]

    kit.advance(1)
    kit.send(A(n=3))  # queued behind the delayed retry
    kit.advance(1)
    out = kit.complete(second, None)  # 1002: the retry is not eligible, A3 is
    (third,) = started(out)
    assert third.item.event == A(n=3)
    assert summary(out)[0] == ("not_running", "flaky", "0")
    out = kit.complete(third, None)
    assert summary(out) == [("not_running", "flaky", "0")]  # no idle check: retry pending
    assert (kit.state.queued, kit.state.running, kit.state.quiescent) == (1, 0, False)

    kit.advance(1)
    early = kit.wakeup("flaky")  # 1003: too early; it may only re-arm the wakeup
    assert started(early) == []
    assert all(c == ("wakeup", 1005.0, "flaky") for c in summary(early))
    kit.advance(2)
    out = kit.wakeup("flaky")  # 1005
    assert summary(out) == [("running", "flaky", "0"), ("run", "flaky", first.item.work_item_id, 0)]
    assert kit.state.queued == 0


def test_a_failure_without_retry_fails_the_run_with_attempts_and_elapsed() -> None:
    kit = quiet(RetryFlow())
    kit.send(A(n=1))
    kit.send(B(n=1))
    (side,) = kit.running("side")
    (attempt,) = kit.running("flaky")
    for delay in (2, 3):
        kit.advance(delay)
        kit.fail(attempt, RuntimeError("again"), retry_delay=0)
        (attempt,) = kit.running("flaky")
    kit.advance(2)
    last = RuntimeError("final")
    out = kit.fail(attempt, last, retry_delay=None)
    assert summary(out) == [
        ("not_running", "flaky", "0"),
        ("cancel", side.invocation_id),
        ("fail", "flaky", last, 3, 7.0),
    ]
    assert_cleared(kit, "failed")


def test_an_exhausted_failure_goes_to_its_catch_error_handler_once_per_lineage() -> None:
    kit = ReducerKit(CatchFlow())
    kit.start()
    (flaky,) = kit.running("flaky")
    kit.advance(1)
    boom = RuntimeError("boom")
    out = kit.fail(flaky, boom, retry_delay=None)
    assert summary(out) == [
        ("not_running", "flaky", "0"),
        ("running", "recover", "0"),
        ("run", "recover", "wi-1", 0),
    ]
    (handler,) = started(out)
    failed = handler.item.event
    assert isinstance(failed, StepFailedEvent)
    assert (failed.step_name, failed.input_event, failed.exception) == ("flaky", StartEvent(), boom)
    assert (failed.attempts, failed.elapsed_seconds) == (1, 1.0)
    assert failed.failed_at == datetime.fromtimestamp(1001.0, tz=timezone.utc)
    assert handler.item.recovery_counts == {"recover": 1}

    out = kit.complete(handler, A(n=1))  # the handler re-routes the flow
    (again,) = started(out)
    assert again.step == "flaky" and again.item.recovery_counts == {"recover": 1}
    second = RuntimeError("second")
    out = kit.fail(again, second, retry_delay=None)  # max_recoveries=1: not handled again
    assert summary(out) == [("not_running", "flaky", "0"), ("fail", "flaky", second, 1, 0.0)]


def test_a_result_for_an_unknown_invocation_is_ignored() -> None:
    kit = ReducerKit(ChainFlow())
    kit.start()
    before = kit.state
    assert kit.feed(StepResult(kit.now, "begin", "inv-999", Completed(A(n=1)))) == []
    assert kit.state.steps == before.steps and kit.state.running == 1


# ----------------------------------------------------------------------------- waiters


def test_a_suspension_frees_the_slot_registers_the_waiter_and_publishes_once() -> None:
    kit = ReducerKit(HitlFlow())
    kit.start()
    (ask,) = kit.running("ask")
    kit.advance(2)
    out = kit.suspend(ask, Reply, "w", waiter_event=Ask(n=1), requirements={"n": 1}, timeout=20)
    # api.md §23.1: NOT_RUNNING with output_event_name=None, then the waiter event.
    assert summary(out) == [
        ("not_running", "ask", "0"),
        ("publish", Ask(n=1)),
        ("waiter_timeout", 1022.0, "ask", "w"),
        ("idle_check",),
    ]
    assert materialize(out[0]).output_event_name is None
    s = kit.state
    ask_state = s.steps["ask"]
    assert (s.running, ask_state.busy_slots, len(ask_state.in_progress)) == (0, frozenset(), 0)
    w = ask_state.waiters["w"]
    assert (w.item, w.event_type, w.requirements, w.waiter_event) == (
        ask.item,
        Reply,
        {"n": 1},
        Ask(n=1),
    )
    # api.md §23.1: the deadline is the registering tick's stamp plus the timeout.
    assert (w.timeout, w.deadline, w.resolved_event, w.timed_out) == (20, 1022.0, None, False)
    assert resolvable(kit, Reply(n=1)) == {("ask", "w")}
    assert ask_state.waiters_by_item == PMap.of([(ask.item.work_item_id, frozenset({"w"}))])


def test_registering_the_same_waiter_again_keeps_its_budget_and_publishes_nothing() -> None:
    kit = ReducerKit(HitlFlow())
    kit.start()
    (ask,) = kit.running("ask")
    kit.suspend(ask, Reply, "w", waiter_event=Ask(n=1), timeout=20)
    kit.advance(5)
    kit.send(Reply(n=1), step="audit")  # targeted elsewhere: the waiter still resolves
    (rerun,) = kit.running("ask")
    kit.advance(1)
    out = kit.suspend(rerun, Reply, "w", waiter_event=Ask(n=1), timeout=20)
    assert summary(out) == [("not_running", "ask", "0")]  # audit is still running
    w = kit.state.steps["ask"].waiters["w"]
    assert (w.deadline, w.resolved_event, w.timed_out) == (1020.0, None, False)  # not moved
    assert resolvable(kit, Reply(n=1)) == {("ask", "w")}


def test_a_matching_event_resolves_the_waiter_and_redelivers_the_work_item() -> None:
    kit = ReducerKit(HitlFlow())
    kit.start()
    (ask,) = kit.running("ask")
    kit.suspend(ask, Reply, "w", requirements={"n": 1})
    out = kit.send(Reply(n=1))
    # ask is woken (its original StartEvent work item) and does not also receive the
    # Reply as a new trigger; audit receives it normally.
    assert summary(out) == [
        ("running", "ask", "0"),
        ("run", "ask", ask.item.work_item_id, 0),
        ("running", "audit", "0"),
        ("run", "audit", "wi-1", 0),
    ]
    rerun, audit = started(out)
    assert rerun.item == ask.item and audit.item.event == Reply(n=1)
    assert rerun.waiters_view["w"].resolved_event == Reply(n=1)
    assert kit.state.steps["ask"].waiters["w"].resolved_event == Reply(n=1)
    assert not kit.state.waiter_index
    # a second matching event finds no waiter: it is an ordinary trigger again
    out = kit.send(Reply(n=1))
    assert [inv.step for inv in started(out)] == ["ask", "audit"]


def test_an_event_that_fails_the_requirements_is_routed_normally() -> None:
    kit = ReducerKit(HitlFlow())
    kit.start()
    (ask,) = kit.running("ask")
    kit.suspend(ask, Reply, "w", requirements={"n": 1})
    out = kit.send(Reply(n=2))
    assert summary(out) == [
        ("running", "ask", "0"),
        ("run", "ask", "wi-1", 0),
        ("running", "audit", "0"),
        ("run", "audit", "wi-2", 0),
    ]
    assert kit.state.steps["ask"].waiters["w"].resolved_event is None


def test_waiter_matching_is_exact_unless_the_step_is_in_subclass_mode() -> None:
    kit = ReducerKit(HitlFlow())
    kit.start()
    (ask,) = kit.running("ask")
    kit.suspend(ask, Reply, "w")
    out = kit.send(SubReply(n=1))
    assert summary(out) == [
        ("publish", unhandled(SubReply, idle=True)),
        ("dropped", "SubReply", None),
    ]

    kit.send(Base(n=1))
    (loose,) = kit.running("loose")
    kit.suspend(loose, Reply, "lw")
    out = kit.send(SubReply(n=2))
    assert summary(out) == [("running", "loose", "0"), ("run", "loose", loose.item.work_item_id, 0)]
    assert kit.state.steps["ask"].waiters["w"].resolved_event is None
    assert resolvable(kit, Reply(n=1)) == {("ask", "w")}


def test_completing_the_work_item_deletes_its_waiters() -> None:
    kit = ReducerKit(HitlFlow())
    kit.start()
    (ask,) = kit.running("ask")
    kit.suspend(ask, Reply, "w")
    kit.send(Reply(n=1), step="audit")
    (rerun,) = kit.running("ask")
    kit.complete(rerun, None)
    ask_state = kit.state.steps["ask"]
    assert len(ask_state.waiters) == 0 and len(ask_state.waiters_by_item) == 0
    assert not kit.state.waiter_index


def test_a_waiter_timeout_rearms_while_budget_remains_and_redelivers_when_spent() -> None:
    kit = ReducerKit(HitlFlow())
    kit.start()
    (ask,) = kit.running("ask")
    kit.suspend(ask, Reply, "w", timeout=10)  # at 1000
    kit.advance(4)
    assert summary(kit.waiter_timeout("ask", "w")) == [("waiter_timeout", 1010.0, "ask", "w")]
    kit.advance(6)
    out = kit.waiter_timeout("ask", "w")
    assert summary(out) == [("running", "ask", "0"), ("run", "ask", ask.item.work_item_id, 0)]
    (rerun,) = started(out)
    assert rerun.waiters_view["w"].timed_out is True
    assert kit.state.steps["ask"].waiters["w"].timed_out is True
    assert not kit.state.waiter_index
    # a timed-out waiter is not resolved any more: the Reply is an ordinary trigger
    out = kit.send(Reply(n=1))
    assert [(inv.step, inv.item.event) for inv in started(out)] == [
        ("ask", Reply(n=1)),
        ("audit", Reply(n=1)),
    ]
    assert kit.state.steps["ask"].waiters["w"].resolved_event is None


def test_a_waiter_timeout_after_resolution_does_nothing() -> None:
    kit = ReducerKit(HitlFlow())
    kit.start()
    (ask,) = kit.running("ask")
    kit.suspend(ask, Reply, "w", timeout=10)
    kit.advance(2)
    kit.send(Reply(n=1), step="audit")
    kit.advance(8)
    before = kit.state
    assert kit.waiter_timeout("ask", "w") == []
    assert kit.state.steps == before.steps


def test_an_event_nobody_takes_while_steps_run_is_kept_for_a_waiter_still_to_come() -> None:
    """api.md §23.1: an event sent before the step reached its ``wait_for_event`` (the
    ordering of tasks decides that) resolves the waiter registered after it."""
    kit = ReducerKit(HitlFlow())
    kit.start()
    (ask,) = kit.running("ask")
    out = kit.send(Orphan(n=1))  # ask is still running: kept, not dropped
    assert summary(out) == [("publish", unhandled(Orphan, idle=False))]
    out = kit.suspend(ask, Orphan, "w")
    # Registered and resolved by the kept event at once: the work item is re-delivered.
    assert summary(out) == [
        ("not_running", "ask", "0"),
        ("running", "ask", "0"),
        ("run", "ask", ask.item.work_item_id, 0),
    ]
    (rerun,) = started(out)
    assert rerun.waiters_view["w"].resolved_event == Orphan(n=1)
    (kept,) = kit.state.holdings.unclaimed
    assert kept.taken_by == {ask.item.work_item_id}
    # The same work item waiting again (another id) does not get it a second time; at
    # quiescence it is forgotten without being reported (a waiter took it).
    out = kit.suspend(rerun, Orphan, "w2")
    assert "dropped" not in [c[0] for c in summary(out)]
    assert not kit.state.holdings.unclaimed
    assert kit.state.steps["ask"].waiters["w2"].resolved_event is None


def test_kept_events_are_dropped_and_reported_once_the_run_is_quiescent() -> None:
    kit = ReducerKit(HitlFlow())
    kit.start()
    (ask,) = kit.running("ask")
    kit.send_from(ask, 0, Orphan(n=1))
    out = kit.complete(ask, None, sends=1)
    assert summary(out) == [
        ("not_running", "ask", "0"),
        ("dropped", "Orphan", "ask"),
        ("idle_check",),
    ]
    assert kit.state.holdings.dropped == ("Orphan from step 'ask'",)
    assert not kit.state.holdings.unclaimed


def test_an_input_required_event_nobody_takes_is_neither_kept_nor_reported() -> None:
    kit = ReducerKit(HitlFlow())
    kit.start()
    kit.send(Ask(n=1))
    assert not kit.state.holdings.unclaimed


def test_a_returned_question_is_remembered_until_the_caller_sends() -> None:
    """The questions a run waiting for a human was asked survive in its state (the
    command line shows them on resume), until the caller sends an event."""
    kit = ReducerKit(AskFlow())
    kit.start()
    (begin,) = kit.running("begin")
    kit.complete(begin, Ask(n=1))
    assert kit.state.holdings.questions == (Ask(n=1),)
    (triage,) = kit.running("triage")
    kit.send_from(triage, 0, Orphan(n=1))  # a step's send is no answer
    assert kit.state.holdings.questions == (Ask(n=1),)
    kit.send(Reply(n=1))
    assert kit.state.holdings.questions == ()


def test_a_new_suspension_of_a_work_item_drops_its_other_pending_waiter() -> None:
    """A body suspends at its first unresolved wait: a pending waiter the new pass did not
    ask for again (changed code, or a new implicit id) must not hold the item back."""
    kit = ReducerKit(HitlFlow())
    kit.start()
    (ask,) = kit.running("ask")
    blind = WaiterRequest("old", Orphan, None, None, None, has_requirements=True)
    kit.feed(StepResult(kit.now, "ask", ask.invocation_id, Suspended(blind)))
    kit.cancel()
    (rerun,) = started(kit.feed(SessionStart(kit.now, "run-2")))
    kit.suspend(rerun, Orphan, "new", requirements={"n": 1})
    assert set(kit.state.steps["ask"].waiters) == {"new"}
    assert kit.state.holdings.blind.size == 0
    assert resolvable(kit, Orphan(n=1)) == {("ask", "new")}


def test_a_stale_waiter_timer_does_nothing_once_the_waiter_has_no_timeout() -> None:
    """A waiter timed out, was deleted by the retried body and registered again without a
    timeout: the timer armed for the old one must not touch the new one."""
    kit = ReducerKit(HitlFlow())
    kit.start()
    (ask,) = kit.running("ask")
    kit.suspend(ask, Reply, "w", timeout=10)
    kit.advance(10)
    (rerun,) = started(kit.waiter_timeout("ask", "w"))
    failed = Failed(TimeoutError("no reply"), 0.0, kit.now, 0, ("w",))
    (retry,) = started(kit.feed(StepResult(kit.now, "ask", rerun.invocation_id, failed)))
    kit.suspend(retry, Reply, "w", timeout=None)
    assert kit.waiter_timeout("ask", "w") == []
    waiter = kit.state.steps["ask"].waiters["w"]
    assert waiter.pending and waiter.timeout is None


def test_a_suspension_forgets_the_waiters_its_body_deleted() -> None:
    """api.md §23.1: the replayed call deletes a timed-out waiter."""
    kit = ReducerKit(HitlFlow())
    kit.start()
    (ask,) = kit.running("ask")
    kit.suspend(ask, Reply, "w1", timeout=5)
    kit.advance(5)
    kit.waiter_timeout("ask", "w1")
    (rerun,) = kit.running("ask")
    # the body caught the TimeoutError (which deletes w1) and now waits for w2
    request = WaiterRequest("w2", Reply, None, None, None)
    outcome = Suspended(request, deleted_waiters=("w1",))
    kit.feed(StepResult(kit.now, "ask", rerun.invocation_id, outcome))
    ask_state = kit.state.steps["ask"]
    assert set(ask_state.waiters) == {"w2"}
    assert ask_state.waiters_by_item == PMap.of([(ask.item.work_item_id, frozenset({"w2"}))])
    assert resolvable(kit, Reply(n=1)) == {("ask", "w2")}


def test_waiting_again_on_a_deleted_waiter_id_is_a_first_registration() -> None:
    kit = ReducerKit(HitlFlow())
    kit.start()
    (ask,) = kit.running("ask")
    kit.suspend(ask, Reply, "w", waiter_event=Ask(n=1), timeout=5)
    kit.advance(5)
    kit.waiter_timeout("ask", "w")
    (rerun,) = kit.running("ask")
    kit.advance(1)
    # the body caught the TimeoutError, sent a reminder and waits on the same id again
    request = WaiterRequest("w", Reply, None, Ask(n=2), 5)
    outcome = Suspended(request, deleted_waiters=("w",))
    out = kit.feed(StepResult(kit.now, "ask", rerun.invocation_id, outcome))
    assert summary(out) == [
        ("not_running", "ask", "0"),
        ("publish", Ask(n=2)),
        ("waiter_timeout", 1011.0, "ask", "w"),
    ]  # (no idle check: the one scheduled at the first suspension is still pending)
    w = kit.state.steps["ask"].waiters["w"]
    assert (w.deadline, w.timed_out, w.resolved_event) == (1011.0, False, None)
    assert resolvable(kit, Reply(n=1)) == {("ask", "w")}


# ------------------------------------------------------------------ multi-slot joins


def test_a_join_pairs_arrivals_in_order_and_leftovers_start_the_next_batch() -> None:
    kit = quiet(JoinFlow())
    a1, a2, b1, b2 = A(n=1), A(n=2), B(n=1), B(n=2)
    assert summary(kit.send(a1)) == [("idle_check",)]  # absorbed: still quiescent
    assert kit.send(a2) == []
    assert tuple(kit.state.steps["assemble"].join_buffer) == (a1, a2)

    out = kit.send(b1)
    assert summary(out) == [("running", "assemble", "0"), ("run", "assemble", "wi-1", 0)]
    (first,) = started(out)
    assert first.item.bound_events == {"a": a1, "b": b1} and first.item.event is b1
    assert tuple(kit.state.steps["assemble"].join_buffer) == (a2,)

    (second,) = started(kit.send(b2))
    assert second.item.bound_events == {"a": a2, "b": b2}
    assert tuple(kit.state.steps["assemble"].join_buffer) == ()


def test_join_slots_of_the_same_type_bind_in_arrival_order() -> None:
    kit = quiet(JoinFlow())
    d1, d2, d3 = Done(n=1), Done(n=2), Done(n=3)
    kit.send(d1)
    (inv,) = started(kit.send(d2))
    assert inv.item.bound_events == {"x": d1, "y": d2}
    assert started(kit.send(d3)) == []
    assert tuple(kit.state.steps["pair"].join_buffer) == (d3,)


def test_join_slot_assignment_backtracks_to_find_a_complete_batch() -> None:
    kit = quiet(JoinFlow())
    special, base = Special(n=1), Base(n=2)
    assert started(kit.send(special)) == []
    # greedy would put `special` in `first` (it is a Base) and find no Special left
    (inv,) = started(kit.send(base))
    assert inv.item.bound_events == {"first": base, "second": special}
    assert tuple(kit.state.steps["loose_pair"].join_buffer) == ()


def test_the_same_event_object_arriving_twice_counts_as_two_arrivals() -> None:
    """Pairing is by arrival, not object identity (a journal replay decodes distinct
    objects, so identity-based bookkeeping would make replay diverge)."""
    kit = quiet(JoinFlow())
    a = A(n=1)
    kit.send(a)
    kit.send(a)
    (inv,) = started(kit.send(B(n=1)))
    assert inv.item.bound_events == {"a": a, "b": B(n=1)}
    assert tuple(kit.state.steps["assemble"].join_buffer) == (a,)


# ---------------------------------------------------------------- collect_events


def collect_result(
    kit: ReducerKit, inv: Invocation, expected: list[type], if_released: object
) -> list[object]:
    """Feed the result of a step body that calls ``ctx.collect_events(ev, expected)``
    on the view it was dispatched with, returning ``if_released`` on a release."""
    view = inv.collect_view.get("default", EMPTY_BUFFER)
    op, _, released = decide_collect(view, "default", inv.item.event, expected)
    value = if_released if released is not None else None
    return kit.feed(
        StepResult(kit.now, inv.step, inv.invocation_id, Completed(value, collect_ops=(op,)))
    )


def test_collect_decisions_that_still_hold_commit_without_a_rerun() -> None:
    kit = quiet(CollectFlow())
    for n in (1, 2, 3):
        kit.send(Done(n=n))
    g1, g2, g3 = kit.running("gather")
    assert all(inv.collect_view == {} for inv in (g1, g2, g3))
    expected = [Done, Done, Done]
    stop = StopEvent(result="all")

    assert summary(collect_result(kit, g1, expected, stop)) == [("not_running", "gather", "0")]
    buffer = kit.state.steps["gather"].collect_buffers["default"]
    assert (buffer.events, buffer.generation) == (PList.of([Done(n=1)]), 1)

    # g2 decided "buffered" on the empty view; with one member buffered it still holds
    assert summary(collect_result(kit, g2, expected, stop)) == [("not_running", "gather", "1")]
    buffer = kit.state.steps["gather"].collect_buffers["default"]
    assert (buffer.events, buffer.generation) == (PList.of([Done(n=1), Done(n=2)]), 2)
    assert buffer.type_counts == {Done: 2}


def test_a_stale_collect_view_reruns_the_invocation_silently() -> None:
    kit = quiet(CollectFlow())
    for n in (1, 2, 3):
        kit.send(Done(n=n))
    g1, g2, g3 = kit.running("gather")
    expected = [Done, Done, Done]
    stop = StopEvent(result="all")
    collect_result(kit, g1, expected, stop)
    collect_result(kit, g2, expected, stop)

    # g3 decided "buffered" on the empty view, but its event now completes the set: it
    # runs again (no NOT_RUNNING), dispatched like any work item to the smallest free slot
    out = collect_result(kit, g3, expected, stop)
    assert summary(out) == [("running", "gather", "0"), ("run", "gather", g3.item.work_item_id, 0)]
    (rerun,) = started(out)
    assert rerun.invocation_id != g3.invocation_id and rerun.item == g3.item
    assert rerun.collect_view["default"].generation == 2
    assert kit.state.steps["gather"].collect_buffers["default"].generation == 2
    assert kit.state.running == 1

    out = collect_result(kit, rerun, expected, stop)
    assert summary(out) == [("not_running", "gather", "0"), ("complete", stop)]
    assert_cleared(kit, "completed")


def test_a_rerun_drops_a_member_the_buffer_no_longer_needs() -> None:
    kit = quiet(CollectFlow())
    kit.send(Done(n=1))
    kit.send(Done(n=2))
    g1, g2 = kit.running("gather")
    expected = [Done, Orphan]
    collect_result(kit, g1, expected, None)  # buffered: one Done of one needed
    out = collect_result(kit, g2, expected, None)  # decided on the empty view: stale
    (rerun,) = started(out)
    assert summary(out) == [("running", "gather", "0"), ("run", "gather", g2.item.work_item_id, 0)]
    out = collect_result(kit, rerun, expected, None)  # now "dropped"
    assert summary(out) == [("not_running", "gather", "0"), ("idle_check",)]
    buffer = kit.state.steps["gather"].collect_buffers["default"]
    assert (buffer.events, buffer.generation) == (PList.of([Done(n=1)]), 1)


# ----------------------------------------------------------------------------- timeout


def test_a_timeout_names_the_pending_waiters_and_the_events_dropped_unclaimed() -> None:
    """No silent hang: the message says what the run was waiting for and what it lost."""
    kit = ReducerKit(HitlFlow())
    kit.start()
    (ask,) = kit.running("ask")
    kit.suspend(ask, Reply, "w", requirements={"n": 7})
    kit.send(Orphan(n=1))
    kit.advance(45)
    (halt,) = kit.timeout()
    assert isinstance(halt, Halt) and isinstance(halt.exception, WorkflowTimeoutError)
    message = str(halt.exception)
    assert "no step was active" in message
    assert "waiting for: Reply with {'n': 7} in step 'ask'" in message
    assert "Orphan from the caller" in message


def test_a_timeout_with_budget_left_rearms_for_the_remainder() -> None:
    kit = ReducerKit(ChainFlow())
    kit.start()
    kit.advance(10)
    assert summary(kit.timeout()) == [("timeout", 1045.0)]
    assert (kit.state.status, kit.state.elapsed_alive) == ("running", 10.0)


def test_a_spent_budget_times_out_the_run_naming_the_active_steps_sorted() -> None:
    kit = ReducerKit(RoutingFlow())
    kit.start()  # begin running
    kit.send(A(n=1))  # exact, loose, other running
    running = {inv.invocation_id for inv in kit.running()}
    kit.advance(45)
    out = kit.timeout()
    cancels, halt = out[:-1], summary(out)[-1]
    assert all(isinstance(c, CancelWorker) for c in cancels)
    assert {c.invocation_id for c in cancels} == running
    assert halt == (
        "halt",
        "timeout",
        WorkflowTimeoutError,
        WorkflowTimedOutEvent(timeout=45.0, active_steps=["begin", "exact", "loose", "other"]),
    )
    assert_cleared(kit, "timed_out")
    assert kit.timeout() == [] and kit.send(A(n=2)) == []


def test_a_quiescent_run_times_out_with_no_active_steps() -> None:
    kit = quiet(RoutingFlow())
    kit.advance(45)
    assert summary(kit.timeout()) == [
        (
            "halt",
            "timeout",
            WorkflowTimeoutError,
            WorkflowTimedOutEvent(timeout=45.0, active_steps=[]),
        )
    ]


# ------------------------------------------------------------------------------ cancel


def test_cancel_halts_but_keeps_the_run_resumable() -> None:
    kit = ReducerKit(HitlFlow())
    kit.start()
    (ask,) = kit.running("ask")
    kit.suspend(ask, Reply, "w")
    kit.send(Base(n=1))
    (loose,) = kit.running("loose")
    before = kit.state
    out = kit.cancel()
    assert summary(out) == [
        ("cancel", loose.invocation_id),
        ("halt", "cancel", WorkflowCancelledByUser, WorkflowCancelledEvent()),
    ]
    s = kit.state
    assert (s.status, s.is_running, s.running, s.queued) == ("cancelled", True, 1, 0)
    assert s.steps == before.steps  # in-progress, waiters: all still recorded
    assert s.waiter_index is before.waiter_index
    # late results and inputs are ignored
    assert kit.complete(loose, None) == []
    assert kit.send(Reply(n=1)) == []
    assert kit.cancel() == [] and kit.timeout() == [] and kit.idle_check() == []
    assert kit.state.steps == before.steps


def test_cancel_keeps_queued_work() -> None:
    kit = quiet(QueueFlow())
    for n in (1, 2):
        kit.send(B(n=n))
    kit.cancel()
    assert [it.event for it in kit.queued("single")] == [B(n=2)]
    assert (kit.state.queued, kit.state.running) == (1, 1)
    assert len(kit.state.steps["single"].in_progress) == 1


# --------------------------------------------------------------------------- idle check


def test_one_idle_check_at_a_time_and_idle_only_if_still_quiescent() -> None:
    kit = ReducerKit(ChainFlow())
    kit.start()
    (begin,) = kit.running("begin")
    out = kit.complete(begin, None)
    assert summary(out) == [("not_running", "begin", "0"), ("idle_check",)]
    assert kit.state.idle_check_pending
    # still quiescent, but a check is already pending
    assert summary(kit.send(Orphan(n=1))) == [
        ("publish", unhandled(Orphan, idle=True)),
        ("dropped", "Orphan", None),
    ]
    assert summary(kit.idle_check()) == [("publish", WorkflowIdleEvent())]
    assert not kit.state.idle_check_pending
    assert summary(kit.send(Orphan(n=2))) == [
        ("publish", unhandled(Orphan, idle=True)),
        ("dropped", "Orphan", None),
        ("idle_check",),
    ]
    kit.send(A(n=1))  # middle starts before the check runs
    assert kit.idle_check() == []
    (middle,) = kit.running("middle")
    assert summary(kit.complete(middle, None)) == [("not_running", "middle", "0"), ("idle_check",)]


# ------------------------------------------------------------------- purity and sharing


def test_reduce_leaves_its_input_unchanged_and_shares_what_it_did_not_touch() -> None:
    kit = quiet(QueueFlow())
    kit.send(A(n=1))
    before = kit.state
    snapshot = fingerprint(before)
    after, commands = reduce(before, AddEvent(kit.now, B(n=1)))
    assert summary(commands)[0] == ("running", "single", "0")
    assert fingerprint(before) == snapshot
    assert after.config is before.config
    assert after.steps["pool"] is before.steps["pool"]
    assert after.steps["begin"] is before.steps["begin"]
    assert after.steps["single"] is not before.steps["single"]
    assert after.steps["single"].waiters is before.steps["single"].waiters
    assert after.steps["single"].queue is before.steps["single"].queue


# ---------------------------------------------------------------------- the new state


def test_the_new_state_is_a_run_state_that_holds_neither_its_input_nor_its_commands() -> None:
    """A reduction builds its new state in place (``Tx`` is a ``RunState`` under
    construction): what it hands out is a plain ``RunState``, equal to one built field by
    field, and keeps no reference to the state it came from or to the commands (a run
    would otherwise keep every previous state alive, and a parked run its last commands).
    """
    kit = ReducerKit(ChainFlow(timeout=None))
    kit.start()
    (begin,) = kit.running("begin")
    before = kit.state
    commands = kit.complete(begin, A())
    after = kit.state
    assert type(after) is RunState
    assert after == replace(after)  # equal to a copy built by its class, field by field
    referents = gc.get_referents(after)
    assert not any(ref is before or ref is commands for ref in referents)
    assert after.commands is None  # the working slot, cleared
    assert not hasattr(after, "base")  # no working slot holds the input state
    assert summary(commands)  # the commands were returned all the same
