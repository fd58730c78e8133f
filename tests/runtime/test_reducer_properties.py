"""Property tests of the reducer over random, valid tick sequences.

A small simulator plays the runner's part: it keeps the set of running invocations from
``RunWorker``/``CancelWorker`` commands and the timers the reducer scheduled, and at each
step hypothesis picks what happens next: an invocation returns, fails (with or without a
retry), suspends, sends (keyed), a keyed send is re-posted, the caller sends an event,
time passes, a timer fires, the run is cancelled or resumed, a late result arrives...
Each step becomes one tick, fed to the pure reducer.

Properties (architecture.md §4, quality.md §2, api.md §18.2, §24.1, §26.3):

(a) purity: ``reduce`` never changes its input state (structural fingerprint);
(b) determinism: the same ticks from the same state give equal states and commands;
(c) replay equivalence: ``rebuild_state_from_ticks(S0, ticks[:k])`` equals the live
    state after ``k`` ticks, for every ``k`` (also from per-tick deep copies, which is
    what decoding a journal gives);
(d) exactly-once: a keyed send is routed at most once however often it is re-posted,
    and a first post from a live invocation is routed; an invocation interrupted by a
    cancel and re-run after the resume makes its sends again, and the ones already
    routed are not routed twice;
(e) one terminal outcome per session: at most one of CompleteRun / FailWorkflow / Halt,
    it is the last command of its tick, and later ticks produce no command.

Plus bookkeeping invariants that the reducer's O(1) counters rely on.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.events import HumanResponseEvent, InputRequiredEvent, UnhandledEvent
from tickwork.runtime.control_loop import rebuild_state_from_ticks
from tickwork.runtime.control_loop.reduce import reduce, reduce_all
from tickwork.runtime.control_loop.streams import EMPTY_BUFFER, decide_collect
from tickwork.runtime.types.commands import (
    CancelWorker,
    Command,
    CompleteRun,
    FailWorkflow,
    Halt,
    PublishEvent,
    RunWorker,
    ScheduleIdleCheck,
    ScheduleTimeout,
    ScheduleWaiterTimeout,
    ScheduleWakeup,
)
from tickwork.runtime.types.results import (
    Completed,
    Failed,
    StepOutcome,
    Suspended,
    WaiterRequest,
)
from tickwork.runtime.types.state import Invocation, RunState
from tickwork.runtime.types.ticks import (
    AddEvent,
    CancelRun,
    IdleCheck,
    SessionStart,
    StepResult,
    Tick,
    Timeout,
    WaiterTimeout,
    Wakeup,
)
from tickwork.runtime.types.ticks import (
    PublishEvent as PublishTick,
)
from tickwork.testing import ReducerKit

from .reducer_helpers import fingerprint

PROPERTY = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MAX_ACTIONS = 40
TERMINAL = (CompleteRun, FailWorkflow, Halt)

# ---------------------------------------------------------------------------- events


class A(Event):
    n: int = 0


class B(Event):
    n: int = 0


class Task(Event):
    n: int = 0


class Done(Event):
    n: int = 0


class Orphan(Event):
    n: int = 0


class Ask(InputRequiredEvent):
    n: int = 0


class Reply(HumanResponseEvent):
    n: int = 0


class SubReply(Reply):
    pass


# ------------------------------------------------------------------------- workflows


class ChainFlow(Workflow):
    @step
    async def begin(self, ev: StartEvent) -> A: ...

    @step(num_workers=2)
    async def finish(self, ev: B) -> StopEvent | None: ...

    @step(num_workers=1)
    async def middle(self, ev: A) -> B | None: ...


class SendCollectFlow(Workflow):
    @step
    async def fan(self, ev: StartEvent) -> Task | None: ...

    @step(num_workers=2)
    async def gather(self, ctx: Context, ev: Done) -> StopEvent | None: ...

    @step(num_workers=2)
    async def work(self, ev: Task) -> Done | None: ...


class JoinFlow(Workflow):
    @step(num_workers=2)
    async def assemble(self, a: A, b: B) -> StopEvent | None: ...

    @step
    async def begin(self, ev: StartEvent) -> A | None: ...


class HitlFlow(Workflow):
    @step
    async def ask(self, ev: StartEvent | Reply) -> StopEvent | None: ...

    @step
    async def audit(self, ev: Reply) -> None: ...


class RetryFlow(Workflow):
    @step(num_workers=1)
    async def flaky(self, ev: StartEvent | A) -> StopEvent | None: ...


class ListFanFlow(Workflow):
    @step
    async def fan(self, ev: StartEvent) -> list[Task]: ...

    @step
    async def join(self, events: list[Done]) -> StopEvent: ...

    @step(num_workers=2)
    async def work(self, ev: Task) -> Done | None: ...


# ----------------------------------------------------------------- step behaviours
# A behaviour decides what one invocation does: the keyed sends it makes (in order) and
# its outcome.  ``draw`` is hypothesis' draw function, ``now`` the virtual clock.

Draw = Callable[[st.SearchStrategy[Any]], Any]
Behaviour = Callable[[Invocation, Draw, float], tuple[list[Event], StepOutcome]]

_counter = iter(range(10**9))
_mostly_true = st.sampled_from([True, True, False])


def fresh(cls: type[Event]) -> Event:
    """A new event object with a unique payload."""
    return cls(n=next(_counter))


def _completed(value: Any, sends: list[Event] | None = None) -> tuple[list[Event], StepOutcome]:
    sends = sends or []
    return sends, Completed(value, sends=len(sends))


def _maybe_fail(draw: Draw, now: float) -> tuple[list[Event], StepOutcome] | None:
    """Any step may raise; the retry decision is drawn like a policy would decide it."""
    if draw(st.sampled_from(["ok", "ok", "ok", "raise"])) == "ok":
        return None
    delay = draw(st.sampled_from([0.0, 2.0, None]))
    return [], Failed(RuntimeError(f"boom-{next(_counter)}"), delay, now)


def chain_behaviour(inv: Invocation, draw: Draw, now: float) -> tuple[list[Event], StepOutcome]:
    failed = _maybe_fail(draw, now)
    if failed:
        return failed
    out = {"begin": A, "middle": B, "finish": StopEvent}[inv.step]
    if draw(_mostly_true):
        return _completed(StopEvent(result="ok") if out is StopEvent else fresh(out))
    return _completed(None)


def send_collect_behaviour(
    inv: Invocation, draw: Draw, now: float
) -> tuple[list[Event], StepOutcome]:
    if inv.step == "fan":
        return _completed(None, [fresh(Task) for _ in range(draw(st.integers(0, 3)))])
    failed = _maybe_fail(draw, now)
    if failed:
        return failed
    if inv.step == "work":
        return _completed(fresh(Done) if draw(_mostly_true) else None)
    # gather: ctx.collect_events(ev, [Done, Done]) against the dispatch-time view
    view = inv.collect_view.get("default", EMPTY_BUFFER)
    op, _, released = decide_collect(view, "default", inv.item.event, [Done, Done])
    value = StopEvent(result="gathered") if released is not None else None
    return [], Completed(value, collect_ops=(op,))


def join_behaviour(inv: Invocation, draw: Draw, now: float) -> tuple[list[Event], StepOutcome]:
    if inv.step == "begin":
        sends = [fresh(draw(st.sampled_from([A, B]))) for _ in range(draw(st.integers(0, 3)))]
        return _completed(fresh(A) if draw(_mostly_true) else None, sends)
    failed = _maybe_fail(draw, now)
    if failed:
        return failed
    return _completed(StopEvent(result="joined") if draw(_mostly_true) else None)


def hitl_behaviour(inv: Invocation, draw: Draw, now: float) -> tuple[list[Event], StepOutcome]:
    if inv.step == "audit":
        return _completed(None)
    if not isinstance(inv.item.event, StartEvent):
        return _completed(None)  # a Reply that reached ask as a trigger
    waiter = inv.waiters_view.get("w")
    if waiter is not None and waiter.resolved_event is not None:
        return _completed(StopEvent(result="answered") if draw(_mostly_true) else None)
    if waiter is not None and waiter.timed_out:
        if draw(st.booleans()):
            error = TimeoutError("no reply")
            return [], Failed(error, draw(st.sampled_from([0.0, None])), now, 0, ("w",))
        return [], Completed(None, deleted_waiters=("w",))
    request = WaiterRequest(
        "w",
        Reply,
        draw(st.sampled_from([None, {"n": 1}])),
        Ask(n=1),
        draw(st.sampled_from([None, 4.0])),
    )
    return [], Suspended(request)


def retry_behaviour(inv: Invocation, draw: Draw, now: float) -> tuple[list[Event], StepOutcome]:
    choice = draw(st.sampled_from(["fail", "stop", "none"]))
    if choice == "fail":
        delay = draw(st.sampled_from([0.0, 3.0, None]))
        return [], Failed(RuntimeError(f"flaky-{next(_counter)}"), delay, now)
    return _completed(StopEvent(result="ok") if choice == "stop" else None)


def list_fan_behaviour(inv: Invocation, draw: Draw, now: float) -> tuple[list[Event], StepOutcome]:
    if inv.step == "fan":
        return _completed([fresh(Task) for _ in range(draw(st.integers(0, 3)))])
    if inv.step == "join":
        return _completed(StopEvent(result=len(inv.item.event.events)))
    failed = _maybe_fail(draw, now)
    if failed:
        return failed
    return _completed(fresh(Done) if draw(_mostly_true) else None)


@dataclass(frozen=True)
class FlowModel:
    name: str
    workflow: Callable[[], Workflow]
    behaviour: Behaviour
    external: tuple[Callable[[], Event], ...]
    sendable: tuple[type[Event], ...]


FLOWS = [
    FlowModel(
        "chain", ChainFlow, chain_behaviour, (lambda: fresh(A), lambda: fresh(Orphan)), (A, B)
    ),
    FlowModel(
        "send_collect",
        SendCollectFlow,
        send_collect_behaviour,
        (lambda: fresh(Task), lambda: fresh(Done)),
        (Task, Done),
    ),
    FlowModel("join", JoinFlow, join_behaviour, (lambda: fresh(A), lambda: fresh(B)), (A, B)),
    FlowModel(
        "hitl",
        HitlFlow,
        hitl_behaviour,
        (
            lambda: Reply(n=1),
            lambda: Reply(n=1),
            lambda: Reply(n=2),
            lambda: SubReply(n=1),
            lambda: Ask(n=3),
        ),
        (Orphan,),
    ),
    FlowModel("retry", RetryFlow, retry_behaviour, (lambda: fresh(A), lambda: fresh(Orphan)), (A,)),
    FlowModel("list_fan", ListFanFlow, list_fan_behaviour, (lambda: fresh(Task),), (Orphan,)),
]
flows = pytest.mark.parametrize("flow", FLOWS, ids=[f.name for f in FLOWS])


# ------------------------------------------------------------------------ simulator


@dataclass
class KeyedPost:
    key: tuple[str, int]
    first_post_while_live: bool
    routed: bool


@dataclass
class Run:
    """Everything one simulated run produced."""

    initial: RunState
    ticks: list[Tick] = field(default_factory=list)
    states: list[RunState] = field(default_factory=list)  # states[k]: after k ticks
    commands: list[list[Command]] = field(default_factory=list)
    keyed: list[KeyedPost] = field(default_factory=list)
    own_exceptions: list[BaseException] = field(default_factory=list)


class Simulator:
    """Plays the runner: turns drawn actions into ticks and tracks what is running."""

    def __init__(self, flow: FlowModel, draw: Draw, *, check_purity: bool) -> None:
        self.flow = flow
        self.draw = draw
        self.check_purity = check_purity
        kit = ReducerKit(flow.workflow())
        self.state = kit.state
        self.run = Run(initial=kit.state, states=[kit.state])
        self.now = 1000.0
        self.running: dict[str, Invocation] = {}
        self.gone: list[Invocation] = []  # cancelled or finished: their results are late
        # (due, make); the run's own timeout timer is kept apart as (None, (due, make))
        self.timers: list[tuple[Any, Any]] = []
        self.idle_requested = False
        # Keyed sends are tracked per *logical execution*: a fresh invocation is its own
        # execution; its re-run after a resume continues the same execution and makes
        # the same sends again, in the same order (api.md §26.3).
        self.execution_of: dict[str, str] = {}
        self.interrupted: dict[tuple[str, int], str] = {}  # (work item, attempts) -> exec
        self.sends_of: dict[str, list[Event]] = {}
        self.next_send: dict[str, int] = {}
        self.posted: list[tuple[tuple[str, int], AddEvent]] = []
        self.posted_keys: set[tuple[str, int]] = set()

    # -- feeding -------------------------------------------------------------------

    def feed(self, tick: Tick) -> tuple[RunState, RunState, list[Command]]:
        before = self.state
        snapshot = fingerprint(before) if self.check_purity else None
        after, commands = reduce(before, tick)
        if self.check_purity:
            assert fingerprint(before) == snapshot, f"reduce mutated its input state on {tick!r}"
        self.state = after
        self.run.ticks.append(tick)
        self.run.states.append(after)
        self.run.commands.append(commands)
        self._observe(tick, commands)
        return before, after, commands

    def _observe(self, tick: Tick, commands: list[Command]) -> None:
        if isinstance(tick, StepResult):
            done = self.running.pop(tick.invocation_id, None)
            if done is not None:
                self.gone.append(done)
        if isinstance(tick, SessionStart):
            # a new session: the old one's workers, timers and idle request are gone
            self.idle_requested = False
            self.gone.clear()
        cancel = any(isinstance(c, Halt) and c.reason == "cancel" for c in commands)
        for command in commands:
            if isinstance(command, RunWorker):
                inv = command.invocation
                rerun_of = self.interrupted.pop((inv.item.work_item_id, inv.item.attempts), None)
                self.execution_of[inv.invocation_id] = rerun_of or inv.invocation_id
                self.running[inv.invocation_id] = inv
                self.next_send[inv.invocation_id] = 0  # a body runs from the top
            elif isinstance(command, CancelWorker):
                cancelled = self.running.pop(command.invocation_id, None)
                if cancelled is not None:
                    self.gone.append(cancelled)
                    if cancel:  # interrupted: it re-runs when the run resumes
                        item = cancelled.item
                        execution = self.execution_of[cancelled.invocation_id]
                        self.interrupted[(item.work_item_id, item.attempts)] = execution
            elif isinstance(command, ScheduleWakeup):
                name = command.step
                self.timers.append((command.due_at, lambda now, s=name: Wakeup(now, s)))
            elif isinstance(command, ScheduleTimeout):
                self.timers.append((None, (command.due_at, Timeout)))
            elif isinstance(command, ScheduleWaiterTimeout):
                s, w = command.step, command.waiter_id
                self.timers.append((command.due_at, lambda now, s=s, w=w: WaiterTimeout(now, s, w)))
            elif isinstance(command, ScheduleIdleCheck):
                self.idle_requested = True
            elif isinstance(command, TERMINAL):
                # the session is over: its timers and idle request die with it
                self.timers.clear()
                self.idle_requested = False

    def post_keyed(self, inv: Invocation, index: int, event: Event) -> None:
        """A send made by a running body (a re-run may repeat one made before a resume)."""
        key = (self.execution_of[inv.invocation_id], index)
        first = key not in self.posted_keys
        live = self.state.status == "running" and inv.invocation_id in (
            self.state.steps[inv.step].in_progress
        )
        tick = AddEvent(
            self.now,
            event,
            emission_key=(inv.invocation_id, index),
            source_step=inv.step,
            recovery_counts=inv.item.recovery_counts,
        )
        if first:
            self.posted.append((key, tick))
            self.posted_keys.add(key)
        before, after, commands = self.feed(tick)
        self.run.keyed.append(
            KeyedPost(key, first and live, _routed(tick, before, after, commands))
        )

    # -- actions -------------------------------------------------------------------

    def start(self) -> None:
        self.feed(SessionStart(self.now, "prop-run"))
        self.feed(AddEvent(self.now, StartEvent()))

    def act(self) -> None:
        # Repetition weights the choice: results are common, ends of the run rare.
        options = ["external", "external", "advance", "publish", "wakeup", "cancel", "timeout"]
        if self.running:
            options += ["result"] * 8 + ["send"] * 2
        if self.posted:
            options.append("repost")
        if self.gone:
            options.append("late_result")
        if any(due is not None for due, _ in self.timers):
            options += ["timer"] * 2
        if any(due is None for due, _ in self.timers):
            options.append("run_timer")
        if self.idle_requested:
            options += ["idle"] * 2
        if self.state.status == "cancelled":
            options += ["resume"] * 4
        getattr(self, "_" + self.draw(st.sampled_from(options)))()

    def _pick_running(self) -> Invocation:
        return self.running[self.draw(st.sampled_from(sorted(self.running)))]

    def _result(self) -> None:
        inv = self._pick_running()
        sends, outcome = self.flow.behaviour(inv, self.draw, self.now)
        for event in sends:
            self._send_from(inv, event)
        if isinstance(outcome, Failed):
            self.run.own_exceptions.append(outcome.exception)
        self.feed(StepResult(self.now, inv.step, inv.invocation_id, outcome))

    def _send_from(self, inv: Invocation, event: Event) -> None:
        """The body's next send; a re-run first repeats the sends its execution made."""
        index = self.next_send[inv.invocation_id]
        self.next_send[inv.invocation_id] = index + 1
        made = self.sends_of.setdefault(self.execution_of[inv.invocation_id], [])
        if index < len(made):
            event = made[index].model_copy()
        else:
            made.append(event)
        self.post_keyed(inv, index, event)

    def _send(self) -> None:
        inv = self._pick_running()
        self._send_from(inv, fresh(self.draw(st.sampled_from(self.flow.sendable))))

    def _repost(self) -> None:
        key, original = self.draw(st.sampled_from(self.posted))
        inv_id, index = original.emission_key  # type: ignore[misc]
        assert original.source_step is not None
        self.now += self.draw(st.sampled_from([0.0, 1.0]))
        tick = AddEvent(
            self.now,
            original.event.model_copy(),  # a decoded duplicate, not the same object
            emission_key=(inv_id, index),
            source_step=original.source_step,
        )
        before, after, commands = self.feed(tick)
        self.run.keyed.append(KeyedPost(key, False, _routed(tick, before, after, commands)))

    def _late_result(self) -> None:
        inv = self.draw(st.sampled_from(self.gone))
        self.feed(StepResult(self.now, inv.step, inv.invocation_id, Completed(None)))

    def _timer(self) -> None:
        """A wakeup or waiter-timeout timer fires at its due time."""
        indexes = [i for i, (due, _) in enumerate(self.timers) if due is not None]
        due, make = self.timers.pop(self.draw(st.sampled_from(indexes)))
        self.now = max(self.now, due)
        self.feed(make(self.now))

    def _run_timer(self) -> None:
        """The run's timeout timer fires at its due time."""
        index = next(i for i, (due, _) in enumerate(self.timers) if due is None)
        due, make = self.timers.pop(index)[1]
        self.now = max(self.now, due)
        self.feed(make(self.now))

    def _idle(self) -> None:
        self.idle_requested = False
        self.feed(IdleCheck(self.now))

    def _advance(self) -> None:
        self.now += self.draw(st.sampled_from([0.5, 2.0, 7.0]))

    def _external(self) -> None:
        make = self.draw(st.sampled_from(self.flow.external))
        self.feed(AddEvent(self.now, make()))

    def _publish(self) -> None:
        self.feed(PublishTick(self.now, fresh(Orphan)))

    def _timeout(self) -> None:
        self.feed(Timeout(self.now))

    def _cancel(self) -> None:
        self.feed(CancelRun(self.now))

    def _wakeup(self) -> None:
        self.feed(Wakeup(self.now, self.draw(st.sampled_from(sorted(self.state.steps)))))

    def _resume(self) -> None:
        self.now += self.draw(st.sampled_from([1.0, 100.0]))
        self.feed(SessionStart(self.now, "prop-run-resumed"))


