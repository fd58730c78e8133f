"""A SQLite append that carries a compacting snapshot (``append(snapshot=)``, a finished
run's last append): the rows it leaves are those of writing its records and patch and
then compacting them away, and a duplicate record is still refused."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tickwork.stores.encoded import DeferredTextRecord
from tickwork.stores.records import JournalError, StatePatch
from tickwork.stores.sqlite import SqliteJournal

from .helpers import rec, seqs, snap

pytestmark = pytest.mark.anyio


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteJournal]:
    made = SqliteJournal(tmp_path / "runs.db")
    yield made
    made.close()


def _deferred(seq: int, written: list[int]) -> DeferredTextRecord:
    """A record whose text, when written, is noted in ``written``."""

    def write() -> str:
        written.append(seq)
        return json.dumps(rec(seq).data)

    return DeferredTextRecord(seq, False, write)


def _rows(path: Path, table: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        return list(conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2"))


async def test_a_fenced_final_append_leaves_only_its_snapshot(
    store: SqliteJournal, tmp_path: Path
) -> None:
    lease = store.register_run("r", "wf", snap(), start_event={}, owner="w1")
    await store.append("r", [rec(0), rec(1)], StatePatch(1, [{"op": "add"}]), lease=lease)
    patch = StatePatch(3, [{"op": "replace"}])
    await store.append(
        "r", [rec(2), rec(3)], patch, "completed", lease=lease, snapshot=(4, snap(4, done=True))
    )
    assert await seqs(store, "r") == []
    assert await store.read_state_patches("r") == []
    assert await store.read_snapshot("r") == (4, snap(4, done=True))
    entry = await store.get_run("r")
    assert entry is not None and entry.status == "completed" and entry.last_seq == 3
    store.close()
    assert _rows(tmp_path / "runs.db", "records") == []
    assert _rows(tmp_path / "runs.db", "state_patches") == []


async def test_records_after_the_snapshot_of_an_append_are_kept(store: SqliteJournal) -> None:
    lease = store.register_run("r", "wf", snap(), start_event={}, owner="w1")
    patch = StatePatch(2, [{"op": "add"}])
    await store.append("r", [rec(0), rec(1), rec(2)], patch, lease=lease, snapshot=(1, snap(1)))
    assert await seqs(store, "r", 1) == [1, 2]
    assert [p.after_seq for p in await store.read_state_patches("r")] == [2]


async def test_an_unfenced_final_append_still_refuses_a_duplicate(store: SqliteJournal) -> None:
    store.register_run("r", "wf", snap(), start_event={})
    await store.append("r", [rec(0)])
    with pytest.raises(JournalError, match="already written"):
        await store.append("r", [rec(0)], None, "completed", snapshot=(1, snap(1)))
    assert await seqs(store, "r") == [0]
    assert await store.read_snapshot("r") == (0, snap())


async def test_a_final_append_without_a_patch_drops_the_patches_written_before(
    store: SqliteJournal, tmp_path: Path
) -> None:
    lease = store.register_run("r", "wf", snap(), start_event={}, owner="w1")
    await store.append("r", [rec(0), rec(1)], StatePatch(1, [{"op": "add"}]), lease=lease)
    await store.append("r", [rec(2)], None, "completed", lease=lease, snapshot=(3, snap(3)))
    store.close()
    assert _rows(tmp_path / "runs.db", "state_patches") == []


async def test_a_new_session_drops_the_patches_of_the_one_before(
    store: SqliteJournal, tmp_path: Path
) -> None:
    first = store.register_run("r", "wf", snap(), start_event={}, owner="w1")
    await store.append("r", [rec(0), rec(1)], StatePatch(1, [{"op": "add"}]), lease=first)
    # A new session of the run, resumed from its snapshot at seq 1 (the patch after it
    # stays), that writes no patch of its own.
    second = store.register_run("r", "wf", snap(1), owner="w1")
    assert second is not None and second.epoch == first.epoch + 1
    assert [p.after_seq for p in await store.read_state_patches("r")] == [1]
    await store.append("r", [rec(2)], None, "completed", lease=second, snapshot=(3, snap(3)))
    store.close()
    assert _rows(tmp_path / "runs.db", "state_patches") == []


async def test_records_a_fenced_final_append_compacts_away_are_never_written(
    store: SqliteJournal, tmp_path: Path
) -> None:
    written: list[int] = []
    lease = store.register_run("r", "wf", snap(), start_event={}, owner="w1")
    await store.append("r", [_deferred(0, written), _deferred(1, written)], lease=lease)
    assert written == [0, 1] and await seqs(store, "r") == [0, 1]
    final = [_deferred(2, written), _deferred(3, written)]
    await store.append("r", final, None, "completed", lease=lease, snapshot=(4, snap(4)))
    assert written == [0, 1]  # the final ones' texts were not needed
    entry = await store.get_run("r")
    assert entry is not None and entry.status == "completed" and entry.last_seq == 3
    assert await store.read_snapshot("r") == (4, snap(4))
    store.close()
    assert _rows(tmp_path / "runs.db", "records") == []


async def test_records_an_append_keeps_are_written(store: SqliteJournal) -> None:
    written: list[int] = []
    # Unfenced, the insert is what refuses a duplicate: the records are written.
    store.register_run("u", "wf", snap(), start_event={})
    await store.append("u", [_deferred(0, written)], None, "completed", snapshot=(1, snap(1)))
    assert written == [0]
    # Fenced, a record at or after the snapshot's seq is kept.
    lease = store.register_run("f", "wf", snap(), start_event={}, owner="w1")
    await store.append("f", [_deferred(0, written), _deferred(1, written)], lease=lease)
    await store.append("f", [_deferred(2, written)], lease=lease, snapshot=(2, snap(2)))
    assert written == [0, 0, 1, 2] and await seqs(store, "f", 2) == [2]
