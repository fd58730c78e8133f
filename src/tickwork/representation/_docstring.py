"""Docstrings in drawings: the class's own text, rendered to safe HTML or plain text.

Users write docstrings in reST (Sphinx) or Markdown, so a drawing that printed them raw
would show ````code````, ``*stars*`` and ``:class:`roles``` to a reader.  This module is a
deliberately tiny renderer for the markup people actually put in docstrings, not a full
reST or Markdown implementation:

* blocks: paragraphs (separated by blank lines, their lines joined), bullet lists
  (``-``, ``*`` or ``+`` items), and literal blocks (fenced with three backticks,
  indented, or ``>>>`` doctests), which keep their line breaks in ``<pre>``;
* inline: ````code```` and ``code`` spans, ``:role:`target``` (shown as code, ``~a.b.C``
  as ``C``), ``**strong**``, ``*emphasis*``, and links written ``[text](url)``,
  ```text <url>`_`` or ``<url>``.

Safety: every piece of user text goes through ``html.escape`` before it is wrapped in
tags, and a link becomes an ``<a>`` only for ``http``, ``https`` and ``mailto`` targets (a
``javascript:`` link stays text).  The output can therefore be inserted as HTML.
"""

from __future__ import annotations

import html
import inspect
import re
from collections.abc import Callable

__all__ = ["own_docstring", "render_docstring", "plain_docstring"]

_BULLET = re.compile(r"^([-*+])\s+")
_FENCE = "```"
_SAFE_URL = re.compile(r"^(?:https?://|mailto:)[^\s\"'<>]+$", re.IGNORECASE)

# Alternatives in priority order: a code span hides the stars and brackets inside it.
_INLINE = re.compile(
    r"``(?P<literal>.+?)``"
    r"|:(?:[\w.+-]+:)+`(?P<role>[^`]+)`"
    r"|`(?P<rst_text>[^`<]+?)\s*<(?P<rst_url>[^>`]+)>`__?"
    r"|`(?P<code>[^`]+)`"
    r"|\[(?P<md_text>[^\]]+)\]\((?P<md_url>(?:[^()\s]|\([^()\s]*\))+)\)"
    r"|<(?P<auto_url>(?:https?://|mailto:)[^>\s]+)>"
    r"|\*\*(?P<strong>[^\s*](?:.*?[^\s*])?)\*\*"
    r"|(?<![\w*])\*(?P<emphasis>[^\s*](?:.*?[^\s*])?)\*(?![\w*])"
)


def own_docstring(cls: type) -> str | None:
    """The docstring ``cls`` itself declares, cleaned; never one inherited from a base.

    ``inspect.getdoc`` falls back to the base class, so an undocumented workflow would
    show the ``Workflow`` base class's docstring; this reads ``cls.__dict__`` only.
    """
    doc = vars(cls).get("__doc__")
    if not isinstance(doc, str) or not doc.strip():
        return None
    return inspect.cleandoc(doc)


def render_docstring(text: str) -> str:
    """``text`` as HTML: ``<p>``, ``<ul>`` and ``<pre>`` blocks with inline markup."""
    parts: list[str] = []
    for kind, lines in _blocks(text):
        if kind == "pre":
            parts.append(f"<pre>{html.escape(chr(10).join(lines))}</pre>")
        elif kind == "list":
            items = "".join(f"<li>{_inline_html(item)}</li>" for item in lines)
            parts.append(f"<ul>{items}</ul>")
        else:
            parts.append(f"<p>{_inline_html(' '.join(lines))}</p>")
    return "".join(parts)


def plain_docstring(text: str) -> str:
    """The first paragraph of ``text`` on one line, with the inline markup removed."""
    for kind, lines in _blocks(text):
        if kind == "paragraph":
            return _inline(" ".join(lines), _plain_part, lambda s: s)
    return ""


# --- blocks ------------------------------------------------------------------------------


def _blocks(text: str) -> list[tuple[str, list[str]]]:
    """Split ``text`` into ``("paragraph" | "list" | "pre", lines)`` blocks, in order.

    A list block's "lines" are its items, continuation lines joined to their item.
    """
    blocks: list[tuple[str, list[str]]] = []
    lines = text.expandtabs(4).splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        stripped = line.strip()
        if not stripped:
            index += 1
        elif stripped.startswith(_FENCE):
            index = _fenced(lines, index, blocks)
        elif line.startswith(" ") or stripped.startswith(">>>"):
            index = _literal(lines, index, blocks)
        elif _BULLET.match(stripped):
            index = _bullets(lines, index, blocks)
        else:
            index = _paragraph(lines, index, blocks)
    return blocks


