"""Snapshots and resume (api.md §8.9, §10, §23.1, §24.1-24.3, §26).

Async tests run under asyncio and trio.  Loading-rule tests (§10.4) are plain sync tests
over a snapshot taken once from a real run.  No test relies on tight timing: runs are
driven by their event streams, by ``anyio.Event`` gates, or by polling with a deadline.
"""

from __future__ import annotations

import copy
import functools
import json
import threading
import time
import warnings
from asyncio import CancelledError
from typing import Any

import anyio
import pytest
from pydantic import PrivateAttr

from tickwork import (
    Context,
    Event,
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
    Workflow,
    step,
)
from tickwork.errors import (
    ContextSerdeError,
    ContextStateError,
    WorkflowCancelledByUser,
    WorkflowTimeoutError,
)
from tickwork.events import StepState, StepStateChanged
from tickwork.handler import WorkflowHandler
from tickwork.retry_policy import retry_policy, stop_after_attempt, wait_fixed
from tickwork.serde.serializers import JsonSerializer, PickleSerializer

from .snapshot_keys import SNAPSHOT_KEYS

TIMEOUT = 10.0

TOP_KEYS = set(SNAPSHOT_KEYS)
WORKER_KEYS = {
    "queue",
    "in_progress",
    "collected_events",
    "collect_generations",
    "static_collect_events",
    "collected_waiters",
}
ITEM_KEYS = {
    "event",
    "bound_events",
    "attempts",
    "first_attempt_at",
    "last_exception",
    "last_failed_at",
    "recovery_counts",
    "not_before",
    "scope_path",
    "collection_release_payload",
    "work_item_id",
}
INVOCATION_KEYS = ITEM_KEYS | {
    "worker_id",
    "invocation_id",
    "received",
    "collected_events",
    "collect_generations",
}
WAITER_KEYS = {
    "waiter_id",
    "event",
    "waiting_for_event",
    "has_requirements",
    "resolved_event",
    "bound_events",
    "timed_out",
    "scope_path",
    "collection_release_payload",
    "work_item_id",
    "timeout",
    "deadline",
}
STREAM_KEYS = {"stream_id", "source_step", "scope_path", "open_work_items", "accepting_binding_ids"}
RELEASE_KEYS = {"binding_id", "stream_id", "buffer", "released"}


# --------------------------------------------------------------------------- events


class Item(Event):
    n: int


class Done(Event):
    n: int


class FanStart(StartEvent):
    count: int = 5


class Ask(InputRequiredEvent):
    prompt: str


class Reply(HumanResponseEvent):
    text: str


class Note(Event):
    n: int


class Go(Event):
    pass


class Left(Event):
    v: int


class Right(HumanResponseEvent):
    v: int


class LockedStart(StartEvent):
    """A start event with a private attribute no serializer can encode."""

    _lock: Any = PrivateAttr(default_factory=threading.Lock)


class LockedFlow(Workflow):
    @step
    async def ask(self, ctx: Context, ev: LockedStart) -> StopEvent:
        reply = await ctx.wait_for_event(Reply, waiter_event=Ask(prompt="?"))
        return StopEvent(result=reply.text)


class Blob:
    """A value JSON cannot express (needs PickleSerializer)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Blob) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)


# --------------------------------------------------------------------------- workflows


class FanFlow(Workflow):
    """produce -> list[Item] -> work (2 workers) -> list[Done] join -> StopEvent."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("timeout", TIMEOUT)
        super().__init__(**kwargs)
        self.executed: list[int] = []

    @step
    async def produce(self, ev: FanStart) -> list[Item]:
        return [Item(n=i) for i in range(ev.count)]

    @step(num_workers=2)
    async def work(self, ev: Item) -> Done:
        self.executed.append(ev.n)
        await anyio.sleep(0.002 * (ev.n % 3))
        return Done(n=ev.n * 10)

    @step
    async def join(self, ctx: Context, evs: list[Done]) -> StopEvent:
        await ctx.store.set("joined", len(evs))
        return StopEvent(result=sorted(e.n for e in evs))


