"""The run context package: ``Context``, serializers and the state store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tickwork.context.serializers import BaseSerializer, JsonSerializer, PickleSerializer

if TYPE_CHECKING:
    from tickwork.context.context import Context

__all__ = [
    "BaseSerializer",
    "Context",
    "JsonSerializer",
    "PickleSerializer",
]


def __getattr__(name: str) -> Any:
    # ``Context`` sits above the runtime, which itself imports serializers and the
    # snapshot codec from this package: load it on first use to keep imports acyclic.
    if name == "Context":
        from tickwork.context.context import Context

        return Context
    raise AttributeError(f"module 'tickwork.context' has no attribute {name!r}")
