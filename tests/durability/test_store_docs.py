"""The durability guide lists every method of the store protocol, and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

from tickwork.stores.store import JournalStore

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "durability.md"


def test_the_guide_lists_the_methods_of_the_store_protocol() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split("### Other stores", 1)[1].split("\n#", 1)[0]
    listed = section.split("`tickwork.journal.JournalStore`:", 1)[1].split(
        "`tickwork.journal.InMemoryJournal`", 1
    )[0]
    named = set(re.findall(r"`([a-z_]+)`", listed))
    protocol = {
        name
        for name, value in vars(JournalStore).items()
        if callable(value) and not name.startswith("_")
    }
    assert named == protocol, (sorted(named - protocol), sorted(protocol - named))
