"""Replay equivalence of real runs' journals (api.md §18.2, quality.md §2).

Hypothesis picks a small workflow (a chain, a send + ``collect_events`` fan-in, a
``list[E]`` fan-out join, a retried step that may exhaust its retries, a HITL wait that
is answered, cancelled or timed out) and its parameters.  The workflow runs for real
(asyncio or trio) with ``journal=True``.  The records of ``handler.journal()`` go
through a JSON round trip (proving they are serializable), then:

* **prefix equivalence**: for every ``k``, ``rebuild_state_from_ticks(S0, R[:k])``
  equals the live run's state just after record ``k`` (captured by observing the
  session's ``processed`` hook), compared through the snapshot encoding;
* **split folds**: folding ``R[:k]`` then ``R[k:]`` equals folding ``R`` at once, and
  folding never changes the state it starts from;
* the full fold equals the live final state (``handler._session.state``);
* ``replay_ticks_stream`` reports the exit command of the outcome (``complete``,
  ``fail``, ``halt``), and ``None`` for every prefix that does not end the run.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
from tickwork.errors import WorkflowCancelledByUser, WorkflowTimeoutError
from tickwork.retry_policy import retry_policy, stop_after_attempt, wait_fixed
from tickwork.runtime.control_loop import (
    rebuild_state_from_ticks,
    rebuild_state_from_ticks_stream,
    replay_ticks_stream,
)
from tickwork.runtime.session import RunSession
from tickwork.serde.serializers import JsonSerializer
from tickwork.serde.snapshot import encode_snapshot
from tickwork.testing import ReducerKit
from tickwork.types import JournalRecord

TIMEOUT = 10.0
SER = JsonSerializer()


# --------------------------------------------------------------------------- workflows


class Hop(Event):
    i: int


class Item(Event):
    n: int


class Done(Event):
    n: int


class Ask(InputRequiredEvent):
    pass


class Reply(HumanResponseEvent):
    text: str


class Flaky(Exception):
    pass


class ChainFlow(Workflow):
    def __init__(self, hops: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hops = hops

    @step
    async def begin(self, ev: StartEvent) -> Hop:
        return Hop(i=0)

    @step
    async def hop(self, ctx: Context, ev: Hop) -> Hop | StopEvent:
        await ctx.store.set("last", ev.i)
        if ev.i >= self.hops:
            return StopEvent(result=ev.i)
        return Hop(i=ev.i + 1)


class SendCollectFlow(Workflow):
    def __init__(self, n: int, workers: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.n = n
        self.workers = workers

    @step
    async def fan(self, ctx: Context, ev: StartEvent) -> Item | None:
        for i in range(self.n):
            ctx.send_event(Item(n=i))
        return None

    @step(num_workers=2)
    async def work(self, ev: Item) -> Done:
        await anyio.sleep(0.001 * (ev.n % 3))
        return Done(n=ev.n)

    @step
    async def gather(self, ctx: Context, ev: Done) -> StopEvent | None:
        got = ctx.collect_events(ev, [Done] * self.n)
        if got is None:
            return None
        return StopEvent(result=sorted(e.n for e in got))


class FanJoinFlow(Workflow):
    def __init__(self, n: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.n = n

    @step
    async def produce(self, ev: StartEvent) -> list[Item]:
        return [Item(n=i) for i in range(self.n)]

    @step(num_workers=3)
    async def work(self, ev: Item) -> Done | None:
        await anyio.sleep(0.001 * (ev.n % 2))
        return None if ev.n == 3 else Done(n=ev.n)

    @step
    async def join(self, ctx: Context, evs: list[Done]) -> StopEvent:
        await ctx.store.set("joined", len(evs))
        return StopEvent(result=sorted(e.n for e in evs))


class RetryFlow(Workflow):
    def __init__(self, failures: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.failures = failures

    @step(retry_policy=retry_policy(wait=wait_fixed(0.01), stop=stop_after_attempt(3)))
    async def flaky(self, ctx: Context, ev: StartEvent) -> StopEvent:
        attempt = ctx.retry_info().retry_number
        if attempt < self.failures:
            raise Flaky(f"attempt {attempt}")
        return StopEvent(result=attempt)


class HitlFlow(Workflow):
    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        await ctx.store.set("asked", True)
        reply = await ctx.wait_for_event(Reply, waiter_event=Ask(), timeout=100)
        return StopEvent(result=reply.text)


# --------------------------------------------------------------------------- capture


@contextlib.contextmanager
def capture_live_states() -> Iterator[dict[int, Any]]:
    """Record the live run's state after each processed record, keyed by seq."""
    states: dict[int, Any] = {}
    original = RunSession.processed

    def processed(self: RunSession, tick: Any, state: Any, commands: Any) -> None:
        states[state.journal_seq - 1] = state
        original(self, tick, state, commands)

    RunSession.processed = processed  # type: ignore[method-assign]
    try:
        yield states
    finally:
        RunSession.processed = original  # type: ignore[method-assign]


