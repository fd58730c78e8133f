"""``wait_for_event`` in drawings: found in a step's source, drawn as "waits for" / "asks".

The waits are found statically (the step is never run), so these tests write real step
bodies and check what is found, what is ignored, and how both renderers draw it.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import tickwork.events as tw_events
from tickwork import (
    Context,
    Event,
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
    Workflow,
    step,
)
from tickwork.representation import get_workflow_representation
from tickwork.representation._drawing import drawing_of
from tickwork.representation._waits import WaitSite, wait_sites
from tickwork.representation.draw import to_html, to_mermaid

from .showcase import AskPayment, AuditDone, Payment, PaymentApproval


class Answer(HumanResponseEvent):
    text: str


class Question(InputRequiredEvent):
    prompt: str


class Note(Event):
    text: str


class Holder:
    class Inner(Event):
        pass


# --- finding the calls -------------------------------------------------------------------


def test_finds_each_call_in_source_order_with_its_literal_question() -> None:
    async def body(self: Any, ctx: Context, ev: StartEvent) -> StopEvent:
        first = await ctx.wait_for_event(Answer, waiter_event=Question(prompt="?"))
        await self.ctx.wait_for_event(event_type=Note, timeout=None)
        await ctx.wait_for_event(Answer, waiter_event=Question(prompt="again?"))  # same site
        return StopEvent(result=first.text)

    assert wait_sites(body) == (WaitSite(Answer, Question), WaitSite(Note, None))


def test_resolves_dotted_names_class_attributes_and_closures() -> None:
    class Local(Event):
        pass

    async def body(ctx: Context) -> None:
        await ctx.wait_for_event(tw_events.HumanResponseEvent)
        await ctx.wait_for_event(Holder.Inner)
        await ctx.wait_for_event(Local, Question(prompt="positional waiter"))

    assert wait_sites(body) == (
        WaitSite(HumanResponseEvent, None),
        WaitSite(Holder.Inner, None),
        WaitSite(Local, Question),
    )


def test_ignores_what_is_not_a_literal_event_class() -> None:
    question = Question(prompt="built elsewhere")

    async def body(ctx: Context, kind: type[Event]) -> None:
        await ctx.wait_for_event(kind)  # a parameter: unknown until run time
        await ctx.wait_for_event("Answer")  # not a class
        await ctx.wait_for_event(Holder)  # a class, not an Event
        await ctx.wait_for_event(Answer, waiter_event=question)  # not a literal call
        await ctx.wait_for_event(Note, waiter_event=Note(text="not a question"))
        await ctx.wait_for(Answer)  # another method

    assert wait_sites(body) == (WaitSite(Answer, None), WaitSite(Note, None))


def test_no_source_means_no_waits() -> None:
    namespace: dict[str, Any] = {"Answer": Answer}
    exec("async def body(ctx):\n    await ctx.wait_for_event(Answer)\n", namespace)
    assert wait_sites(namespace["body"]) == ()
    assert wait_sites(len) == ()


# --- drawing them ------------------------------------------------------------------------


def test_mermaid_draws_waits_questions_and_the_human() -> None:
    text = to_mermaid(Payment)
    lines = text.splitlines()
    edges = [line.strip() for line in lines if re.match(r"^    \w+ (-->|-\.->|==>)", line)]
    assert 'event_PaymentApproval -.->|"waits for"| step_pay' in edges
    assert 'step_pay -->|"asks"| event_AskPayment' in edges
    assert "event_AskPayment --> external_step" in edges
    assert "external_step --> event_PaymentApproval" in edges
    assert 'event_AuditDone -.->|"waits for"| step_audit' in edges
    assert '    event_PaymentApproval(["PaymentApproval"])' in lines
    assert '    external_step{{"external_step"}}' in lines
    styles = {}
    for line in lines:
        if line.startswith("    linkStyle"):
            _, indexes, style = line.split(maxsplit=2)
            styles[style] = [int(i) for i in indexes.split(",")]
    waits = styles["stroke:#e8710a,stroke-width:2px,stroke-dasharray:8 3 2 3"]
    asks = styles["stroke:#e8710a,stroke-width:1.5px"]
    all_edges = [line for line in lines if re.match(r"^    \w+ (-->|-\.->|==>)", line)]
    assert sorted(all_edges[i].split()[0] for i in waits) == [
        "event_AuditDone",
        "event_PaymentApproval",
    ]
    assert [all_edges[i].split()[0] for i in asks] == ["step_pay"]


class _Graph(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.nodes: set[str] = set()
        self.edges: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        classes = values.get("class", "").split()
        if tag == "g" and "node" in classes:
            self.nodes.add(values["data-node-id"])
        if tag == "g" and "edge" in classes:
            self.edges.append(
                (values["data-source"], values["data-target"], values["data-edge-kind"])
            )


def test_html_draws_the_same_waits_and_the_graph_stays_as_specified() -> None:
    page = _Graph()
    page.feed(to_html(Payment))
    assert ("PaymentApproval", "pay", "wait") in page.edges
    assert ("pay", "AskPayment", "asks") in page.edges
    assert ("AskPayment", "external_step", "flow") in page.edges
    assert ("external_step", "PaymentApproval", "flow") in page.edges
    assert ("AuditDone", "audit", "wait") in page.edges
    drawing = drawing_of(Payment)
    assert page.nodes == {node.id for node in drawing.nodes}
    # the JSON graph of §16 knows nothing of waits: they are drawing overlays
    graph_ids = {node.id for node in get_workflow_representation(Payment).nodes}
    assert {PaymentApproval.__name__, AskPayment.__name__, "external_step"}.isdisjoint(graph_ids)
    assert AuditDone.__name__ in graph_ids  # returned by auditor: drawn once, not added again
    assert [n.id for n in drawing.nodes].count("AuditDone") == 1
    assert {type(n).__name__ for n in drawing.extra_nodes} == {
        "WorkflowEventNode",
        "WorkflowExternalNode",
    }


class Ping(Event):
    pass


class LoudPing(Ping):
    pass


class Subclassing(Workflow):
    @step
    async def start(self, ev: StartEvent) -> LoudPing | None:
        return LoudPing()

    @step(accept_event_subclasses=True)
    async def listen(self, ctx: Context, ev: StartEvent) -> StopEvent:
        await ctx.wait_for_event(Ping)
        return StopEvent()


def test_a_subclass_mode_step_is_answered_by_subclasses_too() -> None:
    edges = {(e.source, e.target, e.kind) for e in drawing_of(Subclassing).edges}
    assert ("Ping", "listen", "wait") in edges
    assert ("LoudPing", "listen", "wait") in edges


def test_a_wait_without_a_question_adds_no_human() -> None:
    class Quiet(Workflow):
        @step
        async def go(self, ctx: Context, ev: StartEvent) -> StopEvent:
            note = await ctx.wait_for_event(Note)
            return StopEvent(result=note.text)

    drawing = drawing_of(Quiet)
    assert [n.id for n in drawing.extra_nodes] == ["Note"]
    assert [(e.source, e.target, e.label) for e in drawing.edges if e.kind == "wait"] == [
        ("Note", "go", "waits for")
    ]
