"""Encoding ticks as JSON-compatible journal records, and back.

A record is ``{"type": <tick kind>, "stamped_at": <epoch seconds>, ...}``.  Events are
stored in the serializer's record form (``BaseSerializer.to_record``: a model
envelope dict for ``JsonSerializer``, text for other serializers), exceptions as
``{"exception_type", "exception_message"}`` dicts (api.md §4.9), event classes as
qualified names.  Waiter requirements are stored as serializer text, and must survive it
unchanged: a replay has to resolve waiters exactly as the live run did, so a waiter whose
requirements cannot be journaled makes the tick unjournalable (records of earlier
versions carry only ``has_requirements``).  The layout is versioned with the snapshot
format.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from json import dumps as json_text
from json.encoder import encode_basestring_ascii
from typing import Any, cast

from pydantic import BaseModel

from tickwork._serde_fields import dump_exception, load_exception, qualified_name
from tickwork.runtime.types.results import (
    CollectOp,
    Completed,
    Failed,
    StepOutcome,
    Suspended,
    WaiterRequest,
)
from tickwork.runtime.types.ticks import (
    AddEvent,
    CancelRun,
    IdleCheck,
    PublishEvent,
    SessionStart,
    StepResult,
    Tick,
    Timeout,
    WaiterTimeout,
    Wakeup,
)
from tickwork.serde.requirements import decode_requirements, encode_requirements
from tickwork.serde.serializers import (
    BaseSerializer,
    JsonSerializer,
    model_text,
    writes_model_text,
)

__all__ = [
    "JOURNAL_FORMAT_VERSION",
    "certain_tick_text",
    "decode_tick",
    "encode_tick",
    "encode_tick_text",
    "event_text",
    "known_record",
    "opens_session",
    "records_model_text",
]

JOURNAL_FORMAT_VERSION = 1

_KINDS: dict[type, str] = {
    SessionStart: "session_start",
    AddEvent: "add_event",
    StepResult: "step_result",
    CancelRun: "cancel_run",
    PublishEvent: "publish_event",
    Timeout: "timeout",
    WaiterTimeout: "waiter_timeout",
    Wakeup: "wakeup",
    IdleCheck: "idle_check",
}


_DEFAULT_SERIALIZER = JsonSerializer()

Known = Mapping[int, tuple[Any, Any]] | None
"""Records made already, by the ``id`` of their event: ``(event, record)``."""


def _event(value: Any, serializer: BaseSerializer) -> Any:
    return None if value is None else serializer.to_record(value)


def _load_event(value: Any, serializer: BaseSerializer) -> Any:
    return None if value is None else serializer.from_record(value)


def known_record(known: Known, value: Any) -> Any:
    """The record (or text) ``known`` holds for this very object ``value``; ``None``
    when it holds none (an equal event is not the same one)."""
    if known is None:
        return None
    hit = known.get(id(value))
    return hit[1] if hit is not None and hit[0] is value else None


def _record_of(value: Any, serializer: BaseSerializer, known: Known) -> Any:
    """``serializer.to_record(value)``, reusing the record in ``known`` made for it."""
    record = known_record(known, value)
    return serializer.to_record(value) if record is None else record


def _known_event(value: Any, serializer: BaseSerializer, known: Known) -> Any:
    """``_event(value)``, reusing the record in ``known`` made for this very object."""
    return None if value is None else _record_of(value, serializer, known)


def _encode_value(value: Any, serializer: BaseSerializer, known: Known = None) -> Any:
    if isinstance(value, list):
        return {"list": [serializer.to_record(v) for v in value]}
    return {"event": _known_event(value, serializer, known)}


def _decode_value(data: dict[str, Any], serializer: BaseSerializer) -> Any:
    event = data.get("event")
    if event is not None:
        return serializer.from_record(event)
    if "list" in data:
        return [serializer.from_record(v) for v in data["list"]]
    return None


def _encode_op(op: CollectOp, serializer: BaseSerializer) -> dict[str, Any]:
    return {
        "buffer_id": op.buffer_id,
        "event": serializer.to_record(op.event),
        "decision": op.decision,
        "needed_of_type": op.needed_of_type,
        "expected_len": op.expected_len,
        "released_count": op.released_count,
    }


def _decode_op(data: dict[str, Any], serializer: BaseSerializer) -> CollectOp:
    return CollectOp(
        buffer_id=data["buffer_id"],
        event=serializer.from_record(data["event"]),
        decision=data["decision"],
        needed_of_type=int(data["needed_of_type"]),
        expected_len=int(data["expected_len"]),
        released_count=int(data.get("released_count", 0)),
    )


def _encode_outcome(
    outcome: StepOutcome, serializer: BaseSerializer, known: Known = None
) -> dict[str, Any]:
    common: dict[str, Any] = {
        "sends": outcome.sends,
        "deleted_waiters": list(outcome.deleted_waiters),
    }
    if isinstance(outcome, Completed):
        return {
            "kind": "completed",
            "value": _encode_value(outcome.value, serializer, known),
            "collect_ops": [_encode_op(op, serializer) for op in outcome.collect_ops],
            **common,
        }
    if isinstance(outcome, Failed):
        return {
            "kind": "failed",
            "exception": dump_exception(outcome.exception),
            "retry_delay": outcome.retry_delay,
            "failed_at": outcome.failed_at,
            **common,
        }
    request = outcome.waiter
    return {
        "kind": "suspended",
        "waiter_id": request.waiter_id,
        "event_type": qualified_name(request.event_type),
        "has_requirements": bool(request.requirements) or request.has_requirements,
        "requirements": encode_requirements(serializer, request.requirements, strict=True),
        "waiter_event": _event(request.waiter_event, serializer),
        "timeout": request.timeout,
        "collect_ops": [_encode_op(op, serializer) for op in outcome.collect_ops],
        **common,
    }


def _decode_outcome(data: dict[str, Any], serializer: BaseSerializer) -> StepOutcome:
    kind = data["kind"]
    sends = int(data.get("sends", 0))
    raw_deleted = data.get("deleted_waiters")
    deleted = tuple(raw_deleted) if raw_deleted else ()
    raw_ops = data.get("collect_ops")
    ops = tuple(_decode_op(op, serializer) for op in raw_ops) if raw_ops else ()
    if kind == "completed":
        return Completed(_decode_value(data["value"], serializer), sends, ops, deleted)
    if kind == "failed":
        with serializer.validation_context():
            error = load_exception(data["exception"])
        return Failed(error, data.get("retry_delay"), float(data["failed_at"]), sends, deleted)
    if kind == "suspended":
        request = WaiterRequest(
            waiter_id=data["waiter_id"],
            event_type=serializer.resolve_class(data["event_type"]),
            requirements=decode_requirements(serializer, data.get("requirements")),
            waiter_event=_load_event(data.get("waiter_event"), serializer),
            timeout=data.get("timeout"),
            # Records written before requirements were journaled replay as they did
            # then (by type alone), so that their replay still agrees with their run.
            has_requirements=bool(data.get("has_requirements", False)) and "requirements" in data,
        )
        return Suspended(request, sends, ops, deleted)
    raise ValueError(f"unknown step outcome kind {kind!r} in journal record")


def encode_tick(
    tick: Tick, serializer: BaseSerializer | None = None, known: Known = None
) -> dict[str, Any]:
    """The JSON-compatible record of ``tick``.

    ``known`` maps the ``id`` of events whose record was made already (an event the
    tick's drain published, e.g. a run's ``StopEvent``) to ``(event, record)``: the
    tick's record embeds that record instead of encoding the event again."""
    ser = serializer or _DEFAULT_SERIALIZER
    data: dict[str, Any] = {"type": _KINDS[type(tick)], "stamped_at": tick.stamped_at}
    if isinstance(tick, SessionStart):
        data["run_id"] = tick.run_id
    elif isinstance(tick, AddEvent):
        data["event"] = _record_of(tick.event, ser, known)
        data["target_step"] = tick.target_step
        data["emission_key"] = list(tick.emission_key) if tick.emission_key else None
        data["source_step"] = tick.source_step
        data["recovery_counts"] = dict(tick.recovery_counts)
    elif isinstance(tick, StepResult):
        data["step"] = tick.step
        data["invocation_id"] = tick.invocation_id
        data["outcome"] = _encode_outcome(tick.outcome, ser, known)
    elif isinstance(tick, PublishEvent):
        data["event"] = _known_event(tick.event, ser, known)
        data["invocation_id"] = tick.invocation_id
    elif isinstance(tick, Wakeup):
        data["step"] = tick.step
    elif isinstance(tick, WaiterTimeout):
        data["step"] = tick.step
        data["waiter_id"] = tick.waiter_id
    return data


