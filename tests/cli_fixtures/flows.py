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
* :class:`Interview` — waits with ``ctx.wait_for_event`` for a :class:`Reply` about its
  topic (a requirement), then lingers; its default timeout is short, so a resumed run
  that lived past it shows that the run's own timeout was kept.
* :class:`Vote` — returns a question answered by one of two response types.
* :class:`Flaky` — fails twice, retried after a delay, then succeeds.
* ``shout_instance`` — a ready Workflow *instance* (``MODULE:ATTRIBUTE`` may name one).
* ``NOT_A_WORKFLOW`` — an attribute that is not a workflow, for the error case.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

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
from tickwork.retry_policy import retry_policy, stop_after_attempt, wait_fixed


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


class Question(InputRequiredEvent):
    """What :class:`Interview` asks."""

    text: str


class Reply(HumanResponseEvent):
    """The answer :class:`Interview` waits for: ``topic`` must be the run's topic."""

    topic: str
    text: str


class Interview(Workflow):
    """Ask about ``topic`` ``rounds`` times (default once), waiting for a :class:`Reply`
    each time; linger ``linger`` seconds after.

    Its default timeout is 0.5 s: a run started with a longer timeout (or none) and
    resumed with ``linger=1`` finishes only if the resume kept the run's own timeout.
    """

    def __init__(self, timeout: float | None = 0.5, **options: Any) -> None:
        super().__init__(timeout=timeout, **options)

    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        texts = []
        for round_ in range(int(ev.get("rounds", 1))):
            reply = await ctx.wait_for_event(
                Reply,
                waiter_event=Question(text=f"what about {ev.topic}?" if round_ == 0 else "more?"),
                waiter_id=f"round {round_}",
                requirements={"topic": ev.topic},
                timeout=3600,
            )
            texts.append(reply.text)
        await anyio.sleep(float(ev.get("linger", 0)))
        return StopEvent(result=f"{ev.topic}: {', '.join(texts)}")


class Ballot(InputRequiredEvent):
    """What :class:`Vote` asks."""

    motion: str


class Yes(HumanResponseEvent):
    """A vote for the motion."""


class No(HumanResponseEvent):
    """A vote against the motion, with a reason."""

    reason: str


class Vote(Workflow):
    """Put ``motion`` to a vote: a :class:`Yes` or a :class:`No` answers it."""

    @step
    async def put(self, ev: StartEvent) -> Ballot:
        return Ballot(motion=str(ev.motion))

    @step
    async def carried(self, ev: Yes) -> StopEvent:
        return StopEvent(result="carried")

    @step
    async def rejected(self, ev: No) -> StopEvent:
        return StopEvent(result=f"rejected: {ev.reason}")


class Flaky(Workflow):
    """``fetch`` fails twice (retried 0.01 s later each time), then succeeds."""

    @step(retry_policy=retry_policy(wait=wait_fixed(0.01), stop=stop_after_attempt(3)))
    async def fetch(self, ctx: Context, ev: StartEvent) -> StopEvent:
        attempt = ctx.retry_info().retry_number + 1
        if attempt < 3:
            raise ConnectionError(f"attempt {attempt} failed")
        return StopEvent(result=f"fetched on attempt {attempt}")


NOT_A_WORKFLOW = 42


# What ``tickwork worker tests.cli_fixtures.flows:FLEET`` serves (a list of workflows).
FLEET = [Echo, Interview]
