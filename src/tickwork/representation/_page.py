"""The fixed parts of the HTML drawing: its stylesheet, its script and the page template.

Kept apart from ``tickwork.representation._html``, which computes what varies (the
SVG, the legend, the details), so that each file does one job.  Everything here is
inlined into the page: a drawing loads nothing from the network.

The script reads the node details JSON (see ``tickwork.representation._details``):
a string is shown as text, a list as a bulleted list, and ``{"html": ...}`` as markup
that Python rendered with every piece of user text escaped.
"""

from __future__ import annotations

__all__ = ["PAGE", "SCRIPT", "STYLE"]

STYLE = """
:root { color-scheme: light; }
body { margin: 0; background: #f8f9fa; color: #202124;
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
header { padding: 20px 24px 4px; }
h1 { margin: 0 0 4px; font-size: 22px; font-weight: 600; }
div.description { margin: 4px 0; max-width: 80ch; color: #3c4043; }
div.description p { margin: 4px 0; }
div.description ul { margin: 4px 0; padding-left: 22px; }
div.description pre, #details pre { margin: 4px 0; padding: 6px 8px; background: #f1f3f4;
  border-radius: 4px; overflow-x: auto; font-size: 12px; }
code { font: 0.92em ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono",
  monospace; background: #f1f3f4; border-radius: 3px; padding: 0 3px; }
p.summary { margin: 4px 0 0; color: #5f6368; font-size: 13px; }
main { display: flex; gap: 20px; padding: 12px 24px 24px; align-items: flex-start; }
.canvas { flex: 0 1 auto; overflow: auto; background: #fff; border: 1px solid #dadce0;
  border-radius: 8px; }
aside { flex: 0 0 280px; display: flex; flex-direction: column; gap: 16px; }
aside section { background: #fff; border: 1px solid #dadce0; border-radius: 8px;
  padding: 12px 14px; }
aside h2 { margin: 0 0 8px; font-size: 14px; }
ul.legend { list-style: none; margin: 0; padding: 0; font-size: 13px; }
ul.legend li { display: flex; align-items: center; gap: 8px; margin: 2px 0; }
.legend-swatch { flex: none; }
#details dl { margin: 0; font-size: 13px; }
#details dt { font-weight: 600; margin-top: 6px; }
#details dd { margin: 0; word-break: break-word; }
#details dd p { margin: 0 0 4px; }
#details dd ul { margin: 0; padding-left: 18px; }
#details dd.text { white-space: pre-wrap; }
#details p.hint { margin: 0; color: #5f6368; font-size: 13px; }
svg.workflow { display: block; }
.node { cursor: pointer; }
.node text { font: 13px ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono",
  monospace; text-anchor: middle; dominant-baseline: central; fill: #202124;
  pointer-events: none; }
.node .shape { stroke-width: 1.5; }
.node.step .shape { fill: #e8f0fe; stroke: #3367d6; }
.node.event .shape { fill: #fff7e0; stroke: #c98a00; }
.node.event.start .shape { fill: #e6f4ea; stroke: #188038; }
.node.event.stop .shape { fill: #fce8e6; stroke: #c5221f; }
.node.external .shape { fill: #f3e8fd; stroke: #8430ce; }
.node.resource .shape { fill: #e0f7fa; stroke: #00838f; }
.node.resource .rim, .legend-swatch.resource .rim { fill: none; stroke: #00838f;
  stroke-width: 1.5; }
.node.resource_config .shape { fill: #f1f8e9; stroke: #558b2f; }
.node.generic .shape { fill: #f1f3f4; stroke: #5f6368; stroke-dasharray: 4 3; }
.legend-swatch.step .shape { fill: #e8f0fe; stroke: #3367d6; }
.legend-swatch.event .shape { fill: #fff7e0; stroke: #c98a00; }
.legend-swatch.event.start .shape { fill: #e6f4ea; stroke: #188038; }
.legend-swatch.event.stop .shape { fill: #fce8e6; stroke: #c5221f; }
.legend-swatch.external .shape { fill: #f3e8fd; stroke: #8430ce; }
.legend-swatch.resource .shape { fill: #e0f7fa; stroke: #00838f; }
.legend-swatch.resource_config .shape { fill: #f1f8e9; stroke: #558b2f; }
.legend-swatch.generic .shape { fill: #f1f3f4; stroke: #5f6368; stroke-dasharray: 4 3; }
.node.selected .shape { stroke-width: 3; }
.node:focus { outline: none; }
.node:focus .shape { stroke-width: 3; }
.edge .line { fill: none; stroke-width: 1.5; }
.edge.flow .line { stroke: #5f6368; }
.edge.fan_out .line { stroke: #1a73e8; stroke-width: 3; }
.edge.resource .line { stroke: #00838f; stroke-width: 1.2; }
.edge.join .line { stroke: #8430ce; stroke-width: 2; stroke-dasharray: 2 4; }
.edge.failure .line { stroke: #d93025; stroke-dasharray: 6 4; }
.edge.wait .line { stroke: #e8710a; stroke-width: 2; stroke-dasharray: 8 3 2 3; }
.edge.asks .line { stroke: #e8710a; stroke-width: 1.5; }
.edge-label rect { fill: #fff; fill-opacity: 0.92; stroke: none; }
.edge-label text { font: 11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  text-anchor: middle; dominant-baseline: central; }
.edge-label.fan_out text { fill: #1a73e8; }
.edge-label.join text { fill: #8430ce; }
.edge-label.failure text { fill: #d93025; }
.edge-label.resource text { fill: #00838f; }
.edge-label.wait text, .edge-label.asks text { fill: #b3540a; }
.edge-label { pointer-events: none; }
.dim { opacity: 0.18; }
footer { padding: 0 24px 16px; color: #80868b; font-size: 12px; }
"""

