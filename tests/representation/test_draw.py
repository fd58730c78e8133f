"""Drawing workflows: ``to_mermaid``, ``to_html`` and ``draw_workflow``.

The Mermaid tests read the text line by line, as Mermaid does: node declarations, one
edge per line, and ``linkStyle`` lines whose indexes must point at the right edges.  The
HTML tests parse the page with the standard library's ``html.parser`` and check what a
browser would load (nothing from the network) and what it would show (one SVG group per
graph node, one path per drawn edge).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tickwork import Event, StartEvent, StopEvent, Workflow, catch_error, step
from tickwork.events import StepFailedEvent
from tickwork.representation import get_workflow_representation
from tickwork.representation._drawing import drawing_of
from tickwork.representation._html import geometry
from tickwork.representation._layout import Layout, layered_layout
from tickwork.representation._routes import EdgeRoute, room_needed, route_edges
from tickwork.representation.draw import _mermaid_text, draw_workflow, to_html, to_mermaid

from .showcase import Agent, Loopy, Payment, Review
from .stepkit import fan_out, workflow_class
from .stepkit import step as fake_step

# --- reading Mermaid -----------------------------------------------------------------------

_EDGE_LINE = re.compile(
    r"^    (?P<source>\w+) (?P<arrow>-->|==>|-\.->)(?:\|\"(?P<label>[^\"]*)\"\|)? (?P<target>\w+)$"
)
_NODE_LINE = re.compile(r"^    (?P<id>\w+)(?P<shape>[\[\(\{].*[\]\)\}])$")


def _mermaid_edges(text: str) -> list[tuple[str, str, str, str | None]]:
    """``(source, arrow, target, label)`` for every edge line, in order."""
    found = []
    for line in text.splitlines():
        match = _EDGE_LINE.match(line)
        if match:
            found.append((match["source"], match["arrow"], match["target"], match["label"]))
    return found


def _mermaid_nodes(text: str) -> dict[str, str]:
    """Mermaid id -> shape text for every node declaration."""
    nodes = {}
    for line in text.splitlines():
        match = _NODE_LINE.match(line)
        if match and not line.strip().startswith(("classDef", "class ", "linkStyle")):
            nodes[match["id"]] = match["shape"]
    return nodes


def _link_styles(text: str) -> dict[str, list[int]]:
    """The stroke colour of each ``linkStyle`` line -> the edge indexes it styles."""
    styles = {}
    for line in text.splitlines():
        match = re.match(r"^    linkStyle ([\d,]+) stroke:(#\w+)", line)
        if match:
            styles[match[2]] = [int(i) for i in match[1].split(",")]
    return styles


RESOURCE_ID = next(
    n.id for n in get_workflow_representation(Review).nodes if n.node_type == "resource"
)


# --- Mermaid -------------------------------------------------------------------------------


def test_mermaid_is_a_top_down_flowchart_naming_the_workflow() -> None:
    text = to_mermaid(Review)
    lines = text.splitlines()
    assert lines[0] == "flowchart TD"
    assert lines[1] == "    %% Review"
    assert (
        lines[2] == "    %% Write sections in parallel, assemble them, and ask a human to approve."
    )
    assert text.endswith("\n")


def test_mermaid_declares_every_graph_node_with_its_shape() -> None:
    nodes = _mermaid_nodes(to_mermaid(Review))
    assert nodes == {
        "step_assemble": '["assemble"]',
        "event_Section": '(["Section"])',
        "event_AskApproval": '(["AskApproval"])',
        "external_step": '{{"external_step"}}',
        "step_decide": '["decide"]',
        "event_Approval": '(["Approval"])',
        "event_StopEvent": '(["StopEvent"])',
        "step_plan": '["plan"]',
        "event_StartEvent": '(["StartEvent"])',
        "event_Draft": '(["Draft"])',
        "step_recover": '["recover"]',
        "event_StepFailedEvent": '(["StepFailedEvent"])',
        "step_write": '["write"]',
        RESOURCE_ID: '[("Writer")]',
    }


def test_mermaid_marks_fan_out_join_failure_hitl_and_resource_edges() -> None:
    edges = _mermaid_edges(to_mermaid(Review))
    # the fan-out: thick, labelled with the list type
    assert ("step_plan", "==>", "event_Draft", "list[Draft]") in edges
    # the join: from the stream's producer to its list[E] step
    assert ("step_plan", "-.->", "step_assemble", "join list[Section]") in edges
    # the @catch_error routes, from each claimed step only
    failures = [(s, t) for s, arrow, t, label in edges if label == "on failure"]
    assert failures == [("step_write", "step_recover"), ("step_assemble", "step_recover")]
    assert all(arrow == "-.->" for _, arrow, _, label in edges if label == "on failure")
    # human in the loop
    assert ("event_AskApproval", "-->", "external_step", None) in edges
    assert ("external_step", "-->", "event_Approval", None) in edges
    # the resource edge carries the parameter name
    assert ("step_write", "-->", RESOURCE_ID, "writer") in edges
    # ordinary flow edges stay plain
    assert ("event_Draft", "-->", "step_write", None) in edges
    assert ("event_Section", "-->", "step_assemble", None) in edges


def test_mermaid_link_styles_point_at_the_right_edges() -> None:
    text = to_mermaid(Review)
    edges = _mermaid_edges(text)
    styles = _link_styles(text)
    assert [edges[i][1] for i in styles["#1a73e8"]] == ["==>"]  # fan-out
    assert [edges[i][3] for i in styles["#8430ce"]] == ["join list[Section]"]
    assert {edges[i][3] for i in styles["#d93025"]} == {"on failure"}
    assert len(styles["#d93025"]) == 2
    assert [edges[i][2] for i in styles["#00838f"]] == [RESOURCE_ID]


def test_mermaid_keeps_every_graph_edge_and_adds_only_joins_and_failures() -> None:
    graph = get_workflow_representation(Review)
    edges = _mermaid_edges(to_mermaid(Review))
    assert len(edges) == len(graph.edges) + 1 + 2  # one join, two failure routes
    assert edges[: len(graph.edges)] == [
        (
            _mermaid_id(e.source, graph),
            "==>" if (e.source, e.target) == ("plan", "Draft") else "-->",
            _mermaid_id(e.target, graph),
            "list[Draft]" if (e.source, e.target) == ("plan", "Draft") else e.label,
        )
        for e in graph.edges
    ]


def _mermaid_id(node_id: str, graph: Any) -> str:
    node_type = next(n.node_type for n in graph.nodes if n.id == node_id)
    return node_id if node_id.startswith(f"{node_type}_") else f"{node_type}_{node_id}"


def test_mermaid_classes_start_stop_and_kinds() -> None:
    text = to_mermaid(Review)
    assert "    class event_StartEvent start" in text
    assert "    class event_StopEvent stop" in text
    assert "    class external_step external" in text
    assert f"    class {RESOURCE_ID} resource" in text
    steps = next(line for line in text.splitlines() if line.endswith(" step"))
    assert set(steps.split()[1].split(",")) == {
        "step_assemble",
        "step_decide",
        "step_plan",
        "step_recover",
        "step_write",
    }


def test_mermaid_wildcard_handler_take_join_nested_fan_out_and_config() -> None:
    text = to_mermaid(Loopy)
    edges = _mermaid_edges(text)
    failures = {s for s, _, t, label in edges if label == "on failure" and t == "step_oops"}
    assert failures == {
        "step_again",
        "step_both",
        "step_check",
        "step_merge_parts",
        "step_split",
        "step_start",
        "step_sub",
    }
    joins = [(s, t, label) for s, arrow, t, label in edges if label and label.startswith("join")]
    # the inner fan-out's stream is the one joined; the outer one has no list[E] step
    assert joins == [("step_sub", "step_merge_parts", "join list[Part], take 2")]
    fan_outs = {(s, t) for s, arrow, t, _ in edges if arrow == "==>"}
    assert fan_outs == {("step_split", "event_Chunk"), ("step_sub", "event_Part")}
    config = next(i for i, shape in _mermaid_nodes(text).items() if shape == '[/"settings"/]')
    assert config.startswith("resource_config_")
    assert ("step_check", "-->", config, "settings") in edges


def test_mermaid_ids_cannot_clash_with_mermaid_keywords() -> None:
    cls = workflow_class(
        "Keywords",
        fake_step("end", [StartEvent], [StopEvent]),
        fake_step("graph", [StartEvent], [StopEvent]),
    )
    text = to_mermaid(cls)
    assert '    step_end["end"]' in text
    assert '    step_graph["graph"]' in text
    assert ("event_StartEvent", "-->", "step_end", None) in _mermaid_edges(text)


def test_mermaid_text_escapes_quotes_brackets_and_hashes() -> None:
    assert _mermaid_text('say "hi" <b>#1\nnext') == "say #quot;hi#quot; #lt;b#gt;#35;1 next"


def test_drawing_a_class_or_an_instance_gives_the_same_text() -> None:
    assert to_mermaid(Review(timeout=None)) == to_mermaid(Review)
    assert to_html(Review(timeout=None)) == to_html(Review)


def test_an_invalid_workflow_can_still_be_drawn() -> None:
    """Drawing reads annotations only: a class no Workflow would accept still draws."""

    class Orphan(Event):
        pass

    cls = workflow_class(
        "Broken",
        fan_out("spray", [Orphan], [Orphan]),  # nothing starts it, nothing stops
    )
    text = to_mermaid(cls)
    assert ("step_spray", "==>", "event_Orphan", "list[Orphan]") in _mermaid_edges(text)
    assert 'data-node-id="spray"' in to_html(cls)


# --- HTML ----------------------------------------------------------------------------------


class _PageReader(HTMLParser):
    """Collects the elements a test asks about, and every URL-bearing attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: list[dict[str, str]] = []
        self.edges: list[dict[str, str]] = []
        self.labels: list[dict[str, str]] = []
        self.tags: list[str] = []
        self.url_attributes: list[tuple[str, str, str]] = []
        self.title: list[str] = []
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        self.tags.append(tag)
        self._in_title = tag == "title" and not self.nodes  # the page title, not SVG tooltips
        classes = values.get("class", "").split()
        if tag == "g" and "node" in classes:
            self.nodes.append(values)
        elif tag == "g" and "edge" in classes:
            self.edges.append(values)
        elif tag == "g" and "edge-label" in classes:
            self.labels.append(values)
        for name in ("src", "href", "xlink:href", "action", "srcset", "poster"):
            if name in values:
                self.url_attributes.append((tag, name, values[name]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)


def _read(page: str) -> _PageReader:
    reader = _PageReader()
    reader.feed(page)
    reader.close()
    return reader


@pytest.mark.parametrize("workflow", [Review, Loopy], ids=["Review", "Loopy"])
def test_html_is_self_contained(workflow: type[Workflow]) -> None:
    page = to_html(workflow)
    assert "http://" not in page
    assert "https://" not in page
    assert "//" not in re.sub(r"<script>.*?</script>", "", page, flags=re.S).replace(
        "<!DOCTYPE html>", ""
    )
    reader = _read(page)
    assert reader.url_attributes == []  # no src, no href: nothing to fetch
    assert "link" not in reader.tags
    assert "img" not in reader.tags
    assert "iframe" not in reader.tags
    assert page.startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("workflow", [Review, Loopy], ids=["Review", "Loopy"])
def test_html_has_one_node_group_per_graph_node(workflow: type[Workflow]) -> None:
    graph = get_workflow_representation(workflow)
    reader = _read(to_html(workflow))
    found = [(n["data-node-id"], n["data-node-type"]) for n in reader.nodes]
    assert sorted(found) == sorted((n.id, n.node_type) for n in graph.nodes)
    for node in reader.nodes:
        classes = node["class"].split()
        assert classes[0] == "node"
        assert node["data-node-type"] in classes


def test_html_marks_start_and_stop_events() -> None:
    reader = _read(to_html(Review))
    classes = {n["data-node-id"]: n["class"] for n in reader.nodes}
    assert classes["StartEvent"] == "node event start"
    assert classes["StopEvent"] == "node event stop"
    assert classes["Draft"] == "node event"
    assert classes["plan"] == "node step"
    assert classes["external_step"] == "node external"
    assert classes[RESOURCE_ID] == "node resource"


def test_html_draws_every_edge_of_the_drawing_with_its_kind() -> None:
    drawing = drawing_of(Review)
    reader = _read(to_html(Review))
    drawn = [(e["data-source"], e["data-target"], e["data-edge-kind"]) for e in reader.edges]
    assert drawn == [(e.source, e.target, e.kind) for e in drawing.edges]
    assert ("plan", "Draft", "fan_out") in drawn
    assert ("plan", "assemble", "join") in drawn
    assert ("write", "recover", "failure") in drawn
    assert ("assemble", "recover", "failure") in drawn
    assert ("write", RESOURCE_ID, "resource") in drawn
    labelled = {(label["data-source"], label["data-target"]) for label in reader.labels}
    assert labelled == {(e.source, e.target) for e in drawing.edges if e.label}


def test_html_has_a_legend_title_and_details_for_every_node() -> None:
    page = to_html(Review)
    reader = _read(page)
    assert "".join(reader.title) == "Review workflow"
    assert 'class="legend"' in page
    for text in ("fan-out: list[E]", "join: stream collected by a list[E] step", "on failure"):
        assert text in page
    match = re.search(
        r'<script type="application/json" id="tickwork-node-details">(.*?)</script>', page, re.S
    )
    assert match is not None
    details = json.loads(match.group(1))
    assert set(details) == {n.id for n in get_workflow_representation(Review).nodes}
    assert details["write"]["description"] == {"html": "<p>Write one section.</p>"}
    assert details["Section"]["fields"] == ["topic: str", "text: str"]
    assert details["Draft"]["produced by"] == ["plan"]
    assert details["write"]["accepts"] == ["ev: Draft(topic: str)"]


def test_html_title_is_configurable_and_user_text_is_escaped() -> None:
    class Sneaky(Workflow):
        """Docs with </script><script>alert(1)</script> & <b>markup</b>."""

        @step
        async def go(self, ev: StartEvent) -> StopEvent:
            """A step whose docstring closes </script> tags."""
            return StopEvent()

    page = to_html(Sneaky, title="<Mine> & yours")
    assert "<title>&lt;Mine&gt; &amp; yours</title>" in page
    assert "alert(1)</script>" not in page
    assert page.count("<script") == 2  # the details JSON and the inline script, nothing else
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in page  # the description, escaped


def test_html_svg_fits_every_node_inside_its_canvas() -> None:
    page = to_html(Loopy)
    size = re.search(r'<svg class="workflow"[^>]* viewBox="0 0 (\d+) (\d+)"', page)
    assert size is not None
    width, height = int(size[1]), int(size[2])
    shift = re.search(r'<g transform="translate\(([\d.]+),0\)">', page)
    dx = float(shift[1]) if shift else 0.0
    for cx, cy in re.findall(r'<ellipse class="shape" cx="([\d.]+)" cy="([\d.]+)"', page):
        assert 0 < float(cx) + dx < width
        assert 0 < float(cy) < height


# --- layout and routes ---------------------------------------------------------------------


def test_layout_puts_every_forward_edge_downwards_and_detects_loops() -> None:
    drawing = drawing_of(Loopy)
    ids = [n.id for n in drawing.nodes]
    edges = [(e.source, e.target) for e in drawing.edges]
    layout = layered_layout(ids, dict.fromkeys(ids, (80.0, 36.0)), edges, drawing.start_ids)
    assert layout.layers["StartEvent"] == 0
    assert layout.back_edges == {("again", "Checked")}  # the retry loop
    for source, target in edges:
        if (source, target) not in layout.back_edges:
            assert layout.layers[target] > layout.layers[source], (source, target)
    # a multi-slot join sits below both of its inputs; the stop event below everything
    assert layout.layers["both"] > max(layout.layers["Summary"], layout.layers["Side"])
    assert layout.layers["StopEvent"] > layout.layers["both"]
    # the handler's StepFailedEvent is pulled down to just above the handler
    assert layout.layers["StepFailedEvent"] == layout.layers["oops"] - 1


def test_layout_rows_do_not_overlap() -> None:
    drawing = drawing_of(Review)
    ids = [n.id for n in drawing.nodes]
    sizes = {n: (float(40 + 8 * len(n)), 36.0) for n in ids}
    layout = layered_layout(
        ids, sizes, [(e.source, e.target) for e in drawing.edges], ["StartEvent"]
    )
    rows: dict[int, list[str]] = {}
    for node, layer in layout.layers.items():
        rows.setdefault(layer, []).append(node)
    for row in rows.values():
        spans = sorted(
            (layout.centres[n][0] - sizes[n][0] / 2, layout.centres[n][0] + sizes[n][0] / 2)
            for n in row
        )
        assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))
        assert len({layout.centres[n][1] for n in row}) == 1  # one row, one height
    for node, (x, _) in layout.centres.items():
        assert x - sizes[node][0] / 2 >= 0
        assert x + sizes[node][0] / 2 <= layout.width