class GateFlow(Workflow):
    """A fan-out whose single worker blocks until the test opens the gate."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("timeout", TIMEOUT)
        super().__init__(**kwargs)
        self.gate = anyio.Event()
        self.entered = anyio.Event()
        self.order: list[int] = []

    @step
    async def produce(self, ev: StartEvent) -> list[Item]:
        return [Item(n=i) for i in range(3)]

    @step(num_workers=1)
    async def work(self, ev: Item) -> Done:
        self.order.append(ev.n)
        self.entered.set()
        await self.gate.wait()
        return Done(n=ev.n)

    @step
    async def join(self, evs: list[Done]) -> StopEvent:
        return StopEvent(result=sorted(e.n for e in evs))


class AskFlow(Workflow):
    """One step that waits for a human (optionally with requirements and a budget)."""

    def __init__(
        self,
        wait_timeout: float | None = 100.0,
        requirements: dict[str, Any] | None = None,
        blob: bool = False,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("timeout", TIMEOUT)
        super().__init__(**kwargs)
        self.wait_timeout = wait_timeout
        self.requirements = requirements
        self.blob = blob
        self.passes = 0

    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        self.passes += 1
        await ctx.store.set("asked", True)
        if self.blob:
            await ctx.store.set("blob", Blob(7))
        try:
            reply = await ctx.wait_for_event(
                Reply,
                waiter_event=Ask(prompt="name?"),
                requirements=self.requirements,
                timeout=self.wait_timeout,
            )
        except TimeoutError as error:
            return StopEvent(result=f"timeout: {error}")
        return StopEvent(result=f"hello {reply.text}")


class OtherFlow(Workflow):
    """A different workflow (for cross-workflow loading)."""

    @step
    async def other(self, ctx: Context, ev: StartEvent) -> StopEvent:
        return StopEvent(result=await ctx.store.get("asked", default="nothing"))


class OutcomeFlow(Workflow):
    """Ends in the chosen outcome while work is queued, waiting and streaming."""

    def __init__(self, mode: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mode = mode

    @step
    async def produce(self, ctx: Context, ev: StartEvent) -> list[Item]:
        await ctx.store.set("kept", self.mode)
        return [Item(n=i) for i in range(4)]

    @step(num_workers=1)
    async def work(self, ctx: Context, ev: Item) -> Done | StopEvent:
        if self.mode == "complete" and ev.n == 0:
            return StopEvent(result="done")
        if self.mode == "fail" and ev.n == 0:
            raise RuntimeError("boom")
        await ctx.wait_for_event(Reply, waiter_id=f"w{ev.n}", timeout=100)
        return Done(n=ev.n)

    @step
    async def join(self, evs: list[Done]) -> StopEvent:
        return StopEvent(result=len(evs))


class RetryFlow(Workflow):
    """Fails the first attempt; the policy retries after 0.3 s."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("timeout", TIMEOUT)
        super().__init__(**kwargs)
        self.attempt_times: list[float] = []

    @step(retry_policy=retry_policy(wait=wait_fixed(0.3), stop=stop_after_attempt(3)))
    async def flaky(self, ctx: Context, ev: StartEvent) -> StopEvent:
        self.attempt_times.append(time.time())
        number = ctx.retry_info().retry_number
        if number == 0:
            raise ValueError("first attempt fails")
        return StopEvent(result=number)


class BlockFlow(Workflow):
    """``emit`` sends three notes then blocks (while ``block``); later passes add one."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("timeout", TIMEOUT)
        super().__init__(**kwargs)
        self.block = True
        self.emit_passes = 0
        self.notes: list[int] = []

    @step
    async def emit(self, ctx: Context, ev: StartEvent) -> Go | Note:
        self.emit_passes += 1
        for i in range(3):
            ctx.send_event(Note(n=i))
        if self.block:
            await anyio.sleep_forever()
        ctx.send_event(Note(n=3))
        return Go()

    @step
    async def note(self, ev: Note) -> None:
        self.notes.append(ev.n)

    @step
    async def finish(self, ev: Go) -> StopEvent:
        # Leave time for any (wrongly) re-delivered note to be processed first.
        await anyio.sleep(0.1)
        return StopEvent(result="finished")


class CollectFlow(Workflow):
    """Legacy fan-in: ``gather`` buffers ``Done`` events until three have arrived."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("timeout", TIMEOUT)
        super().__init__(**kwargs)

    @step
    async def start(self, ctx: Context, ev: StartEvent) -> Done | None:
        for i in range(2):
            ctx.send_event(Done(n=i))
        return None

    @step
    async def gather(self, ctx: Context, ev: Done) -> StopEvent | None:
        got = ctx.collect_events(ev, [Done, Done, Done])
        if got is None:
            return None
        return StopEvent(result=[e.n for e in got])


