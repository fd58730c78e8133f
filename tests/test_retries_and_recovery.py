"""End-to-end tests of retries and ``@catch_error`` at run time (api.md §12, §22, §21.1.6).

Every async test runs under asyncio and trio (see ``conftest.py``).
"""

from __future__ import annotations

import hashlib
import re
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import anyio
import pytest

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, catch_error, step
from tickwork.errors import (
    StepTimeoutError,
    WorkflowRuntimeError,
    WorkflowTimeoutError,
    WorkflowValidationError,
)
from tickwork.events import (
    CollectionReleaseEvent,
    StepFailedEvent,
    StepState,
    StepStateChanged,
    WorkflowFailedEvent,
    WorkflowIdleEvent,
)
from tickwork.handler import WorkflowHandler
from tickwork.retry_policy import (
    RetryInfo,
    retry_if_exception_type,
    retry_policy,
    stop_after_attempt,
    wait_fixed,
)

pytestmark = pytest.mark.anyio

TIMEOUT = 5.0


# --------------------------------------------------------------------------- events


class Item(Event):
    n: int


class Done(Event):
    n: int


class Task(Event):
    n: int


class Seed(Event):
    n: int


class Note(Event):
    text: str


class Left(Event):
    n: int


class Right(Event):
    n: int


# --------------------------------------------------------------------------- helpers


class Recording(Workflow):
    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("timeout", TIMEOUT)
        super().__init__(**kwargs)
        self.log: list[Any] = []
        self.errors: list[BaseException] = []
        self.infos: list[RetryInfo] = []
        self.failures: list[StepFailedEvent] = []


async def drain(handler: WorkflowHandler) -> list[Event]:
    return [ev async for ev in handler.stream_events(expose_internal=True)]


def expected_seed(run_id: str, step_name: str, attempts: int) -> int:
    digest = hashlib.sha256(f"{run_id}:{step_name}:{attempts}".encode()).hexdigest()
    return int(digest, 16) & 0xFFFFFFFF


def is_utc_aware(value: datetime) -> bool:
    return value.tzinfo is not None and value.utcoffset() == timedelta(0)


def running_count(events: list[Event], name: str) -> int:
    return sum(
        1
        for ev in events
        if isinstance(ev, StepStateChanged)
        and ev.name == name
        and ev.step_state is StepState.RUNNING
    )


# =========================================================================== §22.2 retries


class FlakyFlow(Recording):
    """``work`` fails ``ev.failures`` times, then succeeds; up to 3 executions."""

    @step(retry_policy=retry_policy(wait=wait_fixed(0), stop=stop_after_attempt(3)))
    async def work(self, ctx: Context, ev: StartEvent) -> StopEvent:
        self.infos.append(ctx.retry_info())
        if len(self.infos) <= ev.failures:
            error = ValueError(f"failure {len(self.infos)}")
            self.errors.append(error)
            raise error
        return StopEvent(result=len(self.infos))


async def test_retries_run_the_whole_body_again_until_it_succeeds() -> None:
    wf = FlakyFlow()
    handler = wf.run(failures=2)
    events = await drain(handler)
    assert await handler == 3
    assert running_count(events, "work") == 3, "RUNNING is published for every retry"
    assert not any(isinstance(ev, WorkflowFailedEvent) for ev in events)


async def test_retry_info_describes_each_attempt() -> None:
    wf = FlakyFlow()
    await wf.run(failures=2)
    first, second, third = wf.infos
    assert first == RetryInfo(
        retry_number=0, elapsed_seconds=0.0, last_exception=None, last_failed_at=None
    )
    assert second.retry_number == 1 and third.retry_number == 2
    assert second.last_exception is wf.errors[0]
    assert third.last_exception is wf.errors[1]
    for info in (second, third):
        assert info.last_failed_at is not None and is_utc_aware(info.last_failed_at)
        assert 0.0 <= info.elapsed_seconds < TIMEOUT
    assert second.elapsed_seconds <= third.elapsed_seconds
    assert second.last_failed_at is not None and third.last_failed_at is not None
    assert second.last_failed_at <= third.last_failed_at


async def test_exhausted_retries_fail_the_run_with_the_last_exception() -> None:
    wf = FlakyFlow()
    handler = wf.run(failures=3)
    events = await drain(handler)
    with pytest.raises(ValueError) as info:
        await handler
    assert info.value is wf.errors[-1]
    assert len(wf.infos) == 3, "stop_after_attempt(3) means three executions in total"
    last = events[-1]
    assert isinstance(last, WorkflowFailedEvent)
    assert last.step_name == "work" and last.attempts == 3
    assert last.exception is wf.errors[-1]
    assert last.elapsed_seconds is not None and 0.0 <= last.elapsed_seconds < TIMEOUT