def encoded(state: Any) -> dict[str, Any]:
    snap = encode_snapshot(state, SER, None)
    return {**snap, "status": state.status}


async def wait_for_ask(handler: Any) -> None:
    with anyio.fail_after(5):
        async for ev in handler.stream_events():
            if isinstance(ev, Ask):
                return


async def play(scenario: str, params: dict[str, Any]) -> tuple[Any, Any, str]:
    """Run the scenario; returns (workflow, handler, expected exit kind)."""
    if scenario == "chain":
        wf: Workflow = ChainFlow(params["size"], timeout=TIMEOUT, journal=True)
        handler = wf.run()
        assert await handler == params["size"]
        return wf, handler, "complete"
    if scenario == "send_collect":
        wf = SendCollectFlow(params["size"], 2, timeout=TIMEOUT, journal=True)
        handler = wf.run()
        assert await handler == list(range(params["size"]))
        return wf, handler, "complete"
    if scenario == "fan_join":
        wf = FanJoinFlow(params["size"], timeout=TIMEOUT, journal=True)
        handler = wf.run()
        assert await handler == [i for i in range(params["size"]) if i != 3]
        return wf, handler, "complete"
    if scenario == "retry":
        wf = RetryFlow(params["failures"], timeout=TIMEOUT, journal=True)
        handler = wf.run()
        if params["failures"] < 3:
            assert await handler == params["failures"]
            return wf, handler, "complete"
        with pytest.raises(Flaky):
            await handler
        return wf, handler, "fail"
    assert scenario == "hitl"
    ending = params["ending"]
    wf = HitlFlow(timeout=0.2 if ending == "timeout" else TIMEOUT, journal=True)
    handler = wf.run()
    if ending == "timeout":
        with pytest.raises(WorkflowTimeoutError):
            await handler
        return wf, handler, "halt"
    await wait_for_ask(handler)
    if ending == "cancel":
        await handler.cancel_run()
        with pytest.raises(WorkflowCancelledByUser):
            await handler
        return wf, handler, "halt"
    handler.ctx.send_event(Reply(text="yes"))
    assert await handler == "yes"
    return wf, handler, "complete"


async def aiter_of(records: list[JournalRecord]) -> AsyncIterator[JournalRecord]:
    for r in records:
        yield r