class PairFlow(Workflow):
    """A multi-slot join: ``pair`` fires once a ``Left`` and a ``Right`` are there."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("timeout", TIMEOUT)
        super().__init__(**kwargs)

    @step
    async def start(self, ev: StartEvent) -> Left:
        return Left(v=1)

    @step
    async def pair(self, left: Left, right: Right) -> StopEvent:
        return StopEvent(result=(left.v, right.v))


# --------------------------------------------------------------------------- helpers


async def snapshot_when_asked(handler: WorkflowHandler, serializer: Any = None) -> dict[str, Any]:
    """Consume the stream up to the waiter event; return the snapshot at that point."""
    with anyio.fail_after(5):
        async for ev in handler.stream_events():
            if isinstance(ev, Ask):
                return handler.ctx.to_dict(serializer)
    raise AssertionError("the run ended without asking")


async def wait_until(predicate: Any, seconds: float = 5.0) -> None:
    with anyio.fail_after(seconds):
        while not predicate():
            await anyio.sleep(0.005)


def worker_of(handler: WorkflowHandler, step_name: str) -> dict[str, Any]:
    worker: dict[str, Any] = handler.ctx.to_dict(include_state=False)["workers"][step_name]
    return worker


def decode(text: str) -> Any:
    return JsonSerializer().deserialize(text)


def assert_worker_state_cleared(snap: dict[str, Any]) -> None:
    assert snap["is_running"] is False
    for name, worker in snap["workers"].items():
        assert worker["queue"] == [], name
        assert worker["in_progress"] == [], name
        assert worker["collected_waiters"] == [], name
        assert worker["static_collect_events"] == [], name
        assert all(not events for events in worker["collected_events"].values()), name
    assert snap["streams"] == {}
    assert snap["collection_release_states"] == {}
    assert snap["deliveries"] == []


def round_trip(snap: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(json.dumps(snap))
    return loaded


# --------------------------------------------------------------------------- format (§10.3)


@pytest.mark.anyio
async def test_running_fan_out_snapshot_has_the_normative_keys() -> None:
    wf = GateFlow()
    handler = wf.run()
    with anyio.fail_after(5):
        await wf.entered.wait()
    snap = handler.ctx.to_dict()
    assert round_trip(snap) == snap
    assert set(snap) >= TOP_KEYS
    assert snap["version"] == 3
    assert snap["is_running"] is True
    assert set(snap["workers"]) == {"produce", "work", "join"}
    for worker in snap["workers"].values():
        assert set(worker) >= WORKER_KEYS
    for key in ("stream_seq", "work_item_seq", "invocation_seq", "journal_seq"):
        assert isinstance(snap[key], int) and snap[key] > 0, key
    assert isinstance(snap["elapsed_alive"], float) and snap["elapsed_alive"] >= 0
    assert isinstance(snap["last_alive_stamp"], float)
    assert isinstance(snap["deliveries"], list)

    work = snap["workers"]["work"]
    (running,) = work["in_progress"]
    assert set(running) >= INVOCATION_KEYS
    assert decode(running["event"]) == Item(n=0)
    assert running["attempts"] == 0 and running["last_exception"] is None
    assert isinstance(running["invocation_id"], str) and running["worker_id"] == 0
    # The single worker is busy: the two other members are queued in dispatch order.
    assert [set(item) >= ITEM_KEYS for item in work["queue"]] == [True, True]
    assert [decode(item["event"]) for item in work["queue"]] == [Item(n=1), Item(n=2)]
    ids = {running["work_item_id"], *(item["work_item_id"] for item in work["queue"])}
    assert len(ids) == 3

    (stream_id,) = snap["streams"]
    stream = snap["streams"][stream_id]
    assert set(stream) >= STREAM_KEYS
    assert stream["stream_id"] == stream_id and stream["source_step"] == "produce"
    assert stream["open_work_items"] == 3
    assert running["scope_path"] == [stream_id]
    for release in snap["collection_release_states"].values():
        assert set(release) >= RELEASE_KEYS
        assert release["stream_id"] == stream_id and release["released"] is False

    wf.gate.set()
    assert await handler == [0, 1, 2]


@pytest.mark.anyio
async def test_waiter_snapshot_lists_the_waiter_with_its_deadline() -> None:
    wf = AskFlow(wait_timeout=50.0, requirements={"text": "Ada"})
    handler = wf.run()
    snap = await snapshot_when_asked(handler)
    await handler.cancel_run()
    worker = snap["workers"]["ask"]
    assert worker["in_progress"] == [] and worker["queue"] == []
    (waiter,) = worker["collected_waiters"]
    assert set(waiter) >= WAITER_KEYS
    assert waiter["waiting_for_event"] == f"{Reply.__module__}.Reply"
    assert waiter["has_requirements"] is True
    # Requirements the serializer can store are stored (§23.1 "Persistence").
    assert JsonSerializer().deserialize(waiter["requirements"]) == {"text": "Ada"}
    assert waiter["resolved_event"] is None and waiter["timed_out"] is False
    assert decode(waiter["event"]) == StartEvent()
    assert waiter["timeout"] == 50.0
    assert time.time() < waiter["deadline"] <= time.time() + 50.0
    assert round_trip(snap) == snap


@pytest.mark.anyio
async def test_in_progress_work_resumes_at_the_front_of_its_queue() -> None:
    wf = GateFlow()
    handler = wf.run()
    with anyio.fail_after(5):
        await wf.entered.wait()
    await handler.cancel_run()
    snap = round_trip(handler.ctx.to_dict())
    assert [decode(i["event"]).n for i in snap["workers"]["work"]["in_progress"]] == [0]
    fresh = GateFlow()
    fresh.gate.set()
    resumed = fresh.run(ctx=Context.from_dict(fresh, snap), run_id="chosen-id")
    assert resumed.run_id == "chosen-id"  # §26.2: run_id= is honoured on resume
    assert await resumed == [0, 1, 2]
    assert fresh.order == [0, 1, 2]


@pytest.mark.anyio
async def test_a_loaded_snapshot_is_its_own_pre_run_snapshot() -> None:
    handler = AskFlow().run()
    snap = round_trip(await snapshot_when_asked(handler))
    await handler.cancel_run()
    ctx = Context.from_dict(AskFlow(), snap)
    assert ctx.to_dict() == snap
    await ctx.store.set("staged", 1)
    staged = ctx.to_dict()
    assert {k: v for k, v in staged.items() if k != "state"} == {
        k: v for k, v in snap.items() if k != "state"
    }
    assert await Context.from_dict(AskFlow(), staged).store.get("staged") == 1


@pytest.mark.anyio
async def test_private_attributes_do_not_prevent_a_snapshot() -> None:
    wf = LockedFlow(timeout=TIMEOUT)
    handler = wf.run(start_event=LockedStart())
    snap = round_trip(await snapshot_when_asked(handler))
    await handler.cancel_run()
    again = LockedFlow(timeout=TIMEOUT)
    resumed = again.run(ctx=Context.from_dict(again, snap))
    resumed.ctx.send_event(Reply(text="ok"))
    assert await resumed == "ok"


# --------------------------------------------------------------------------- outcomes (§24.1)


@pytest.mark.anyio
async def test_snapshot_before_the_first_run_is_not_running() -> None:
    ctx = Context(OutcomeFlow("complete"))
    snap = ctx.to_dict()
    assert snap["version"] == 3 and snap["is_running"] is False
    assert set(snap["workers"]) == {"produce", "work", "join"}
    assert_worker_state_cleared(snap)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("complete", None),
        ("fail", RuntimeError),
        ("timeout", WorkflowTimeoutError),
    ],
)
async def test_terminal_outcomes_clear_worker_state_and_keep_the_store(
    mode: str, error: type[BaseException] | None
) -> None:
    wf = OutcomeFlow(mode, timeout=0.4 if mode == "timeout" else TIMEOUT)
    handler = wf.run()
    if error is None:
        assert await handler == "done"
    else:
        with pytest.raises(error):
            await handler
    snap = handler.ctx.to_dict()
    assert_worker_state_cleared(snap)
    # The state section is kept, and only it carries over.
    restored = Context.from_dict(OutcomeFlow(mode), round_trip(snap))
    assert restored.is_running is False
    assert await restored.store.get("kept") == mode


@pytest.mark.anyio
async def test_cancel_keeps_everything_resumable() -> None:
    wf = OutcomeFlow("cancel", timeout=TIMEOUT)
    handler = wf.run()
    # Every member ends up suspended on its own waiter.
    await wait_until(lambda: len(worker_of(handler, "work")["collected_waiters"]) == 4)
    await handler.cancel_run()
    with pytest.raises(WorkflowCancelledByUser):
        await handler
    snap = handler.ctx.to_dict()
    assert snap["is_running"] is True
    waiters = snap["workers"]["work"]["collected_waiters"]
    assert sorted(w["waiter_id"] for w in waiters) == ["w0", "w1", "w2", "w3"]
    assert len(snap["streams"]) == 1
    assert await Context.from_dict(OutcomeFlow("cancel"), round_trip(snap)).store.get("kept") == (
        "cancel"
    )


@pytest.mark.anyio
async def test_a_hard_abort_leaves_the_last_processed_state_resumable() -> None:
    wf = AskFlow()
    handler = wf.run()
    before = await snapshot_when_asked(handler)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        handler.cancel()  # deprecated hard abort (§7.1)
    with pytest.raises((WorkflowCancelledByUser, CancelledError)):
        await handler
    after = handler.ctx.to_dict()
    assert after["is_running"] is True
    resumable = round_trip(after)
    # The same pending work, deadlines included (they are wall-clock times).
    assert after["workers"] == before["workers"]
    assert after["journal_seq"] >= before["journal_seq"]
    fresh = AskFlow()
    resumed = fresh.run(ctx=Context.from_dict(fresh, resumable))
    resumed.ctx.send_event(Reply(text="Gus"))
    assert await resumed == "hello Gus"


@pytest.mark.anyio
async def test_include_state_false_writes_null_and_restores_a_fresh_store() -> None:
    wf = AskFlow()
    handler = wf.run()
    full = await snapshot_when_asked(handler)
    bare = handler.ctx.to_dict(include_state=False)
    await handler.cancel_run()
    assert full["state"] is not None
    assert bare["state"] is None
    assert {k: v for k, v in bare.items() if k != "state"} == {
        k: v for k, v in full.items() if k != "state"
    }
    assert await Context.from_dict(AskFlow(), full).store.get("asked") is True
    fresh = Context.from_dict(AskFlow(), round_trip(bare))
    assert await fresh.store.get("asked", default="absent") == "absent"
    # The bare snapshot still resumes: the waiter was kept.
    resumed = AskFlow()
    again = resumed.run(ctx=Context.from_dict(resumed, bare))
    again.ctx.send_event(Reply(text="Bo"))
    assert await again == "hello Bo"


# --------------------------------------------------------------------------- resume (§26.2)


@pytest.mark.anyio
async def test_resume_from_every_not_running_snapshot_of_a_fan_out() -> None:
    wf = FanFlow()
    handler = wf.run(start_event=FanStart(count=5))
    snaps: list[dict[str, Any]] = []
    async for ev in handler.stream_events(expose_internal=True):
        if isinstance(ev, StepStateChanged) and ev.step_state == StepState.NOT_RUNNING:
            snaps.append(round_trip(handler.ctx.to_dict()))
    expected = await handler
    assert expected == [0, 10, 20, 30, 40]
    assert len(snaps) >= 7  # produce, five members, join
    assert snaps[-1]["is_running"] is False
    resumable = [s for s in snaps if s["is_running"]]
    # How many snapshots catch the run still live depends on how far the consumer lags
    # behind the run (a snapshot is the state after the last processed input, not at the
    # event); at least the first ones do.
    assert len(resumable) >= 1
    for snap in resumable:
        pending = sorted(
            decode(item["event"]).n
            for item in snap["workers"]["work"]["queue"] + snap["workers"]["work"]["in_progress"]
        )
        fresh = FanFlow()
        ctx = Context.from_dict(fresh, snap)
        assert ctx.is_running is True
        resumed = fresh.run(ctx=ctx)
        assert resumed.ctx is ctx
        assert await resumed == expected
        assert await resumed.ctx.store.get("joined") == 5
        # Exactly the members still pending at the snapshot ran again, once each.
        assert sorted(fresh.executed) == pending, snap["journal_seq"]


@pytest.mark.anyio
async def test_hitl_wait_survives_json_and_resumes_in_a_new_instance() -> None:
    first = AskFlow()
    handler = first.run()
    snap = round_trip(await snapshot_when_asked(handler))
    await handler.cancel_run()

    second = AskFlow()
    ctx = Context.from_dict(second, snap)
    assert ctx.is_running is True
    resumed = second.run(ctx=ctx)
    assert resumed.ctx is ctx
    assert resumed.run_id != handler.run_id
    resumed.ctx.send_event(Reply(text="Ada"))
    events = [ev async for ev in resumed.stream_events()]
    assert await resumed == "hello Ada"
    # The request is not published again after a resume (§23.1, §23.2).
    assert not any(isinstance(ev, Ask) for ev in events)
    assert second.passes == 1  # only the pass that received the answer


@pytest.mark.anyio
async def test_a_waiter_deadline_is_wall_clock_and_downtime_counts() -> None:
    """api.md §23.1 (revised): a deadline that passed while the run was not alive fires
    promptly after the resume."""
    first = AskFlow(wait_timeout=0.3)
    handler = first.run()
    asked_at = time.time()
    snap = round_trip(await snapshot_when_asked(handler))
    await handler.cancel_run()
    (waiter,) = snap["workers"]["ask"]["collected_waiters"]
    assert waiter["timeout"] == 0.3
    assert asked_at - 0.5 <= waiter["deadline"] <= time.time() + 0.3
    await anyio.sleep(0.4)  # the deadline passes while nothing runs
    second = AskFlow(wait_timeout=0.3)
    resumed = second.run(ctx=Context.from_dict(second, snap))
    with anyio.fail_after(1):  # promptly, not after a fresh 0.3 s budget... or 2000 s
        result = await resumed
    assert result.startswith("timeout:")
    assert "Reply" in result  # the TimeoutError names the awaited type
    assert await resumed.ctx.store.get("asked") is True


@pytest.mark.anyio
async def test_the_deadline_is_read_from_the_snapshot_and_never_moved() -> None:
    first = AskFlow(wait_timeout=1000.0)
    handler = first.run()
    snap = round_trip(await snapshot_when_asked(handler))
    await handler.cancel_run()
    (waiter,) = snap["workers"]["ask"]["collected_waiters"]
    waiter["deadline"] = time.time() + 0.2  # almost due
    # Had the deadline been reset to 1000 s, the 5 s workflow timeout would end the run.
    second = AskFlow(wait_timeout=1000.0, timeout=5.0)
    resumed = second.run(ctx=Context.from_dict(second, snap))
    assert (await resumed).startswith("timeout:")


@pytest.mark.anyio
async def test_a_version_2_snapshot_counts_what_was_left_of_the_budget_from_the_load() -> None:
    first = AskFlow(wait_timeout=1000.0)
    handler = first.run()
    snap = round_trip(await snapshot_when_asked(handler))
    await handler.cancel_run()
    snap["version"] = 2
    (waiter,) = snap["workers"]["ask"]["collected_waiters"]
    del waiter["deadline"]
    waiter["timeout_spent"] = 999.9  # version 2: alive time spent, 0.1 s left
    second = AskFlow(wait_timeout=1000.0, timeout=5.0)
    resumed = second.run(ctx=Context.from_dict(second, snap))
    assert (await resumed).startswith("timeout:")


@pytest.mark.anyio
async def test_stored_requirements_keep_rejecting_other_events_right_after_resume() -> None:
    first = AskFlow(requirements={"text": "Ada"})
    handler = first.run()
    snap = round_trip(await snapshot_when_asked(handler))
    await handler.cancel_run()

    second = AskFlow(requirements={"text": "Ada"})
    resumed = second.run(ctx=Context.from_dict(second, snap))
    resumed.ctx.send_event(Reply(text="Bob"))  # right after the resume: must not match
    await anyio.sleep(0.05)
    assert not resumed.is_done()
    assert second.passes == 0  # stored requirements: no re-run needed
    resumed.ctx.send_event(Reply(text="Ada"))
    events = [ev async for ev in resumed.stream_events()]
    assert await resumed == "hello Ada"
    assert not any(isinstance(ev, Ask) for ev in events)


class Exactly:
    """A requirement value JSON cannot store; it compares equal to its text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return other == self.text if isinstance(other, str) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.text)


