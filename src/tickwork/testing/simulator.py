"""A deterministic simulator: a workflow's reducer driven by a virtual clock.

``Simulator`` plays the runner's part without an event loop.  Each step invocation gets
a *scripted* outcome — a value to return, an exception to raise, and how much virtual
time it takes — and the simulator feeds the resulting ticks to the real reducer, fires
timers (retries, waiter timeouts, the run timeout) in virtual time, and can **crash** the
run after any tick: it then rebuilds the state from the journal recorded so far (encoded
and decoded like a real journal) and resumes it, as recovery after a process death does.
A 50-step workflow with a few crash points runs in milliseconds::

    sim = Simulator(MyFlow(timeout=60))
    sim.script("fetch", lambda ev: Fetched(url=ev.url), seconds=0.5)
    sim.script("flaky", fail_times(2, ValueError("boom")))
    outcome = sim.run(topic="x", crash_after=[5, 12, 30])
    assert outcome.result == ...

A step without a script runs its real body when the body needs nothing but its event
(no ``Context`` and no resources) and never awaits anything that would suspend.
"""

from __future__ import annotations

import heapq
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tickwork.retry_policy import call_policy, retry_seed
from tickwork.runtime.config import build_run_config
from tickwork.runtime.control_loop.reduce import initial_state, reduce
from tickwork.runtime.event_stream import materialize
from tickwork.runtime.step_worker import check_return_value
from tickwork.runtime.types.commands import (
    CancelWorker,
    Command,
    CompleteRun,
    FailWorkflow,
    Halt,
    PublishEvent,
    PublishStepState,
    RunWorker,
    ScheduleIdleCheck,
    ScheduleTimeout,
    ScheduleWaiterTimeout,
    ScheduleWakeup,
    terminal_event,
)
from tickwork.runtime.types.results import Completed, Failed, StepOutcome
from tickwork.runtime.types.state import Invocation, RunState
from tickwork.runtime.types.ticks import (
    AddEvent,
    IdleCheck,
    SessionStart,
    StepResult,
    Tick,
    Timeout,
    WaiterTimeout,
    Wakeup,
)
from tickwork.serde.journal_codec import decode_tick, encode_tick
from tickwork.serde.serializers import BaseSerializer, JsonSerializer

__all__ = ["Scripted", "SimulationOutcome", "Simulator", "fail_times"]

Script = Callable[[Any], Any]


@dataclass(frozen=True)
class Scripted:
    """What one invocation does: return ``value`` or raise ``error`` after ``seconds``."""

    value: Any = None
    error: BaseException | None = None
    seconds: float = 0.0


def fail_times(times: int, error: BaseException, then: Script | None = None) -> Script:
    """A script that raises ``error`` on the first ``times`` calls, then runs ``then``."""
    calls = {"n": 0}

    def script(event: Any) -> Any:
        calls["n"] += 1
        if calls["n"] <= times:
            return Scripted(error=error)
        return then(event) if then is not None else None

    return script


@dataclass
class SimulationOutcome:
    """How a simulated run ended, and what happened on the way."""

    exit: Command | None
    published: list[Any]
    executions: dict[str, int]
    ticks: int
    crashes: int
    state: RunState
    elapsed: float

    @property
    def result(self) -> Any:
        """The run's result (like ``await handler``), raising the run's exception."""
        if isinstance(self.exit, CompleteRun):
            stop = self.exit.stop_event
            return stop.result if type(stop).__name__ == "StopEvent" else stop
        if isinstance(self.exit, FailWorkflow):
            raise self.exit.exception
        if isinstance(self.exit, Halt):
            raise self.exit.exception
        raise RuntimeError("the simulated run did not end (it is idle or waiting)")


@dataclass(order=True)
class _Timer:
    due: float
    seq: int
    make: Callable[[float], Tick] = field(compare=False)
    external: bool = field(default=False, compare=False)


