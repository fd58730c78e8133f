"""Real workflows that exercise every part of a drawing, shared by the drawing tests.

* :class:`Review` — a fan-out (``plan -> list[Draft]``) joined by a ``list[Section]`` step,
  a scoped ``@catch_error`` handler, a human-in-the-loop round trip and a resource.
* :class:`Loopy` — a retry loop (a back edge), a nested fan-out joined with ``Take(2)``,
  a multi-slot join, a wildcard ``@catch_error`` handler, a resource with a dependency
  and a resource config.
* :class:`Agent` — an agent loop ``think -> call_tool -> observe -> think`` whose
  ``observe`` step joins the tool calls: a join edge inside a loop.  No docstring.
* :class:`Payment` — the ``wait_for_event`` style: ``pay`` asks a human and waits for the
  answer, ``audit`` waits for an event another step produces; retry policy and timeout.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel

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
from tickwork.collect import Collect, Take
from tickwork.events import StepFailedEvent
from tickwork.resource import Resource, ResourceConfig
from tickwork.retry_policy import retry_policy, stop_after_attempt, wait_exponential


class Draft(Event):
    """A section to write."""

    topic: str


class Section(Event):
    """A written section."""

    topic: str
    text: str


class AskApproval(InputRequiredEvent):
    """Ask a human to approve the report."""

    text: str


class Approval(HumanResponseEvent):
    """The human's answer."""

    approved: bool


class Writer:
    """Stands in for a model client."""

    def write(self, topic: str) -> str:
        return f"all about {topic}"


def make_writer() -> Writer:
    """Build the writing client."""
    return Writer()


class Review(Workflow):
    """Write sections in parallel, assemble them, and ask a human to approve."""

    @step
    async def plan(self, ev: StartEvent) -> list[Draft]:
        """One draft per topic."""
        return [Draft(topic=t) for t in ev.topics]

    @step
    async def write(self, ev: Draft, writer: Annotated[Writer, Resource(make_writer)]) -> Section:
        """Write one section."""
        return Section(topic=ev.topic, text=writer.write(ev.topic))

    @step
    async def assemble(self, sections: list[Section]) -> AskApproval:
        """Join the sections and ask for approval."""
        return AskApproval(text="\n".join(s.text for s in sections))

    @step
    async def decide(self, ev: Approval) -> StopEvent:
        """Finish with the decision."""
        return StopEvent(result=ev.approved)

    @catch_error(for_steps=["write", "assemble"])
    async def recover(self, ev: StepFailedEvent) -> StopEvent:
        """Give up cleanly when writing fails."""
        return StopEvent(result=f"failed in {ev.step_name}")


class Checked(Event):
    n: int


class Retry(Event):
    n: int


class Batch(Event):
    n: int


class Chunk(Event):
    n: int


class Part(Event):
    n: int


class Summary(Event):
    text: str


class Side(Event):
    x: int


class Settings(BaseModel):
    level: int = 1


def make_db() -> dict[str, int]:
    return {}


def make_cache(db: Annotated[dict[str, int], Resource(make_db)]) -> list[int]:
    return []


class Loopy(Workflow):
    """A loop, a nested fan-out joined with Take(2), a multi-slot join and a wildcard handler."""

    @step
    async def start(self, ev: StartEvent) -> Checked | Side:
        return Checked(n=0)

    @step
    async def check(
        self,
        ev: Checked,
        cache: Annotated[list[int], Resource(make_cache)],
        settings: Annotated[Settings, ResourceConfig("settings.json", label="settings")],
    ) -> Batch | Retry:
        return Batch(n=ev.n)

    @step
    async def again(self, ev: Retry) -> Checked:
        return Checked(n=ev.n + 1)

    @step
    async def split(self, ev: Batch) -> list[Chunk]:
        return [Chunk(n=i) for i in range(ev.n)]

    @step
    async def sub(self, ev: Chunk) -> list[Part]:
        return [Part(n=ev.n)]

    @step
    async def merge_parts(self, parts: Annotated[list[Part], Collect(Take(2))]) -> Summary:
        return Summary(text=str(len(parts)))

    @step
    async def both(self, summary: Summary, side: Side) -> StopEvent:
        return StopEvent(result=summary.text)

    @catch_error
    async def oops(self, ev: StepFailedEvent) -> StopEvent:
        return StopEvent(result="failed")


class ToolCall(Event):
    name: str


class ToolResult(Event):
    output: str


class Observed(Event):
    notes: str


class Agent(Workflow):
    @step
    async def think(self, ev: StartEvent | Observed) -> list[ToolCall] | StopEvent:
        return StopEvent(result="done")

    @step
    async def call_tool(self, ev: ToolCall) -> ToolResult:
        return ToolResult(output=ev.name)

    @step
    async def observe(self, results: list[ToolResult]) -> Observed:
        return Observed(notes=", ".join(r.output for r in results))


class AskPayment(InputRequiredEvent):
    amount: int


class PaymentApproval(HumanResponseEvent):
    approved: bool


class Paid(Event):
    amount: int


class AuditDone(Event):
    ok: bool


class Payment(Workflow):
    """Pay once a human approves: ``pay`` *waits* with `wait_for_event`.

    The [human-in-the-loop guide](https://example.org/hitl) explains the pattern.
    """

    @step(
        retry_policy=retry_policy(wait=wait_exponential(max=30), stop=stop_after_attempt(5)),
        timeout=30,
    )
    async def pay(self, ctx: Context, ev: StartEvent) -> Paid:
        """Ask for approval, then **pay**."""
        reply = await ctx.wait_for_event(
            PaymentApproval, waiter_event=AskPayment(amount=ev.amount), timeout=5
        )
        return Paid(amount=ev.amount if reply.approved else 0)

    @step
    async def audit(self, ctx: Context, ev: Paid) -> StopEvent:
        done = await ctx.wait_for_event(AuditDone)
        return StopEvent(result=done.ok)

    @step(num_workers=2)
    async def auditor(self, ev: Paid) -> AuditDone:
        return AuditDone(ok=ev.amount >= 0)