@pytest.mark.anyio
async def test_unstorable_requirements_hold_events_until_the_step_registers_them_again() -> None:
    first = AskFlow(requirements={"text": Exactly("Ada")})
    handler = first.run()
    snap = round_trip(await snapshot_when_asked(handler))
    await handler.cancel_run()
    (waiter,) = snap["workers"]["ask"]["collected_waiters"]
    assert waiter["has_requirements"] is True and waiter["requirements"] is None

    second = AskFlow(requirements={"text": Exactly("Ada")})
    resumed = second.run(ctx=Context.from_dict(second, snap))
    # Sent before the re-run registered the requirements: held, then judged by them.
    resumed.ctx.send_event(Reply(text="Bob"))
    await wait_until(
        lambda: (
            second.passes == 1
            and not resumed.ctx.to_dict()["workers"]["ask"]["in_progress"]
            and not resumed.ctx.to_dict().get("held_events", {}).get("held")
        )
    )
    assert not resumed.is_done()
    # Bob did not meet them: routed normally, nothing took it, so it was dropped.
    assert resumed.ctx.to_dict()["held_events"]["dropped"] == ["Reply from the caller"]
    resumed.ctx.send_event(Reply(text="Ada"))
    events = [ev async for ev in resumed.stream_events()]
    assert await resumed == "hello Ada"
    assert not any(isinstance(ev, Ask) for ev in events)