async def check_run(scenario: str, params: dict[str, Any]) -> None:
    with capture_live_states() as live:
        wf, handler, exit_kind = await play(scenario, params)
    raw = [r async for r in handler.journal()]
    records = [JournalRecord(r.seq, json.loads(json.dumps(r.data))) for r in raw]
    assert [r.data for r in records] == [r.data for r in raw]
    n = len(records)
    assert [r.seq for r in records] == list(range(n))
    assert records[0].data["type"] == "session_start"

    s0 = ReducerKit(wf).state
    s0_before = encoded(s0)
    final_live = handler._session.state
    assert final_live is live[n - 1]

    full = rebuild_state_from_ticks(s0, records)
    assert encoded(full) == encoded(final_live)
    assert encoded(full) == {**handler.ctx.to_dict(include_state=False), "status": full.status}
    assert full.journal_seq == n
    # Folding again skips records already folded (seq below journal_seq).
    assert encoded(rebuild_state_from_ticks(full, records)) == encoded(full)

    prefix_state = s0
    for k in range(n + 1):
        if k:
            prefix_state = rebuild_state_from_ticks(prefix_state, records[k - 1 : k])
        prefix = rebuild_state_from_ticks(s0, records[:k])
        assert encoded(prefix) == encoded(prefix_state)
        if k:
            assert encoded(prefix) == encoded(live[k - 1]), f"prefix {k} of {n}"
        before = encoded(prefix)
        rest = rebuild_state_from_ticks(prefix, records[k:])
        assert encoded(rest) == encoded(full), f"split at {k} of {n}"
        assert encoded(prefix) == before  # folding never changes its input

        replay = await replay_ticks_stream(s0, aiter_of(records[:k]))
        if k < n:
            assert replay.exit_command is None, f"prefix {k} of {n} ended the run"
    assert encoded(s0) == s0_before

    streamed = await rebuild_state_from_ticks_stream(s0, aiter_of(records))
    assert encoded(streamed) == encoded(full)
    replay = await replay_ticks_stream(s0, aiter_of(records))
    assert encoded(replay.state) == encoded(full)
    assert replay.exit_command is not None
    assert replay.exit_command.kind == exit_kind
    if exit_kind == "complete":
        assert replay.exit_command.result == handler.get_stop_event()
    if exit_kind == "fail":
        assert replay.exit_command.step_name == "flaky"
        assert isinstance(replay.exit_command.exception, Flaky)


scenarios = st.one_of(
    st.tuples(st.just("chain"), st.fixed_dictionaries({"size": st.integers(0, 6)})),
    st.tuples(st.just("send_collect"), st.fixed_dictionaries({"size": st.integers(1, 5)})),
    st.tuples(st.just("fan_join"), st.fixed_dictionaries({"size": st.integers(0, 6)})),
    st.tuples(st.just("retry"), st.fixed_dictionaries({"failures": st.integers(0, 3)})),
    st.tuples(
        st.just("hitl"),
        st.fixed_dictionaries({"ending": st.sampled_from(["answer", "cancel", "timeout"])}),
    ),
)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=scenarios)
def test_every_journal_prefix_replays_to_the_live_state(
    backend: str, case: tuple[str, dict[str, Any]]
) -> None:
    scenario, params = case
    anyio.run(check_run, scenario, params, backend=backend)


# --------------------------------------------------------------------------- sequence rules


def _journal_of_a_chain() -> tuple[Any, list[JournalRecord]]:
    async def go() -> tuple[Any, list[JournalRecord]]:
        wf = ChainFlow(2, timeout=TIMEOUT, journal=True)
        handler = wf.run()
        assert await handler == 2
        return wf, [r async for r in handler.journal()]

    return anyio.run(go)


def test_a_gap_names_the_expected_and_actual_seq() -> None:
    wf, records = _journal_of_a_chain()
    s0 = ReducerKit(wf).state
    with pytest.raises(ValueError) as info:
        rebuild_state_from_ticks(s0, records[:2] + records[3:])
    assert "2" in str(info.value) and "3" in str(info.value)


def test_an_unknown_record_type_is_named() -> None:
    wf, records = _journal_of_a_chain()
    s0 = ReducerKit(wf).state
    bogus = JournalRecord(1, {"type": "teleport", "stamped_at": 1.0})
    with pytest.raises(ValueError, match="teleport"):
        rebuild_state_from_ticks(s0, [records[0], bogus])


def test_records_below_the_state_journal_seq_are_skipped() -> None:
    wf, records = _journal_of_a_chain()
    s0 = ReducerKit(wf).state
    middle = rebuild_state_from_ticks(s0, records[:4])
    assert middle.journal_seq == 4
    assert encoded(rebuild_state_from_ticks(middle, records)) == encoded(
        rebuild_state_from_ticks(s0, records)
    )


def test_folding_the_tail_onto_a_decoded_mid_session_snapshot() -> None:
    wf, records = _journal_of_a_chain()
    s0 = ReducerKit(wf).state
    middle = rebuild_state_from_ticks(s0, records[:4])
    assert middle.status == "running"
    snap = json.loads(json.dumps(encode_snapshot(middle, SER, None)))
    restored = Context.from_dict(wf, snap)._current_run_state()
    expected = encoded(rebuild_state_from_ticks(s0, records))
    assert expected["status"] == "completed"
    assert encoded(rebuild_state_from_ticks(restored, records[4:])) == expected