class RecordingPolicy:
    """A custom policy (any object with a compatible ``next``) that records its calls."""

    def __init__(self, retries: int) -> None:
        self.retries = retries
        self.calls: list[tuple[float, int, Exception, int | None]] = []

    def next(
        self, elapsed_time: float, attempts: int, error: Exception, *, seed: int | None = None
    ) -> float | None:
        self.calls.append((elapsed_time, attempts, error, seed))
        return 0.0 if attempts <= self.retries else None


class SeedlessPolicy:
    """An older custom policy: ``next`` takes no ``seed``."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def next(self, elapsed_time: float, attempts: int, error: Exception) -> float | None:
        self.calls.append(attempts)
        return 0.0 if attempts < 2 else None


RECORDING_POLICY = RecordingPolicy(retries=2)
SEEDLESS_POLICY = SeedlessPolicy()


class PolicyFlow(Recording):
    @step(retry_policy=RECORDING_POLICY)
    async def work(self, ev: StartEvent) -> StopEvent:
        error = RuntimeError(f"attempt {len(self.errors) + 1}")
        self.errors.append(error)
        raise error


class SeedlessFlow(Recording):
    @step(retry_policy=SEEDLESS_POLICY)
    async def work(self, ev: StartEvent) -> StopEvent:
        if not self.errors:
            self.errors.append(RuntimeError("once"))
            raise self.errors[0]
        return StopEvent(result="ok")


async def test_the_policy_is_asked_at_each_failure_with_attempts_elapsed_and_seed() -> None:
    RECORDING_POLICY.calls.clear()
    wf = PolicyFlow()
    handler = wf.run()
    with pytest.raises(RuntimeError):
        await handler
    calls = RECORDING_POLICY.calls
    assert [attempts for _, attempts, _, _ in calls] == [1, 2, 3]
    assert [error for _, _, error, _ in calls] == wf.errors
    assert all(a is b for (_, _, a, _), b in zip(calls, wf.errors, strict=True))
    assert [seed for *_, seed in calls] == [
        expected_seed(handler.run_id, "work", attempts) for attempts in (1, 2, 3)
    ]
    elapsed = [e for e, *_ in calls]
    assert elapsed == sorted(elapsed) and 0.0 <= elapsed[0] < TIMEOUT


async def test_a_policy_without_a_seed_parameter_still_works() -> None:
    SEEDLESS_POLICY.calls.clear()
    assert await SeedlessFlow().run() == "ok"
    assert SEEDLESS_POLICY.calls == [1]


class DelayFlow(Recording):
    """One worker slot; item 0 fails once and waits 0.05 s before its retry."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delay_failed_at = 0.0

    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=k) for k in range(ev.count)]

    @step(
        num_workers=1, retry_policy=retry_policy(wait=wait_fixed(0.05), stop=stop_after_attempt(2))
    )
    async def work(self, ctx: Context, ev: Item) -> Done:
        info = ctx.retry_info()
        self.log.append((ev.n, info.retry_number, time.monotonic()))
        self.infos.append(info)
        if ev.n == 0 and info.retry_number == 0:
            raise ValueError("first attempt of item 0")
        return Done(n=ev.n)

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        return StopEvent(result=[e.n for e in events])


async def test_a_delayed_retry_holds_no_slot_and_is_honoured() -> None:
    wf = DelayFlow()
    handler = wf.run(count=3)
    events = await drain(handler)
    # Items 1 and 2 use the only slot while item 0's retry waits; the retry comes last.
    assert await handler == [1, 2, 0]
    assert [(n, retry) for n, retry, _ in wf.log] == [(0, 0), (1, 0), (2, 0), (0, 1)]
    failed_at = wf.log[0][2]
    retried_at = wf.log[-1][2]
    assert retried_at - failed_at >= 0.045
    assert wf.infos[-1].retry_number == 1 and wf.infos[-1].elapsed_seconds >= 0.045
    # While a retry is pending the run is not quiescent.
    assert not any(isinstance(ev, WorkflowIdleEvent) for ev in events)


class FrontFlow(Recording):
    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=k) for k in range(3)]

    @step(num_workers=1, retry_policy=retry_policy(wait=wait_fixed(0), stop=stop_after_attempt(2)))
    async def work(self, ctx: Context, ev: Item) -> Done:
        retry = ctx.retry_info().retry_number
        self.log.append((ev.n, retry))
        if ev.n == 0 and retry == 0:
            raise ValueError("again")
        return Done(n=ev.n)

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        return StopEvent(result=[e.n for e in events])


