"""A kit for unit-testing a workflow's reducer without an event loop.

``ReducerKit`` builds the initial run state of a workflow, makes ticks with a virtual
clock, feeds them to the pure reducer and keeps what came out, so a test reads like the
run it describes::

    kit = ReducerKit(MyFlow())
    kit.start(topic="x")
    (inv,) = kit.running("first")
    kit.complete(inv, Middle())
    assert kit.published_types()[-1] is StepStateChanged

Nothing runs the step bodies: the test decides each invocation's outcome.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tickwork.events import Event, StartEvent
from tickwork.runtime.config import build_run_config
from tickwork.runtime.control_loop.reduce import initial_state, reduce
from tickwork.runtime.event_stream import materialize
from tickwork.runtime.types.commands import (
    Command,
    CompleteRun,
    FailWorkflow,
    Halt,
    PublishEvent,
    PublishStepState,
    RunWorker,
    terminal_event,
)
from tickwork.runtime.types.results import Completed, Failed, Suspended, WaiterRequest
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

__all__ = ["ReducerKit"]


class ReducerKit:
    """Feeds ticks to the reducer for one workflow, with a virtual clock."""

    def __init__(self, workflow: Any, *, run_id: str = "test-run", now: float = 1000.0) -> None:
        self.workflow = workflow
        self.run_id = run_id
        self.now = now
        steps = workflow._get_steps()
        self.config = build_run_config(
            workflow.workflow_name, steps, workflow._timeout, workflow.start_event_class
        )
        self.state: RunState = initial_state(self.config)
        self.ticks: list[Tick] = []
        self.commands: list[Command] = []
        self.last_commands: list[Command] = []

    # -- feeding -------------------------------------------------------------------------

    def feed(self, tick: Tick) -> list[Command]:
        """Reduce one tick; returns (and records) its commands."""
        self.state, commands = reduce(self.state, tick)
        self.ticks.append(tick)
        self.commands.extend(commands)
        self.last_commands = commands
        return commands

    def advance(self, seconds: float) -> None:
        """Move the virtual clock forward."""
        self.now += seconds

    def start(self, start_event: StartEvent | None = None, **kwargs: Any) -> list[Command]:
        """A session start followed by the start event (built from ``kwargs``)."""
        event = start_event or self.workflow.start_event_class(**kwargs)
        out = self.feed(SessionStart(self.now, self.run_id))
        return out + self.feed(AddEvent(self.now, event))

    def send(self, event: Event, step: str | None = None) -> list[Command]:
        """An event sent from the handler side."""
        return self.feed(AddEvent(self.now, event, step))

    def send_from(self, invocation: Invocation, index: int, event: Event) -> list[Command]:
        """A keyed send made by ``invocation`` (its ``index``-th)."""
        return self.feed(
            AddEvent(
                self.now,
                event,
                None,
                emission_key=(invocation.invocation_id, index),
                source_step=invocation.step,
            )
        )

    def complete(self, invocation: Invocation, value: Any = None, sends: int = 0) -> list[Command]:
        """The invocation returned ``value``."""
        return self.feed(
            StepResult(self.now, invocation.step, invocation.invocation_id, Completed(value, sends))
        )

    def fail(
        self, invocation: Invocation, error: BaseException, retry_delay: float | None = None
    ) -> list[Command]:
        """The invocation raised ``error``; ``retry_delay`` is the policy's decision."""
        outcome = Failed(error, retry_delay, self.now)
        return self.feed(StepResult(self.now, invocation.step, invocation.invocation_id, outcome))

    def suspend(
        self,
        invocation: Invocation,
        event_type: type,
        waiter_id: str = "w",
        *,
        waiter_event: Any = None,
        requirements: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> list[Command]:
        """The invocation awaited ``event_type`` and must be suspended."""
        request = WaiterRequest(waiter_id, event_type, requirements, waiter_event, timeout)
        return self.feed(
            StepResult(self.now, invocation.step, invocation.invocation_id, Suspended(request))
        )

    def cancel(self) -> list[Command]:
        """A graceful cancel request."""
        return self.feed(CancelRun(self.now))

    def timeout(self) -> list[Command]:
        """The run timer fires now."""
        return self.feed(Timeout(self.now))

    def wakeup(self, step: str) -> list[Command]:
        """A delayed retry of ``step`` is due now."""
        return self.feed(Wakeup(self.now, step))

    def waiter_timeout(self, step: str, waiter_id: str) -> list[Command]:
        """A waiter's timer fires now."""
        return self.feed(WaiterTimeout(self.now, step, waiter_id))

    def idle_check(self) -> list[Command]:
        """The runner's idle check."""
        return self.feed(IdleCheck(self.now))

    # -- reading -------------------------------------------------------------------------

    def running(self, step: str | None = None) -> list[Invocation]:
        """In-flight invocations (of ``step``), oldest first."""
        names = [step] if step is not None else list(self.state.steps)
        out = [inv for name in names for inv in self.state.steps[name].in_progress.values()]
        return sorted(out, key=lambda inv: int(inv.invocation_id.split("-")[1]))

    def queued(self, step: str) -> list[Any]:
        """The queued work items of ``step``, in order."""
        return list(self.state.steps[step].queue)

    @staticmethod
    def started(commands: Iterable[Command]) -> list[Invocation]:
        """The invocations that ``commands`` start."""
        return [c.invocation for c in commands if isinstance(c, RunWorker)]

    def published(self, commands: Iterable[Command] | None = None) -> list[Event]:
        """Every event published so far (or by ``commands``), internal ones included."""
        source = self.commands if commands is None else commands
        out: list[Event] = []
        for command in source:
            if isinstance(command, PublishEvent):
                out.append(command.event)
            elif isinstance(command, (PublishStepState, RunWorker)):
                out.append(materialize(command))
            elif isinstance(command, (CompleteRun, FailWorkflow, Halt)):
                out.append(terminal_event(command))
        return out

    def published_types(self) -> list[type]:
        """The types of ``published``."""
        return [type(ev) for ev in self.published()]

    def exit(self) -> Command | None:
        """The terminal command (complete, fail or halt), if the run has ended."""
        for command in self.commands:
            if isinstance(command, (CompleteRun, FailWorkflow, Halt)):
                return command
        return None
