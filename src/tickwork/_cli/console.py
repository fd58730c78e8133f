"""How the ``tickwork`` command talks to the user: progress and error lines on stderr.

``CliError`` carries the one line that explains a failure and the exit status;
``Console`` writes ``[tag] text`` progress lines (coloured with plain ANSI codes only
when stderr is a terminal and ``NO_COLOR`` is not set) and the final error line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TextIO

from pydantic import ValidationError

__all__ = [
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "CliError",
    "Console",
    "one_line",
]

EXIT_OK = 0
EXIT_FAILURE = 1  # the run, or the workflow's own code, failed
EXIT_USAGE = 2  # the command line cannot be acted on
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT


class CliError(Exception):
    """A problem reported as one line on stderr; ``status`` is the exit status."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.status = status


_COLOURS = {"red": "31", "green": "32", "blue": "34", "magenta": "35", "cyan": "36", "dim": "2"}


@dataclass
class Console:
    """Progress and error lines on stderr, coloured only when stderr is a terminal."""

    stream: TextIO
    quiet: bool = False
    colour: bool = field(init=False)
    resume_hint: str | None = None
    """What becomes of the run being followed, said when the command is interrupted."""

    def __post_init__(self) -> None:
        isatty = getattr(self.stream, "isatty", None)
        self.colour = bool(isatty and isatty()) and "NO_COLOR" not in os.environ

    def progress(self, tag: str, text: str, colour: str = "cyan") -> None:
        """``[tag] text`` unless quiet."""
        if not self.quiet:
            self._write(f"{self._paint(f'[{tag}]', colour)} {text}\n")

    def notice(self, tag: str, text: str, colour: str = "cyan") -> None:
        """``[tag] text``, even when quiet (what a user at a prompt must see)."""
        self._write(f"{self._paint(f'[{tag}]', colour)} {text}\n")

    def prompt(self, text: str) -> None:
        """A question for the user (shown even when quiet)."""
        self._write(self._paint(text, "magenta"))

    def warning(self, message: str) -> None:
        """A line the user should read before going on (shown even when quiet)."""
        self._write(f"{self._paint('tickwork: warning:', 'magenta')} {message}\n")

    def error(self, message: str) -> None:
        """The one line that explains why the command failed."""
        self._write(f"{self._paint('tickwork: error:', 'red')} {message}\n")

    def _paint(self, text: str, colour: str) -> str:
        code = _COLOURS.get(colour)
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour and code else text

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def one_line(error: BaseException) -> str:
    """``Type: message`` on a single line (multi-line messages are joined).

    A pydantic ``ValidationError`` is shortened to ``field: problem; ...``.
    """
    if isinstance(error, ValidationError):
        problems = "; ".join(
            f"{'.'.join(map(str, item['loc'])) or 'value'}: {item['msg']}"
            for item in error.errors()
        )
        return f"{error.title}: {problems}"
    message = " ".join(str(error).split())
    name = type(error).__name__
    return f"{name}: {message}" if message else name