@pytest.mark.anyio
async def test_the_suspension_not_running_captures_the_waiting_state() -> None:
    handler = AskFlow().run()
    captured: list[dict[str, Any]] = []
    async for ev in handler.stream_events(expose_internal=True):
        if isinstance(ev, StepStateChanged) and ev.step_state == StepState.NOT_RUNNING:
            assert ev.output_event_name is None
            captured.append(handler.ctx.to_dict())
            break
    await handler.cancel_run()
    (snap,) = captured
    assert len(snap["workers"]["ask"]["collected_waiters"]) == 1


@pytest.mark.anyio
async def test_spent_workflow_budget_survives_a_resume() -> None:
    first = AskFlow(timeout=5.0)
    handler = first.run()
    snap = round_trip(await snapshot_when_asked(handler))
    await handler.cancel_run()
    snap["elapsed_alive"] = 4.9  # 0.1 s of the 5 s budget is left
    second = AskFlow(timeout=5.0)
    resumed = second.run(ctx=Context.from_dict(second, snap))
    with anyio.fail_after(3), pytest.raises(WorkflowTimeoutError):
        await resumed
    assert resumed.ctx.to_dict()["elapsed_alive"] >= 5.0 - 1e-6


@pytest.mark.anyio
async def test_collect_events_buffers_survive_a_resume() -> None:
    wf = CollectFlow()
    handler = wf.run()
    await wait_until(
        lambda: len(worker_of(handler, "gather")["collected_events"].get("default", [])) == 2
    )
    await handler.cancel_run()
    snap = round_trip(handler.ctx.to_dict())
    buffered = snap["workers"]["gather"]["collected_events"]["default"]
    assert sorted(decode(ev).n for ev in buffered) == [0, 1]
    assert isinstance(snap["workers"]["gather"]["collect_generations"], dict)

    fresh = CollectFlow()
    resumed = fresh.run(ctx=Context.from_dict(fresh, snap))
    resumed.ctx.send_event(Done(n=2))
    result = await resumed
    assert sorted(result) == [0, 1, 2]
    assert result[-1] == 2