# -- records as JSON text, in one pass -------------------------------------------------
#
# For a serializer whose record of a model is the model's envelope (the JSON one), a
# tick's record can be written as text directly: the text ``json.dumps`` gives for
# ``encode_tick``'s dictionary, character for character (same keys in the same order,
# the same separators, ASCII escapes and number forms), without building the
# envelope and record dictionaries.

_TAILS: dict[type, str] = {}  # the text after a model's dump, by class (model_text)


def records_model_text(serializer: BaseSerializer) -> bool:
    """Whether ``serializer.to_record(model)`` is the envelope of a model whose JSON
    text is ``model_text(model)``, so that ``encode_tick_text`` may write its records."""
    return writes_model_text(serializer) and type(serializer).to_record is JsonSerializer.to_record


def event_text(event: Any) -> str:
    """``json.dumps(serializer.to_record(event))`` for a pydantic model ``event`` and a
    serializer of ``records_model_text``; raises what dumping the model raises."""
    return model_text(event, _TAILS)


def _scalar(value: Any) -> str:
    """``json.dumps(value)``, quicker for the scalars of a record."""
    kind = type(value)
    if kind is str:
        text: str = encode_basestring_ascii(value)
        return text
    if value is None:
        return "null"
    if kind is int:
        return int.__repr__(value)
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    return json_text(value)