async def test_an_immediate_retry_goes_to_the_front_of_the_queue() -> None:
    wf = FrontFlow()
    assert await wf.run() == [0, 1, 2]
    assert wf.log == [(0, 0), (0, 1), (1, 0), (2, 0)]


class SendThenFail(Recording):
    @step(retry_policy=retry_policy(wait=wait_fixed(0), stop=stop_after_attempt(2)))
    async def work(self, ctx: Context, ev: StartEvent) -> Note | None:
        attempt = ctx.retry_info().retry_number
        ctx.send_event(Note(text=f"sent by attempt {attempt}"))
        if attempt == 0:
            raise ValueError("after the send")
        return None

    @step
    async def tally(self, ev: Note) -> StopEvent | None:
        self.log.append(ev.text)
        return StopEvent(result=sorted(self.log)) if len(self.log) == 2 else None


async def test_sends_made_by_a_failed_attempt_stay_delivered() -> None:
    wf = SendThenFail()
    assert await wf.run() == ["sent by attempt 0", "sent by attempt 1"]


class PolicyError(Exception):
    pass


class RaisingPolicy:
    def __init__(self) -> None:
        self.error = PolicyError("the policy broke")

    def next(
        self, elapsed_time: float, attempts: int, error: Exception, *, seed: int | None = None
    ) -> float | None:
        raise self.error


RAISING_POLICY = RaisingPolicy()


class RaisingPolicyFlow(Recording):
    @step(retry_policy=RAISING_POLICY)
    async def work(self, ev: StartEvent) -> StopEvent:
        error = ValueError("step failure")
        self.errors.append(error)
        raise error


async def test_a_raising_policy_fails_the_run_with_its_exception_caused_by_the_step_error() -> None:
    wf = RaisingPolicyFlow()
    handler = wf.run()
    events = await drain(handler)
    with pytest.raises(PolicyError) as info:
        await handler
    assert info.value is RAISING_POLICY.error
    assert info.value.__cause__ is wf.errors[0]
    assert len(wf.errors) == 1, "the decision is 'stop': no retry"
    last = events[-1]
    assert isinstance(last, WorkflowFailedEvent)
    assert last.step_name == "work" and last.exception is RAISING_POLICY.error


class RaisingPolicyHandled(Recording):
    @step(retry_policy=RAISING_POLICY)
    async def work(self, ev: StartEvent) -> StopEvent:
        error = ValueError("step failure")
        self.errors.append(error)
        raise error

    @catch_error
    async def recover(self, ev: StepFailedEvent) -> StopEvent:
        self.failures.append(ev)
        return StopEvent(result="recovered")


async def test_a_raising_policys_exception_is_what_catch_error_receives() -> None:
    wf = RaisingPolicyHandled()
    assert await wf.run() == "recovered"
    (failure,) = wf.failures
    assert failure.exception is RAISING_POLICY.error
    assert failure.exception.__cause__ is wf.errors[0]
    assert failure.attempts == 1


class TimeoutFlow(Recording):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cancelled = 0

    @step(
        timeout=0.02,
        retry_policy=retry_policy(
            retry=retry_if_exception_type(TimeoutError),
            wait=wait_fixed(0),
            stop=stop_after_attempt(3),
        ),
    )
    async def work(self, ctx: Context, ev: StartEvent) -> StopEvent:
        info = ctx.retry_info()
        self.infos.append(info)
        if info.retry_number < ev.hangs:
            try:
                await anyio.sleep_forever()
            finally:
                self.cancelled += 1
        return StopEvent(result=info.retry_number)


async def test_a_step_timeout_goes_through_the_retry_policy() -> None:
    wf = TimeoutFlow()
    assert await wf.run(hangs=2) == 2
    assert wf.cancelled == 2
    for info in wf.infos[1:]:
        error = info.last_exception
        assert isinstance(error, StepTimeoutError) and isinstance(error, TimeoutError)
        assert error.step_name == "work" and error.timeout == 0.02
        assert "work" in str(error) and "0.02" in str(error)


async def test_a_step_timeout_that_exhausts_retries_fails_the_run() -> None:
    wf = TimeoutFlow()
    handler = wf.run(hangs=5)
    events = await drain(handler)
    with pytest.raises(StepTimeoutError) as info:
        await handler
    assert info.value.step_name == "work" and info.value.timeout == 0.02
    assert len(wf.infos) == 3
    assert isinstance(events[-1], WorkflowFailedEvent) and events[-1].attempts == 3


