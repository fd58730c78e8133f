"""Waiters never miss their event, whatever the order tasks happen to run in (api.md §23.1).

A step waits from the moment it calls ``wait_for_event``, but the run learns of the
waiter only when the step's suspension is processed; the answer may be sent by another
step, by the caller or by the step itself in between, or before the waiting step even
started (trio shuffles the order of ready tasks on purpose).  These tests pin the rules
that make every such ordering end with the same result:

* an event no step and no waiter takes is kept while any step is queued or running, and
  handed to each matching waiter registered before the run is quiescent again;
* a step result is processed only once every worker dispatched before it has started.

A hypothesis test generates orderings of sends, waits, joins and subclass matching and
checks that every run ends with every waiter answered.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.errors import WorkflowTimeoutError
from tickwork.events import InputRequiredEvent
from tickwork.journal import InMemoryJournal, resume_run

BACKENDS = ("asyncio", "trio")

# ----------------------------------------------------------------------------- events


class Ping0(Event):
    pass


class Pong0(Event):
    pass


class Ping1(Event):
    pass


class Ping2(Event):
    pass


class SubPing2(Ping2):
    pass


class Go0(Event):
    pass


class A1(Event):
    pass


class B1(Event):
    pass


class Base2(Event):
    pass


class Go2(Base2):
    pass


class Send(Event):
    """Asks the sender step to send the answer of waiter ``target``."""

    target: int


class Got0(Event):
    seen: list[str]


class Got1(Event):
    seen: str


class Got2(Event):
    seen: str


# ------------------------------------------------------------------------------- plans


@dataclass(frozen=True)
class Plan:
    """One ordering of a run with three waiters.

    Waiter 0 is a plain step (optionally waiting twice: Ping0, then Pong0), waiter 1 a
    multi-slot join (A1 + B1), waiter 2 a step in subclass mode waiting for ``Ping2``
    (answered with a ``SubPing2`` when ``subclass``).  ``who`` says who sends each
    answer: ``"step"`` (a sender step), ``"self"`` (the waiting step, right before it
    waits) or ``"caller"`` (the test, as soon as the run starts).
    """

    kick_order: tuple[str, ...]
    waiter_delays: tuple[int, int, int]
    sender_delays: tuple[int, int, int]
    who: tuple[str, str, str]
    wait_twice: bool
    subclass: bool
    sync_sender: bool
    durable: bool

    def answers(self, target: int) -> list[Event]:
        if target == 0:
            return [Ping0(), Pong0()] if self.wait_twice else [Ping0()]
        if target == 1:
            return [Ping1()]
        return [SubPing2() if self.subclass else Ping2()]

    def expected(self) -> dict[str, Any]:
        return {
            "w0": ["Ping0", "Pong0"] if self.wait_twice else ["Ping0"],
            "w1": "Ping1",
            "w2": "SubPing2" if self.subclass else "Ping2",
        }


TRIGGERS = ("go0", "a1", "b1", "go2", "send0", "send1", "send2")


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    delays = st.integers(min_value=0, max_value=3)
    return Plan(
        kick_order=tuple(draw(st.permutations(TRIGGERS))),
        waiter_delays=(draw(delays), draw(delays), draw(delays)),
        sender_delays=(draw(delays), draw(delays), draw(delays)),
        who=tuple(draw(st.sampled_from(["step", "self", "caller"])) for _ in range(3)),  # type: ignore[arg-type]
        wait_twice=draw(st.booleans()),
        subclass=draw(st.booleans()),
        sync_sender=draw(st.booleans()),
        durable=draw(st.booleans()),
    )


async def _checkpoints(count: int) -> None:
    for _ in range(count):
        await anyio.sleep(0)


class Orchestra(Workflow):
    """Three waiters, their senders and a final join, all driven by a :class:`Plan`."""

    def __init__(self, plan: Plan, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan = plan

    @step
    async def kick(self, ctx: Context, ev: StartEvent) -> Go0 | A1 | B1 | Go2 | Send:
        events: dict[str, Event] = {
            "go0": Go0(),
            "a1": A1(),
            "b1": B1(),
            "go2": Go2(),
            "send0": Send(target=0),
            "send1": Send(target=1),
            "send2": Send(target=2),
        }
        for name in self.plan.kick_order:
            ctx.send_event(events[name])
        return None

    @step(num_workers=3)
    async def sender(self, ctx: Context, ev: Send) -> None:
        if self.plan.who[ev.target] != "step":
            return
        await _checkpoints(self.plan.sender_delays[ev.target])
        for answer in self.plan.answers(ev.target):
            ctx.send_event(answer)

    async def _answer_myself(self, ctx: Context, target: int) -> None:
        if self.plan.who[target] == "self":
            for answer in self.plan.answers(target):
                ctx.send_event(answer)

    @step
    async def wait0(self, ctx: Context, ev: Go0) -> Got0:
        await _checkpoints(self.plan.waiter_delays[0])
        await self._answer_myself(ctx, 0)
        seen = [type(await ctx.wait_for_event(Ping0, timeout=None)).__name__]
        if self.plan.wait_twice:
            seen.append(type(await ctx.wait_for_event(Pong0, timeout=None)).__name__)
        return Got0(seen=seen)

    @step
    async def wait1(self, ctx: Context, a: A1, b: B1) -> Got1:
        await _checkpoints(self.plan.waiter_delays[1])
        await self._answer_myself(ctx, 1)
        return Got1(seen=type(await ctx.wait_for_event(Ping1, timeout=None)).__name__)

    @step(accept_event_subclasses=True)
    async def wait2(self, ctx: Context, ev: Base2) -> Got2:
        await _checkpoints(self.plan.waiter_delays[2])
        await self._answer_myself(ctx, 2)
        return Got2(seen=type(await ctx.wait_for_event(Ping2, timeout=None)).__name__)

    @step
    async def finish(self, g0: Got0, g1: Got1, g2: Got2) -> StopEvent:
        return StopEvent(result={"w0": g0.seen, "w1": g1.seen, "w2": g2.seen})


class SyncOrchestra(Orchestra):
    """The same, with the sender step a plain ``def`` running in a worker thread."""

    @step(num_workers=3)
    def sender(self, ctx: Context, ev: Send) -> None:  # type: ignore[override]
        if self.plan.who[ev.target] != "step":
            return
        for answer in self.plan.answers(ev.target):
            ctx.send_event(answer)


async def run_plan(plan: Plan) -> Any:
    flow_class = SyncOrchestra if plan.sync_sender else Orchestra
    journal = InMemoryJournal() if plan.durable else None
    workflow = flow_class(plan, timeout=10, journal=journal)
    handler = workflow.run()
    for target in range(3):
        if plan.who[target] == "caller":
            for answer in plan.answers(target):
                handler.ctx.send_event(answer)
    with anyio.fail_after(10):
        return await handler


@pytest.mark.parametrize("backend", BACKENDS)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=plans())
def test_every_ordering_of_sends_waits_and_joins_answers_every_waiter(
    backend: str, plan: Plan
) -> None:
    result = anyio.run(functools.partial(run_plan, plan), backend=backend)
    assert result == plan.expected()


# -------------------------------------------------------------- the reported hangs


class JoinThenPing(Workflow):
    """A multi-slot join waits for a Ping that another step sends as the join fires."""

    @step
    async def start(self, ctx: Context, ev: StartEvent) -> A1 | B1 | Go0:
        ctx.send_event(A1())
        ctx.send_event(B1())
        ctx.send_event(Go0())
        return None

    @step
    async def pinger(self, ctx: Context, ev: Go0) -> None:
        ctx.send_event(Ping1())

    @step
    async def join(self, ctx: Context, a: A1, b: B1) -> StopEvent:
        await ctx.wait_for_event(Ping1)
        return StopEvent(result="answered")


@pytest.mark.anyio
async def test_a_join_waiting_for_a_ping_sent_as_it_fires_is_answered() -> None:
    # trio runs ready tasks in a shuffled order: repeat so that both orders occur.
    for _ in range(10):
        with anyio.fail_after(5):
            assert await JoinThenPing(timeout=5).run() == "answered"


class SubclassWaiter(Workflow):
    """A step in subclass mode asks another step, then waits for the answer's base type."""

    @step(accept_event_subclasses=True)
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent | Go2:
        ctx.send_event(Go2())
        got = await ctx.wait_for_event(Ping2)
        return StopEvent(result=type(got).__name__)

    @step
    def answer(self, ctx: Context, ev: Go2) -> None:
        ctx.send_event(SubPing2())  # from a worker thread: truly concurrent


