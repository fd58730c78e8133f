"""Live progress of a run for the ``tickwork`` command: one line per step change.

:class:`ProgressReporter` turns the events a run publishes (``stream_events(
expose_internal=True)``) into lines: steps queued, running and done, events the steps
write to the stream, unhandled events, and the ``k/n`` progress of each fan-out stream
that a ``list[E]`` step joins.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from tickwork._cli.console import Console
from tickwork.collect import Take
from tickwork.events import (
    Event,
    InternalDispatchEvent,
    StepState,
    StepStateChanged,
    StopEvent,
    UnhandledEvent,
)
from tickwork.handler import WorkflowHandler
from tickwork.representation.build import discover_step_functions
from tickwork.runtime.stream_plan import StreamBinding, compute_stream_bindings
from tickwork.runtime.verbose import summarize
from tickwork.workflow import Workflow

__all__ = ["ProgressReporter", "class_name"]

_SAMPLING_SHARE = 0.2  # at most this share of the wall time goes to progress snapshots...
_SAMPLING_ALLOWANCE = 0.005  # ...plus this many seconds, so that short runs are sampled
_CLASS_REPR = re.compile(r"<class '(?:[\w.]*\.)?(\w+)'>")


@dataclass
class _StreamSeen:
    """What the reporter knows of one open fan-out stream and one of its joins."""

    label: str
    size: int = 0
    shown: tuple[int, int] | None = None


@dataclass
class ProgressReporter:
    """Turns the run's published events into progress lines.

    Fan-out progress comes from the run's snapshot (api.md §10.3): for every open stream,
    ``open_work_items`` and the members buffered for each ``list[E]`` binding.  A
    stream's size is the largest ``members + open`` seen (a dead branch lowers the sum,
    a nested step keeps it), and ``done = size - open``.  A snapshot costs O(state), so
    sampling is skipped once it has used a fifth of the run's wall time: small runs are
    sampled after every invocation, a 10,000-item fan-out is not slowed down much.
    """

    workflow: Workflow
    handler: WorkflowHandler
    console: Console
    streams: dict[tuple[str, str], _StreamSeen] = field(default_factory=dict)
    fan_out_steps: frozenset[str] = frozenset()
    bare_outputs: dict[str, frozenset[str]] = field(default_factory=dict)
    bindings: dict[str, StreamBinding] = field(default_factory=dict)
    _started: float = field(default_factory=time.monotonic)
    _sampling_time: float = 0.0
    _sampling: bool = True

    def __post_init__(self) -> None:
        steps = discover_step_functions(type(self.workflow))
        plan = compute_stream_bindings(steps, self.workflow.start_event_class)
        self.bindings = {
            b.binding_id: b for group in plan.bindings_by_producer.values() for b in group
        }
        self.fan_out_steps = frozenset(plan.bindings_by_producer)
        self.bare_outputs = {name: _bare_return_names(steps[name]) for name in self.fan_out_steps}
        self._sampling = bool(self.bindings) and not self.console.quiet

    def on_event(self, event: Event) -> None:
        """Report one published event."""
        if isinstance(event, StepStateChanged):
            self._step_line(event)
            self._maybe_sample(event)
        elif isinstance(event, UnhandledEvent):
            self.console.progress("unhandled", f"{event.event_type} reached no step")
        elif not isinstance(event, (InternalDispatchEvent, StopEvent)):
            self.console.progress("event", summarize(event))

    def _step_line(self, event: StepStateChanged) -> None:
        if event.step_state is StepState.PREPARING:
            self.console.progress(event.name, f"queued ({event.input_event_name})")
        elif event.step_state is StepState.RUNNING:
            self.console.progress(
                f"{event.name}:{event.worker_id}", f"running ({event.input_event_name})"
            )
        elif event.output_event_name is None:
            self.console.progress(f"{event.name}:{event.worker_id}", "failed or cancelled", "red")
        else:
            output = class_name(event.output_event_name)
            if output == "NoneType":
                done = "done (no event)"
            elif event.name in self.fan_out_steps and output not in self.bare_outputs[event.name]:
                done = f"done -> list[{output}]"
            else:
                done = f"done -> {output}"
            self.console.progress(f"{event.name}:{event.worker_id}", done, "green")

    def _maybe_sample(self, event: StepStateChanged) -> None:
        """Sample the snapshot after an invocation ended, within the time budget.

        Counts only change when an invocation's result is processed, so only NOT_RUNNING
        events (and a join's release) are worth a sample.  A fan-out producer finishing is
        always sampled, so every stream is seen with its full size.
        """
        if not self._sampling:
            return
        finished = event.step_state is StepState.NOT_RUNNING
        opened = finished and event.name in self.fan_out_steps
        released = event.input_event_name == "CollectionReleaseEvent"
        now = time.monotonic()
        budget = _SAMPLING_SHARE * (now - self._started) + _SAMPLING_ALLOWANCE
        if not (opened or ((finished or released) and self._sampling_time <= budget)):
            return
        try:
            snapshot = self.handler.ctx.to_dict(include_state=False)
        except Exception:  # a snapshot that cannot be encoded: no fan-out progress
            self._sampling = False
            return
        self._sampling_time += time.monotonic() - now
        for kind, label, text in self._stream_lines(snapshot):
            self.console.progress(label, text, kind)

    def _stream_lines(self, snapshot: dict[str, Any]) -> list[tuple[str, str, str]]:
        members: dict[tuple[str, str], int] = {}
        for release in (snapshot.get("collection_release_states") or {}).values():
            key = (str(release.get("stream_id")), str(release.get("binding_id")))
            members[key] = len(release.get("buffer") or ())
        lines: list[tuple[str, str, str]] = []
        open_keys: set[tuple[str, str]] = set()
        for stream_id, stream in (snapshot.get("streams") or {}).items():
            for binding_id in stream.get("accepting_binding_ids") or ():
                if binding_id not in self.bindings:
                    continue
                key = (str(stream_id), str(binding_id))
                open_keys.add(key)
                seen = self._seen(key)
                open_items = int(stream.get("open_work_items", 0))
                seen.size = max(seen.size, members.get(key, 0) + open_items)
                progress = (seen.size - open_items, seen.size)
                if progress != seen.shown:
                    seen.shown = progress
                    lines.append(("blue", seen.label, f"{progress[0]}/{progress[1]}"))
        for key in [k for k in self.streams if k not in open_keys]:
            seen = self.streams.pop(key)
            binding = self.bindings[key[1]]
            cardinality = binding.policy.cardinality
            if isinstance(cardinality, Take) and cardinality.cancel_rest:
                lines.append(("blue", seen.label, f"closed (took {cardinality.n} of {seen.size})"))
            elif seen.shown != (seen.size, seen.size):
                lines.append(("blue", seen.label, f"{seen.size}/{seen.size}"))
        return lines

    def _seen(self, key: tuple[str, str]) -> _StreamSeen:
        seen = self.streams.get(key)
        if seen is None:
            binding = self.bindings[key[1]]
            label = f"fan-out {binding.producer} -> {binding.target}"
            concurrent = sum(1 for other in self.streams if other[1] == key[1])
            seen = _StreamSeen(label=f"{label} #{concurrent + 1}" if concurrent else label)
            self.streams[key] = seen
        return seen


def _bare_return_names(step_function: Any) -> frozenset[str]:
    """The class names a fan-out step may return without a list (``-> list[A] | B``: B)."""
    return frozenset(t.__name__ for t in step_function._step_config.bare_return_types)


def class_name(text: str) -> str:
    """``"<class 'pkg.mod.Word'>"`` → ``"Word"``; other text is returned as is."""
    found = _CLASS_REPR.fullmatch(text)
    return found.group(1) if found else text
