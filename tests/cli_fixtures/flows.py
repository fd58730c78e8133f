"""Workflows the ``tickwork`` command and the drawing tests run and draw.

* :class:`Greet` — one step; the start event takes ``name`` and ``times``.
* :class:`Shout` — fan-out to one ``Word`` per word, uppercased by ``shout``, joined by
  a ``list[Loud]`` step; ``shout`` writes a :class:`Progress` event to the stream.
* :class:`Review` — the drawing showcase: a fan-out with a join, a ``@catch_error``
  handler, a human-in-the-loop round trip and a resource.
* :class:`Boom` — a step that always fails, for the run-failure exit status.
* :class:`Crashy` — kills its process once, so that ``tickwork runs resume`` can finish it.
* :class:`Echo`, :class:`Count`, :class:`Opaque` — results that show how ``key=value``
  arguments are parsed and how results are printed (JSON, a typed stop event, ``repr``).
* :class:`Sleepy` — sleeps, for the timeout exit status.
* ``shout_instance`` — a ready Workflow *instance* (``MODULE:ATTRIBUTE`` may name one).
* ``NOT_A_WORKFLOW`` — an attribute that is not a workflow, for the error case.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import anyio

from tickwork import (
    Context,
    Event,
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
    Workflow,
    catch_error,
    step,
)
from tickwork.events import StepFailedEvent
from tickwork.resource import Resource


class Greet(Workflow):
    """Say hello ``times`` times."""

    @step
    async def hello(self, ev: StartEvent) -> StopEvent:
        times = int(ev.get("times", 1))
        return StopEvent(result={"greeting": " ".join([f"hello {ev.name}"] * times)})


class Word(Event):
    """One word of the sentence, with its position."""

    index: int
    text: str


class Loud(Event):
    """A shouted word."""

    index: int
    text: str


class Progress(Event):
    """Written to the stream as each word is shouted."""

    message: str


class Shout(Workflow):
    """Split a sentence into words, shout each one, and join them back."""

    @step
    async def split(self, ev: StartEvent) -> list[Word]:
        return [Word(index=i, text=w) for i, w in enumerate(str(ev.sentence).split())]

    @step(num_workers=2)
    async def shout(self, ctx: Context, ev: Word) -> Loud:
        await anyio.sleep(0.02)  # slow enough for the command to see the stream's progress
        ctx.write_event_to_stream(Progress(message=f"shouted {ev.text}"))
        return Loud(index=ev.index, text=ev.text.upper())

    @step
    async def join(self, words: list[Loud]) -> StopEvent:
        return StopEvent(result=" ".join(w.text for w in sorted(words, key=lambda w: w.index)))


shout_instance = Shout(timeout=30)


class Draft(Event):
    """A section of the report to write."""

    topic: str


class Section(Event):
    """A written section."""

    topic: str
    text: str


class Report(Event):
    """All sections, ready for review."""

    text: str


class AskApproval(InputRequiredEvent):
    """Ask a human to approve the report."""

    text: str


class Approval(HumanResponseEvent):
    """The human's answer."""

    approved: bool


class Client:
    """Stands in for a model client."""

    def write(self, topic: str) -> str:
        return f"all about {topic}"


def make_client() -> Client:
    """Build the writing client."""
    return Client()


class Review(Workflow):
    """Write sections in parallel, assemble them, and ask a human to approve."""

    @step
    async def plan(self, ev: StartEvent) -> list[Draft]:
        """Split the work into one draft per topic."""
        return [Draft(topic=t) for t in ev.topics]

    @step
    async def write(self, ev: Draft, client: Annotated[Client, Resource(make_client)]) -> Section:
        """Write one section."""
        return Section(topic=ev.topic, text=client.write(ev.topic))

    @step
    async def assemble(self, sections: list[Section]) -> AskApproval:
        """Join the sections and ask for approval."""
        return AskApproval(text="\n".join(s.text for s in sections))

    @step
    async def decide(self, ev: Approval) -> StopEvent:
        """Finish with the human's decision."""
        return StopEvent(result=ev.approved)

    @catch_error(for_steps=["write", "assemble"])
    async def recover(self, ev: StepFailedEvent) -> StopEvent:
        """Give up cleanly when writing fails."""
        return StopEvent(result=f"failed in {ev.step_name}")


class Boom(Workflow):
    """Always fails."""

    @step
    async def explode(self, ev: StartEvent) -> StopEvent:
        raise RuntimeError("kaboom")


class Ready(Event):
    """``prepare`` is done; ``marker`` is the file that remembers the crash."""

    marker: str


class Crashy(Workflow):
    """Kills its own process the first time ``fragile`` runs, to be resumed from a journal.

    The crash happens while ``marker`` does not exist (it is created just before), so the
    resumed run gets past it.
    """

    @step
    async def prepare(self, ev: StartEvent) -> Ready:
        return Ready(marker=str(ev.marker))

    @step
    async def fragile(self, ev: Ready) -> StopEvent:
        marker = Path(ev.marker)
        if not marker.exists():
            marker.write_text("crashed once", encoding="utf-8")
            os._exit(17)  # a hard crash: no cleanup, no final journal status
        return StopEvent(result="recovered")


class Echo(Workflow):
    """Return the start event's fields, each with the name of its value's type."""

    @step
    async def echo(self, ev: StartEvent) -> StopEvent:
        return StopEvent(result={k: [type(v).__name__, v] for k, v in ev.to_dict().items()})


class Sleepy(Workflow):
    """Sleeps ``seconds`` (default 5), for the timeout exit status."""

    @step
    async def nap(self, ev: StartEvent) -> StopEvent:
        await anyio.sleep(float(ev.get("seconds", 5)))
        return StopEvent(result="rested")


class Tally(StopEvent):
    """A typed stop event: the command prints it as JSON."""

    total: int


class Count(Workflow):
    """Count the entries of ``names`` and finish with a :class:`Tally`."""

    @step
    async def count(self, ev: StartEvent) -> Tally:
        return Tally(total=len(ev.names))


class Opaque(Workflow):
    """Finishes with a result JSON cannot encode, so the command prints its ``repr``."""

    @step
    async def make(self, ev: StartEvent) -> StopEvent:
        return StopEvent(result=frozenset({"only"}))


NOT_A_WORKFLOW = 42