@pytest.mark.anyio
async def test_multi_slot_join_buffer_survives_a_resume() -> None:
    wf = PairFlow()
    handler = wf.run()
    await wait_until(
        lambda: handler.ctx.to_dict()["workers"]["pair"]["static_collect_events"] != []
    )
    await handler.cancel_run()
    snap = round_trip(handler.ctx.to_dict())
    assert [decode(ev) for ev in snap["workers"]["pair"]["static_collect_events"]] == [Left(v=1)]
    fresh = PairFlow()
    resumed = fresh.run(ctx=Context.from_dict(fresh, snap))
    resumed.ctx.send_event(Right(v=2))
    assert await resumed == (1, 2)
    assert resumed.ctx.to_dict()["workers"]["pair"]["static_collect_events"] == []


@pytest.mark.anyio
async def test_delayed_retry_keeps_its_not_before_across_a_resume() -> None:
    first = RetryFlow()
    handler = first.run()
    snap: dict[str, Any] | None = None
    async for ev in handler.stream_events(expose_internal=True):
        if isinstance(ev, StepStateChanged) and ev.step_state == StepState.NOT_RUNNING:
            snap = round_trip(handler.ctx.to_dict())
            break
    await handler.cancel_run()
    assert snap is not None and snap["is_running"] is True
    (queued,) = snap["workers"]["flaky"]["queue"]
    assert queued["attempts"] == 1
    assert queued["last_exception"] == {
        "exception_type": "builtins.ValueError",
        "exception_message": "first attempt fails",
    }
    assert queued["not_before"] == pytest.approx(queued["last_failed_at"] + 0.3)
    not_before = queued["not_before"]

    second = RetryFlow()
    resumed = second.run(ctx=Context.from_dict(second, snap))
    await wait_until(lambda: resumed.ctx.to_dict()["journal_seq"] > snap["journal_seq"])
    if not second.attempt_times:
        (still,) = resumed.ctx.to_dict()["workers"]["flaky"]["queue"]
        assert still["not_before"] == not_before
    assert await resumed == 1
    assert len(second.attempt_times) == 1
    assert second.attempt_times[0] >= not_before - 0.01

    # Resumed once the delay is long past, the retry is eligible at once.
    await anyio.sleep(max(0.0, not_before - time.time()) + 0.05)
    third = RetryFlow()
    assert await third.run(ctx=Context.from_dict(third, snap)) == 1


@pytest.mark.anyio
async def test_reusing_a_context_after_cancel_run_resumes_it() -> None:
    wf = AskFlow()
    handler = wf.run()
    await snapshot_when_asked(handler)
    ctx = handler.ctx
    await handler.cancel_run()
    with pytest.raises(WorkflowCancelledByUser):
        await handler
    assert ctx.to_dict()["is_running"] is True
    again = wf.run(ctx=ctx)
    assert again.ctx is ctx
    assert again.run_id != handler.run_id
    again.ctx.send_event(Reply(text="Cy"))
    events = [ev async for ev in again.stream_events()]
    assert await again == "hello Cy"
    assert not any(isinstance(ev, Ask) for ev in events)


@pytest.mark.anyio
async def test_reusing_a_running_context_raises_context_state_error() -> None:
    wf = AskFlow()
    handler = wf.run()
    await snapshot_when_asked(handler)
    with pytest.raises(ContextStateError, match="already running"):
        wf.run(ctx=handler.ctx)
    handler.ctx.send_event(Reply(text="Di"))
    assert await handler == "hello Di"


