"""Damaged and missing SQLite journals (issue #12): always a ``JournalError``, and it says where.

Journals are damaged on disk with a raw ``sqlite3`` connection or by writing garbage
over the file; bad paths are a missing directory, a directory, a path inside a file, a
FIFO and (when not root) files and directories without permission.  Every failure must
be a ``JournalError`` whose message names the journal's path, the run and the seq where
they are known, with the ``sqlite3`` or decoding error as ``__cause__`` — never a bare
``sqlite3`` error, and never a failure from inside a run that already started.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tickwork import Context, StartEvent, StopEvent, Workflow, step
from tickwork.journal import (
    InMemoryJournal,
    JournalError,
    SqliteJournal,
    StatePatch,
    load_run,
    recover_runs,
)
from tickwork.types import JournalRecord

TIMEOUT = 10.0
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


class Tally(Workflow):
    """One step that writes the state store, so snapshots carry a state section."""

    @step
    async def tally(self, ctx: Context, ev: StartEvent) -> StopEvent:
        for i in range(3):
            await ctx.store.set(f"k{i}", i)
        return StopEvent(result=3)


def rec(seq: int, pad: int = 0) -> JournalRecord:
    data: dict[str, Any] = {"type": "idle_check", "stamped_at": 1000.0 + seq}
    if pad:
        data["pad"] = "x" * pad
    return JournalRecord(seq=seq, data=data)


def sql(path: Path, statement: str, *args: Any) -> None:
    """Run one statement on the journal file behind the store's back."""
    conn = sqlite3.connect(path)
    try:
        conn.execute(statement, args)
        conn.commit()
    finally:
        conn.close()


async def read_all(store: SqliteJournal, run_id: str, seen: list[int] | None = None) -> None:
    async for record in store.read(run_id):
        if seen is not None:
            seen.append(record.seq)


async def five_records(path: Path) -> SqliteJournal:
    store = SqliteJournal(path)
    store.register_run("bad", "wf", {"journal_seq": 0})
    await store.append("bad", [rec(i) for i in range(5)])
    await store.append("bad", [], StatePatch(4, [{"op": "add", "path": "/a", "value": 1}]))
    store.close()
    return store


async def finished_tally(path: Path, run_id: str) -> SqliteJournal:
    """A completed durable run of ``Tally``, marked running again as if it was cut short."""
    store = SqliteJournal(path)
    assert await Tally(timeout=TIMEOUT, journal=store).run(run_id=run_id) == 3
    store.close()
    sql(path, "UPDATE runs SET status = 'running' WHERE run_id = ?", run_id)
    return store


def assert_names(error: JournalError, path: Path, *parts: str) -> None:
    message = str(error)
    assert repr(str(path)) in message, message
    for part in parts:
        assert part in message, message


# --------------------------------------------------------------------------- undecodable rows


@pytest.mark.anyio
@pytest.mark.parametrize(
    "damage",
    ["CAST(x'fffe0041' AS TEXT)", "x'fffe0041'"],
    ids=["text-not-utf8", "blob-not-utf8"],
)
async def test_a_record_that_is_not_utf8_names_run_seq_and_path(
    tmp_path: Path, damage: str
) -> None:
    path = tmp_path / "utf8.db"
    store = await five_records(path)
    sql(path, f"UPDATE records SET data = {damage} WHERE run_id = 'bad' AND seq = 2")
    seen: list[int] = []
    with pytest.raises(JournalError) as info:
        await read_all(store, "bad", seen)
    assert_names(info.value, path, "'bad'", "record seq 2", "not UTF-8")
    assert isinstance(info.value.__cause__, UnicodeDecodeError)
    assert seen == [0, 1]  # the records before the damaged one were delivered


@pytest.mark.anyio
async def test_a_snapshot_or_state_patch_that_is_not_utf8_names_run_seq_and_path(
    tmp_path: Path,
) -> None:
    path = tmp_path / "utf8.db"
    store = await five_records(path)
    sql(path, "UPDATE snapshots SET data = CAST(x'c328' AS TEXT) WHERE run_id = 'bad'")
    sql(path, "UPDATE state_patches SET data = x'80' WHERE run_id = 'bad'")
    with pytest.raises(JournalError) as info:
        await store.read_snapshot("bad")
    assert_names(info.value, path, "'bad'", "snapshot at seq 0")
    assert isinstance(info.value.__cause__, UnicodeDecodeError)
    with pytest.raises(JournalError) as info:
        await store.read_state_patches("bad")
    assert_names(info.value, path, "'bad'", "state patch after seq 4")
    assert isinstance(info.value.__cause__, UnicodeDecodeError)


