"""Workflows the ``tickwork`` command and the drawing tests run and draw.

* :class:`Greet` — one step; the start event takes ``name`` and ``times``.
* :class:`Shout` — fan-out to one ``Word`` per word, uppercased by ``shout``, joined by
  a ``list[Loud]`` step; ``shout`` writes a :class:`Progress` event to the stream.
* :class:`Review` — the drawing showcase: a fan-out with a join, a ``@catch_error``
  handler, a human-in-the-loop round trip and a resource.
* :class:`Boom` — a step that always fails, for the run-failure exit status.
* ``shout_instance`` — a ready Workflow *instance* (``MODULE:ATTRIBUTE`` may name one).
* ``NOT_A_WORKFLOW`` — an attribute that is not a workflow, for the error case.
"""

from __future__ import annotations

from typing import Annotated

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
    async def write(
        self, ev: Draft, client: Annotated[Client, Resource(make_client)]
    ) -> Section:
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


NOT_A_WORKFLOW = 42
