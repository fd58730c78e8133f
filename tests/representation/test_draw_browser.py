"""The HTML drawing in a real browser: headless Chromium loads it offline and renders it.

``--dump-dom`` prints the DOM *after* the page's own script ran, so this proves that the
page parses, that its script does not throw before the graph is usable (the details panel
is filled by it), and that every graph node is an element a browser test can find.  The
screenshot proves that something non-trivial is painted.

Chromium is started with networking features off and a throw-away profile; the page is
a ``file://`` URL.  The tests are skipped when ``/usr/bin/chromium`` is not installed.
Set ``TICKWORK_SCREENSHOT_DIR`` to keep a copy of every screenshot for a human to look at.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tickwork.representation import get_workflow_representation
from tickwork.representation._drawing import drawing_of
from tickwork.representation.draw import draw_workflow, to_html

from .showcase import Agent, Loopy, Payment, Review

CHROMIUM = Path("/usr/bin/chromium")
BROWSER_DEADLINE_SECONDS = 120

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="headless browser tests need /usr/bin/chromium"
)


def _chromium(tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    command = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        *arguments,
    ]
    try:
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=BROWSER_DEADLINE_SECONDS,
            check=True,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)


class _DomReader(HTMLParser):
    """The ``data-node-id`` of every element, and the text of the details panel."""

    def __init__(self) -> None:
        super().__init__()
        self.node_ids: list[str] = []
        self.node_classes: dict[str, str] = {}
        self.details_text: list[str] = []
        self._depth_in_details = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        node_id = values.get("data-node-id")
        if node_id is not None:
            self.node_ids.append(node_id)
            self.node_classes[node_id] = values.get("class") or ""
        if values.get("id") == "details-body" or self._depth_in_details:
            self._depth_in_details += 1

    def handle_endtag(self, tag: str) -> None:
        if self._depth_in_details:
            self._depth_in_details -= 1

    def handle_data(self, data: str) -> None:
        if self._depth_in_details:
            self.details_text.append(data)


@pytest.mark.parametrize("workflow", [Review, Loopy], ids=["Review", "Loopy"])
def test_the_rendered_dom_has_an_element_for_every_node(workflow: type, tmp_path: Path) -> None:
    page = tmp_path / "flow.html"
    draw_workflow(workflow, page)
    dumped = _chromium(tmp_path, "--dump-dom", page.as_uri())
    reader = _DomReader()
    reader.feed(dumped.stdout)
    graph = get_workflow_representation(workflow)
    assert sorted(reader.node_ids) == sorted(node.id for node in graph.nodes)
    for node in graph.nodes:
        assert reader.node_classes[node.id].split()[0] == "node"
    # the inline script ran: it filled the details panel with its hint
    assert "Click a node" in "".join(reader.details_text)


def _screenshot(tmp_path: Path, page: Path, name: str, size: tuple[int, int]) -> bytes:
    """Screenshot ``page`` at ``size``; check it is a PNG of that size and return it."""
    shot = tmp_path / f"{name}.png"
    _chromium(tmp_path, f"--screenshot={shot}", f"--window-size={size[0]},{size[1]}", page.as_uri())
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == size  # the IHDR chunk
    keep = os.environ.get("TICKWORK_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)
    return data


@pytest.mark.parametrize(
    ("workflow", "size"),
    [(Review, (1200, 900)), (Agent, (900, 850)), (Payment, (1000, 900))],
    ids=["Review", "Agent-loop-and-join", "Payment-waits"],
)
def test_the_screenshot_is_a_real_picture(
    workflow: type, size: tuple[int, int], tmp_path: Path
) -> None:
    page = tmp_path / "flow.html"
    draw_workflow(workflow, page)
    data = _screenshot(tmp_path, page, f"drawing-{workflow.__name__}", size)
    # a blank page of that size compresses to a few kilobytes; the drawing does not
    assert len(data) > 30_000


def _clicking(workflow: type, node_id: str, page: Path) -> None:
    """Write the drawing with a script that clicks ``node_id`` once the page has loaded."""
    click = (
        f"<script>document.querySelector('[data-node-id=\"{node_id}\"]')"
        ".dispatchEvent(new MouseEvent('click', {bubbles: true}));</script>"
    )
    page.write_text(to_html(workflow).replace("</body>", click + "</body>"), encoding="utf-8")


def test_clicking_a_waiting_step_lists_what_a_user_looks_for(tmp_path: Path) -> None:
    page = tmp_path / "clicked.html"
    _clicking(Payment, "pay", page)
    dumped = _chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
    reader = _DomReader()
    reader.feed(dumped)
    shown = "\n".join(text.strip() for text in reader.details_text if text.strip())
    for line in (
        "accepts",
        "ev: StartEvent",
        "returns",
        "Paid(amount: int)",
        "waits for (wait_for_event)",
        "PaymentApproval(approved: bool)",
        "asks (waiter_event)",
        "AskPayment(amount: int)",
        "num_workers",
        "retry policy",
        "timeout",
        "30 s",
        "failures go to",
    ):
        assert line in shown.splitlines(), line
    # the step docstring and the workflow docstring are rendered, not shown raw
    assert "Ask for approval, then <strong>pay</strong>." in dumped
    assert "<code>wait_for_event</code>" in dumped and "``" not in dumped
    # the clicked node is selected, and nodes it is not linked to are dimmed
    assert "node step selected" in reader.node_classes["pay"]
    assert "dim" in reader.node_classes["auditor"]
    assert "dim" not in reader.node_classes["PaymentApproval"]
    _screenshot(tmp_path, page, "drawing-Payment-clicked-pay", (1000, 900))


def test_clicking_a_join_in_a_loop_shows_its_collect_mode(tmp_path: Path) -> None:
    page = tmp_path / "clicked.html"
    _clicking(Agent, "observe", page)
    reader = _DomReader()
    reader.feed(_chromium(tmp_path, "--dump-dom", page.as_uri()).stdout)
    shown = [text.strip() for text in reader.details_text if text.strip()]
    assert "collect mode" in shown
    assert any(text.startswith("All: runs once, when the stream closes") for text in shown)
    assert "results: list[ToolResult(output: str)]" in shown
    assert sorted(reader.node_ids) == sorted(node.id for node in drawing_of(Agent).nodes)
    _screenshot(tmp_path, page, "drawing-Agent-clicked-observe", (900, 850))