@pytest.mark.anyio
async def test_a_record_that_is_json_but_no_tick_names_run_seq_and_path(tmp_path: Path) -> None:
    path = tmp_path / "json.db"
    store = await five_records(path)
    sql(path, "UPDATE records SET data = '{\"kind\": 1}' WHERE run_id = 'bad' AND seq = 3")
    with pytest.raises(JournalError) as info:
        await read_all(store, "bad")
    assert_names(info.value, path, "'bad'", "record seq 3 is not a tick record", "'kind'")

    # A record the store accepts (it has a type) but that is no tick of that type fails
    # recovery, which names the path as well.
    tally = tmp_path / "tally.db"
    store = await finished_tally(tally, "t1")
    entry = await store.get_run("t1")
    assert entry is not None
    await store.append("t1", [JournalRecord(entry.last_seq + 1, {"type": "step_result"})])
    with pytest.raises(JournalError) as info:
        await load_run(Tally(timeout=TIMEOUT, journal=store), "t1")
    assert_names(info.value, tally, "'t1'", f"record seq {entry.last_seq + 1} is corrupt")
    assert info.value.__cause__ is not None
    store.close()


@pytest.mark.anyio
async def test_a_state_patch_that_does_not_apply_fails_recovery(tmp_path: Path) -> None:
    path = tmp_path / "patch.db"
    store = await finished_tally(path, "p1")
    entry = await store.get_run("p1")
    assert entry is not None
    bad = StatePatch(entry.last_seq + 1, [{"op": "replace", "path": "/no/such/key", "value": 1}])
    await store.append("p1", [], bad)
    with pytest.raises(JournalError) as info:
        await load_run(Tally(timeout=TIMEOUT, journal=store), "p1")
    assert_names(info.value, path, "'p1'", f"state patch after seq {entry.last_seq + 1}")
    assert isinstance(info.value.__cause__, ValueError)
    store.close()


# --------------------------------------------------------------------------- snapshots


@pytest.mark.anyio
async def test_a_truncated_snapshot_fails_read_load_and_recover_naming_the_path(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cut.db"
    store = await finished_tally(path, "cut")
    found = await store.read_snapshot("cut")
    assert found is not None
    seq = found[0]
    store.close()
    sql(path, "UPDATE snapshots SET data = substr(data, 1, length(data) / 2)")
    with pytest.raises(JournalError) as info:
        await store.read_snapshot("cut")
    assert_names(info.value, path, "'cut'", f"snapshot at seq {seq} is corrupt")
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(JournalError) as info:
        await load_run(Tally(timeout=TIMEOUT, journal=store), "cut")
    assert_names(info.value, path, "'cut'", f"seq {seq}")
    # recover_runs reports the run it cannot resume (issue #12 item 2).
    result = await recover_runs(Tally(timeout=TIMEOUT, journal=store))
    assert isinstance(result.failed["cut"], JournalError)
    assert_names(result.failed["cut"], path, "'cut'", f"seq {seq}")
    store.close()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("stored", "expected"),
    [("[1, 2]", "not a snapshot"), ('{"version": 999}', "cannot be loaded")],
    ids=["not-an-object", "unloadable"],
)
async def test_a_snapshot_that_is_json_but_no_snapshot_fails_recovery(
    tmp_path: Path, stored: str, expected: str
) -> None:
    path = tmp_path / "odd.db"
    store = await finished_tally(path, "odd")
    sql(path, "UPDATE snapshots SET data = ?", stored)
    result = await recover_runs(Tally(timeout=TIMEOUT, journal=store))
    assert dict(result) == {}
    assert isinstance(result.failed["odd"], JournalError)
    assert_names(result.failed["odd"], path, "'odd'", expected)
    store.close()


# --------------------------------------------------------------------------- a damaged file


async def big_journal(path: Path) -> int:
    """A journal of 4000 padded records, checkpointed into the main file; its page count."""
    store = SqliteJournal(path)
    store.register_run("big", "wf", {"journal_seq": 0})
    for start in range(0, 4000, 500):
        await store.append("big", [rec(seq, pad=200) for seq in range(start, start + 500)])
    store.close()
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode=DELETE")
        pages: int = conn.execute("PRAGMA page_count").fetchone()[0]
    finally:
        conn.close()
    assert not Path(f"{path}-wal").exists()
    return pages


