"""Storing ``wait_for_event`` requirements (api.md §23.1 "Persistence").

Requirements are stored as the run serializer's text when it can encode them faithfully:
decoding the text must give values equal to the originals, since matching compares with
``==``.  A snapshot leaves out requirements that fail this (the waiter is then *blind*
after a resume, until its step registers them again); a journal refuses them, because a
replay must resolve waiters exactly as the live run did.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tickwork.serde.serializers import BaseSerializer

__all__ = ["decode_requirements", "encode_requirements"]


def encode_requirements(
    serializer: BaseSerializer, requirements: Mapping[str, Any] | None, *, strict: bool = False
) -> str | None:
    """The serializer's text for ``requirements``; ``None`` when there are none.

    When they cannot be stored faithfully, returns ``None`` or, with ``strict``, raises
    ``ValueError`` naming the requirement keys.
    """
    if not requirements:
        return None
    original = dict(requirements)
    try:
        text = serializer.serialize(original)
        faithful = serializer.deserialize(text) == original
    except Exception as error:
        if strict:
            raise ValueError(
                f"wait_for_event() requirements {sorted(original)} cannot be stored by "
                f"{type(serializer).__name__}: {error}"
            ) from error
        return None
    if not faithful:
        if strict:
            raise ValueError(
                f"wait_for_event() requirements {sorted(original)} do not survive "
                f"{type(serializer).__name__} unchanged (a tuple becomes a list, an object "
                "its fields...); use plain strings, numbers or enums"
            )
        return None
    return text


def decode_requirements(serializer: BaseSerializer, text: Any) -> dict[str, Any] | None:
    """The requirements stored as ``text`` (``None`` when none were stored).

    Raises ``ValueError`` when ``text`` is not a stored requirements dict.
    """
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError(f"stored requirements must be serializer text, got {type(text).__name__}")
    value = serializer.deserialize(text)
    if not isinstance(value, dict):
        raise ValueError(f"stored requirements must decode to a dict, got {type(value).__name__}")
    return value
