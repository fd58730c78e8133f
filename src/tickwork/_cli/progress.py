"""Live progress of a run for the ``tickwork`` command: one line per step change.

``ProgressReporter`` turns the events a run publishes (``stream_events(
expose_internal=True)``) into lines: steps queued, running, done, failed (with the
exception and the retry decision), waiting or cancelled; a join's batch as the
``list[E]`` the user wrote; events the steps write to the stream; unhandled events; and
the ``k/n`` progress of each fan-out stream that a ``list[E]`` step joins.  What the
events do not carry comes from the run's ``StepWatch``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tickwork._cli.console import Console
from tickwork._cli.watch import StepWatch
from tickwork.events import (
    Event,
    InternalDispatchEvent,
    StepState,
    StepStateChanged,
    StopEvent,
    UnhandledEvent,
    WorkflowCancelledEvent,
    WorkflowFailedEvent,
    WorkflowTimedOutEvent,
)
from tickwork.representation.build import discover_step_functions
from tickwork.runtime.verbose import summarize

__all__ = ["ProgressReporter", "class_name"]

_CLASS_REPR = re.compile(r"<class '(?:[\w.]*\.)?(\w+)'>")
_RELEASE = "CollectionReleaseEvent"


@dataclass
class ProgressReporter:
    """Turns the run's published events into progress lines (see the module)."""

    watch: StepWatch
    console: Console
    bare_outputs: dict[str, frozenset[str]] = field(default_factory=dict)
    running: dict[tuple[str, str], None] = field(default_factory=dict)

    @classmethod
    def of(cls, workflow: object, watch: StepWatch, console: Console) -> ProgressReporter:
        """A reporter for ``workflow``'s runs."""
        steps = discover_step_functions(type(workflow))
        bare = {name: _bare_return_names(steps[name]) for name in watch.fan_out_steps}
        return cls(watch, console, bare)

    def on_event(self, event: Event) -> None:
        """Report one published event."""
        if isinstance(event, StepStateChanged):
            self._step_line(event)
        elif isinstance(event, UnhandledEvent):
            self.console.progress("unhandled", f"{event.event_type} reached no step")
        elif isinstance(event, StopEvent):
            if isinstance(
                event, (WorkflowCancelledEvent, WorkflowTimedOutEvent, WorkflowFailedEvent)
            ):
                self._cancel_running()
        elif not isinstance(event, InternalDispatchEvent):
            self.console.progress("event", summarize(event))

    def _step_line(self, event: StepStateChanged) -> None:
        slot = (event.name, event.worker_id)
        tag = f"{event.name}:{event.worker_id}"
        if event.step_state is StepState.PREPARING:
            given = event.input_event_name
            if given == _RELEASE:
                given = self.watch.join_labels.get(event.name, given)
            self.console.progress(event.name, f"queued ({given})")
        elif event.step_state is StepState.RUNNING:
            given = event.input_event_name
            if given == _RELEASE:
                given = self.watch.batch(slot) or self.watch.join_labels.get(event.name, given)
            self.running[slot] = None
            self.console.progress(tag, f"running ({given})")
        else:
            self.running.pop(slot, None)
            ending = self.watch.ending(slot)
            if event.output_event_name is None:
                text = ending.text if ending and ending.text else "ended without a result"
                colour = "red" if text.startswith("failed") else "magenta"
                self.console.progress(tag, text, colour)
            else:
                self.console.progress(tag, self._done_text(event), "green")
            for colour, label, line in ending.lines if ending else ():
                self.console.progress(label, line, colour)

    def _done_text(self, event: StepStateChanged) -> str:
        output = class_name(event.output_event_name or "")
        if output == "NoneType":
            return "done (no event)"
        if event.name in self.bare_outputs and output not in self.bare_outputs[event.name]:
            return f"done -> list[{output}]"
        return f"done -> {output}"

    def _cancel_running(self) -> None:
        """The run ended: the invocations still running were cancelled."""
        for step, worker in self.running:
            self.console.progress(f"{step}:{worker}", "cancelled", "magenta")
        self.running.clear()


def _bare_return_names(step_function: Any) -> frozenset[str]:
    """The class names a fan-out step may return without a list (``-> list[A] | B``: B)."""
    return frozenset(t.__name__ for t in step_function._step_config.bare_return_types)


def class_name(text: str) -> str:
    """``"<class 'pkg.mod.Word'>"`` → ``"Word"``; other text is returned as is."""
    found = _CLASS_REPR.fullmatch(text)
    return found.group(1) if found else text
