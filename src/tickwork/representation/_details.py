"""The details panel's content: per node, the facts to list when it is clicked.

The HTML page embeds the result as JSON and its script lays it out.  Each node maps to
an ordered dict of ``term -> value``, where a value is one of:

* a string, shown as text;
* a list of strings, shown as a bulleted list;
* ``{"html": "..."}``, markup made by ``
  render_docstring`` (which escapes every piece of user text first), inserted as HTML.

Only this module decides what becomes HTML, so the script never interprets user text.
"""

from __future__ import annotations

from typing import Any

from tickwork.representation._docstring import render_docstring
from tickwork.representation._drawing import WorkflowDrawing

__all__ = ["node_details"]

_NODE_KINDS = {
    "step": "step",
    "event": "event",
    "external": "the human (external_step)",
    "resource": "resource",
    "resource_config": "resource config",
}


def node_details(drawing: WorkflowDrawing) -> dict[str, dict[str, Any]]:
    """Per node id, the facts the details panel lists (label and kind first)."""
    details: dict[str, dict[str, Any]] = {}
    for node in drawing.nodes:
        facts: dict[str, Any] = {
            "label": node.label,
            "kind": _NODE_KINDS.get(node.node_type, node.node_type),
        }
        description = getattr(node, "description", None)
        if description:
            facts["description"] = {"html": render_docstring(description)}
        for fact in drawing.facts.get(node.id, ()):
            facts[fact.term] = list(fact.value) if isinstance(fact.value, tuple) else fact.value
        if node.node_type == "event" and "fields" not in facts:
            fields = _schema_fields(getattr(node, "event_schema", None))
            if fields:
                facts["fields"] = fields
        produced_by = getattr(node, "produced_by", None)
        if produced_by:
            facts["produced by"] = list(produced_by)
        for attribute in ("getter_name", "source_file", "source_line", "config_file"):
            value = getattr(node, attribute, None)
            if value is not None:
                facts[attribute.replace("_", " ")] = str(value)
        details[node.id] = facts
    return details


def _schema_fields(schema: Any) -> list[str]:
    """``name: type`` per property of a JSON schema (for events of unknown class)."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return []
    return [f"{name}: {_schema_type(spec)}" for name, spec in schema["properties"].items()]


def _schema_type(spec: Any) -> str:
    if not isinstance(spec, dict):
        return "any"
    if "type" in spec:
        return str(spec["type"])
    options = spec.get("anyOf")
    if isinstance(options, list):
        return " | ".join(_schema_type(option) for option in options)
    return "object" if "$ref" in spec else "any"
