"""What a run waiting for a human asks, and reading the answer from the user.

Both human-in-the-loop styles are answered:

* a step that calls ``ctx.wait_for_event(Reply, waiter_event=..., requirements=...)``
  leaves a pending *waiter*: the answer is a ``Reply`` (its ``event_type``), with the
  waiter's requirements already filled in;
* a step that *returns* an ``InputRequiredEvent``: the run keeps it among the questions
  it was asked (``holdings.questions``); the answer is any event a step accepts that is a
  ``HumanResponseEvent`` (or, when no step accepts one, any event a step accepts that is
  not a start event, a failure report or a join's batch).

An answer is one line: JSON for the response type (a bare value when that type has a
single field left to fill), preceded by the type's name when there is more than one to
choose from (``Rejection {"reason": "too long"}``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from tickwork._cli.console import EXIT_USAGE, CliError, Console, one_line
from tickwork.events import Event, HumanResponseEvent, StartEvent, StepFailedEvent
from tickwork.runtime.types.state import RunConfig, RunState, Waiter
from tickwork.runtime.verbose import summarize

__all__ = [
    "NoAnswer",
    "Question",
    "answer_problem",
    "parse_answer",
    "pending_questions",
    "question_for_event",
    "read_answer",
]


class NoAnswer(Exception):
    """The input ended (or gave an empty line) where an answer was expected."""


@dataclass(frozen=True)
class Question:
    """One thing a run waits for a human to answer.

    ``asked`` is the event shown to the user (the ``InputRequiredEvent``, or a waiter's
    ``waiter_event``; ``None`` for a waiter that asked nothing); ``response_types`` the
    event types that answer it; ``prefilled`` the fields a waiter requires (they are set
    in the answer); ``key`` identifies the question, so that it is asked once.
    """

    key: str
    asked: Any
    response_types: tuple[type[Event], ...]
    prefilled: Mapping[str, Any] = field(default_factory=dict)
    step: str | None = None
    deadline: float | None = None

    @property
    def text(self) -> str:
        """The question in one line."""
        if self.asked is not None:
            return summarize(self.asked)
        wanted = self.response_types[0].__name__ if self.response_types else "an event"
        return f"step {self.step} waits for {wanted}{_requirements_text(self.prefilled)}"

    @property
    def answer_hint(self) -> str:
        """``Approval``, or ``Yes or No``: the types that answer."""
        return " or ".join(t.__name__ for t in self.response_types) or "nothing"

    @property
    def prompt(self) -> str:
        """What to type: ``answer with Approval as JSON (approved)``, or with the type's
        name first when several types answer; pre-filled requirements are named."""
        if len(self.response_types) == 1:
            only = self.response_types[0]
            text = f"answer with {only.__name__} as JSON ({self._fields(only)})"
        else:
            choices = ", ".join(f"{t.__name__} ({self._fields(t)})" for t in self.response_types)
            text = f"answer with a type's name, then JSON: {choices}"
        if self.prefilled:
            text += f", pre-filled: {_requirements_text(self.prefilled).strip(' ()')}"
        return text

    def _fields(self, event_type: type[Event]) -> str:
        return ", ".join(_open_fields(event_type, self.prefilled)) or "no fields"


def pending_questions(state: RunState) -> list[Question]:
    """Every question the run in ``state`` waits on: its pending waiters (step order),
    then the ``InputRequiredEvent``\\ s its steps returned."""
    questions = [
        _waiter_question(step, waiter)
        for step, step_state in state.steps.items()
        for waiter in step_state.waiters.values()
        if waiter.pending
    ]
    returned = response_types(state.config)
    questions += [
        Question(key=f"returned-{id(event)}", asked=event, response_types=returned)
        for event in state.holdings.questions
    ]
    return questions


def question_for_event(state: RunState, event: Any) -> Question:
    """The question a published ``InputRequiredEvent`` asks: the waiter it belongs to,
    else a question of the return pattern."""
    for step, step_state in state.steps.items():
        for waiter in step_state.waiters.values():
            if waiter.pending and waiter.waiter_event is event:
                return _waiter_question(step, waiter)
    return Question(
        key=f"returned-{id(event)}", asked=event, response_types=response_types(state.config)
    )


def _waiter_question(step: str, waiter: Waiter) -> Question:
    # A waiter in subclass mode is answered by its type or any subclass of it.
    answers = _with_subclasses(waiter.event_type) if waiter.subclass_mode else (waiter.event_type,)
    return Question(
        key=waiter.waiter_id,
        asked=waiter.waiter_event,
        response_types=answers,
        prefilled=dict(waiter.requirements or {}),
        step=step,
        deadline=waiter.deadline,
    )


def _with_subclasses(event_type: type[Event]) -> tuple[type[Event], ...]:
    found: dict[type[Event], None] = {event_type: None}
    pending = [event_type]
    while pending:
        for sub in pending.pop().__subclasses__():
            if sub not in found:
                found[sub] = None
                pending.append(sub)
    return tuple(found)


def response_types(config: RunConfig) -> tuple[type[Event], ...]:
    """The event types that answer a returned ``InputRequiredEvent`` (see the module)."""
    accepted: dict[type[Event], None] = {}
    for spec in config.steps.values():
        if spec.kind == "collect" or spec.is_catch_error:
            continue
        for event_type in spec.accepted:
            if issubclass(event_type, Event) and not issubclass(
                event_type, (StartEvent, StepFailedEvent)
            ):
                accepted[event_type] = None
    humans = tuple(t for t in accepted if issubclass(t, HumanResponseEvent))
    return humans or tuple(accepted)


def parse_answer(question: Question, line: str) -> Event:
    """The answer event a line gives; ``ValueError`` (or pydantic's ``ValidationError``,
    a ``ValueError``) says what is wrong with it."""
    if not question.response_types:
        raise ValueError("no step of this workflow accepts an answer")
    response_type, text = _pick_type(question.response_types, line.strip())
    try:
        data = json.loads(text) if text else {}
    except ValueError as error:
        raise ValueError(f"not JSON: {error}") from None
    if not isinstance(data, dict):
        names = _open_fields(response_type, question.prefilled)
        if len(names) != 1:
            raise ValueError(
                f"expected a JSON object for {response_type.__name__} with the fields "
                f"{', '.join(names) or '(none)'}"
            )
        data = {names[0]: data}
    for name, required in question.prefilled.items():
        if name in data and data[name] != required:
            raise ValueError(
                f"{name} must be {required!r}: step {question.step} waits for "
                f"{response_type.__name__}{_requirements_text(question.prefilled)}"
            )
    try:
        answer: Event = response_type(**{**data, **question.prefilled})
    except TypeError as error:
        raise ValueError(f"{response_type.__name__}: {error}") from None
    return answer


def _pick_type(types: tuple[type[Event], ...], text: str) -> tuple[type[Event], str]:
    """The response type a line names (its first word), and the rest of the line."""
    first, _, rest = text.partition(" ")
    for event_type in types:
        if first in (event_type.__name__, event_type.__qualname__):
            return event_type, rest.strip()
    if len(types) == 1:
        return types[0], text
    names = " or ".join(t.__name__ for t in types)
    raise ValueError(f"start the answer with the type's name: {names}")


def read_answer(
    question: Question,
    console: Console,
    readline: Callable[[], str],
    interactive: bool,
) -> Event:
    """Show ``question`` and read its answer, one line per try.

    Interactively, a bad answer is explained and asked again; otherwise it raises
    ``CliError`` (status 2).  An empty line or the end of the input raises
    ``NoAnswer``.
    """
    # At a prompt, the question and what is wrong with an answer show even when quiet.
    show = console.notice if interactive else console.progress
    show("input", question.text)
    while True:
        if interactive:
            console.prompt(f"{question.prompt}: ")
        else:
            console.progress("input", f"reading the {question.prompt} from stdin")
        line = readline()
        if not line.strip():
            raise NoAnswer(question.answer_hint)
        try:
            return parse_answer(question, line)
        except ValueError as error:
            problem = answer_problem(error)
            if not interactive:
                raise CliError(f"invalid answer: {problem}", EXIT_USAGE) from None
            show("input", f"invalid answer: {problem}; try again", "red")


def answer_problem(error: ValueError) -> str:
    """What is wrong with an answer, in one line (pydantic's errors shortened)."""
    return one_line(error) if isinstance(error, ValidationError) else " ".join(str(error).split())


def _open_fields(event_type: type[Event], prefilled: Mapping[str, Any]) -> list[str]:
    return [name for name in event_type.model_fields if name not in prefilled]


def _requirements_text(requirements: Mapping[str, Any]) -> str:
    if not requirements:
        return ""
    return " (" + ", ".join(f"{k}={v!r}" for k, v in requirements.items()) + ")"