def _routed(tick: AddEvent, before: RunState, after: RunState, commands: list[Command]) -> bool:
    """Whether an added event had any effect: claimed, delivered, buffered or reported."""
    if after.work_item_seq != before.work_item_seq or after.waiter_index != before.waiter_index:
        return True
    if after.releases is not before.releases:
        return True
    if any(after.steps[s].join_buffer != before.steps[s].join_buffer for s in after.steps):
        return True
    if any(isinstance(c, PublishEvent) and isinstance(c.event, UnhandledEvent) for c in commands):
        return True
    assert tick.emission_key is not None and tick.source_step is not None
    inv_id, index = tick.emission_key
    was = before.steps[tick.source_step].in_progress.get(inv_id)
    now = after.steps[tick.source_step].in_progress.get(inv_id)
    claimed_before = was is not None and index in was.received
    return now is not None and index in now.received and not claimed_before


def simulate(flow: FlowModel, data: st.DataObject, *, check_purity: bool = False) -> Run:
    sim = Simulator(flow, data.draw, check_purity=check_purity)
    sim.start()
    for _ in range(data.draw(st.integers(1, MAX_ACTIONS), label="actions")):
        sim.act()
    return sim.run


# ------------------------------------------------------------------------ properties


@flows
@PROPERTY
@given(data=st.data())
def test_reduce_never_changes_its_input_state(flow: FlowModel, data: st.DataObject) -> None:
    simulate(flow, data, check_purity=True)  # asserts on every tick


