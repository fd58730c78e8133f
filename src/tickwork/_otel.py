"""Whether and how to reach OpenTelemetry (extra ``otel``), for every layer that reports.

Nothing here imports OpenTelemetry until a program has: tickwork's spans and metrics are
cheap no-ops while ``opentelemetry-api`` is missing, and spans are skipped while no
tracer provider is installed (OpenTelemetry's no-op spans still cost microseconds).
This module imports nothing from tickwork but its version, so every layer may use it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from tickwork._version import __version__

__all__ = ["available", "span", "tracer", "tracing_configured"]

# Names a tracer provider for OpenTelemetry's API to load on first use.
_PROVIDER_VARIABLE = "OTEL_PYTHON_TRACER_PROVIDER"
_PROVIDER_KEY = (
    os.environ.encodekey(_PROVIDER_VARIABLE)
    if hasattr(os.environ, "encodekey")
    else _PROVIDER_VARIABLE
)
"""The variable's name as ``os.environ`` stores it."""
_AVAILABLE: bool | None = None
_TRACER: Any = None


def available() -> bool:
    """Whether ``opentelemetry-api`` can be imported (checked once)."""
    global _AVAILABLE
    if _AVAILABLE is None:
        _AVAILABLE = importlib.util.find_spec("opentelemetry") is not None
    return _AVAILABLE


def _provider_named() -> bool:
    """Whether ``OTEL_PYTHON_TRACER_PROVIDER`` is set (and not empty).

    Asked at every run start.  ``os.environ.get()`` of an unset variable costs three
    Python frames and a raised ``KeyError``; CPython's ``os.environ`` keeps its values in
    a dict (``_data``, by encoded name, updated in place by every change), which answers
    the same question in one look-up.  Anything else falls back to ``get()``.
    """
    data = getattr(os.environ, "_data", None)
    if type(data) is not dict:
        return bool(os.environ.get(_PROVIDER_VARIABLE))
    return bool(data.get(_PROVIDER_KEY))


def tracing_configured() -> bool:
    """Whether a real tracer provider is installed.

    A provider is installed through ``opentelemetry.trace`` (or named by the
    ``OTEL_PYTHON_TRACER_PROVIDER`` variable): while neither is the case there is none,
    and a program that does not trace never imports OpenTelemetry.
    """
    if not available():
        return False
    if "opentelemetry.trace" not in sys.modules and not _provider_named():
        return False
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    return type(provider).__name__ not in ("ProxyTracerProvider", "NoOpTracerProvider")


def tracer() -> Any:
    """tickwork's tracer (only call it once ``tracing_configured()``)."""
    global _TRACER
    if _TRACER is None:
        from opentelemetry import trace

        _TRACER = trace.get_tracer("tickwork", __version__)
    return _TRACER


@contextlib.contextmanager
def span(name: str, attributes: Mapping[str, str | int | float | bool]) -> Iterator[Any]:
    """A span ``name`` around the block, current inside it (``None`` and no cost while
    tracing is not configured).  An exception escaping the block is recorded on it."""
    if not tracing_configured():
        yield None
        return
    with tracer().start_as_current_span(name, attributes=dict(attributes)) as current:
        yield current