def test_a_long_edge_is_routed_beside_the_node_in_its_way() -> None:
    ids = ["top", "middle", "bottom"]
    sizes = {"top": (60.0, 30.0), "middle": (200.0, 30.0), "bottom": (60.0, 30.0)}
    edges = [("top", "middle"), ("middle", "bottom"), ("top", "bottom")]
    layout = layered_layout(ids, sizes, edges, ["top"])
    short, _, route = route_edges(edges, layout, sizes)
    middle_x = layout.centres["middle"][0]
    lanes = {x for x, _ in route.points}
    # the vertical lane clears the 200px-wide node in the middle row
    assert any(abs(x - middle_x) > 100 for x in lanes)
    assert route.label_anchor in ("start", "end")
    assert short.path.startswith("M")


def test_a_back_edge_turns_in_the_gaps_and_runs_outside_the_rows() -> None:
    ids = ["a", "b", "c"]
    sizes = dict.fromkeys(ids, (60.0, 30.0))
    edges = [("a", "b"), ("b", "c"), ("c", "a")]
    layout = layered_layout(ids, sizes, edges, ["a"])
    assert layout.back_edges == {("c", "a")}
    route = route_edges(edges, layout, sizes)[2]
    centre_x = layout.centres["a"][0]
    assert route.high_x > centre_x + 30 or route.low_x < centre_x - 30
    # it leaves c downwards and enters a from above, turning in the gaps beyond the rows
    (_, start_y), (_, end_y) = route.points[0], route.points[-1]
    assert route.points[1][1] > start_y and route.points[-2][1] < end_y


