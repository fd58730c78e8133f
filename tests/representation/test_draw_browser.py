"""The HTML drawing in a real browser: headless Chromium loads it offline and renders it.

``--dump-dom`` prints the DOM *after* the page's own script ran, so this proves that the
page parses, that its script does not throw before the graph is usable (the details panel
is filled by it), and that every graph node is an element a browser test can find.  The
screenshot proves that something non-trivial is painted.

Chromium is started with networking features off and a throw-away profile; the page is
a ``file://`` URL.  The tests are skipped when ``/usr/bin/chromium`` is not installed.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tickwork.representation import get_workflow_representation
from tickwork.representation.draw import draw_workflow

from .showcase import Loopy, Review

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


def test_the_screenshot_is_a_real_picture(tmp_path: Path) -> None:
    page = tmp_path / "flow.html"
    shot = tmp_path / "flow.png"
    draw_workflow(Review, page)
    _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1200,900", page.as_uri())
    assert shot.exists()
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert (width, height) == (1200, 900)
    # a blank 1200x900 page compresses to a few kilobytes; the drawing does not
    assert len(data) > 30_000
