"""The store protocols as ``mypy --strict`` sees them.

A store written against ``JournalStore`` before ``append(snapshot=)`` existed still
type-checks as one; ``SnapshotAppendingStore`` is the protocol that adds the keyword,
and the built-in stores implement it.  Each test writes a small module and checks it
with ``mypy.api.run``.  Skipped when mypy is not installed.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

import tickwork  # noqa: E402 - after the importorskip on purpose

SRC = Path(tickwork.__file__).resolve().parents[1]

# Only the store protocol, its records and the in-memory store are analysed; skipped
# modules turn into Any, which is why the broken store below must be reported.
CONFIG = """\
[mypy]
strict = True
mypy_path = {src}
cache_dir = {cache}

[mypy-tickwork.*]
follow_imports = skip

[mypy-tickwork.stores.store,tickwork.stores.records,tickwork.stores.memory]
follow_imports = normal
"""

SNIPPET = """\
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tickwork.stores.memory import InMemoryJournal
from tickwork.stores.records import Lease, RunOutcome, RunStatus, StatePatch, StreamItem
from tickwork.stores.store import JournalStore, SnapshotAppendingStore


class Legacy(JournalStore):
    async def append(
        self,
        run_id: str,
        records: Sequence[Any],
        state_patch: StatePatch | None = None,
        final_status: RunStatus | None = None,
        *,
        lease: Lease | None = None,
        consumed: Sequence[int] = (),
        stream: Sequence[StreamItem] = (),
        outcome: RunOutcome | None = None,
    ) -> None: ...


class Broken(SnapshotAppendingStore):
    async def append(  # error
        self,
        run_id: str,
        records: Sequence[Any],
        state_patch: StatePatch | None = None,
        final_status: RunStatus | None = None,
        *,
        lease: Lease | None = None,
        consumed: Sequence[int] = (),
        stream: Sequence[StreamItem] = (),
        outcome: RunOutcome | None = None,
    ) -> None: ...


def built_in(store: InMemoryJournal) -> SnapshotAppendingStore:
    return store


def either(store: InMemoryJournal) -> JournalStore:
    return store
"""


def test_legacy_stores_type_check_and_snapshot_appenders_need_the_keyword(
    tmp_path: Path,
) -> None:
    module = tmp_path / "snippet.py"
    module.write_text(textwrap.dedent(SNIPPET))
    config = tmp_path / "mypy.ini"
    config.write_text(CONFIG.format(src=SRC, cache=tmp_path / "cache"))
    report, errors, status = mypy_api.run(
        ["--config-file", str(config), "--no-error-summary", str(module)]
    )
    assert errors == "", errors
    expected = {
        number
        for number, line in enumerate(SNIPPET.splitlines(), start=1)
        if line.endswith("# error")
    }
    reported = {int(n) for n in re.findall(r"^.*snippet\.py:(\d+): error:", report, re.M)}
    assert status == 1 and reported == expected, report
