"""The JSON text of a snapshot: what ``json.dumps(snapshot)`` writes, character for
character, written quicker for the dictionaries ``encode_snapshot`` makes.

A store that keeps snapshots as JSON text (the SQLite store) writes two per run at
least, the one that registers it and its final one.  ``json.dumps`` costs most where a
snapshot holds least: its own set-up, then the entries of the steps with nothing
pending, six empty containers each, the same for every idle step of every run.  Here
the snapshot's keys are written around its values, an idle step's entry (the one
``encode_snapshot`` shares) as its text made once, and the other values by one
reusable C encoder, without ``json.dumps``'s set-up.  Anything else (a dictionary of
another shape) goes to ``json.dumps``.
"""

from __future__ import annotations

import json
import math
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from tickwork.serde.snapshot import _EMPTY_WORKER as _IDLE_WORKER
from tickwork.serde.snapshot import empty_worker

__all__ = ["json_text", "snapshot_text"]

# The keys of a snapshot, in the order ``encode_snapshot`` writes them (a failed run's
# ``failure`` and the ``held_events`` come after them).
_KEYS = (
    "version",
    "state",
    "is_running",
    "workers",
    "stream_seq",
    "work_item_seq",
    "invocation_seq",
    "deliveries",
    "streams",
    "collection_release_states",
    "elapsed_alive",
    "last_alive_stamp",
    "journal_seq",
)

_IDLE_WORKER_TEXT = json.dumps(empty_worker())


def _not_json(value: Any) -> Any:
    """What ``json.dumps`` raises for a value it cannot write."""
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


# json.dumps's own C encoder (default separators, ASCII, NaN allowed), made once and
# without the bookkeeping of circular references: a cycle makes it recurse until
# RecursionError, and json.dumps then says what it says for one.
_ENCODE = (
    None
    if c_make_encoder is None
    else c_make_encoder(
        None, _not_json, encode_basestring_ascii, None, ": ", ", ", False, False, True
    )
)


def json_text(value: Any) -> str:
    """``json.dumps(value)``, without its set-up per call: scalars written directly,
    containers by the C encoder made once; raises what ``json.dumps`` raises."""
    kind = type(value)
    if kind is int:
        return int.__repr__(value)
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is str:
        text: str = encode_basestring_ascii(value)
        return text
    if not value and (kind is list or kind is dict):
        return "[]" if kind is list else "{}"
    if _ENCODE is None:  # pragma: no cover - CPython always has the accelerator
        return json.dumps(value)
    try:
        return "".join(_ENCODE(value, 0))
    except RecursionError:
        return json.dumps(value)  # a cycle: json.dumps says so


def _workers(workers: Any) -> str:
    """The text of the ``workers`` map: an idle step's entry is its text made once."""
    if type(workers) is not dict:
        return json_text(workers)
    parts = []
    for name, entry in workers.items():
        if type(name) is not str:
            return json_text(workers)
        text = _IDLE_WORKER_TEXT if entry is _IDLE_WORKER else json_text(entry)
        parts.append(f"{encode_basestring_ascii(name)}: {text}")
    return "{" + ", ".join(parts) + "}"


def snapshot_text(snapshot: dict[str, Any]) -> str:
    """``json.dumps(snapshot)``, quicker for a snapshot made by ``encode_snapshot``;
    raises what ``json.dumps`` raises for it."""
    if type(snapshot) is not dict or len(snapshot) < len(_KEYS):
        return json.dumps(snapshot)
    keys = tuple(snapshot)
    if keys[: len(_KEYS)] != _KEYS:
        return json.dumps(snapshot)
    for key in keys[len(_KEYS) :]:
        if type(key) is not str:
            return json.dumps(snapshot)
    try:
        text = (
            f'{{"version": {json_text(snapshot["version"])}, '
            f'"state": {json_text(snapshot["state"])}, '
            f'"is_running": {json_text(snapshot["is_running"])}, '
            f'"workers": {_workers(snapshot["workers"])}, '
            f'"stream_seq": {json_text(snapshot["stream_seq"])}, '
            f'"work_item_seq": {json_text(snapshot["work_item_seq"])}, '
            f'"invocation_seq": {json_text(snapshot["invocation_seq"])}, '
            f'"deliveries": {json_text(snapshot["deliveries"])}, '
            f'"streams": {json_text(snapshot["streams"])}, '
            f'"collection_release_states": {json_text(snapshot["collection_release_states"])}, '
            f'"elapsed_alive": {json_text(snapshot["elapsed_alive"])}, '
            f'"last_alive_stamp": {json_text(snapshot["last_alive_stamp"])}, '
            f'"journal_seq": {json_text(snapshot["journal_seq"])}'
        )
        for key in keys[len(_KEYS) :]:
            text += f", {encode_basestring_ascii(key)}: {json_text(snapshot[key])}"
    except RecursionError:
        return json.dumps(snapshot)  # a cycle: json.dumps says so
    return text + "}"