class RetriedJoins(Recording):
    """A ``list[E]`` join and a multi-slot join each fail once and are retried."""

    @step
    async def split(self, ctx: Context, ev: StartEvent) -> list[Item] | Left | Right:
        ctx.send_event(Right(n=1))
        ctx.send_event(Left(n=2))
        return [Item(n=k) for k in range(3)]

    @step
    async def work(self, ev: Item) -> Done:
        return Done(n=ev.n)

    @step(retry_policy=retry_policy(wait=wait_fixed(0), stop=stop_after_attempt(2)))
    async def join(self, ctx: Context, events: list[Done]) -> Note:
        retry = ctx.retry_info().retry_number
        self.log.append(("join", retry, sorted(e.n for e in events)))
        if retry == 0:
            raise ValueError("join once")
        return Note(text=str(sorted(e.n for e in events)))

    @step(retry_policy=retry_policy(wait=wait_fixed(0), stop=stop_after_attempt(2)))
    async def pair(self, ctx: Context, left: Left, right: Right) -> Task:
        retry = ctx.retry_info().retry_number
        self.log.append(("pair", retry, (left.n, right.n)))
        if retry == 0:
            raise ValueError("pair once")
        return Task(n=left.n * 10 + right.n)

    @step
    async def final(self, note: Note, task: Task) -> StopEvent:
        return StopEvent(result=(note.text, task.n))


async def test_retried_joins_keep_their_batch_and_bound_events() -> None:
    wf = RetriedJoins()
    handler = wf.run()
    events = await drain(handler)
    assert await handler == ("[0, 1, 2]", 21)
    assert sorted(wf.log) == [
        ("join", 0, [0, 1, 2]),
        ("join", 1, [0, 1, 2]),
        ("pair", 0, (2, 1)),
        ("pair", 1, (2, 1)),
    ]
    assert running_count(events, "join") == 2 and running_count(events, "pair") == 2
    join_runs = [
        ev.input_event_name
        for ev in events
        if isinstance(ev, StepStateChanged)
        and ev.name == "join"
        and ev.step_state is StepState.RUNNING
    ]
    assert join_runs == ["CollectionReleaseEvent", "CollectionReleaseEvent"]


# =========================================================================== §22.3 ownership


class OwnershipFlow(Recording):
    @step
    async def begin(self, ctx: Context, ev: StartEvent) -> Task | Seed | None:
        ctx.send_event(Task(n=1))
        ctx.send_event(Seed(n=2))
        return None

    @step
    async def a(self, ev: Task) -> Note:
        raise ValueError("a broke")

    @step
    async def b(self, ev: Seed) -> Note:
        raise ValueError("b broke")

    @catch_error(for_steps=["a"])
    async def scoped(self, ev: StepFailedEvent) -> Note:
        self.log.append(("scoped", ev.step_name))
        return Note(text=f"scoped:{ev.step_name}")

    @catch_error
    async def wildcard(self, ev: StepFailedEvent) -> Note:
        self.log.append(("wildcard", ev.step_name))
        return Note(text=f"wildcard:{ev.step_name}")

    @step
    async def tally(self, ev: Note) -> StopEvent | None:
        self.log.append(("note", ev.text))
        notes = sorted(text for kind, text in self.log if kind == "note")
        return StopEvent(result=notes) if len(notes) == 2 else None


async def test_a_scoped_handler_owns_its_steps_and_the_wildcard_owns_the_rest() -> None:
    wf = OwnershipFlow()
    assert await wf.run() == ["scoped:a", "wildcard:b"]
    assert sorted(x for x in wf.log if x[0] != "note") == [("scoped", "a"), ("wildcard", "b")]


class FailingScopedHandler(Recording):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.handler_error = KeyError("handler broke")

    @step
    async def a(self, ev: StartEvent) -> StopEvent:
        raise ValueError("a broke")

    @catch_error(for_steps=["a"])
    async def scoped(self, ev: StepFailedEvent) -> StopEvent:
        self.log.append("scoped")
        raise self.handler_error

    @catch_error
    async def wildcard(self, ev: StepFailedEvent) -> StopEvent:
        self.log.append(("wildcard", ev.step_name))
        return StopEvent(result="wildcard")