Segment = tuple[tuple[float, float], tuple[float, float]]


def _shared_length(first: Segment, second: Segment, tolerance: float = 0.5) -> float:
    """How long two segments run on top of each other (0 unless collinear and overlapping)."""
    (ax, ay), (bx, by) = first
    length = math.hypot(bx - ax, by - ay)
    if length == 0:
        return 0.0
    ux, uy = (bx - ax) / length, (by - ay) / length
    ends = []
    for px, py in second:
        if abs((px - ax) * uy - (py - ay) * ux) > tolerance:
            return 0.0  # this end is off the first segment's line
        ends.append((px - ax) * ux + (py - ay) * uy)
    return max(0.0, min(length, max(ends)) - max(0.0, min(ends)))


def _shared_segments(routes: list[EdgeRoute]) -> list[tuple[int, int, float]]:
    """``(edge i, edge j, shared length)`` for every pair of edges sharing a piece of line."""
    shared = []
    for (i, first), (j, second) in itertools.combinations(enumerate(routes), 2):
        for a in first.segments():
            for b in second.segments():
                overlap = _shared_length(a, b)
                if overlap > 1.0:
                    shared.append((i, j, overlap))
    return shared


def test_the_overlap_measure_sees_a_shared_vertical_path() -> None:
    lane = ((10.0, 0.0), (10.0, 100.0))
    assert _shared_length(lane, ((10.0, 40.0), (10.0, 160.0))) == pytest.approx(60.0)
    assert _shared_length(lane, ((10.3, 40.0), (10.3, 160.0))) == pytest.approx(60.0)
    assert _shared_length(lane, ((22.0, 0.0), (22.0, 100.0))) == 0.0  # the next lane
    assert _shared_length(lane, ((0.0, 50.0), (20.0, 50.0))) == 0.0  # a crossing