# The last stamp written and its text: the first two records of a run (its session
# start and its start event) share one stamp, and a float's shortest repr is the
# dearest scalar of a record (about 7k instructions).  Matched by identity, so the
# text is always the repr of that very float.
_last_stamp: tuple[Any, str] = (None, "null")


def _stamp(value: Any) -> str:
    """``_scalar(value)`` for a tick's stamp."""
    global _last_stamp
    last = _last_stamp
    if value is last[0]:
        return last[1]
    text = _scalar(value)
    _last_stamp = (value, text)
    return text


def _model(value: Any, known: Known) -> str:
    """The record text of the model ``value`` (``known`` maps ids to texts made)."""
    found: str | None = known_record(known, value)
    if found is not None:
        return found
    if not isinstance(value, BaseModel):
        raise _NotCommon
    return model_text(value, _TAILS)


class _NotCommon(Exception):
    """A tick the one-pass encoding leaves to ``encode_tick``."""


def encode_tick_text(tick: Tick, known: Known = None) -> str | None:
    """``json.dumps(encode_tick(tick, serializer))`` written in one pass, for a
    serializer of ``records_model_text``; ``None`` for a tick of another kind, one
    carrying something other than models, or one whose event does not dump (the
    general path then says why).

    ``known`` maps the ``id`` of events whose record text was made already to
    ``(event, text)``."""
    writer = _TEXT_WRITERS.get(type(tick))
    if writer is None:
        return None
    try:
        return writer(tick, known)
    except Exception:
        return None


def certain_tick_text(tick: Tick, known: Known) -> Callable[[], str] | None:
    """A function writing ``encode_tick_text(tick, known)``, to call later (or never),
    for a tick whose text is certain: it cannot fail nor fall back to ``encode_tick``.
    That is a session start, or a completed step result (without collect operations)
    whose events all have their text in ``known`` (written already, once: the
    ``StopEvent`` of a run's last step).  ``None`` for any other tick."""
    kind = type(tick)
    if kind is StepResult:
        outcome = tick.outcome  # type: ignore[union-attr]
        if type(outcome) is not Completed or outcome.collect_ops:
            return None
        value = outcome.value
        if isinstance(value, list):
            if not all(type(known_record(known, v)) is str for v in value):
                return None
        elif value is not None and type(known_record(known, value)) is not str:
            return None
    elif kind is not SessionStart:
        return None
    # The writer of such a tick returns its text (never ``None``).
    return cast("Callable[[], str]", functools.partial(_TEXT_WRITERS[kind], tick, known))


def _session_start_text(tick: SessionStart, known: Known) -> str:
    return (
        '{"type": "session_start", "stamped_at": '
        f'{_stamp(tick.stamped_at)}, "run_id": {_scalar(tick.run_id)}}}'
    )


def _publish_event_text(tick: PublishEvent, known: Known) -> str:
    event = tick.event
    return (
        '{"type": "publish_event", "stamped_at": '
        f"{_stamp(tick.stamped_at)}, "
        f'"event": {"null" if event is None else _model(event, known)}, '
        f'"invocation_id": {_scalar(tick.invocation_id)}}}'
    )