async def test_the_wildcard_never_covers_a_handler_step() -> None:
    wf = FailingScopedHandler()
    handler = wf.run()
    events = await drain(handler)
    with pytest.raises(KeyError) as info:
        await handler
    assert info.value is wf.handler_error
    assert wf.log == ["scoped"]
    last = events[-1]
    assert isinstance(last, WorkflowFailedEvent)
    assert last.step_name == "scoped" and last.exception is wf.handler_error


class FailingWildcard(Recording):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.handler_error = LookupError("wildcard broke")

    @step
    async def a(self, ev: StartEvent) -> StopEvent:
        raise ValueError("a broke")

    @catch_error
    async def fallback(self, ev: StepFailedEvent) -> StopEvent:
        raise self.handler_error


async def test_a_failing_handler_owned_by_nobody_fails_the_run_naming_the_handler() -> None:
    wf = FailingWildcard()
    handler = wf.run()
    events = await drain(handler)
    with pytest.raises(LookupError) as info:
        await handler
    assert info.value is wf.handler_error
    last = events[-1]
    assert isinstance(last, WorkflowFailedEvent)
    assert last.step_name == "fallback" and last.exception is wf.handler_error
    assert sum(isinstance(ev, StopEvent) for ev in events) == 1


def test_catch_error_structure_rules() -> None:
    class Base(Workflow):
        @step
        async def a(self, ev: StartEvent) -> StopEvent:
            return StopEvent()

    class TwoWildcards(Base):
        @catch_error
        async def one(self, ev: StepFailedEvent) -> None:
            return None

        @catch_error
        async def two(self, ev: StepFailedEvent) -> None:
            return None

    class UnknownStep(Base):
        @catch_error(for_steps=["nope"])
        async def one(self, ev: StepFailedEvent) -> None:
            return None

    class ClaimsHandler(Base):
        @catch_error(for_steps=["a"])
        async def one(self, ev: StepFailedEvent) -> None:
            return None

        @catch_error(for_steps=["one"])
        async def two(self, ev: StepFailedEvent) -> None:
            return None

    class DoubleClaim(Base):
        @catch_error(for_steps=["a"])
        async def one(self, ev: StepFailedEvent) -> None:
            return None

        @catch_error(for_steps=["a"])
        async def two(self, ev: StepFailedEvent) -> None:
            return None

    cases = [
        (TwoWildcards, ("one", "two")),
        (UnknownStep, ("one", "nope")),
        (ClaimsHandler, ("one", "two")),
        (DoubleClaim, ("a", "one", "two")),
    ]
    for cls, names in cases:
        with pytest.raises(WorkflowValidationError) as info:
            cls().validate()
        for name in names:
            assert name in str(info.value), (cls.__name__, str(info.value))


async def test_catch_error_structure_is_enforced_even_without_validation() -> None:
    class TwoWildcards(Workflow):
        @step
        async def a(self, ev: StartEvent) -> StopEvent:
            return StopEvent()

        @catch_error
        async def one(self, ev: StepFailedEvent) -> None:
            return None

        @catch_error
        async def two(self, ev: StepFailedEvent) -> None:
            return None

    with pytest.raises(WorkflowValidationError):
        TwoWildcards(disable_validation=True).run()


# =========================================================================== StepFailedEvent


class FieldsFlow(Recording):
    @step(retry_policy=retry_policy(wait=wait_fixed(0.02), stop=stop_after_attempt(2)))
    async def work(self, ev: Task) -> StopEvent:
        error = ValueError(f"attempt {len(self.errors) + 1}")
        self.errors.append(error)
        raise error

    @step
    async def begin(self, ev: StartEvent) -> Task:
        return Task(n=7)

    @catch_error
    async def recover(self, ev: StepFailedEvent) -> StopEvent:
        self.failures.append(ev)
        return StopEvent(result="handled")


async def test_step_failed_event_fields() -> None:
    wf = FieldsFlow()
    before = datetime.now(timezone.utc)
    handler = wf.run()
    events = await drain(handler)
    assert await handler == "handled"
    after = datetime.now(timezone.utc)
    (failure,) = wf.failures
    assert failure.step_name == "work"
    assert type(failure.input_event) is Task and failure.input_event.n == 7
    assert failure.exception is wf.errors[-1]
    assert failure.attempts == 2
    assert 0.02 <= failure.elapsed_seconds < TIMEOUT
    assert is_utc_aware(failure.failed_at)
    assert before <= failure.failed_at <= after
    # StepFailedEvent is routed to the handler, never published.
    assert not any(isinstance(ev, StepFailedEvent) for ev in events)