def test_a_join_inside_a_loop_and_the_loop_back_edge_run_apart() -> None:
    """The agent loop think -> call_tool -> observe -> think, whose observe joins the calls.

    The join (think -> observe) and the loop-back edge (Observed -> think) both need a
    lane beside the rows; they used to share one vertical path, and the join's last leg
    ran on top of ToolResult -> observe.
    """
    drawing = drawing_of(Agent)
    drawn = geometry(drawing)
    kinds = [(e.source, e.target, e.kind) for e in drawing.edges]
    join = kinds.index(("think", "observe", "join"))
    loop = kinds.index(("Observed", "think", "flow"))
    assert ("Observed", "think") in drawn.layout.back_edges
    assert _shared_segments(drawn.routes) == []
    # both really run in lanes beside the rows: vertical segments right of every node
    nodes_right = max(x + drawn.boxes[n].width / 2 for n, (x, _) in drawn.layout.centres.items())

    def lane_x(route: EdgeRoute) -> float:
        (a, b) = max(route.segments(), key=lambda seg: abs(seg[1][1] - seg[0][1]))
        assert a[0] == b[0]
        return a[0]

    join_lane, loop_lane = lane_x(drawn.routes[join]), lane_x(drawn.routes[loop])
    assert min(join_lane, loop_lane) > nodes_right
    assert abs(join_lane - loop_lane) >= 12
    # the join is the shorter edge, so it runs inside the loop and does not cross it
    assert join_lane < loop_lane