@flows
@PROPERTY
@given(data=st.data())
def test_reducing_the_same_ticks_twice_gives_the_same_states_and_commands(
    flow: FlowModel, data: st.DataObject
) -> None:
    run = simulate(flow, data)
    state = run.initial
    for k, tick in enumerate(run.ticks):
        state, commands = reduce(state, tick)
        assert state == run.states[k + 1], f"state differs after tick {k}: {tick!r}"
        assert fingerprint(commands) == fingerprint(run.commands[k]), f"commands of tick {k}"


@flows
@PROPERTY
@given(data=st.data())
def test_rebuilding_from_every_prefix_equals_the_live_state(
    flow: FlowModel, data: st.DataObject
) -> None:
    run = simulate(flow, data)
    for k in range(len(run.ticks) + 1):
        rebuilt = rebuild_state_from_ticks(run.initial, run.ticks[:k])
        assert rebuilt == run.states[k], f"prefix of {k} ticks"
    # decoding a journal gives new objects for every record: the fold must not depend
    # on object identity
    state = run.initial
    for k, tick in enumerate(run.ticks):
        state, _ = reduce(state, copy.deepcopy(tick))
        assert fingerprint(state) == fingerprint(run.states[k + 1]), f"copied tick {k}"


@flows
@PROPERTY
@given(data=st.data())
def test_reducing_a_stretch_at_once_equals_reducing_it_tick_by_tick(
    flow: FlowModel, data: st.DataObject
) -> None:
    run = simulate(flow, data)
    n = len(run.ticks)
    start = data.draw(st.integers(0, n), label="start")
    end = data.draw(st.integers(start, n), label="end")
    before = fingerprint(run.states[start])
    folded = reduce_all(run.states[start], run.ticks[start:end])
    assert folded == run.states[end]
    assert fingerprint(run.states[start]) == before, "reduce_all changed its input state"