class CollectFailure(Recording):
    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=k) for k in range(3)]

    @step
    async def work(self, ev: Item) -> Done:
        return Done(n=ev.n)

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        raise ValueError(f"join of {len(events)}")

    @catch_error
    async def recover(self, ev: StepFailedEvent) -> StopEvent:
        self.failures.append(ev)
        return StopEvent(result="handled")


async def test_a_failing_list_join_hands_the_real_batch_to_the_handler() -> None:
    wf = CollectFailure()
    assert await wf.run() == "handled"
    (failure,) = wf.failures
    assert failure.step_name == "join"
    release = failure.input_event
    assert isinstance(release, CollectionReleaseEvent)
    assert sorted(e.n for e in release.events) == [0, 1, 2]
    assert all(type(e) is Done for e in release.events)
    assert re.fullmatch(r"stream-[0-9a-f]{16}", release.stream_id)
    assert release.binding_id


class JoinFailure(Recording):
    @step
    async def begin(self, ctx: Context, ev: StartEvent) -> Left | Right | None:
        ctx.send_event(Right(n=1))
        ctx.send_event(Left(n=2))
        return None

    @step
    async def join(self, left: Left, right: Right) -> StopEvent:
        raise ValueError("join broke")

    @catch_error
    async def recover(self, ev: StepFailedEvent) -> StopEvent:
        self.failures.append(ev)
        return StopEvent(result="handled")


async def test_a_failing_multi_slot_join_reports_the_completing_arrival() -> None:
    wf = JoinFailure()
    assert await wf.run() == "handled"
    (failure,) = wf.failures
    assert failure.step_name == "join"
    assert type(failure.input_event) is Left and failure.input_event.n == 2


# =========================================================================== handler outcomes


class OutcomeFlow(Recording):
    """``work`` fails for odd items; the handler's outcome depends on the start event."""

    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        self.log.append(("mode", ev.mode))
        return [Item(n=k) for k in range(4)]

    @step(num_workers=4)
    async def work(self, ev: Item) -> Done:
        if ev.n % 2:
            raise ValueError(f"item {ev.n}")
        return Done(n=ev.n)

    @catch_error
    async def recover(self, ev: StepFailedEvent) -> Done | Note | StopEvent | None:
        self.failures.append(ev)
        mode = self.log[0][1]
        n = ev.input_event.n
        if mode == "event":
            return Done(n=-n)  # rejoins the failing item's stream
        if mode == "other":
            return Note(text=f"rerouted {n}")
        if mode == "stop":
            return StopEvent(result=f"stopped by {n}")
        return None

    @step
    async def notes(self, ev: Note) -> Done:
        self.log.append(("note", ev.text))
        return Done(n=100 + int(ev.text.split()[-1]))

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        self.log.append(("join", len(events)))
        return StopEvent(result=sorted(e.n for e in events))


async def test_handler_output_rejoins_the_failing_items_stream() -> None:
    wf = OutcomeFlow()
    assert await wf.run(mode="event") == [-3, -1, 0, 2]
    assert [x for x in wf.log if x[0] == "join"] == [("join", 4)]


async def test_a_handler_returning_another_event_reroutes_the_flow_inside_the_stream() -> None:
    wf = OutcomeFlow()
    assert await wf.run(mode="other") == [0, 2, 101, 103]
    assert sorted(x for x in wf.log if x[0] == "note") == [
        ("note", "rerouted 1"),
        ("note", "rerouted 3"),
    ]


async def test_a_handler_returning_none_ends_the_branch_and_the_join_fires_with_the_rest() -> None:
    wf = OutcomeFlow()
    assert await wf.run(mode="none") == [0, 2]
    assert len(wf.failures) == 2


async def test_a_handler_returning_a_stop_event_completes_the_run() -> None:
    wf = OutcomeFlow()
    handler = wf.run(mode="stop")
    events = await drain(handler)
    result = await handler
    assert result in ("stopped by 1", "stopped by 3")
    assert not any(x[0] == "join" for x in wf.log)
    assert sum(isinstance(ev, StopEvent) for ev in events) == 1


# =========================================================================== lineage