@pytest.mark.parametrize("workflow", [Review, Loopy, Agent, Payment], ids=lambda w: w.__name__)
def test_no_two_edges_share_a_segment(workflow: type[Workflow]) -> None:
    drawn = geometry(drawing_of(workflow))
    assert _shared_segments(drawn.routes) == []


def _long_chain_with_a_handler(length: int) -> type[Workflow]:
    """``s0 -> E0 -> s1 -> ... -> StopEvent`` and a wildcard handler catching every step."""
    events = [type(f"E{i}", (Event,), {"__module__": __name__}) for i in range(length - 1)]
    namespace: dict[str, Any] = {"__module__": __name__}
    for index in range(length):
        accepted = StartEvent if index == 0 else events[index - 1]
        returned = events[index] if index < length - 1 else StopEvent

        async def body(self: Any, ev: Any) -> Any:
            return None

        body.__name__ = body.__qualname__ = f"s{index}"
        body.__annotations__ = {"ev": accepted, "return": returned}
        namespace[body.__name__] = step(body)

    async def oops(self: Any, ev: StepFailedEvent) -> StopEvent:
        return StopEvent()

    namespace["oops"] = catch_error(oops)
    return type("Chain", (Workflow,), namespace)


def test_a_crowded_gap_gets_more_room_instead_of_shared_tracks() -> None:
    """Twenty failure routes turn into the gap above their handler: more than it holds."""
    drawing = drawing_of(_long_chain_with_a_handler(20))
    drawn = geometry(drawing)
    assert _shared_segments(drawn.routes) == []
    # with the usual spacing between rows, the runs into the handler would share tracks
    sizes = {node_id: (box.width, box.height) for node_id, box in drawn.boxes.items()}
    pairs = [(edge.source, edge.target) for edge in drawing.edges]
    usual = layered_layout(list(sizes), sizes, pairs, drawing.start_ids)
    routes, room = room_needed(pairs, usual, sizes)
    assert room and _shared_segments(routes) != []
    # so the gap above the handler was made taller, and only where room was needed
    layer = drawn.layout.layers["oops"] - 1
    assert set(room) == {layer}

    def row_distance(layout: Layout) -> float:
        ys = sorted({y for _, y in layout.centres.values()})
        return ys[layer + 1] - ys[layer]

    assert row_distance(drawn.layout) >= row_distance(usual) + room[layer]
    assert row_distance(drawn.layout) - row_distance(usual) == pytest.approx(
        drawn.layout.height - usual.height
    )