def write_garbage(path: Path, page: int) -> None:
    page_size = 4096  # SQLite's default, and what the journal uses
    with open(path, "r+b") as file:
        file.seek(page * page_size)
        file.write(b"\xde\xad\xbe\xef" * (page_size // 4))


@pytest.mark.anyio
async def test_a_damaged_page_is_a_journal_error_naming_path_run_and_seq(tmp_path: Path) -> None:
    path = tmp_path / "damaged.db"
    pages = await big_journal(path)
    assert pages > 100
    write_garbage(path, pages // 2)
    store = SqliteJournal(path)
    seen: list[int] = []
    with pytest.raises(JournalError) as info:
        await read_all(store, "big", seen)
    assert 0 < len(seen) < 4000
    assert seen == list(range(len(seen)))
    # The records before the damage were delivered; the error names the first one lost.
    assert_names(info.value, path, "'big'", f"record seq {len(seen)}", "malformed")
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)
    store.close()


@pytest.mark.anyio
async def test_a_file_that_is_no_database_fails_before_any_run(tmp_path: Path) -> None:
    path = tmp_path / "header.db"
    await big_journal(path)
    write_garbage(path, 0)
    store = SqliteJournal(path)  # the cheap checks pass: it is a readable regular file
    for call in (store.check, lambda: Tally(timeout=TIMEOUT, journal=store)):
        with pytest.raises(JournalError) as info:
            call()
        assert_names(info.value, path, "not a database")
        assert isinstance(info.value.__cause__, sqlite3.DatabaseError)
    with pytest.raises(JournalError) as info:
        await store.list_runs()
    assert_names(info.value, path, "not a database")
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)


# --------------------------------------------------------------------------- bad paths


def test_a_path_that_cannot_hold_a_journal_is_refused_by_the_constructor(tmp_path: Path) -> None:
    a_file = tmp_path / "notes.txt"
    a_file.write_text("hello")
    cases = {
        tmp_path / "missing" / "runs.db": "does not exist",
        tmp_path: "is a directory",
        a_file / "runs.db": "is not a directory",
    }
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "pipe")
        cases[tmp_path / "pipe"] = "not a regular file"
    for path, reason in cases.items():
        with pytest.raises(JournalError) as info:
            SqliteJournal(path)
        assert_names(info.value, path, reason)
    assert not (tmp_path / "missing").exists()


@pytest.mark.skipif(IS_ROOT, reason="root may read and write any file")
def test_files_and_directories_without_permission_are_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked.db"
    locked.write_bytes(b"")
    locked.chmod(0o200)
    with pytest.raises(JournalError) as info:
        SqliteJournal(locked)
    assert_names(info.value, locked, "cannot read and write")
    folder = tmp_path / "readonly"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(JournalError) as info:
            SqliteJournal(folder / "runs.db")
        assert_names(info.value, folder / "runs.db", "cannot write the directory")
    finally:
        folder.chmod(0o700)


def test_a_directory_removed_after_the_store_was_made_fails_the_workflow_constructor(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "gone"
    folder.mkdir()
    store = SqliteJournal(folder / "runs.db")
    folder.rmdir()
    with pytest.raises(JournalError) as info:
        Tally(timeout=TIMEOUT, journal=store)
    assert_names(info.value, folder / "runs.db", "does not exist")
    assert not folder.exists()


@pytest.mark.anyio
async def test_run_refuses_a_journal_whose_directory_was_removed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "gone"
    folder.mkdir()
    store = SqliteJournal(folder / "runs.db")
    workflow = Tally(timeout=TIMEOUT, journal=store)  # opens (and creates) the file
    assert (folder / "runs.db").is_file()
    store.close()
    shutil.rmtree(folder)
    with caplog.at_level(logging.ERROR), pytest.raises(JournalError) as info:
        workflow.run(run_id="never")  # raised by run() itself: no run started
    assert_names(info.value, folder / "runs.db", "does not exist")
    assert not folder.exists()
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest.mark.anyio
async def test_a_store_without_check_and_the_memory_store_are_accepted() -> None:
    class NoCheck(InMemoryJournal):
        check = None  # as if the method were not there: check() is optional

    for store in (InMemoryJournal(), NoCheck()):
        assert await Tally(timeout=TIMEOUT, journal=store).run(run_id="ok") == 3