@pytest.mark.anyio
async def test_interrupted_invocation_reruns_and_its_sends_are_delivered_once() -> None:
    wf = BlockFlow()
    handler = wf.run()
    await wait_until(lambda: sorted(wf.notes) == [0, 1, 2])
    await wait_until(lambda: handler.ctx.to_dict()["workers"]["emit"]["in_progress"][0]["received"])
    await handler.cancel_run()
    snap = round_trip(handler.ctx.to_dict())
    (interrupted,) = snap["workers"]["emit"]["in_progress"]
    assert interrupted["received"] == [0, 1, 2]

    fresh = BlockFlow()
    fresh.block = False
    resumed = fresh.run(ctx=Context.from_dict(fresh, snap))
    assert await resumed == "finished"
    assert fresh.emit_passes == 1  # the in-flight body ran again
    # Sends 0-2 were routed before the snapshot and are not delivered again; the new
    # send (index 3) is delivered once.
    assert fresh.notes == [3]
    assert sorted(wf.notes) == [0, 1, 2]


@pytest.mark.anyio
async def test_pickle_serializer_round_trips_what_json_cannot() -> None:
    wf = AskFlow(blob=True)
    handler = wf.run()
    with pytest.raises(ValueError, match="Blob"):
        await snapshot_when_asked(handler)
    snap = handler.ctx.to_dict(PickleSerializer())
    await handler.cancel_run()
    snap = round_trip(snap)
    again = AskFlow(blob=True)
    ctx = Context.from_dict(again, snap, serializer=PickleSerializer())
    assert await ctx.store.get("blob") == Blob(7)
    resumed = again.run(ctx=ctx)
    resumed.ctx.send_event(Reply(text="Ed"))
    assert await resumed == "hello Ed"
    assert await resumed.ctx.store.get("blob") == Blob(7)


# --------------------------------------------------------------------------- loading (§10.4)


@functools.lru_cache(maxsize=1)
def _waiting_snapshot() -> str:
    async def take() -> dict[str, Any]:
        handler = AskFlow().run()
        snap = await snapshot_when_asked(handler)
        await handler.cancel_run()
        return snap

    return json.dumps(anyio.run(take))


@pytest.fixture
def waiting() -> dict[str, Any]:
    """A JSON snapshot of an AskFlow run waiting for a Reply (a fresh copy per test)."""
    snap: dict[str, Any] = json.loads(_waiting_snapshot())
    return snap


def load_error(snap: Any, workflow: Any = None, **kwargs: Any) -> ContextSerdeError:
    before = copy.deepcopy(snap)
    with pytest.raises(ContextSerdeError) as info:
        Context.from_dict(workflow or AskFlow(), snap, **kwargs)
    assert snap == before, "a failed load must not change the snapshot"
    return info.value


def test_the_waiting_snapshot_loads(waiting: dict[str, Any]) -> None:
    ctx = Context.from_dict(AskFlow(), waiting)
    assert ctx.is_running is True
    assert ctx.run_id is None


@pytest.mark.parametrize("version", [4, 99])
def test_future_version_names_the_version_and_the_highest_supported(
    waiting: dict[str, Any], version: int
) -> None:
    waiting["version"] = version
    message = str(load_error(waiting))
    assert str(version) in message
    assert "version 3" in message  # the highest supported


@pytest.mark.parametrize("version", ["2", 2.0, None, True])
def test_non_integer_version_is_rejected(waiting: dict[str, Any], version: Any) -> None:
    waiting["version"] = version
    assert "version" in str(load_error(waiting))


def test_legacy_version_loads_or_names_the_version(waiting: dict[str, Any]) -> None:
    waiting["version"] = 1
    try:
        Context.from_dict(AskFlow(), waiting)
    except ContextSerdeError as error:
        assert "version 1" in str(error)


@pytest.mark.parametrize("payload", ["not a dict", 42, [1, 2], None])
def test_a_non_dict_snapshot_is_rejected(payload: Any) -> None:
    with pytest.raises(ContextSerdeError, match="expected"):
        Context.from_dict(AskFlow(), payload)


def test_an_empty_dict_is_not_a_snapshot() -> None:
    message = str(load_error({}))
    assert "not a tickwork snapshot" in message and "empty dict" in message
    assert "'version', 'is_running', 'workers' are missing" in message


@pytest.mark.parametrize(
    "payload",
    [
        {"foo": 1},
        {"state": None},
        {"version": 3, "workers": {}},  # no is_running
        {"version": 3, "is_running": False},  # no workers
        {"is_running": False, "workers": {}},  # no version
    ],
)
def test_a_dict_without_the_identifying_keys_names_what_is_missing(
    payload: dict[str, Any],
) -> None:
    message = str(load_error(payload))
    assert "not a tickwork snapshot" in message
    for key in ("version", "is_running", "workers"):
        assert (f"'{key}'" in message.split("but", 1)[1]) is (key not in payload)


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("version", "3", "'version' must be an integer"),
        ("is_running", 1, "'is_running' must be a boolean"),
        ("workers", [], "'workers' must be a dict, got list"),
        ("workers", None, "'workers' must be a dict, got NoneType"),
    ],
)
def test_a_pre_run_snapshot_with_wrong_types_is_rejected(
    key: str, value: Any, fragment: str
) -> None:
    snap = Context(AskFlow()).to_dict()
    snap[key] = value
    assert fragment in str(load_error(snap))


def test_a_pre_run_snapshot_loads_as_a_fresh_context() -> None:
    snap = json.loads(json.dumps(Context(AskFlow()).to_dict(include_state=False)))
    ctx = Context.from_dict(AskFlow(), snap)
    assert ctx.is_running is False


