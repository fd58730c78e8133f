"""What the ``tickwork`` command's progress lines need and the event stream does not carry.

A ``StepStateChanged`` says that an invocation ended without a result, not whether it
failed (and with what, and whether it will be retried) or waits for an event; it names a
join's input as the internal ``CollectionReleaseEvent``; and a snapshot read when the
event is read reflects the run as it is *then*, ahead of the event.  ``StepWatch``
sees the run's processed inputs as they happen and keeps, per worker slot, what the
progress printer shows when it reads the slot's next NOT_RUNNING or RUNNING event.

It is attached to the workflow the command runs (through the hook ``verbose`` runs use),
so only runs the command watches pay for it: a dictionary look-up per published item and
per processed input, plus fan-out counts read from the run state (O(open streams)) after
a step's result, within a time budget.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tickwork._cli.console import one_line
from tickwork.collect import Take
from tickwork.events import CollectionReleaseEvent
from tickwork.representation.build import discover_step_functions
from tickwork.runtime.stream_plan import StreamBinding, compute_stream_bindings
from tickwork.runtime.types.commands import RunWorker
from tickwork.runtime.types.results import Failed, Suspended
from tickwork.runtime.types.state import RunState
from tickwork.runtime.types.step_id import WORKER_NAMES
from tickwork.runtime.types.ticks import StepResult
from tickwork.workflow import Workflow

__all__ = ["Ending", "StepWatch", "attach_watch"]

Slot = tuple[str, str]
"""``(step, worker)`` as a ``StepStateChanged`` names them."""

ProgressLine = tuple[str, str, str]
"""``(colour, tag, text)``."""

_SAMPLING_SHARE = 0.2  # at most this share of the wall time goes to fan-out counts...
_SAMPLING_ALLOWANCE = 0.005  # ...plus this many seconds, so that short runs are counted


@dataclass
class Ending:
    """How one invocation ended: ``text`` when it ended without a result (``failed:
    ...``, ``waiting for ...``), and the fan-out progress lines its result caused."""

    text: str | None = None
    lines: list[ProgressLine] = field(default_factory=list)


@dataclass
class _StreamSeen:
    """What the watch knows of one open fan-out stream and one of its joins."""

    label: str
    size: int = 0
    shown: tuple[int, int] | None = None


def _join_label(binding: StreamBinding) -> str:
    names = " | ".join(t.__name__ for t in binding.element_types)
    return f"list[{names}]"


@dataclass
class StepWatch:
    """Per-slot endings and join batch sizes of one workflow's runs (see the module)."""

    bindings: dict[str, StreamBinding]
    fan_out_steps: frozenset[str]
    join_labels: dict[str, str]
    state_of: Callable[[], RunState] | None = None
    _slots: dict[str, Slot] = field(default_factory=dict)
    _endings: dict[Slot, deque[Ending]] = field(default_factory=dict)
    _batches: dict[Slot, deque[str]] = field(default_factory=dict)
    _streams: dict[tuple[str, str], _StreamSeen] = field(default_factory=dict)
    _started: float = field(default_factory=time.monotonic)
    _counting_time: float = 0.0

    @classmethod
    def of(cls, workflow: Workflow) -> StepWatch:
        """A watch for ``workflow``'s fan-outs and joins."""
        steps = discover_step_functions(type(workflow))
        plan = compute_stream_bindings(steps, workflow.start_event_class)
        bindings = {b.binding_id: b for group in plan.bindings_by_producer.values() for b in group}
        labels: dict[str, str] = {}
        for binding in bindings.values():
            labels.setdefault(binding.target, _join_label(binding))
        return cls(bindings, frozenset(plan.bindings_by_producer), labels)

    # -- the hook: called by the run's session -------------------------------------------

    def published(self, item: Any) -> None:
        """A published item; a dispatched invocation tells which slot it runs in."""
        if type(item) is RunWorker:
            invocation = item.invocation
            slot = (invocation.step, WORKER_NAMES[invocation.worker_id])
            self._slots[invocation.invocation_id] = slot
            event = invocation.item.event
            if isinstance(event, CollectionReleaseEvent):
                binding = self.bindings.get(event.binding_id)
                label = _join_label(binding) if binding else "list"
                self._batches.setdefault(slot, deque()).append(f"{label} of {len(event.events)}")

    def processed(self, tick: Any) -> None:
        """A processed input; a step result is remembered for its slot's NOT_RUNNING."""
        if type(tick) is not StepResult:
            return
        slot = self._slots.pop(tick.invocation_id, None)
        if slot is None:
            return
        outcome = tick.outcome
        ending = Ending()
        if isinstance(outcome, Failed):
            retry = (
                "no retry" if outcome.retry_delay is None else f"retry in {outcome.retry_delay:g}s"
            )
            ending.text = f"failed: {one_line(outcome.exception)} ({retry})"
        elif isinstance(outcome, Suspended):
            ending.text = f"waiting for {outcome.waiter.event_type.__name__}"
        else:
            ending.lines = self._count(tick.step)
        self._endings.setdefault(slot, deque()).append(ending)

    # -- read by the progress printer ------------------------------------------------------

    def ending(self, slot: Slot) -> Ending | None:
        """How the slot's oldest unreported invocation ended (``None``: no result came)."""
        endings = self._endings.get(slot)
        return endings.popleft() if endings else None

    def batch(self, slot: Slot) -> str | None:
        """``list[Loud] of 5``: the batch the slot's oldest unreported join runs with."""
        batches = self._batches.get(slot)
        return batches.popleft() if batches else None

    # -- fan-out counts ------------------------------------------------------------------

    def _count(self, step: str) -> list[ProgressLine]:
        """The fan-out lines that changed with this step result, within the time budget.

        Counts change when a result is processed, so they are read right then: the
        line printed after a ``done`` line counts what is done.  A fan-out producer's
        result is always counted, so every stream is seen with its full size.
        """
        if self.state_of is None or not self.bindings:
            return []
        now = time.monotonic()
        budget = _SAMPLING_SHARE * (now - self._started) + _SAMPLING_ALLOWANCE
        if step not in self.fan_out_steps and self._counting_time > budget:
            return []
        lines = self._stream_lines(self.state_of())
        self._counting_time += time.monotonic() - now
        return lines

    def _stream_lines(self, state: RunState) -> list[ProgressLine]:
        members: dict[tuple[str, str], int] = {
            (release.stream_id, release.binding_id): len(release.buffer)
            for release in state.releases.values()
        }
        lines: list[ProgressLine] = []
        open_keys: set[tuple[str, str]] = set()
        for stream_id, stream in state.streams.items():
            for binding_id in stream.accepting_binding_ids:
                if binding_id not in self.bindings:
                    continue
                key = (stream_id, binding_id)
                open_keys.add(key)
                seen = self._seen(key)
                seen.size = max(seen.size, members.get(key, 0) + stream.open_work_items)
                progress = (seen.size - stream.open_work_items, seen.size)
                if progress != seen.shown:
                    seen.shown = progress
                    lines.append(("blue", seen.label, f"{progress[0]}/{progress[1]}"))
        for key in [k for k in self._streams if k not in open_keys]:
            seen = self._streams.pop(key)
            cardinality = self.bindings[key[1]].policy.cardinality
            if isinstance(cardinality, Take) and cardinality.cancel_rest:
                lines.append(("blue", seen.label, f"closed (took {cardinality.n} of {seen.size})"))
            elif seen.shown != (seen.size, seen.size):
                lines.append(("blue", seen.label, f"{seen.size}/{seen.size}"))
        return lines

    def _seen(self, key: tuple[str, str]) -> _StreamSeen:
        seen = self._streams.get(key)
        if seen is None:
            binding = self.bindings[key[1]]
            label = f"fan-out {binding.producer} -> {binding.target}"
            concurrent = sum(1 for other in self._streams if other[1] == key[1])
            seen = _StreamSeen(label=f"{label} #{concurrent + 1}" if concurrent else label)
            self._streams[key] = seen
        return seen


class _Both:
    """The workflow's own verbose printer and the watch, both fed."""

    def __init__(self, first: Any, second: StepWatch) -> None:
        self._first = first
        self._second = second

    def published(self, item: Any) -> None:
        self._first.published(item)
        self._second.published(item)

    def processed(self, tick: Any) -> None:
        self._first.processed(tick)
        self._second.processed(tick)


def attach_watch(workflow: Workflow) -> StepWatch:
    """Feed a new ``StepWatch`` with every run ``workflow`` starts or resumes.

    The command owns the workflow object, so it plugs the watch into the per-run hook
    that ``Workflow(verbose=True)`` uses (a ``published``/``processed`` pair), keeping
    the workflow's own verbose printer when it has one.
    """
    watch = StepWatch.of(workflow)
    own: Callable[[], Any] | None = workflow._verbose_printer if workflow._verbose else None

    def printer() -> Any:
        return watch if own is None else _Both(own(), watch)

    workflow.__dict__["_verbose_printer"] = printer  # an instance attribute wins
    workflow._verbose = True
    return watch
