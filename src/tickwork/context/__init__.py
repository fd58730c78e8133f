"""The run context package: serializers, the state store and (later) ``Context``."""

from __future__ import annotations

from tickwork.context.serializers import BaseSerializer, JsonSerializer, PickleSerializer

__all__ = [
    "BaseSerializer",
    "JsonSerializer",
    "PickleSerializer",
]
