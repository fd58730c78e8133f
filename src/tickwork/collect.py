"""Cardinality markers for ``list[E]`` join parameters: ``Annotated[list[E], Collect(Take(2))]``."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["All", "Cardinality", "Collect", "Take"]


@dataclass(frozen=True)
class Cardinality:
    """Base of the ways a join can take members from a fan-out stream."""


@dataclass(frozen=True)
class All(Cardinality):
    """Fire once, when the stream closes, with every member that arrived."""


@dataclass(frozen=True)
class Take(Cardinality):
    """Fire on the ``n``-th arrival with the first ``n`` members (or on close with fewer).

    ``cancel_rest=True`` cuts the stream at that point: siblings still queued or running
    are cancelled instead of running to completion for nothing.
    """

    n: int
    cancel_rest: bool = field(default=False, kw_only=True)

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"Take(n): n must be an int >= 1, got {self.n!r}")
        if not isinstance(self.cancel_rest, bool):
            raise ValueError(f"Take(cancel_rest=...) must be a bool, got {self.cancel_rest!r}")


@dataclass(frozen=True)
class Collect:
    """Marker for a join parameter: ``Annotated[list[Done], Collect(Take(3))]``."""

    cardinality: Cardinality = field(default_factory=All)
