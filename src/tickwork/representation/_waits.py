"""Find the ``wait_for_event`` calls in a step's body, for the drawing (api.md §23).

A step that calls ``await ctx.wait_for_event(Answer, waiter_event=Ask(...))`` waits for an
event type that no annotation mentions, so the graph of §16 cannot show it.  This module
reads the step function's source with ``ast`` and reports each call whose first
argument (or ``event_type=``) is a name, or a dotted name, that resolves in the function's
globals or closure to an ``Event`` subclass.  When ``waiter_event`` is a literal
constructor call of an ``InputRequiredEvent`` subclass, that class is reported as the
question the step asks.

It is static and best effort, by design: the step is never run.  Calls made in a helper
the step calls, or whose event type is computed at run time, are not found; a function
whose source is unavailable (built at run time, or shipped without ``.py`` files) simply
shows no waits.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tickwork.events import Event, InputRequiredEvent

__all__ = ["WaitSite", "wait_sites"]

_METHOD = "wait_for_event"


@dataclass(frozen=True)
class WaitSite:
    """One ``wait_for_event`` call: the awaited type, and the question asked, if literal."""

    event_type: type[Event]
    asks: type[InputRequiredEvent] | None = None


def wait_sites(func: Callable[..., Any]) -> tuple[WaitSite, ...]:
    """The distinct ``wait_for_event`` calls written in ``func``'s body, in source order.

    Never raises: a function without readable source, or whose source does not parse,
    gives ``()``.
    """
    try:
        target = inspect.unwrap(func)
        tree = ast.parse(textwrap.dedent(inspect.getsource(target)))
    except (OSError, TypeError, SyntaxError, ValueError):
        return ()
    namespace = _namespace(target)
    calls = sorted(
        (node for node in ast.walk(tree) if isinstance(node, ast.Call) and _is_wait_call(node)),
        key=lambda node: (node.lineno, node.col_offset),
    )
    found: dict[WaitSite, None] = {}
    for call in calls:
        site = _site(call, namespace)
        if site is not None:
            found.setdefault(site)
    return tuple(found)


def _is_wait_call(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Attribute) and call.func.attr == _METHOD


def _site(call: ast.Call, namespace: Mapping[str, Any]) -> WaitSite | None:
    awaited = _argument(call, 0, "event_type")
    event_type = _resolve(awaited, namespace) if awaited is not None else None
    if not (isinstance(event_type, type) and issubclass(event_type, Event)):
        return None
    waiter = _argument(call, 1, "waiter_event")
    asks = _resolve(waiter.func, namespace) if isinstance(waiter, ast.Call) else None
    return WaitSite(event_type, asks if _is_subclass(asks, InputRequiredEvent) else None)


def _argument(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    for item in call.keywords:
        if item.arg == keyword:
            return item.value
    if len(call.args) > position and not any(
        isinstance(arg, ast.Starred) for arg in call.args[: position + 1]
    ):
        return call.args[position]
    return None


def _resolve(expr: ast.expr, namespace: Mapping[str, Any]) -> Any:
    """The object a name or dotted name denotes, looked up without running user code.

    Attributes are read only on modules and classes (static lookups), so a property of
    some other object is never evaluated.
    """
    if isinstance(expr, ast.Name):
        return namespace.get(expr.id)
    if isinstance(expr, ast.Attribute):
        base = _resolve(expr.value, namespace)
        if isinstance(base, types.ModuleType):
            return vars(base).get(expr.attr)
        if isinstance(base, type):
            return inspect.getattr_static(base, expr.attr, None)
    return None


def _namespace(func: Any) -> dict[str, Any]:
    """The names ``func``'s body can see: its globals, overlaid by its closure cells."""
    namespace: dict[str, Any] = dict(getattr(func, "__globals__", {}))
    code = getattr(func, "__code__", None)
    closure = getattr(func, "__closure__", None) or ()
    for name, cell in zip(getattr(code, "co_freevars", ()), closure, strict=False):
        try:
            namespace[name] = cell.cell_contents
        except ValueError:  # a cell not filled yet
            continue
    return namespace


def _is_subclass(candidate: Any, base: type) -> bool:
    return isinstance(candidate, type) and issubclass(candidate, base)