@pytest.mark.anyio
async def test_a_subclass_waiter_is_answered_by_a_subclass_sent_right_after_it() -> None:
    for _ in range(10):
        with anyio.fail_after(5):
            assert await SubclassWaiter(timeout=5).run() == "SubPing2"


class Item(Event):
    n: int


class Done(Event):
    n: int


class TwoJoins(Workflow):
    """Two ``list[Done]`` joins bound to one fan-out; the first to run ends the run."""

    @step
    async def fan(self, ctx: Context, ev: StartEvent) -> list[Item]:
        await ctx.store.set("first", [])
        await ctx.store.set("second", [])
        return [Item(n=i) for i in range(3)]

    @step
    async def work(self, ev: Item) -> Done:
        return Done(n=ev.n)

    @step
    async def first(self, ctx: Context, batch: list[Done]) -> StopEvent:
        seen = await ctx.store.get("first")
        await ctx.store.set("first", [*seen, sorted(d.n for d in batch)])
        return StopEvent(result="first")

    @step
    async def second(self, ctx: Context, batch: list[Done]) -> None:
        seen = await ctx.store.get("second")
        await ctx.store.set("second", [*seen, sorted(d.n for d in batch)])


@pytest.mark.anyio
async def test_two_list_joins_on_one_stream_each_receive_the_whole_batch() -> None:
    handler = TwoJoins(timeout=5).run()
    with anyio.fail_after(5):
        assert await handler == "first"
    assert await handler.ctx.store.get("first") == [[0, 1, 2]]
    assert await handler.ctx.store.get("second") == [[0, 1, 2]]