@flows
@PROPERTY
@given(data=st.data())
def test_keyed_sends_are_routed_exactly_once(flow: FlowModel, data: st.DataObject) -> None:
    run = simulate(flow, data)
    routed: dict[tuple[str, int], int] = {}
    for post in run.keyed:
        routed[post.key] = routed.get(post.key, 0) + post.routed
        if post.first_post_while_live:
            assert post.routed, f"first post of {post.key} was dropped"
    assert all(count <= 1 for count in routed.values()), routed


@flows
@PROPERTY
@given(data=st.data())
def test_one_terminal_outcome_per_session_and_silence_after_it(
    flow: FlowModel, data: st.DataObject
) -> None:
    run = simulate(flow, data)
    ended_at: int | None = None
    final = False  # complete / fail / timeout: nothing may ever follow
    for k, (tick, commands) in enumerate(zip(run.ticks, run.commands, strict=True)):
        if isinstance(tick, SessionStart) and not final:
            ended_at = None  # a resume (after a cancel) opens a new session
        if ended_at is not None:
            assert commands == [], f"tick {k} ({tick!r}) after the end produced {commands!r}"
            continue
        terminals = [c for c in commands if isinstance(c, TERMINAL)]
        assert len(terminals) <= 1, terminals
        if terminals:
            assert commands[-1] is terminals[0], "the terminal command must come last"
            ended_at = k
            final = not (isinstance(terminals[0], Halt) and terminals[0].reason == "cancel")
    if final:
        assert not any(isinstance(t, SessionStart) for t in run.ticks[ended_at or 0 :][1:])


