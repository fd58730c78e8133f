"""What the SQLite journal store checks and how it words its errors.

Every problem the SQLite store meets — a path it cannot use, an ``sqlite3`` error, a
stored value that does not decode — is raised as a ``JournalError`` whose message
names the journal file, the run and the sequence number where they are known, so that a
damaged journal can be found and dealt with from the message alone.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

from tickwork.stores.store import JournalError

__all__ = [
    "check_journal_path",
    "decode_stored_json",
    "journal_label",
    "json_kind",
    "sqlite_failure",
]

# SQLite's own names for these paths: no file is involved, so there is nothing to check.
_NOT_FILES = ("", ":memory:")

_DAMAGED = (
    "; the file is damaged or is not a SQLite database: restore it from a backup, or move "
    "it aside to start a new journal"
)
_HINTS = {
    "SQLITE_CORRUPT": _DAMAGED,
    "SQLITE_NOTADB": _DAMAGED,
    "SQLITE_CANTOPEN": "; check that its directory exists and that this process can write it",
    "SQLITE_READONLY": "; the file or its directory is read-only for this process",
    "SQLITE_FULL": "; the disk is full",
}
# Python 3.10 has no ``sqlite_errorname``; these message fragments stand in for the names.
_HINT_FRAGMENTS = {
    "malformed": _DAMAGED,
    "not a database": _DAMAGED,
    "unable to open": _HINTS["SQLITE_CANTOPEN"],
    "readonly": _HINTS["SQLITE_READONLY"],
    "disk is full": _HINTS["SQLITE_FULL"],
}


def journal_label(path: str, run_id: str | None = None) -> str:
    """``journal '<path>'``, followed by ``, run '<id>'`` when the problem is about one run."""
    text = f"journal {path!r}"
    return text if run_id is None else f"{text}, run {run_id!r}"


def _stat(target: Path, path: str) -> os.stat_result | None:
    """``os.stat(target)``, or None when it does not exist; other OS errors name ``path``."""
    try:
        return target.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise JournalError(
            f"journal {path!r}: cannot look at {str(target)!r}: {error.strerror or error}"
        ) from error


def check_journal_path(path: str) -> None:
    """Raise ``JournalError`` naming ``path`` when it cannot hold a SQLite journal.

    Cheap checks (a few ``stat`` calls, no file is opened or created): the parent is an
    existing directory that this process can write (SQLite keeps its ``-wal`` and
    ``-shm`` files next to the journal), and the path, when it exists, is a regular file
    this process can read and write.  ``os.access`` is lenient for root, so a root
    process may still be refused later, when the file is first opened.
    """
    if path in _NOT_FILES:
        return
    target = Path(path)
    parent = target.parent
    parent_stat = _stat(parent, path)
    if parent_stat is None:
        raise JournalError(
            f"journal {path!r}: the directory {str(parent)!r} does not exist; create it "
            "first or choose another path"
        )
    if not stat.S_ISDIR(parent_stat.st_mode):
        raise JournalError(
            f"journal {path!r}: {str(parent)!r} is not a directory, so it cannot hold the file"
        )
    target_stat = _stat(target, path)
    if target_stat is not None:
        if stat.S_ISDIR(target_stat.st_mode):
            raise JournalError(
                f"journal {path!r} is a directory; give the path of a file, e.g. "
                f"{str(target / 'runs.db')!r}"
            )
        if not stat.S_ISREG(target_stat.st_mode):
            raise JournalError(f"journal {path!r} exists but is not a regular file")
        if not os.access(target, os.R_OK | os.W_OK):
            raise JournalError(
                f"journal {path!r}: this process cannot read and write the file (check its "
                "permissions)"
            )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise JournalError(
            f"journal {path!r}: this process cannot write the directory {str(parent)!r} "
            "(SQLite creates its -wal and -shm files there)"
        )


def _hint(error: sqlite3.Error) -> str:
    name = getattr(error, "sqlite_errorname", None)
    if name in _HINTS:
        return _HINTS[name]
    message = str(error)
    return next((hint for fragment, hint in _HINT_FRAGMENTS.items() if fragment in message), "")


def sqlite_failure(
    error: sqlite3.Error, path: str, action: str, run_id: str | None = None
) -> JournalError:
    """The ``JournalError`` for an ``sqlite3`` error met while doing ``action``.

    The caller raises it ``from error``, so the original stays the ``__cause__``.
    """
    reason = str(error) or "no details"
    return JournalError(
        f"{journal_label(path, run_id)}: {action} failed: {reason} "
        f"(sqlite3.{type(error).__name__}){_hint(error)}"
    )


def decode_stored_json(stored: Any, path: str, run_id: str, what: str) -> Any:
    """The JSON value of a stored ``data`` column read as bytes (``CAST(data AS BLOB)``).

    ``what`` names the value in the message (``"record seq 3"``).  Bytes that are not
    UTF-8 and text that is not JSON raise ``JournalError`` naming the path, the run and
    ``what``, with the decoding error as the cause.
    """
    raw = bytes(stored) if stored is not None else b""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise JournalError(
            f"{journal_label(path, run_id)}: {what} is corrupt: its bytes are not UTF-8 text "
            f"({error.reason} at byte {error.start}); the file is damaged: restore it from a "
            "backup, or move it aside to start a new journal"
        ) from error
    try:
        return json.loads(text)
    except ValueError as error:
        raise JournalError(f"{journal_label(path, run_id)}: {what} is corrupt ({error})") from error


_JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number"}


def json_kind(value: Any) -> str:
    """How a decoded JSON value that has the wrong shape is named in a message."""
    if isinstance(value, dict):
        return f"an object with the keys {sorted(value)[:5]}" if value else "an empty object"
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return _JSON_KINDS.get(type(value), type(value).__name__)
