"""Serializers (api.md §10.1): the public path of ``tickwork.serde.serializers``.

The serializers live in the serialization layer, below the runtime and the ``Context``
that both use them; this module keeps the import path users know.
"""

from __future__ import annotations

from tickwork.serde.serializers import (
    BaseSerializer,
    JsonPickleSerializer,
    JsonSerializer,
    PickleSerializer,
)

__all__ = [
    "BaseSerializer",
    "JsonPickleSerializer",
    "JsonSerializer",
    "PickleSerializer",
]