@pytest.mark.parametrize("key", ["waiter_id", "waiting_for_event"])
def test_a_waiter_missing_a_required_key_names_step_and_key(
    waiting: dict[str, Any], key: str
) -> None:
    del waiting["workers"]["ask"]["collected_waiters"][0][key]
    error = load_error(waiting)
    assert "'ask'" in str(error)
    assert key in str(error)
    assert isinstance(error.__cause__, KeyError)


@pytest.mark.parametrize(
    "key",
    ["workers", "stream_seq", "work_item_seq", "invocation_seq", "journal_seq", "elapsed_alive"],
)
def test_a_truncated_running_snapshot_names_the_missing_key(
    waiting: dict[str, Any], key: str
) -> None:
    del waiting[key]
    assert key in str(load_error(waiting))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("is_running", "yes"),
        ("workers", ["ask"]),
        ("stream_seq", -1),
        ("journal_seq", "7"),
        ("elapsed_alive", "soon"),
    ],
)
def test_a_corrupt_top_level_value_names_the_key(
    waiting: dict[str, Any], key: str, value: Any
) -> None:
    waiting[key] = value
    assert key in str(load_error(waiting))


def test_a_corrupt_event_payload_names_the_step(waiting: dict[str, Any]) -> None:
    waiter = waiting["workers"]["ask"]["collected_waiters"][0]
    waiter["event"] = '{"__is_pydantic": true, "value": '  # truncated
    waiter["work_item"]["event"] = waiter["event"]
    error = load_error(waiting)
    assert "'ask'" in str(error)
    assert error.__cause__ is not None


def test_an_invalid_event_value_is_a_serde_error(waiting: dict[str, Any]) -> None:
    waiter = waiting["workers"]["ask"]["collected_waiters"][0]
    waiter["resolved_event"] = json.dumps(
        {
            "__is_pydantic": True,
            "value": {"text": ["not", "a", "str"]},
            "qualified_name": (f"{Reply.__module__}.Reply"),
        }
    )
    error = load_error(waiting)
    assert error.__cause__ is not None


def test_a_non_in_memory_store_type_is_rejected(waiting: dict[str, Any]) -> None:
    waiting["state"]["store_type"] = "redis"
    assert "redis" in str(load_error(waiting))


def test_an_unresolvable_waited_class_says_how_to_allow_it(waiting: dict[str, Any]) -> None:
    waiter = waiting["workers"]["ask"]["collected_waiters"][0]
    waiter["waiting_for_event"] = "tickwork_nowhere.MissingReply"
    error = load_error(waiting)
    assert "tickwork_nowhere.MissingReply" in str(error)
    assert "allowed_types" in str(error)
    assert error.__cause__ is not None
    assert not isinstance(error, (ImportError, AttributeError))


def test_an_unresolvable_event_payload_says_how_to_allow_it(waiting: dict[str, Any]) -> None:
    waiter = waiting["workers"]["ask"]["collected_waiters"][0]
    envelope = json.loads(waiter["waiter_event"])
    envelope["qualified_name"] = "tickwork_nowhere.GoneEvent"
    waiter["waiter_event"] = json.dumps(envelope)
    error = load_error(waiting)
    assert "allowed_types" in str(error)
    assert "GoneEvent" in str(error) or "GoneEvent" in str(error.__cause__)


@pytest.mark.anyio
async def test_local_event_classes_load_with_allowed_types() -> None:
    class LocalReply(HumanResponseEvent):
        text: str

    class LocalFlow(Workflow):
        @step
        async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
            reply = await ctx.wait_for_event(LocalReply, waiter_event=Ask(prompt="?"))
            return StopEvent(result=reply.text)

    handler = LocalFlow(timeout=TIMEOUT).run()
    snap = round_trip(await snapshot_when_asked(handler))
    await handler.cancel_run()
    with pytest.raises(ContextSerdeError, match="allowed_types"):
        Context.from_dict(LocalFlow(timeout=TIMEOUT), snap)
    wf = LocalFlow(timeout=TIMEOUT)
    ctx = Context.from_dict(wf, snap, serializer=JsonSerializer(allowed_types=[LocalReply, Ask]))
    resumed = wf.run(ctx=ctx)
    resumed.ctx.send_event(LocalReply(text="local"))
    assert await resumed == "local"


def test_pending_work_for_an_unknown_step_names_the_step(waiting: dict[str, Any]) -> None:
    error = load_error(waiting, OtherFlow())
    assert "'ask'" in str(error)


def test_an_idle_entry_for_an_unknown_step_is_ignored(waiting: dict[str, Any]) -> None:
    waiting["workers"]["ghost"] = {
        "queue": [],
        "in_progress": [],
        "collected_events": {},
        "collect_generations": {},
        "static_collect_events": [],
        "collected_waiters": [],
    }
    waiting["unknown_top_level_key"] = {"ignored": True}
    assert Context.from_dict(AskFlow(), waiting).is_running is True


@pytest.mark.anyio
async def test_a_finished_snapshot_loads_into_another_workflow() -> None:
    wf = AskFlow()
    handler = wf.run()
    await snapshot_when_asked(handler)
    handler.ctx.send_event(Reply(text="Fi"))
    assert await handler == "hello Fi"
    done = round_trip(handler.ctx.to_dict())
    other = OtherFlow(timeout=TIMEOUT)
    ctx = Context.from_dict(other, done)
    assert ctx.is_running is False
    # Not resumable: a fresh run of the other workflow with the carried-over store.
    assert await other.run(ctx=ctx) is True
