"""Docstrings render cleanly in the API reference.

The reference (docs/api.md) is rendered by mkdocstrings as Markdown, so a Sphinx role such
as ``:class:`Foo``` would show up as the literal text ``:class:`` followed by ``Foo``.
Docstrings name code with double-backtick spans instead (````Foo````).
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "tickwork"

# A role not preceded by a backtick: ````:class:`x````` inside a code span (as the
# drawing's docstring renderer documents them) is fine.
SPHINX_ROLE = re.compile(r"(?<!`):(?:py:)?(?:class|func|meth|mod|attr|exc|data|obj):`[^`]*`")


def _files_with_roles() -> dict[str, int]:
    found: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        count = len(SPHINX_ROLE.findall(path.read_text(encoding="utf-8")))
        if count:
            found[path.relative_to(PACKAGE).as_posix()] = count
    return found


def test_the_role_pattern() -> None:
    assert SPHINX_ROLE.search("see :class:`~tickwork.errors.ContextSerdeError`.")
    assert SPHINX_ROLE.search(":py:meth:`Context.to_dict`")
    assert SPHINX_ROLE.search(":mod:`tickwork.journal`")
    assert not SPHINX_ROLE.search("see ``ContextSerdeError``")
    assert not SPHINX_ROLE.search("roles such as ``:class:`Flow``` are shown as code")
    assert not SPHINX_ROLE.search(":param timeout: seconds")


def test_docstrings_use_no_sphinx_roles() -> None:
    found = _files_with_roles()
    assert not found, (
        "write ``Name`` instead of :class:`Name` (mkdocstrings renders docstrings as "
        f"Markdown): {found}"
    )
