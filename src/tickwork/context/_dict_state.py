"""``DictState``, the default run state, in a module of its own.

``Context``'s type parameter defaults to it, so ``from tickwork import Context`` needs the
class; this module lets it name ``DictState`` without loading the state store and its
serialization (``tickwork.context._state_section``, which registers the class with the
serializers and re-exports it, is imported by the first ``Context`` built).
"""

from __future__ import annotations

from tickwork._lazy import built_on_first_use
from tickwork.events import DictLikeModel

__all__ = ["DictState"]


@built_on_first_use
class DictState(DictLikeModel, defer_build=True):
    """The default state: a bag of dynamic fields (``DictState(_data={...})``)."""


DictState.__module__ = "tickwork.context.state_store"  # its documented home
