"""What a drawing tells about each node (the details panel) and its legend.

The details are read from the JSON the page embeds for its script, which is exactly what
the panel shows when a node is clicked (the browser test clicks one for real).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

import pytest

from tickwork import Event, StartEvent, StopEvent, Workflow, step
from tickwork.collect import Collect, Take
from tickwork.representation._step_facts import retry_summary, type_text
from tickwork.representation.draw import to_html
from tickwork.retry_policy import (
    retry_if_exception_type,
    retry_if_not_exception_type,
    retry_policy,
    stop_after_attempt,
    stop_after_delay,
    stop_any,
    wait_exponential_jitter,
    wait_fixed,
    wait_incrementing,
    wait_none,
    wait_random,
    wait_random_exponential,
)

from .showcase import Agent, Loopy, Payment, Review


def _details(workflow: type[Workflow]) -> dict[str, dict[str, Any]]:
    match = re.search(
        r'<script type="application/json" id="tickwork-node-details">(.*?)</script>',
        to_html(workflow),
        re.S,
    )
    assert match is not None
    details: dict[str, dict[str, Any]] = json.loads(match.group(1))
    return details


def _legend(workflow: type[Workflow]) -> list[str]:
    legend = re.search(r'<ul class="legend">(.*?)</ul>', to_html(workflow), re.S)
    assert legend is not None
    return re.findall(r"</svg>([^<]+)</li>", legend.group(1))


# --- steps -------------------------------------------------------------------------------


def test_a_step_lists_its_events_with_fields_options_and_waits() -> None:
    pay = _details(Payment)["pay"]
    assert list(pay)[:3] == ["label", "kind", "description"]
    assert pay["description"] == {"html": "<p>Ask for approval, then <strong>pay</strong>.</p>"}
    assert pay["accepts"] == ["ev: StartEvent"]
    assert pay["returns"] == ["Paid(amount: int)"]
    assert pay["waits for (wait_for_event)"] == ["PaymentApproval(approved: bool)"]
    assert pay["asks (waiter_event)"] == ["AskPayment(amount: int)"]
    assert pay["num_workers"] == "4"
    assert pay["retry policy"] == (
        "up to 5 attempts, exponential backoff from 1 s (x2, at most 30 s), on any exception"
    )
    assert pay["timeout"] == "30 s"
    assert pay["failures go to"] == "not caught: a failure fails the run"
    auditor = _details(Payment)["auditor"]
    assert auditor["num_workers"] == "2"
    assert auditor["retry policy"] == "none"
    assert auditor["timeout"] == "none"


def test_resources_and_catch_error_coverage_both_ways() -> None:
    details = _details(Review)
    assert details["write"]["resources"] == ["writer: Writer from make_writer()"]
    assert details["write"]["failures go to"] == "recover"
    assert details["decide"]["failures go to"] == "not caught: a failure fails the run"
    recover = details["recover"]
    assert recover["role"] == "@catch_error handler"
    assert recover["catches failures of (the steps listed)"] == ["write", "assemble"]
    assert recover["max recoveries"] == "1"
    loopy = _details(Loopy)
    assert loopy["oops"]["catches failures of (every other step)"] == [
        "again",
        "both",
        "check",
        "merge_parts",
        "split",
        "start",
        "sub",
    ]
    assert loopy["check"]["resources"] == [
        "cache: list[int] from make_cache()",
        "settings: Settings from config settings.json",
    ]


def test_joins_show_their_collect_mode_or_slots() -> None:
    review, loopy = _details(Review), _details(Loopy)
    assert review["assemble"]["accepts"] == ["sections: list[Section(topic: str, text: str)]"]
    assert review["assemble"]["collect mode"].startswith("All: runs once, when the stream closes")
    assert loopy["merge_parts"]["collect mode"] == (
        "Take(2): runs once 2 have arrived, with those 2 (or when the stream closes with fewer)"
    )
    assert loopy["both"]["role"] == "multi-slot join"
    assert loopy["both"]["accepts"] == ["summary: Summary(text: str)", "side: Side(x: int)"]
    assert loopy["both"]["join slots"].startswith("summary: Summary, side: Side; runs once")
    assert loopy["split"]["role"] == "fan-out: returns a list of events"
    assert loopy["split"]["returns"] == ["list[Chunk(n: int)]"]
    assert "collect mode" not in loopy["split"]


def test_take_with_cancel_rest_says_so() -> None:
    class Hit(Event):
        url: str

    class Search(Workflow):
        @step
        async def spread(self, ev: StartEvent) -> list[Hit]:
            return [Hit(url=u) for u in ev.urls]

        @step
        async def first(
            self, hits: Annotated[list[Hit], Collect(Take(1, cancel_rest=True))]
        ) -> StopEvent:
            return StopEvent(result=hits[0].url)

    mode = _details(Search)["first"]["collect mode"]
    assert mode.startswith("Take(1): runs once 1 have arrived")
    assert mode.endswith("cancel_rest: the branches still queued or running are cancelled then")


def test_events_list_their_fields_and_the_steps_they_reach() -> None:
    details = _details(Payment)
    assert details["Paid"]["fields"] == ["amount: int"]
    assert details["Paid"]["accepted by"] == ["audit", "auditor"]
    assert details["Paid"]["produced by"] == ["pay"]
    assert details["AuditDone"]["awaited by (wait_for_event)"] == ["audit"]
    assert details["StartEvent"]["fields"] == ["no declared fields"]


@pytest.mark.parametrize(
    ("annotation", "text"),
    [
        (int, "int"),
        (list[int], "list[int]"),
        (int | None, "int | None"),
        (Any, "Any"),
        (None, "None"),
    ],
)
def test_type_text(annotation: Any, text: str) -> None:
    assert type_text(annotation) == text


class _Custom:
    def next(self, elapsed_time: float, attempts: int, error: Exception) -> float | None:
        return None


class _Described(_Custom):
    def __repr__(self) -> str:
        return "Described(every 2 s)"


@pytest.mark.parametrize(
    ("policy", "summary"),
    [
        (None, "none"),
        (retry_policy(), "up to 3 attempts, 5 s apart, on any exception"),
        (
            retry_policy(
                retry=retry_if_exception_type((ValueError, KeyError)),
                wait=wait_none(),
                stop=stop_any(stop_after_attempt(4), stop_after_delay(60)),
            ),
            "up to 4 attempts or for up to 60 s, retrying at once, on ValueError, KeyError",
        ),
        (
            retry_policy(retry=retry_if_not_exception_type(TypeError), wait=wait_random(1, 3)),
            "up to 3 attempts, a random 1-3 s apart, on any exception except TypeError",
        ),
        (
            retry_policy(wait=wait_random_exponential(max=10)),
            "up to 3 attempts, random exponential backoff from 1 s (x2, at most 10 s), "
            "on any exception",
        ),
        (
            retry_policy(wait=wait_incrementing(start=1, increment=2, max=9)),
            "up to 3 attempts, 1 s apart, +2 s each time (at most 9 s), on any exception",
        ),
        (
            retry_policy(wait=wait_exponential_jitter(initial=1, max=20, jitter=1)),
            "up to 3 attempts, exponential backoff from 1 s with up to 1 s jitter "
            "(at most 20 s), on any exception",
        ),
        (retry_policy(wait=wait_fixed(0)), "up to 3 attempts, retrying at once, on any exception"),
        (_Custom(), "_Custom"),
        (_Described(), "Described(every 2 s)"),
    ],
)
def test_retry_summary(policy: Any, summary: str) -> None:
    assert retry_summary(policy) == summary


# --- legend ------------------------------------------------------------------------------


def test_the_legend_lists_only_the_kinds_a_drawing_uses() -> None:
    assert _legend(Agent) == [
        "step",
        "event",
        "start event",
        "stop event",
        "event flow",
        "fan-out: list[E]",
        "join: stream collected by a list[E] step",
    ]
    loopy = _legend(Loopy)
    assert "resource config" in loopy and "on failure: @catch_error route" in loopy
    assert "human (external_step)" not in loopy
    assert not any(text.startswith(("waits for", "asks")) for text in loopy)
    payment = _legend(Payment)
    assert "human (external_step)" in payment
    assert "waits for: wait_for_event in the step" in payment
    assert "asks: the waiter_event question" in payment
    assert "fan-out: list[E]" not in payment
    assert "resource" not in payment
