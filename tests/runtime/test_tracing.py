"""OpenTelemetry spans: one per run session and one per step invocation (api.md §27.2)."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.events import HumanResponseEvent
from tickwork.fleet import Worker, WorkerOptions
from tickwork.journal import InMemoryJournal
from tickwork.stores.leases import keeper_for

trace = pytest.importorskip("opentelemetry.trace")
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
export = pytest.importorskip("opentelemetry.sdk.trace.export")
in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")

_EXPORTER = in_memory.InMemorySpanExporter()
_PROVIDER = sdk_trace.TracerProvider()
_PROVIDER.add_span_processor(export.SimpleSpanProcessor(_EXPORTER))


@pytest.fixture(autouse=True)
def spans() -> Iterator[object]:
    # The global provider can be set once per process; tickwork looks it up through
    # opentelemetry.trace, so install ours and clear the exporter around each test.
    if not isinstance(trace.get_tracer_provider(), sdk_trace.TracerProvider):
        trace.set_tracer_provider(_PROVIDER)
    current = trace.get_tracer_provider()
    if current is not _PROVIDER and not getattr(current, "_tickwork_test_exporter", False):
        # Another test (a docs example) installed the process-wide provider first.
        current.add_span_processor(export.SimpleSpanProcessor(_EXPORTER))
        current._tickwork_test_exporter = True
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


class Middle(Event):
    n: int


class Reply(HumanResponseEvent):
    text: str


class Flaky(Workflow):
    @step
    async def first(self, ev: StartEvent) -> Middle:
        with trace.get_tracer("user").start_as_current_span("user-span"):
            pass
        return Middle(n=1)

    @step
    async def second(self, ev: Middle) -> StopEvent:
        if ev.n == 1:
            raise ValueError("boom")
        return StopEvent(result=ev.n)


class Ok(Workflow):
    @step
    async def first(self, ev: StartEvent) -> Middle:
        return Middle(n=2)

    @step
    async def second(self, ev: Middle) -> StopEvent:
        return StopEvent(result=ev.n)


class Waits(Workflow):
    @step
    async def wait(self, ctx: Context, ev: StartEvent) -> StopEvent:
        reply = await ctx.wait_for_event(Reply, timeout=5)
        return StopEvent(result=reply.text)


def _by_name(name: str) -> list[object]:
    return [s for s in _EXPORTER.get_finished_spans() if s.name == name]


@pytest.mark.anyio
async def test_run_and_step_spans_nest_under_the_caller_span() -> None:
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("caller") as caller:
        assert await Ok(timeout=5).run() == 2
    (run,) = _by_name("tickwork.run")
    assert run.parent.span_id == caller.get_span_context().span_id
    assert run.attributes["tickwork.workflow.name"].endswith("Ok")
    assert run.attributes["tickwork.start_event"] == "tickwork.events.StartEvent"
    assert run.attributes["tickwork.resumed"] is False
    assert run.status.status_code == trace.StatusCode.OK
    steps = _by_name("tickwork.step")
    assert sorted(s.attributes["tickwork.step.name"] for s in steps) == ["first", "second"]
    for span in steps:
        assert span.parent.span_id == run.context.span_id
        assert span.attributes["tickwork.run_id"] == run.attributes["tickwork.run_id"]
        assert span.attributes["tickwork.step.attempt"] == 0


@pytest.mark.anyio
async def test_failure_marks_the_step_and_run_spans_as_errors() -> None:
    with pytest.raises(ValueError, match="boom"):
        await Flaky(timeout=5).run()
    (run,) = _by_name("tickwork.run")
    assert run.status.status_code == trace.StatusCode.ERROR
    failed = [
        s for s in _by_name("tickwork.step") if s.attributes["tickwork.step.name"] == "second"
    ]
    assert failed[0].status.status_code == trace.StatusCode.ERROR
    assert any(e.name == "exception" for e in failed[0].events)
    (user,) = _by_name("user-span")
    first = [s for s in _by_name("tickwork.step") if s.attributes["tickwork.step.name"] == "first"]
    assert user.parent.span_id == first[0].context.span_id


@pytest.mark.anyio
async def test_a_waiter_suspension_ends_the_step_span_without_error() -> None:
    handler = Waits(timeout=5).run()
    await anyio.sleep(0.05)
    handler.ctx.send_event(Reply(text="hi"))
    assert await handler == "hi"
    spans = _by_name("tickwork.step")
    suspended = [s for s in spans if s.attributes.get("tickwork.step.suspended")]
    assert len(suspended) == 1
    assert suspended[0].status.status_code != trace.StatusCode.ERROR
    assert len(spans) == 2


@pytest.mark.anyio
async def test_a_cancelled_run_is_not_an_error() -> None:
    handler = Waits(timeout=5).run()
    await anyio.sleep(0.05)
    await handler.cancel_run()
    (run,) = _by_name("tickwork.run")
    assert run.attributes["tickwork.cancelled"] is True
    assert run.status.status_code == trace.StatusCode.UNSET


class Answer(Event):
    text: str


class Ask(Workflow):
    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        answer = await ctx.wait_for_event(Answer, timeout=None)
        return StopEvent(result=answer.text)


@pytest.mark.anyio
async def test_a_fleet_worker_traces_claims_parking_renewals_and_lost_leases(
    spans: object,
) -> None:
    store = InMemoryJournal()
    handler = await Ask(journal=store).submit(run_id="f1")
    options = WorkerOptions(poll_seconds=0.05, idle_release=0)
    worker = Worker([Ask(journal=store)], store, options)
    async with anyio.create_task_group() as group:
        group.start_soon(worker.run)
        with anyio.fail_after(10):
            while (await store.get_run("f1")).status != "parked":  # type: ignore[union-attr]
                await anyio.sleep(0.01)
            await handler.send_event(Answer(text="yes"), idempotency_key="a")
            assert await handler == "yes"
        worker.stop()
    # A run started here, then taken over: its keeper renews, then loses the lease.
    local = Ask(journal=store, timeout=10).run(run_id="f2")
    await anyio.sleep(0.05)
    entry = await store.get_run("f2")
    assert entry is not None and entry.owner is not None
    await store.expire_owner(entry.owner)
    assert await store.claim_run("f2", "elsewhere") is not None
    ownership = local._session.ownership
    assert ownership is not None
    keeper_for(store, entry.owner, ownership.lease_seconds).renew_now()
    with pytest.raises(Exception, match="another worker"):
        await local

    finished = _EXPORTER.get_finished_spans()
    names = [span.name for span in finished]
    assert names.count("tickwork.fleet.claim") == 2  # claimed, parked, claimed again
    assert names.count("tickwork.fleet.park") == 1
    assert "tickwork.fleet.renew" in names
    (lost,) = [span for span in finished if span.name == "tickwork.fleet.lease_lost"]
    assert lost.attributes["tickwork.run_id"] == "f2"
    claims = [span for span in finished if span.name == "tickwork.fleet.claim"]
    assert all(span.attributes["tickwork.run_id"] == "f1" for span in claims)
    assert {span.attributes["tickwork.epoch"] for span in claims} == {1, 2}
    # The run's spans are children of the claim that resumed them.
    runs = [span for span in finished if span.name == "tickwork.run"]
    claim_ids = {span.context.span_id for span in claims}
    assert sum(1 for run in runs if run.parent and run.parent.span_id in claim_ids) == 2