class Simulator:
    """Runs a workflow's reducer with scripted step outcomes and a virtual clock."""

    def __init__(
        self,
        workflow: Any,
        *,
        run_id: str = "sim-run",
        start_time: float = 1_000.0,
        serializer: BaseSerializer | None = None,
    ) -> None:
        self.workflow = workflow
        self.run_id = run_id
        self.start_time = start_time
        self.serializer = serializer or JsonSerializer()
        self._steps = workflow._get_steps()
        self.config = build_run_config(
            workflow.workflow_name, self._steps, workflow._timeout, workflow.start_event_class
        )
        self._scripts: dict[str, tuple[Script, float]] = {}

    def script(self, step: str, script: Script | Any, seconds: float = 0.0) -> Simulator:
        """Decide the outcome of every invocation of ``step``.

        ``script(event)`` returns the step's value, a ``Scripted``, or raises;
        a non-callable is returned as the value every time.  ``seconds`` is the virtual
        time each invocation takes (a ``Scripted`` may override it).
        """
        if step not in self.config.steps:
            raise ValueError(f"the workflow has no step named {step!r}")
        fn: Script = script if callable(script) else _constant(script)
        self._scripts[step] = (fn, seconds)
        return self

    # -- running ---------------------------------------------------------------------------

    def run(
        self,
        start_event: Any = None,
        *,
        crash_after: Iterable[int] = (),
        send: Iterable[tuple[float, Any]] = (),
        until: float | None = None,
        **kwargs: Any,
    ) -> SimulationOutcome:
        """Run to the end (or to virtual time ``until``) and return the outcome.

        ``crash_after`` lists tick counts after which the process "dies" (at the end of
        the drain that contains that tick, since a drain is committed at once):
        in-flight invocations are lost and the run is rebuilt from its journal and
        resumed.
        ``send`` schedules ``(virtual seconds after start, event)`` sends from outside.
        """
        return _Simulation(self, crash_after, send, until).run(
            start_event or self.workflow.start_event_class(**kwargs)
        )

    def outcome_of(self, invocation: Invocation) -> tuple[float, StepOutcome]:
        """Execute one invocation: its duration and outcome, with the retry decision."""
        seconds = 0.0
        try:
            script = self._scripts.get(invocation.step)
            if script is not None:
                value, seconds = self._scripted(script, invocation)
            else:
                value = self._real_body(invocation)
            check_return_value(self.config.steps[invocation.step], value)
        except Exception as error:
            return seconds, self._failure(invocation, error, seconds)
        return seconds, Completed(value)

    def _scripted(self, script: tuple[Script, float], invocation: Invocation) -> tuple[Any, float]:
        fn, seconds = script
        produced = fn(invocation.item.event)
        if isinstance(produced, Scripted):
            if produced.error is not None:
                raise produced.error
            return produced.value, produced.seconds or seconds
        return produced, seconds

    def _real_body(self, invocation: Invocation) -> Any:
        fn = self._steps[invocation.step]
        config = fn._step_config
        if config.context_parameter or config.resources or config.collect_params:
            raise TypeError(
                f"step {invocation.step!r} needs a Context, resources or a join batch; "
                "script it with Simulator.script()"
            )
        if config.collection_param is not None:
            arguments = {config.collection_param[0]: list(invocation.item.event.events)}
        else:
            arguments = {config.event_name: invocation.item.event}
        value = fn(**arguments)
        if inspect.isawaitable(value):
            coroutine = value.__await__()
            try:
                coroutine.send(None)
            except StopIteration as done:
                return done.value
            raise TypeError(
                f"step {invocation.step!r} awaits something real; script it with Simulator.script()"
            )
        return value

    def _failure(self, invocation: Invocation, error: Exception, seconds: float) -> Failed:
        failed_at = invocation.dispatched_at + seconds
        policy = self._steps[invocation.step]._step_config.retry_policy
        delay: float | None = None
        if policy is not None:
            attempts = invocation.item.attempts + 1
            first = invocation.item.first_attempt_at or invocation.dispatched_at
            try:
                delay = call_policy(
                    policy,
                    failed_at - first,
                    attempts,
                    error,
                    retry_seed(self.run_id, invocation.step, attempts),
                )
            except Exception as policy_error:
                policy_error.__cause__ = error
                error, delay = policy_error, None
        return Failed(error, delay, failed_at)


def _send_at(event: Any) -> Callable[[float], Tick]:
    def make(now: float) -> Tick:
        return AddEvent(now, event)

    return make


def _constant(value: Any) -> Script:
    def script(_event: Any) -> Any:
        return value

    return script