def _fenced(lines: list[str], index: int, blocks: list[tuple[str, list[str]]]) -> int:
    body: list[str] = []
    index += 1
    while index < len(lines) and not lines[index].strip().startswith(_FENCE):
        body.append(lines[index])
        index += 1
    blocks.append(("pre", body))
    return index + 1


def _literal(lines: list[str], index: int, blocks: list[tuple[str, list[str]]]) -> int:
    """An indented block (blank lines inside it included) or a doctest (up to a blank line)."""
    body: list[str] = []
    doctest = lines[index].strip().startswith(">>>")
    while index < len(lines):
        line = lines[index]
        if (not line.strip()) if doctest else (line.strip() and not line.startswith(" ")):
            break
        body.append(line)
        index += 1
    while body and not body[-1].strip():
        body.pop()
    blocks.append(("pre", _dedent(body)))
    return index


def _bullets(lines: list[str], index: int, blocks: list[tuple[str, list[str]]]) -> int:
    items: list[str] = []
    while index < len(lines) and lines[index].strip():
        stripped = lines[index].strip()
        bullet = _BULLET.match(stripped)
        if bullet:
            items.append(stripped[bullet.end() :])
        elif items:
            items[-1] += " " + stripped
        index += 1
    blocks.append(("list", items))
    return index


def _paragraph(lines: list[str], index: int, blocks: list[tuple[str, list[str]]]) -> int:
    body: list[str] = []
    while index < len(lines) and lines[index].strip() and not lines[index].startswith(" "):
        stripped = lines[index].strip()
        if body and (_BULLET.match(stripped) or stripped.startswith(_FENCE)):
            break
        body.append(stripped)
        index += 1
    if body and body[-1].endswith("::"):
        # reST "Example::" introduces a literal block and shows a single colon
        body[-1] = body[-1][:-1] if not body[-1].endswith(" ::") else body[-1][:-3]
    blocks.append(("paragraph", body))
    return index


def _dedent(lines: list[str]) -> list[str]:
    indents = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(indents, default=0)
    return [line[cut:] for line in lines]


# --- inline ------------------------------------------------------------------------------


def _inline_html(text: str) -> str:
    return _inline(text, _html_part, html.escape)


def _inline(
    text: str,
    render_match: Callable[[re.Match[str]], str],
    render_text: Callable[[str], str],
) -> str:
    """``text`` with each inline construct rendered and the text between them escaped."""
    out: list[str] = []
    position = 0
    for match in _INLINE.finditer(text):
        out.append(render_text(text[position : match.start()]))
        out.append(render_match(match))
        position = match.end()
    out.append(render_text(text[position:]))
    return "".join(out)


def _html_part(match: re.Match[str]) -> str:
    groups = match.groupdict()
    if groups["literal"] is not None:
        return f"<code>{html.escape(groups['literal'])}</code>"
    if groups["role"] is not None:
        return f"<code>{html.escape(_role_text(groups['role']))}</code>"
    if groups["code"] is not None:
        return f"<code>{html.escape(groups['code'])}</code>"
    if groups["strong"] is not None:
        return f"<strong>{_inline_html(groups['strong'])}</strong>"
    if groups["emphasis"] is not None:
        return f"<em>{_inline_html(groups['emphasis'])}</em>"
    text, url = _link(groups)
    if _SAFE_URL.match(url):
        return f'<a href="{html.escape(url)}" rel="noopener noreferrer">{html.escape(text)}</a>'
    return html.escape(text)


def _plain_part(match: re.Match[str]) -> str:
    groups = match.groupdict()
    if groups["role"] is not None:
        return _role_text(groups["role"])
    for name in ("literal", "code"):
        if groups[name] is not None:
            return str(groups[name])
    for name in ("strong", "emphasis"):
        if groups[name] is not None:
            return _inline(str(groups[name]), _plain_part, lambda s: s)
    return _link(groups)[0]


def _link(groups: dict[str, str | None]) -> tuple[str, str]:
    """``(text, url)`` of whichever link form matched."""
    if groups["rst_url"] is not None:
        return str(groups["rst_text"]).strip(), groups["rst_url"].strip()
    if groups["md_url"] is not None:
        return str(groups["md_text"]), groups["md_url"]
    url = str(groups["auto_url"])
    return url, url


def _role_text(target: str) -> str:
    """What a ``:role:`target``` shows: ``title <ref>`` → title, ``~a.b.C`` → ``C``."""
    titled = re.match(r"^(.*?)\s*<[^>]*>$", target)
    if titled and titled.group(1):
        return titled.group(1)
    if target.startswith("~"):
        return target[1:].rsplit(".", 1)[-1]
    return target.lstrip("!")
