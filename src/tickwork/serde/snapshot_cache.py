"""What a snapshot of a run keeps for the next one: the ``SnapshotCache``.

Snapshots of one run share every encoding that is still valid: values by identity, the
encodings of persistent sequences by the cons cells they were made from, and whole worker
entries and tables while their source is unchanged.  ``tickwork.serde.snapshot``
reads and updates the cache; this module holds its records and the sequence helpers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from tickwork.runtime.types.state import RunState
from tickwork.serde.serializers import BaseSerializer

__all__ = ["SnapshotCache"]


@dataclass(slots=True)
class _Seq:
    """The encoding of a persistent sequence and the cons cells it was made from.

    ``encoded`` is private to the cache: the next version of the sequence takes it over
    (``take``) and changes it in place, which leaves this record spent, so a version
    is always derived from what the previous one really held.  Snapshots get
    ``public``, one copy shared by the snapshots taken while the sequence is unchanged.
    """

    front: Any
    back: Any
    encoded: list[Any]
    public: list[Any] | None = None
    spent: bool = False

    def shared(self) -> list[Any]:
        """The copy of the encoding that snapshots hold."""
        public = self.public
        if public is None:
            public = self.public = self.encoded[:]
        return public

    def take(self) -> list[Any]:
        """The private list, for the next version to change in place (this record is
        spent: nothing is derived from it again)."""
        encoded = self.encoded
        self.encoded = []
        self.spent = True
        return encoded


@dataclass(slots=True)
class _Entry:
    """A private template of one state record, reused while the record is the same object.

    ``weight`` is the number of cached values the template refers to (it keeps the
    cache bound honest when the whole record is reused); ``parts`` holds the templates
    of its containers, reused one by one when the record changed but a container did
    not.
    """

    source: Any
    template: Any
    weight: int = 0
    parts: dict[str, Any] = field(default_factory=dict)


_NO_PARTS: dict[str, Any] = {}


class SnapshotCache:
    """Encodings from earlier snapshots of the same run, reused while unchanged.

    Run states are values that share their unchanged parts, so a snapshot taken after
    each step differs from the previous one in a few records only.  The cache keys its
    work by object identity at every level: events, work items and invocations
    (``values``), the template of each step's worker entry (``workers``), the stream and
    release tables and their records (``tables``), and persistent-container cells
    (queues and buffers, see ``_Encoder.sequence``); ``tails`` keeps the end of an
    event's text (its class name) by class, and ``plain`` what the text of an event of a
    plain class is written with (its serializer and the writer ``plain_writer`` makes from
    ``tickwork.serde.serializers.plain_text_parts``).
    A new snapshot therefore encodes only what changed and builds its own dicts;
    everything else is reused.
    Without it, snapshotting at every NOT_RUNNING of an n-item fan-out re-serializes the
    whole queue n times.

    What snapshots share: every snapshot gets its own dicts (and waiter entries), while
    the encodings of queued items and running invocations, and the lists of queues,
    running invocations and buffers that did not change, are shared between snapshots
    (treat a snapshot as read-only, or ``copy.deepcopy`` it before changing it).  New
    versions of a queue or buffer are derived from private copies, so an edited list
    never leaks into later versions of it.

    Templates are replaced by the ones the latest snapshot used; the entries of an
    invocation that finished (its own, its item's and its event's) are dropped when a
    snapshot sees it gone, a queued item's when a snapshot sees it leave the front of
    its queue (its invocation, if it was dispatched, reuses the item's encoding), and
    ``values`` is pruned by a full re-walk of the state whenever it outgrows what the
    latest snapshot refers to by a constant factor, so the cache stays O(state) at an
    amortized O(1) cost per change.  ``frame`` (the latest
    snapshot's templates, and the snapshot assembled from them) makes a snapshot of an
    unchanged state cost only copies of its top-level maps.
    """

    def __init__(self) -> None:
        self.serializer: BaseSerializer | None = None
        self.values: dict[int, tuple[Any, Any]] = {}
        self.tails: dict[type, str] = {}
        self.plain: dict[type, tuple[Any, Callable[[Any], str | None]]] = {}
        self.workers: dict[str, _Entry] = {}
        self.tables: dict[str, _Entry] = {}
        self.frame: _Frame | None = None
        self.ways: tuple[BaseSerializer, bool, bool] | None = None
        """How the encoder writes with a serializer (see ``_Encoder``), by serializer."""

    def reset(self, serializer: BaseSerializer) -> None:
        """Forget every encoding (they were made by another serializer)."""
        self.serializer = serializer
        self.values = {}
        self.tails = {}
        self.plain = {}
        self.workers = {}
        self.tables = {}
        self.frame = None
        self.ways = None


def _advance(cell: Any, target: Any, limit: int) -> int | None:
    """How many cells to walk from ``cell`` to reach ``target`` (``None``: not found)."""
    steps = 0
    while steps <= limit:
        if cell is target:
            return steps
        if cell is None:
            return None
        cell = cell[1]
        steps += 1
    return None


def _new_cells(cell: Any, old: Any, limit: int) -> list[Any] | None:
    """The heads of the cells prepended before ``old`` (newest first), or ``None``."""
    heads: list[Any] = []
    while cell is not old:
        if cell is None or len(heads) > limit:
            return None
        heads.append(cell[0])
        cell = cell[1]
    return heads


# The first element of a ``(sort key, encoding)`` pair (a C call: it runs per invocation).
_sort_key = itemgetter(0)


@dataclass(slots=True)
class _Frame:
    """The private templates of one snapshot (``None``: a step with nothing pending)."""

    state: RunState
    workers: dict[str, dict[str, Any] | None]
    streams: dict[str, dict[str, Any]]
    releases: dict[str, dict[str, Any]]
    waiting_steps: frozenset[str]
    """The steps with waiters: their entries are new in every snapshot."""
    base: dict[str, Any] | None = None
    """The snapshot of these templates without its state section (private: snapshots
    are copies of it, see ``tickwork.serde.snapshot._assemble``), made on first use."""
    reusable: bool = False
    """Whether a snapshot of the same state is ``_assemble``'s copies alone (nothing is
    encoded anew: no waiters, nothing held); set by ``encode_snapshot``."""

    @property
    def has_waiters(self) -> bool:
        """Whether some step has waiters (encoded anew in every snapshot)."""
        return bool(self.waiting_steps)
