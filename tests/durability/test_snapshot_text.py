"""Snapshots written as JSON text (``snapshot_text``, what the SQLite store stores): the
characters ``json.dumps`` writes for the snapshot's dictionary, and the snapshot of a
run with nothing pending, made without an encoding pass, is the one the pass makes.
Likewise ``json_text`` for any value, and a run's start event, whose text is written
once for the store and its first record."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork import Event, StartEvent, StopEvent, Workflow, step
from tickwork.journal import SqliteJournal
from tickwork.runtime.types.persistent import PMap, PQueue
from tickwork.runtime.types.state import (
    Holdings,
    RunConfig,
    RunState,
    StepRunState,
    StepSpec,
    WorkItem,
)
from tickwork.serde.serializers import JsonSerializer
from tickwork.serde.snapshot import SnapshotCache, empty_worker, encode_snapshot
from tickwork.serde.snapshot_text import json_text, snapshot_text

from .json_strategies import json_values
from .snapshot_keys import SNAPSHOT_KEYS

SER = JsonSerializer()
KEYS = SNAPSHOT_KEYS

_json = json_values(key_size=4, text_size=8, max_leaves=12)


def _idle_worker() -> dict[str, Any]:
    """The entry ``encode_snapshot`` shares between the idle steps of every snapshot."""
    state = RunState(config=CONFIG, steps={"a": StepRunState()})
    shared: dict[str, Any] = encode_snapshot(state, SER, None)["workers"]["a"]
    return shared


@st.composite
def snapshots(draw: st.DrawFn) -> dict[str, Any]:
    """Dictionaries of a snapshot's shape (its keys first, in its order), holding any
    JSON values, the shared idle worker entry among them, and sometimes more keys."""
    idle = _idle_worker()
    workers = draw(
        st.dictionaries(
            st.text(max_size=6),
            st.just(idle) | st.just(empty_worker()) | _json,
            max_size=4,
        )
        | _json
    )
    snapshot = {key: draw(_json) for key in KEYS}
    snapshot["workers"] = workers
    snapshot.update(draw(st.dictionaries(st.sampled_from(["failure", "held_events", "é"]), _json)))
    return snapshot


@settings(max_examples=300, deadline=None)
@given(snapshots())
def test_a_snapshot_is_written_as_json_dumps_writes_it(snapshot: dict[str, Any]) -> None:
    text = snapshot_text(snapshot)
    assert text == json.dumps(snapshot)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_a_value_is_written_as_json_dumps_writes_it(value: Any) -> None:
    assert json_text(value) == json.dumps(value)


@pytest.mark.parametrize(
    "value",
    [
        {"version": 3},
        {**dict.fromkeys(KEYS[::-1], 1)},
        {**dict.fromkeys(KEYS, 1), 7: "a non-string key"},
        [1, 2],
        "text",
    ],
    ids=["small", "reordered", "int-key", "list", "str"],
)
def test_other_values_are_written_by_json_dumps(value: Any) -> None:
    assert snapshot_text(value) == json.dumps(value)


def test_what_json_dumps_refuses_is_refused_alike() -> None:
    snapshot: dict[str, Any] = dict.fromkeys(KEYS)
    snapshot["state"] = {"value": object()}
    with pytest.raises(TypeError, match="Object of type object is not JSON serializable"):
        snapshot_text(snapshot)
    loop: dict[str, Any] = {}
    loop["self"] = loop
    snapshot["state"] = loop
    with pytest.raises(ValueError, match="Circular reference"):
        snapshot_text(snapshot)


CONFIG = RunConfig(workflow_name="text-test", steps={"a": StepSpec("a", (StartEvent,))})


def _state(**step: Any) -> RunState:
    return RunState(
        config=CONFIG,
        steps={"a": StepRunState(**step), "b": StepRunState()},
        status="completed",
        elapsed_alive=0.25,
        journal_seq=7,
    )


@pytest.mark.parametrize(
    "state",
    [
        _state(),
        _state(queue=PQueue().append(WorkItem("wi-1", "a", StartEvent(value=1)))),
        RunState(config=CONFIG, steps={}, holdings=Holdings()),
        RunState(config=CONFIG, steps={"a": StepRunState()}, streams=PMap()),
    ],
    ids=["idle", "queued", "holdings", "no-streams"],
)
def test_a_snapshot_without_a_cache_is_the_one_an_encoding_pass_makes(state: RunState) -> None:
    section = {"store_type": "in_memory", "state_data": {"_data": {}}}
    quick = encode_snapshot(state, SER, section)
    passed = encode_snapshot(state, SER, section, SnapshotCache())
    assert quick == passed
    assert snapshot_text(quick) == json.dumps(quick) == json.dumps(passed)


class Middle(Event):
    value: int


class Steps(Workflow):
    @step
    async def first(self, ev: StartEvent) -> Middle:
        return Middle(value=ev.value + 1)

    @step
    async def second(self, ev: Middle) -> StopEvent:
        return StopEvent(result=ev.value * 2)


@pytest.mark.anyio
async def test_stored_snapshots_read_back_as_the_snapshots_written(tmp_path: Path) -> None:
    store = SqliteJournal(tmp_path / "runs.db")
    written: list[dict[str, Any]] = []
    register = store.register_run

    def spy(run_id: str, workflow_name: str, snapshot: dict[str, Any], **kw: Any) -> Any:
        written.append(snapshot)
        return register(run_id, workflow_name, snapshot, **kw)

    store.register_run = spy  # type: ignore[method-assign]
    assert await Steps(journal=store).run(value=3, run_id="r") == 8
    found = await store.read_snapshot("r")
    assert found is not None
    seq, final = found
    assert final["journal_seq"] == seq and final["is_running"] is False
    assert list(final) == KEYS
    store.close()
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        (stored,) = conn.execute("SELECT data FROM snapshots").fetchone()
    assert stored == json.dumps(final)
    assert written and list(written[0]) == KEYS


@pytest.mark.anyio
async def test_the_start_event_is_stored_as_its_record_text(tmp_path: Path) -> None:
    store = SqliteJournal(tmp_path / "runs.db")
    start = StartEvent(value=3, note='h\u00e9 "q"')
    record = SER.to_record(start)
    handler = Steps(journal=store).run(start_event=start, run_id="r")
    assert await handler == 8
    entry = await store.get_run("r")
    assert entry is not None and entry.start_event == record and entry.options == {"timeout": 45.0}
    store.close()
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        row = conn.execute("SELECT start_event, options FROM runs").fetchone()
    assert row == (json.dumps(record), json.dumps({"timeout": 45.0}))