def test_edges_meeting_at_a_node_get_their_own_ports() -> None:
    drawing = drawing_of(Loopy)
    drawn = geometry(drawing)
    ends: dict[tuple[str, str], list[float]] = {}
    for edge, route in zip(drawing.edges, drawn.routes, strict=True):
        if edge.source != edge.target:
            ends.setdefault((edge.source, "out"), []).append(route.points[0][0])
            ends.setdefault((edge.target, "in"), []).append(route.points[-1][0])
    assert len(ends[("oops", "in")]) == 8  # seven failure routes and StepFailedEvent
    for points in ends.values():
        assert len(set(points)) == len(points)
    # the handler is widened so that its eight ports fit on it
    assert drawn.boxes["oops"].width > 100


# --- draw_workflow -------------------------------------------------------------------------


def test_draw_workflow_writes_mermaid_or_html_by_extension(tmp_path: Path) -> None:
    draw_workflow(Review, tmp_path / "flow.mmd")
    draw_workflow(Review, str(tmp_path / "flow.html"))
    draw_workflow(Review, tmp_path / "FLOW.HTM")
    assert (tmp_path / "flow.mmd").read_text(encoding="utf-8") == to_mermaid(Review)
    assert (tmp_path / "flow.html").read_text(encoding="utf-8") == to_html(Review)
    assert (tmp_path / "FLOW.HTM").read_text(encoding="utf-8") == to_html(Review)


@pytest.mark.parametrize(
    ("name", "named"), [("flow.png", "'.png'"), ("flow", "no extension"), ("flow.md", "'.md'")]
)
def test_draw_workflow_rejects_other_extensions(tmp_path: Path, name: str, named: str) -> None:
    with pytest.raises(ValueError, match=re.escape(named)) as caught:
        draw_workflow(Review, tmp_path / name)
    assert ".mmd" in str(caught.value) and ".html" in str(caught.value)
    assert list(tmp_path.iterdir()) == []
