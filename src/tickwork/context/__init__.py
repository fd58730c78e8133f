"""The run context package: ``Context``, serializers and the state store.

Its names are imported on first use (PEP 562): ``from tickwork import Context`` then
loads neither the state store nor the serializers, which the first ``Context`` built
imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tickwork._lazy import lazy_exports

if TYPE_CHECKING:
    from tickwork.context.context import Context as Context
    from tickwork.serde.serializers import BaseSerializer as BaseSerializer
    from tickwork.serde.serializers import JsonSerializer as JsonSerializer
    from tickwork.serde.serializers import PickleSerializer as PickleSerializer

__all__ = [
    "BaseSerializer",
    "Context",
    "JsonSerializer",
    "PickleSerializer",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "BaseSerializer": "tickwork.serde.serializers",
            "Context": "tickwork.context.context",
            "JsonSerializer": "tickwork.serde.serializers",
            "PickleSerializer": "tickwork.serde.serializers",
        },
    )
