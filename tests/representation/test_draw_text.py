"""Docstrings in drawings: the workflow's own docstring only, its markup rendered safely."""

from __future__ import annotations

import pytest

from tickwork import StartEvent, StopEvent, Workflow, step
from tickwork.representation._docstring import own_docstring, plain_docstring, render_docstring
from tickwork.representation.draw import to_html, to_mermaid

from .showcase import Agent, Payment, Review


class Base(Workflow):
    """A documented base workflow."""


class Undocumented(Base):
    @step
    async def go(self, ev: StartEvent) -> StopEvent:
        return StopEvent()


# --- whose docstring ---------------------------------------------------------------------


@pytest.mark.parametrize("workflow", [Agent, Undocumented], ids=["Agent", "Undocumented"])
def test_a_workflow_without_a_docstring_shows_none(workflow: type[Workflow]) -> None:
    assert own_docstring(workflow) is None
    page = to_html(workflow)
    assert 'class="description"' not in page
    assert "Base class of workflows" not in page
    assert "documented base" not in page
    lines = to_mermaid(workflow).splitlines()
    assert lines[1] == f"    %% {workflow.__name__}"
    assert not lines[2].startswith("    %%")  # no description comment follows the name


def test_own_docstring_is_cleaned_and_blank_counts_as_none() -> None:
    class Indented(Workflow):
        """First line.

        Second paragraph, indented in the source.
        """

    class Blank(Workflow):
        """ """

    assert own_docstring(Indented) == "First line.\n\nSecond paragraph, indented in the source."
    assert own_docstring(Blank) is None


def test_the_page_renders_the_docstring_markup() -> None:
    page = to_html(Payment)
    assert (
        '<div class="description"><p>Pay once a human approves: <code>pay</code> '
        "<em>waits</em> with <code>wait_for_event</code>.</p>"
    ) in page
    assert (
        '<a href="https://example.org/hitl" rel="noopener noreferrer">human-in-the-loop guide</a>'
    ) in page
    assert "``" not in page.split("<body>")[1].split("<script")[0]  # no raw reST left


def test_mermaid_shows_the_first_paragraph_without_markup() -> None:
    lines = to_mermaid(Payment).splitlines()
    assert lines[2] == "    %% Pay once a human approves: pay waits with wait_for_event."
    assert to_mermaid(Review).splitlines()[2] == (
        "    %% Write sections in parallel, assemble them, and ask a human to approve."
    )


# --- the renderer ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Use ``run()`` now", "<p>Use <code>run()</code> now</p>"),
        ("Use `run()` now", "<p>Use <code>run()</code> now</p>"),
        ("See :class:`~tickwork.Workflow`", "<p>See <code>Workflow</code></p>"),
        ("See :meth:`Flow.run`", "<p>See <code>Flow.run</code></p>"),
        ("See :ref:`the guide <guide>`", "<p>See <code>the guide</code></p>"),
        ("*one* and **two**", "<p><em>one</em> and <strong>two</strong></p>"),
        ("**`code` inside**", "<p><strong><code>code</code> inside</strong></p>"),
        ("2 * 3 * 4 and a_b_c and __init__", "<p>2 * 3 * 4 and a_b_c and __init__</p>"),
        (
            "[docs](https://x.org/a?b=1&c=2)",
            '<p><a href="https://x.org/a?b=1&amp;c=2" rel="noopener noreferrer">docs</a></p>',
        ),
        (
            "`the docs <https://x.org>`_",
            '<p><a href="https://x.org" rel="noopener noreferrer">the docs</a></p>',
        ),
        (
            "<https://x.org>",
            '<p><a href="https://x.org" rel="noopener noreferrer">https://x.org</a></p>',
        ),
        ("one\nparagraph\n\ntwo", "<p>one paragraph</p><p>two</p>"),
        (
            "Items:\n\n- a\n  more\n- *b*",
            "<p>Items:</p><ul><li>a more</li><li><em>b</em></li></ul>",
        ),
        (
            "Example::\n\n    x = 1\n      y\n\nAfter",
            "<p>Example:</p><pre>x = 1\n  y</pre><p>After</p>",
        ),
        ("```\n<b>raw</b>\n```", "<pre>&lt;b&gt;raw&lt;/b&gt;</pre>"),
        (">>> 1 + 1\n2", "<pre>&gt;&gt;&gt; 1 + 1\n2</pre>"),
    ],
)
def test_render_docstring(text: str, expected: str) -> None:
    assert render_docstring(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "<script>alert(1)</script>",
        "`<img src=x onerror=alert(1)>`",
        "**<b>bold</b>**",
        '[x](https://a.org/"onmouseover="alert(1))',
        "[click](javascript:alert(1))",
        "`x <javascript:alert(1)>`_",
    ],
)
def test_render_docstring_escapes_user_text_and_drops_unsafe_links(text: str) -> None:
    rendered = render_docstring(text)
    assert "<script" not in rendered
    assert "<img" not in rendered
    assert "<b>" not in rendered
    assert "javascript:" not in rendered.split(">", 1)[0]
    assert 'href="javascript' not in rendered
    assert '"onmouseover' not in rendered


def test_plain_docstring_drops_markup_and_keeps_the_first_paragraph() -> None:
    text = "Run ``flow`` *fast* with :func:`~a.b.go` and [docs](https://x.org).\n\nMore."
    assert plain_docstring(text) == "Run flow fast with go and docs."
    assert plain_docstring("    only code") == ""