@flows
@PROPERTY
@given(data=st.data())
def test_counters_indexes_and_failures_stay_consistent(
    flow: FlowModel, data: st.DataObject
) -> None:
    run = simulate(flow, data)
    own = {id(e) for e in run.own_exceptions}
    for commands in run.commands:
        for command in commands:
            if isinstance(command, FailWorkflow):
                # the only failures are those of step bodies (no accounting errors,
                # no stuck streams in valid sequences)
                assert id(command.exception) in own, command
    for k, state in enumerate(run.states[1:], start=1):
        specs = state.config.steps
        steps = state.steps
        assert state.queued == sum(len(s.queue) for s in steps.values()), k
        assert state.running == sum(len(s.in_progress) for s in steps.values()), k
        for name, s in steps.items():
            slots = [inv.worker_id for inv in s.in_progress.values()]
            assert len(set(slots)) == len(slots), (k, name, slots)
            assert all(0 <= slot < specs[name].num_workers for slot in slots), (k, name)
        pending = {
            (name, wid)
            for name, s in steps.items()
            for wid, waiter in s.waiters.items()
            if waiter.resolved_event is None and not waiter.timed_out
        }
        if not pending:
            assert not state.waiter_index, k
        elif state.status == "running":
            # every waiter of these flows awaits Reply with no requirement or n=1: a
            # Reply(n=1) must find all of them through the index
            probe = Reply(n=1)
            after, _ = reduce(state, AddEvent(state.last_alive_stamp or 0.0, probe))
            resolved = {
                (name, wid)
                for name, s in after.steps.items()
                for wid, waiter in s.waiters.items()
                if waiter.resolved_event is probe
            }
            assert resolved == pending, k
        assert all(stream.open_work_items >= 0 for stream in state.streams.values()), k