# ------------------------------------------------------ requirements across a resume


class Question(InputRequiredEvent):
    pass


class Reply(Event):
    user: str


class AskAlice(Workflow):
    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        reply = await ctx.wait_for_event(
            Reply, waiter_event=Question(), requirements={"user": "alice"}, timeout=None
        )
        return StopEvent(result=f"answered by {reply.user}")


async def _asked(handler: Any) -> None:
    with anyio.fail_after(5):
        async for ev in handler.stream_events():
            if isinstance(ev, Question):
                return


@pytest.mark.anyio
async def test_requirements_survive_a_journal_resume() -> None:
    store = InMemoryJournal()
    handler = AskAlice(journal=store, timeout=10).run(run_id="alice-1")
    await _asked(handler)
    await handler.cancel_run()

    resumed = await resume_run(AskAlice(journal=store, timeout=10), "alice-1")
    resumed.ctx.send_event(Reply(user="bob"))  # right after the resume: no match
    await anyio.sleep(0.05)
    assert not resumed.is_done()
    resumed.ctx.send_event(Reply(user="alice"))
    with anyio.fail_after(5):
        assert await resumed == "answered by alice"


# ------------------------------------------------------------------ no silent hang


class Orphan(Event):
    pass


class Lonely(Workflow):
    @step
    async def chatty(self, ctx: Context, ev: StartEvent) -> None:
        ctx.send_event(Orphan())

    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        await ctx.wait_for_event(Reply, requirements={"user": "alice"}, timeout=None)
        return StopEvent()


@pytest.mark.anyio
async def test_a_dropped_event_is_logged_naming_its_type_and_producer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="tickwork")
    handler = Lonely(timeout=0.3).run()
    with pytest.raises(WorkflowTimeoutError) as info:
        await handler
    dropped = [r for r in caplog.records if "Orphan" in r.getMessage()]
    assert len(dropped) == 1
    assert dropped[0].name.startswith("tickwork") and dropped[0].levelno == logging.WARNING
    assert "'chatty'" in dropped[0].getMessage()
    # The timeout says what the run waited for and what it dropped.
    message = str(info.value)
    assert "waiting for: Reply with {'user': 'alice'} in step 'ask'" in message
    assert "Orphan from step 'chatty'" in message