class _Simulation:
    """One simulated run: state, pending ticks, timers, in-flight completions."""

    def __init__(
        self,
        sim: Simulator,
        crash_after: Iterable[int],
        send: Iterable[tuple[float, Any]],
        until: float | None,
    ) -> None:
        self.sim = sim
        self.now = sim.start_time
        self.until = None if until is None else sim.start_time + until
        self.state = initial_state(sim.config)
        self.journal: list[dict[str, Any]] = []
        self.pending: list[Tick] = []
        self.timers: list[_Timer] = []
        self.timer_seq = 0
        self.completions: list[tuple[float, int, Invocation, StepOutcome]] = []
        self.crash_points = sorted(set(crash_after))
        self.crashes = 0
        self.published: list[Any] = []
        self.executions: dict[str, int] = {}
        self.exit: Command | None = None
        self.idle_requested = False
        for delay, event in send:
            self._timer(sim.start_time + delay, _send_at(event), external=True)

    def _timer(self, due: float, make: Callable[[float], Tick], external: bool = False) -> None:
        self.timer_seq += 1
        heapq.heappush(self.timers, _Timer(due, self.timer_seq, make, external))

    def run(self, start_event: Any) -> SimulationOutcome:
        self.pending = [SessionStart(self.now, self.sim.run_id), AddEvent(self.now, start_event)]
        while self.exit is None:
            if self.pending:
                self._reduce(self.pending.pop(0))
                continue
            if self.idle_requested:
                self.idle_requested = False
                self.pending.append(IdleCheck(self.now))
                continue
            if not self._advance():
                break
        return SimulationOutcome(
            exit=self.exit,
            published=self.published,
            executions=self.executions,
            ticks=len(self.journal),
            crashes=self.crashes,
            state=self.state,
            elapsed=self.now - self.sim.start_time,
        )

    def _advance(self) -> bool:
        """Move the clock to the next completion or timer; ``False`` when nothing is left."""
        next_completion = self.completions[0][0] if self.completions else None
        next_timer = self.timers[0].due if self.timers else None
        candidates = [t for t in (next_completion, next_timer) if t is not None]
        if not candidates:
            return False
        due = min(candidates)
        if self.until is not None and due > self.until:
            self.now = self.until
            return False
        self.now = max(self.now, due)
        if next_completion is not None and next_completion == due:
            _, _, invocation, outcome = heapq.heappop(self.completions)
            self.pending.append(
                StepResult(self.now, invocation.step, invocation.invocation_id, outcome)
            )
        else:
            timer = heapq.heappop(self.timers)
            self.pending.append(timer.make(self.now))
        return True

    def _reduce(self, tick: Tick) -> None:
        self.state, commands = reduce(self.state, tick)
        self.journal.append(encode_tick(tick, self.sim.serializer))
        for command in commands:
            self._execute(command)
        # A real process dies between group commits: the ticks of one drain are written
        # together, so a crash point takes effect once the current drain is over.
        if (
            self.crash_points
            and not self.pending
            and len(self.journal) >= self.crash_points[0]
            and self.exit is None
        ):
            while self.crash_points and self.crash_points[0] <= len(self.journal):
                self.crash_points.pop(0)
            self._crash_and_resume()

    def _execute(self, command: Command) -> None:
        if isinstance(command, RunWorker):
            self.published.append(materialize(command))
            invocation = command.invocation
            self.executions[invocation.step] = self.executions.get(invocation.step, 0) + 1
            seconds, outcome = self.sim.outcome_of(invocation)
            heapq.heappush(
                self.completions,
                (self.now + seconds, self.timer_seq, invocation, outcome),
            )
            self.timer_seq += 1
        elif isinstance(command, CancelWorker):
            self.completions = [
                c for c in self.completions if c[2].invocation_id != command.invocation_id
            ]
            heapq.heapify(self.completions)
        elif isinstance(command, (PublishEvent, PublishStepState)):
            item = command.event if isinstance(command, PublishEvent) else command
            self.published.append(materialize(item))
        elif isinstance(command, ScheduleWakeup):
            step = command.step
            self._timer(command.due_at, lambda now: Wakeup(now, step))
        elif isinstance(command, ScheduleTimeout):
            self._timer(command.due_at, Timeout)
        elif isinstance(command, ScheduleWaiterTimeout):
            step, waiter_id = command.step, command.waiter_id
            self._timer(command.due_at, lambda now: WaiterTimeout(now, step, waiter_id))
        elif isinstance(command, ScheduleIdleCheck):
            self.idle_requested = True
        elif isinstance(command, (CompleteRun, FailWorkflow, Halt)):
            self.published.append(terminal_event(command))
            self.exit = command

    def _crash_and_resume(self) -> None:
        """The process dies: rebuild from the journal, lose in-flight work, resume."""
        self.crashes += 1
        state = initial_state(self.sim.config)
        for data in self.journal:
            state, _ = reduce(state, decode_tick(data, self.sim.serializer))
        self.state = state
        self.completions = []
        self.timers = [t for t in self.timers if t.external]
        heapq.heapify(self.timers)
        self.pending = [SessionStart(self.now, self.sim.run_id)]