SCRIPT = """
(function () {
  "use strict";
  var details = JSON.parse(document.getElementById("tickwork-node-details").textContent);
  var svg = document.querySelector("svg.workflow");
  var panel = document.getElementById("details-body");
  function show(id) {
    panel.textContent = "";
    if (id === null) {
      var hint = document.createElement("p");
      hint.className = "hint";
      hint.textContent = "Click a node to see its details and highlight its edges.";
      panel.appendChild(hint);
      return;
    }
    var list = document.createElement("dl");
    var facts = details[id] || {};
    Object.keys(facts).forEach(function (key) {
      var term = document.createElement("dt");
      term.textContent = key;
      var value = document.createElement("dd");
      var fact = facts[key];
      if (Array.isArray(fact)) {
        var items = document.createElement("ul");
        fact.forEach(function (text) {
          var item = document.createElement("li");
          item.textContent = String(text);
          items.appendChild(item);
        });
        value.appendChild(items);
      } else if (fact !== null && typeof fact === "object") {
        value.innerHTML = fact.html;  // rendered in Python, every user text escaped
      } else {
        value.className = "text";
        value.textContent = String(fact);
      }
      list.appendChild(term);
      list.appendChild(value);
    });
    panel.appendChild(list);
  }
  function select(id) {
    var linked = {};
    if (id !== null) { linked[id] = true; }
    svg.querySelectorAll(".edge, .edge-label").forEach(function (edge) {
      var on = id !== null && (edge.dataset.source === id || edge.dataset.target === id);
      if (on) { linked[edge.dataset.source] = true; linked[edge.dataset.target] = true; }
      edge.classList.toggle("dim", id !== null && !on);
    });
    svg.querySelectorAll(".node").forEach(function (node) {
      node.classList.toggle("dim", id !== null && !linked[node.dataset.nodeId]);
      node.classList.toggle("selected", node.dataset.nodeId === id);
    });
    show(id);
  }
  svg.addEventListener("click", function (event) {
    var node = event.target.closest(".node");
    select(node ? node.dataset.nodeId : null);
  });
  svg.addEventListener("keydown", function (event) {
    var node = event.target.closest(".node");
    if (node && (event.key === "Enter" || event.key === " ")) {
      event.preventDefault();
      select(node.dataset.nodeId);
    }
  });
  show(null);
})();
"""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="tickwork">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
<header>
<h1>{heading}</h1>
{description}
<p class="summary">{summary}</p>
</header>
<main>
<div class="canvas">{svg}</div>
<aside>
<section id="details"><h2>Details</h2><div id="details-body"></div></section>
<section><h2>Legend</h2>{legend}</section>
</aside>
</main>
<footer>Drawn by tickwork. This page is self-contained: it loads nothing from the network.</footer>
<script type="application/json" id="tickwork-node-details">{details_json}</script>
<script>{script}</script>
</body>
</html>
"""