class LineageFlow(Recording):
    """``work`` fails on every Task; how the handler continues depends on ``route``."""

    route = "return"
    budget = 1

    @step
    async def begin(self, ev: StartEvent) -> Task:
        return Task(n=0)

    @step
    async def work(self, ev: Task) -> StopEvent:
        error = ValueError(f"task {ev.n}")
        self.errors.append(error)
        raise error

    @step
    async def relay(self, ev: Note) -> Task:
        return Task(n=int(ev.text))

    @step
    async def splitter(self, ev: Seed) -> list[Task]:
        return [Task(n=ev.n)]

    @catch_error
    async def recover(self, ctx: Context, ev: StepFailedEvent) -> Task | Note | Seed | None:
        self.failures.append(ev)
        n = ev.input_event.n + 1
        if self.route == "return":
            return Task(n=n)
        if self.route == "send":
            ctx.send_event(Task(n=n))
            return None
        if self.route == "relay":
            return Note(text=str(n))
        return Seed(n=n)


def lineage_flow(route: str, budget: int = 1) -> LineageFlow:
    if budget == 1:
        cls = type(f"Lineage_{route}", (LineageFlow,), {"route": route})
    else:

        class Budgeted(LineageFlow):
            @catch_error(max_recoveries=budget)
            async def recover(self, ctx: Context, ev: StepFailedEvent) -> Task | Note | Seed | None:
                return await LineageFlow.recover(self, ctx, ev)

        Budgeted.route = route
        cls = Budgeted
    return cls(skip_graph_checks={"reachability"})


@pytest.mark.parametrize("route", ["return", "send", "relay", "fan_out"])
async def test_the_default_budget_recovers_a_lineage_once(route: str) -> None:
    wf = lineage_flow(route)
    handler = wf.run()
    events = await drain(handler)
    with pytest.raises(ValueError) as info:
        await handler
    # The second failure in the same lineage is not handed to the handler.
    assert len(wf.failures) == 1
    assert len(wf.errors) == 2
    assert info.value is wf.errors[1]
    last = events[-1]
    assert isinstance(last, WorkflowFailedEvent)
    assert last.step_name == "work" and last.exception is wf.errors[1]


async def test_max_recoveries_is_a_per_lineage_budget() -> None:
    wf = lineage_flow("return", budget=3)
    with pytest.raises(ValueError) as info:
        await wf.run()
    assert len(wf.failures) == 3
    assert [f.input_event.n for f in wf.failures] == [0, 1, 2]
    assert info.value is wf.errors[3]


class IndependentLineages(Recording):
    """Two separate items each fail once: each lineage has its own budget of 1."""

    @step
    async def begin(self, ctx: Context, ev: StartEvent) -> Task | None:
        ctx.send_event(Task(n=1))
        ctx.send_event(Task(n=2))
        return None

    @step
    async def work(self, ev: Task) -> Done:
        if ev.n > 0:
            raise ValueError(f"task {ev.n}")
        return Done(n=ev.n)

    @catch_error
    async def recover(self, ev: StepFailedEvent) -> Task:
        self.failures.append(ev)
        return Task(n=0)

    @step
    async def tally(self, ev: Done) -> StopEvent | None:
        self.log.append(ev.n)
        return StopEvent(result=len(self.log)) if len(self.log) == 2 else None


async def test_separate_lineages_each_get_their_own_budget() -> None:
    wf = IndependentLineages()
    assert await wf.run() == 2
    assert sorted(f.input_event.n for f in wf.failures) == [1, 2]


class RecoverInStream(Recording):
    """A member fails twice in one lineage inside a stream: the second failure ends the run."""

    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=k) for k in range(3)]

    @step
    async def work(self, ev: Item) -> Done:
        if ev.n == 1:
            raise ValueError(f"item {ev.n} attempt {len(self.failures)}")
        return Done(n=ev.n)

    @catch_error
    async def recover(self, ev: StepFailedEvent) -> Item:
        self.failures.append(ev)
        return Item(n=1)  # back into the same failing step, same lineage

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        self.log.append("joined")
        return StopEvent(result=len(events))


async def test_a_second_failure_in_a_stream_lineage_fails_the_run() -> None:
    wf = RecoverInStream()
    with pytest.raises(ValueError, match="attempt 1"):
        await wf.run()
    assert len(wf.failures) == 1
    assert wf.log == []


# =========================================================================== more failure kinds


class Answer(Event):
    n: int


class OddFailures(Recording):
    """Failures that are not body exceptions still go through @catch_error."""

    @step
    async def begin(self, ctx: Context, ev: StartEvent) -> Task | Seed | list[Item] | None:
        ctx.send_event(Task(n=0))
        ctx.send_event(Seed(n=0))
        return [Item(n=0)]

    @step
    async def bad_send(self, ctx: Context, ev: Task) -> None:
        ctx.send_event(Done(n=1), step="join")  # a targeted send to a collect step

    @step
    async def waits(self, ctx: Context, ev: Seed) -> None:
        await ctx.wait_for_event(Answer, timeout=0.02)

    @step
    async def work(self, ev: Item) -> Done:
        return Done(n=ev.n)

    @step
    async def join(self, events: list[Done]) -> Note:
        return Note(text="joined")

    @catch_error
    async def recover(self, ev: StepFailedEvent) -> Note:
        self.failures.append(ev)
        return Note(text=ev.step_name)

    @step
    async def tally(self, ev: Note) -> StopEvent | None:
        self.log.append(ev.text)
        return StopEvent(result=sorted(self.log)) if len(self.log) == 3 else None