def _step_result_text(tick: StepResult, known: Known) -> str | None:
    outcome = tick.outcome
    if type(outcome) is not Completed or outcome.collect_ops:
        return None
    value = outcome.value
    if isinstance(value, list):
        inner = '{"list": [' + ", ".join([_model(v, known) for v in value]) + "]}"
    else:
        inner = '{"event": ' + ("null" if value is None else _model(value, known)) + "}"
    deleted = outcome.deleted_waiters
    return (
        '{"type": "step_result", "stamped_at": '
        f"{_stamp(tick.stamped_at)}, "
        f'"step": {_scalar(tick.step)}, '
        f'"invocation_id": {_scalar(tick.invocation_id)}, '
        f'"outcome": {{"kind": "completed", "value": {inner}, "collect_ops": [], '
        f'"sends": {_scalar(outcome.sends)}, '
        f'"deleted_waiters": {json_text(list(deleted)) if deleted else "[]"}}}}}'
    )


def _add_event_text(tick: AddEvent, known: Known) -> str:
    key = tick.emission_key
    counts = tick.recovery_counts
    return (
        '{"type": "add_event", "stamped_at": '
        f"{_stamp(tick.stamped_at)}, "
        f'"event": {_model(tick.event, known)}, '
        f'"target_step": {_scalar(tick.target_step)}, '
        f'"emission_key": {json_text(list(key)) if key else "null"}, '
        f'"source_step": {_scalar(tick.source_step)}, '
        f'"recovery_counts": {json_text(dict(counts)) if counts else "{}"}}}'
    )


_TEXT_WRITERS: dict[type, Callable[[Any, Known], str | None]] = {
    StepResult: _step_result_text,
    SessionStart: _session_start_text,
    AddEvent: _add_event_text,
    PublishEvent: _publish_event_text,
}


def opens_session(data: Any) -> bool:
    """Whether the journal record ``data`` is the record a session of a run opens with
    (a ``SessionStart``: every start, resume or claim of a run writes one)."""
    return isinstance(data, dict) and data.get("type") == _KINDS[SessionStart]


def decode_tick(data: dict[str, Any], serializer: BaseSerializer | None = None) -> Tick:
    """The tick a journal record stands for; ``ValueError`` names a bad record type."""
    kind = data.get("type")
    decoder = _DECODERS.get(kind) if isinstance(kind, str) else None
    if decoder is None:
        raise ValueError(f"unknown journal record type {kind!r}")
    return decoder(data, float(data["stamped_at"]), serializer or _DEFAULT_SERIALIZER)


def _decode_session_start(data: dict[str, Any], stamp: float, ser: BaseSerializer) -> Tick:
    return SessionStart(stamp, str(data.get("run_id", "")))


def _decode_add_event(data: dict[str, Any], stamp: float, ser: BaseSerializer) -> Tick:
    key = data.get("emission_key")
    return AddEvent(
        stamp,
        ser.from_record(data["event"]),
        data.get("target_step"),
        emission_key=(str(key[0]), int(key[1])) if key else None,
        source_step=data.get("source_step"),
        recovery_counts=dict(data.get("recovery_counts") or {}),
    )


def _decode_step_result(data: dict[str, Any], stamp: float, ser: BaseSerializer) -> Tick:
    outcome = _decode_outcome(data["outcome"], ser)
    return StepResult(stamp, data["step"], data["invocation_id"], outcome)


def _decode_publish_event(data: dict[str, Any], stamp: float, ser: BaseSerializer) -> Tick:
    return PublishEvent(stamp, _load_event(data.get("event"), ser), data.get("invocation_id"))


_DECODERS: dict[str, Callable[[dict[str, Any], float, BaseSerializer], Tick]] = {
    "session_start": _decode_session_start,
    "add_event": _decode_add_event,
    "step_result": _decode_step_result,
    "publish_event": _decode_publish_event,
    "cancel_run": lambda data, stamp, ser: CancelRun(stamp),
    "timeout": lambda data, stamp, ser: Timeout(stamp),
    "wakeup": lambda data, stamp, ser: Wakeup(stamp, data["step"]),
    "waiter_timeout": lambda data, stamp, ser: WaiterTimeout(
        stamp, data["step"], data["waiter_id"]
    ),
    "idle_check": lambda data, stamp, ser: IdleCheck(stamp),
}
