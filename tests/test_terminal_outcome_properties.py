"""Every run ends with exactly one terminal outcome, whatever happens and when.

Generated workflows are chains of steps that return, raise, or stall; the caller may
cancel at a random moment and the run may time out.  Whatever the combination, the stream
ends with exactly one terminal event, ``await handler`` agrees with it, nothing is
published after it, and the handler is done (quality.md §2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.errors import WorkflowCancelledByUser, WorkflowTimeoutError
from tickwork.events import (
    WorkflowCancelledEvent,
    WorkflowFailedEvent,
    WorkflowTimedOutEvent,
)
from tickwork.retry_policy import retry_policy, stop_after_attempt, wait_fixed


class Hop(Event):
    index: int


class PlanError(Exception):
    pass


@dataclass(frozen=True)
class Plan:
    """What each hop does: "ok", "raise", "flaky" (fails once, retried) or "stall"."""

    actions: tuple[str, ...]
    cancel_after: float | None
    timeout: float


class Generated(Workflow):
    def __init__(self, plan: Plan, **kwargs: Any) -> None:
        super().__init__(timeout=plan.timeout, **kwargs)
        self.plan = plan
        self.failed_once: set[int] = set()

    @step
    async def begin(self, ev: StartEvent) -> Hop:
        return Hop(index=0)

    @step(retry_policy=retry_policy(wait=wait_fixed(0), stop=stop_after_attempt(2)))
    async def hop(self, ctx: Context, ev: Hop) -> Hop | StopEvent:
        action = self.plan.actions[ev.index]
        if action == "raise":
            raise PlanError(f"hop {ev.index}")
        if action == "flaky" and ev.index not in self.failed_once:
            self.failed_once.add(ev.index)
            raise PlanError(f"flaky hop {ev.index}")
        if action == "stall":
            await anyio.sleep(10)
        ctx.write_event_to_stream(Event(note=f"hop {ev.index}"))
        if ev.index + 1 == len(self.plan.actions):
            return StopEvent(result=ev.index + 1)
        return Hop(index=ev.index + 1)


plans = st.builds(
    Plan,
    actions=st.lists(
        st.sampled_from(["ok", "ok", "ok", "flaky", "raise", "stall"]), min_size=1, max_size=6
    ).map(tuple),
    cancel_after=st.one_of(st.none(), st.floats(min_value=0.0, max_value=0.05)),
    timeout=st.sampled_from([0.05, 0.2, 1.0]),
)

_TERMINAL = (StopEvent,)


async def _run(plan: Plan) -> tuple[list[Any], Any]:
    handler = Generated(plan).run()
    events: list[Any] = []

    async def consume() -> None:
        async for ev in handler.stream_events():
            events.append(ev)

    async with anyio.create_task_group() as group:
        group.start_soon(consume)
        if plan.cancel_after is not None:
            await anyio.sleep(plan.cancel_after)
            await handler.cancel_run()
    try:
        outcome: Any = await handler
    except Exception as error:
        outcome = error
    assert handler.is_done()
    return events, outcome


def _check(plan: Plan, events: list[Any], outcome: Any) -> None:
    terminals = [ev for ev in events if isinstance(ev, _TERMINAL)]
    assert len(terminals) == 1, (plan, events)
    assert events[-1] is terminals[0], "nothing is published after the terminal event"
    last = terminals[0]
    if isinstance(last, WorkflowFailedEvent):
        assert isinstance(outcome, PlanError) and last.exception is outcome
    elif isinstance(last, WorkflowTimedOutEvent):
        assert isinstance(outcome, WorkflowTimeoutError)
    elif isinstance(last, WorkflowCancelledEvent):
        assert isinstance(outcome, WorkflowCancelledByUser)
    else:
        assert type(last) is StopEvent and outcome == len(plan.actions)
        assert all(a in ("ok", "flaky") for a in plan.actions)


@pytest.mark.anyio
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(plan=plans)
async def test_every_generated_run_ends_with_exactly_one_terminal_outcome(plan: Plan) -> None:
    events, outcome = await _run(plan)
    _check(plan, events, outcome)