async def test_an_invalid_send_and_a_waiter_timeout_are_step_failures() -> None:
    wf = OddFailures()
    assert await wf.run() == ["bad_send", "joined", "waits"]
    by_step = {f.step_name: f.exception for f in wf.failures}
    assert isinstance(by_step["bad_send"], WorkflowRuntimeError)
    assert "join" in str(by_step["bad_send"])
    assert isinstance(by_step["waits"], TimeoutError)
    assert "Answer" in str(by_step["waits"])


class NeverEnding(Recording):
    @step(retry_policy=RECORDING_POLICY)
    async def work(self, ev: StartEvent) -> StopEvent:
        await anyio.sleep_forever()
        return StopEvent()

    @catch_error
    async def recover(self, ev: StepFailedEvent) -> StopEvent:
        self.failures.append(ev)
        return StopEvent(result="recovered")


async def test_a_workflow_timeout_never_reaches_retries_or_catch_error() -> None:
    RECORDING_POLICY.calls.clear()
    wf = NeverEnding(timeout=0.05)
    with pytest.raises(WorkflowTimeoutError):
        await wf.run()
    assert RECORDING_POLICY.calls == [] and wf.failures == []


class L1(Event):
    n: int


class L2(Event):
    n: int


class Inner(Event):
    n: int
    total: int


class InnerJoinFails(Recording):
    """The inner join of branch 1 fails; the handler's output rejoins the outer stream."""

    @step
    async def split(self, ev: StartEvent) -> list[L1]:
        return [L1(n=k) for k in range(3)]

    @step
    async def split_inner(self, ev: L1) -> list[L2]:
        return [L2(n=ev.n * 10 + j) for j in range(2)]

    @step
    async def inner_join(self, events: list[L2]) -> Inner:
        ns = sorted(e.n for e in events)
        if ns[0] == 10:
            raise ValueError("inner join of branch 1")
        return Inner(n=ns[0] // 10, total=sum(ns))

    @catch_error
    async def recover(self, ev: StepFailedEvent) -> Inner:
        self.failures.append(ev)
        release = ev.input_event
        assert isinstance(release, CollectionReleaseEvent)
        return Inner(n=-1, total=sum(e.n for e in release.events))

    @step
    async def outer_join(self, events: list[Inner]) -> StopEvent:
        return StopEvent(result=sorted((e.n, e.total) for e in events))


async def test_a_recovered_inner_join_still_feeds_the_outer_join() -> None:
    wf = InnerJoinFails()
    assert await wf.run() == [(-1, 21), (0, 1), (2, 41)]
    (failure,) = wf.failures
    assert failure.step_name == "inner_join"


def test_catch_error_options_are_checked_at_decoration() -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(WorkflowValidationError, match="max_recoveries"):

            @catch_error(max_recoveries=bad)  # type: ignore[arg-type]
            async def handler(self: Any, ev: StepFailedEvent) -> None:
                return None

    with pytest.raises(WorkflowValidationError) as info:

        class Wrong(Workflow):
            @catch_error
            async def handler(self, ev: Task) -> None:
                return None

    assert "handler" in str(info.value) and "StepFailedEvent" in str(info.value)


class ConcurrentFailures(Recording):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.active = 0
        self.peak = 0

    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=k) for k in range(4)]

    @step(num_workers=4)
    async def work(self, ev: Item) -> Done:
        raise ValueError(f"item {ev.n}")

    @catch_error
    async def recover(self, ev: StepFailedEvent) -> Done:
        self.active += 1
        self.peak = max(self.peak, self.active)
        await anyio.sleep(0.005)
        self.active -= 1
        return Done(n=ev.input_event.n)

    @step
    async def join(self, events: list[Done]) -> StopEvent:
        return StopEvent(result=sorted(e.n for e in events))


async def test_a_handler_runs_one_failure_at_a_time() -> None:
    wf = ConcurrentFailures()
    assert await wf.run() == [0, 1, 2, 3]
    assert wf.peak == 1
