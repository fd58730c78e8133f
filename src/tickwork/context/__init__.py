"""The run context package: ``Context``, serializers and the state store."""

from __future__ import annotations

from tickwork.context.context import Context
from tickwork.serde.serializers import BaseSerializer, JsonSerializer, PickleSerializer

__all__ = [
    "BaseSerializer",
    "Context",
    "JsonSerializer",
    "PickleSerializer",
]
