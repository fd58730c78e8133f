"""The snapshot format (version 3, api.md §10.3): a run state as a JSON-compatible dict.

``encode_snapshot`` walks the *current* run state — never the history — so its cost
is O(size of the state), and with a ``SnapshotCache`` it re-encodes only what
changed since the previous snapshot.  Events are serializer strings, exceptions
``{"exception_type", "exception_message"}`` dicts, times epoch seconds.  Reading a
snapshot back (``decode_snapshot``) lives in ``tickwork.serde.snapshot_decode``
and is re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel

from tickwork._serde_fields import dump_exception, qualified_name
from tickwork.events import CollectionReleaseEvent
from tickwork.runtime.types.persistent import EMPTY_MAPPING, PList, PMap, PQueue
from tickwork.runtime.types.state import (
    NO_HOLDINGS,
    NO_SENDS,
    Holdings,
    Invocation,
    ReleaseState,
    RunState,
    StepRunState,
    StreamState,
    Waiter,
    WorkItem,
)
from tickwork.serde.plain_text import plain_writer
from tickwork.serde.requirements import encode_requirements
from tickwork.serde.serializers import (
    MODEL_TEXT_HEAD,
    BaseSerializer,
    JsonSerializer,
    model_text,
    plain_text_parts,
    writes_model_text,
)
from tickwork.serde.snapshot_cache import (
    _NO_PARTS,
    SnapshotCache,
    _advance,
    _Entry,
    _Frame,
    _new_cells,
    _Seq,
    _sort_key,
)
from tickwork.serde.snapshot_decode import SNAPSHOT_VERSION, decode_snapshot

__all__ = [
    "SNAPSHOT_VERSION",
    "SnapshotCache",
    "decode_snapshot",
    "empty_worker",
    "encode_snapshot",
]


# --------------------------------------------------------------------------- encoding


def _fresh_worker(template: dict[str, Any]) -> dict[str, Any]:
    """A worker entry built from a template: new dicts, shared sequence lists."""
    return {
        **template,
        "collected_events": template["collected_events"].copy(),
        "collect_generations": template["collect_generations"].copy(),
        "collected_waiters": [],
    }


# The keys of an item's encoding, in order, with the values of a fresh item where they
# are constants (``_Encoder.item`` copies it and replaces the values).
_ITEM_TEMPLATE: dict[str, Any] = {
    "event": None,
    "bound_events": None,
    "attempts": 0,
    "first_attempt_at": None,
    "last_exception": None,
    "last_failed_at": None,
    "recovery_counts": None,
    "not_before": None,
    "scope_path": None,
    "collection_release_payload": None,
    "work_item_id": None,
}

# How the JSON serializer's text of an empty release event begins ("events" is its first
# field); _Encoder._release_text splices the members' texts in after the "[".
_RELEASE_PREFIX = '{"__is_pydantic": true, "value": {"events": []'


class _Encoder:
    """One pass over a run state, reading and updating a ``SnapshotCache``."""

    def __init__(self, serializer: BaseSerializer, cache: SnapshotCache) -> None:
        self.ser = serializer
        self.serialize = serializer.serialize
        ways = cache.ways
        if ways is None or ways[0] is not serializer:  # decided once per serializer
            ways = cache.ways = (
                serializer,
                # Release events can be spliced from their members' texts (see
                # _release_text) when the serializer is the plain JSON one.
                type(serializer).serialize is JsonSerializer.serialize,
                # Events are written as text around their dump when that is what
                # serialize() returns for them (no envelope dict, the class name
                # written once per class).
                writes_model_text(serializer),
            )
        self.splice, self.model_text = ways[1], ways[2]
        self.tails = cache.tails
        self.plain = cache.plain
        self.cache = cache
        # Values are looked up in old_values and kept in values: the same dict (a value
        # found needs no storing), except in a pruning pass (see _Pruner).
        self.values = self.old_values = cache.values
        self.pruning = False
        self.old_workers = cache.workers
        self.old_tables = cache.tables
        self.workers: dict[str, _Entry] = {}
        self.tables: dict[str, _Entry] = {}
        self.touched = 0
        # The cache entries of the items this pass saw leave the front of a queue, by
        # work item id: a dispatched item's invocation reuses its encoding (see
        # keyed_invocation).
        self.popped: dict[str, tuple[WorkItem, dict[str, Any]]] = {}

    def finish(self) -> bool:
        """Store what this pass used in the cache; whether ``values`` needs pruning."""
        cache = self.cache
        cache.values = self.values
        cache.workers = self.workers
        cache.tables = self.tables
        return len(self.values) > 3 * self.touched + 1024

    # -- values ------------------------------------------------------------------------
    #
    # Value encodings are looked up in old_values by id(value) and kept in values, each
    # entry holding the value itself so that a recycled id is never taken for it.

    def event(self, event: Any) -> str | None:
        """The serializer text of ``event`` (``None`` stays ``None``)."""
        if event is None:
            return None
        self.touched += 1
        key = id(event)
        hit = self.old_values.get(key)
        if hit is not None and hit[0] is event:
            if self.pruning:
                self.values[key] = hit
            found: str = hit[1]
            return found
        cls = type(event)
        plain = self.plain.get(cls)  # model_text() inline, for a class known plain
        if plain is not None and plain[0] is cls.__pydantic_serializer__:
            text = plain[1](event)
        else:
            text = None
        if text is None:
            text = self._model_text(event)
            if text is None:
                text = self._event_text(event)
        self.values[key] = (event, text)
        return text

    def _model_text(self, event: Any) -> str | None:
        """``model_text(event)`` when the serializer writes that for ``event`` and it
        succeeds (``None``: use ``_event_text``); the parts of a plain class's text are
        kept in ``plain`` for its next events (see ``plain_text_parts``)."""
        if (
            not self.model_text
            or type(event) is CollectionReleaseEvent
            or not isinstance(event, BaseModel)
        ):
            return None
        try:
            text = model_text(event, self.tails)
        except Exception:  # _event_text ends with serialize(), which explains it
            return None
        parts = plain_text_parts(type(event), self.tails)  # again after a model_rebuild()
        if parts is not None:
            serializer, fields, tail = parts
            self.plain[type(event)] = (serializer, plain_writer(fields, MODEL_TEXT_HEAD, tail))
        return text

    def _event_text(self, event: Any) -> str:
        """The serializer text of ``event``."""
        if type(event) is CollectionReleaseEvent:
            if self.splice:
                spliced = self._release_text(event)
                if spliced is not None:
                    return spliced
        elif self.model_text and isinstance(event, BaseModel):
            try:
                return model_text(event, self.tails)
            except Exception:  # serialize() raises its own error for it
                pass
        text: str = self.serialize(event)
        return text

    def _release_text(
        self, event: CollectionReleaseEvent, texts: list[str | None] | None = None
    ) -> str | None:
        """The text of a join's release event, spliced from its members' cached texts
        (``texts``, when the caller has them: ``self.events(event.events)``).

        A release event carries the whole batch, whose members the snapshot has already
        serialized one by one (they sat in the join buffer): the JSON serializer writes
        a nested event exactly as it writes that event alone, so the batch's text is
        theirs joined inside the text of the event without its members.  ``None`` (use
        the serializer) if that text does not start as expected.
        """
        empty = self.serialize(event.model_copy(update={"events": []}))
        if not empty.startswith(_RELEASE_PREFIX):
            return None
        if texts is None:
            texts = self.events(event.events)
        members = ", ".join([text or "null" for text in texts])
        start = len(_RELEASE_PREFIX) - 1  # keeps the "]" of the empty list
        return _RELEASE_PREFIX[:-1] + members + empty[start:]

    def events(self, events: Iterable[Any]) -> list[str | None]:
        """The serializer texts of ``events``, in order.

        A cached text is taken here (``event()`` inline, without a call per event): the
        events of a join's batch or of a collect buffer are, as a rule, cached already,
        and there are thousands of them.
        """
        old_values, values, event = self.old_values, self.values, self.event
        texts: list[str | None] = []
        hits = 0
        for ev in events:
            hit = old_values.get(id(ev))
            if hit is not None and hit[0] is ev:
                if values is not old_values:  # a pruning pass keeps what it meets
                    values[id(ev)] = hit
                texts.append(hit[1])
                hits += 1
            else:
                texts.append(event(ev))
        self.touched += hits
        return texts

    def cached_item(self, item: WorkItem) -> dict[str, Any]:
        """The encoding of a queued item, shared while the item object is unchanged."""
        self.touched += 1
        key = id(item)
        hit = self.old_values.get(key)
        if hit is None or hit[0] is not item:
            hit = self.values[key] = (item, self.item(item))
        elif self.pruning:
            self.values[key] = hit
        encoded: dict[str, Any] = hit[1]
        return encoded

    def release_item(self, item: WorkItem) -> dict[str, Any]:
        """The encoding of a join's work item: its batch's texts are looked up once, for
        the release event's text (when it is not cached) and for its payload."""
        event: CollectionReleaseEvent = item.event
        texts = self.events(event.events)
        self.touched += 1  # event() inline, for the release event with its members' texts
        key = id(event)
        hit = self.old_values.get(key)
        if hit is None or hit[0] is not event:
            text = self._release_text(event, texts) if self.splice else None
            hit = (event, self.serialize(event) if text is None else text)
        self.values[key] = hit
        payload = {
            "binding_id": event.binding_id,
            "stream_id": event.stream_id,
            "events": texts,
            "output_scope_path": [*item.scope_path],
        }
        return self.item(item, hit[1], payload)

    def item(
        self,
        item: WorkItem,
        text: str | None = None,
        payload: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The encoding of a work item (queued, running or parked); a join's item goes to
        ``release_item``, which gives its event's ``text`` and its batch's ``payload``."""
        event, bound, error = item.event, item.bound_events, item.last_exception
        if payload is None:
            if type(event) is CollectionReleaseEvent:
                return self.release_item(item)
            text = self.event(event)
        recovery = item.recovery_counts  # the shared empty default, as a rule: no len()
        # A copy of the template, its values then replaced: a C clone of a table is
        # cheaper than building one key by key, and the keys keep the template's order.
        encoded = _ITEM_TEMPLATE.copy()
        encoded["event"] = text
        if bound is not None:
            encoded["bound_events"] = {k: self.event(v) for k, v in bound.items()}
        encoded["attempts"] = item.attempts
        encoded["first_attempt_at"] = item.first_attempt_at
        if error is not None:
            encoded["last_exception"] = dump_exception(error)
        encoded["last_failed_at"] = item.last_failed_at
        encoded["recovery_counts"] = (
            {} if recovery is EMPTY_MAPPING or not recovery else dict(recovery)
        )
        encoded["not_before"] = item.not_before
        encoded["scope_path"] = [*item.scope_path]
        if payload is not None:
            encoded["collection_release_payload"] = payload
        encoded["work_item_id"] = item.work_item_id
        return encoded

    def release_payload(self, item: WorkItem) -> dict[str, Any] | None:
        """The batch a join item carries, or ``None`` for other items."""
        event = item.event
        if type(event) is not CollectionReleaseEvent:
            return None
        return {
            "binding_id": event.binding_id,
            "stream_id": event.stream_id,
            "events": self.events(event.events),
            "output_scope_path": [*item.scope_path],
        }

    def keyed_invocation(self, inv: Invocation) -> tuple[int, dict[str, Any]]:
        """The sort key of a running invocation and its encoding.

        Its work item fields are encoded as its item's were while the item was queued,
        when that encoding is at hand (``popped``) and the invocation holds the very
        same field values (a dispatch copies them): one encoding per item, not two.
        """
        item: WorkItem = inv  # its work item's fields: encoded and cached per invocation
        hit = self.popped.pop(inv.work_item_id, None)
        if (
            hit is not None
            and (queued := hit[0]).event is inv.event  # every field item() encodes
            and queued.bound_events is inv.bound_events
            and queued.scope_path is inv.scope_path
            and queued.recovery_counts is inv.recovery_counts
            and queued.attempts is inv.attempts
            and queued.first_attempt_at is inv.first_attempt_at
            and queued.last_exception is inv.last_exception
            and queued.last_failed_at is inv.last_failed_at
            and queued.not_before is inv.not_before
        ):
            self.touched += 1
            encoded_item: dict[str, Any] = hit[1]
        else:
            encoded_item = self.cached_item(item)
        view, received, inv_id = inv.collect_view, inv.received, inv.invocation_id
        if view is EMPTY_MAPPING or not view:
            collected: dict[str, Any] = {}
            generations: dict[str, int] = {}
        else:
            collected = {bid: self.events(buf.events) for bid, buf in view.items()}
            generations = {bid: buf.generation for bid, buf in view.items()}
        encoded = encoded_item.copy()  # a C clone of the item's table, then its keys
        encoded["worker_id"] = inv.worker_id
        encoded["invocation_id"] = inv_id
        encoded["received"] = [] if received is NO_SENDS else list(received)
        encoded["collected_events"] = collected
        encoded["collect_generations"] = generations
        try:  # _seq() inline (the text after the last "-", without a list of parts)
            seq = int(inv_id[inv_id.rindex("-") + 1 :])
        except ValueError:
            seq = 0
        return seq, encoded

    def waiter(self, waiter: Waiter) -> dict[str, Any]:
        """The encoding of a parked ``wait_for_event`` call (new in every snapshot)."""
        item = waiter.item
        return {
            "waiter_id": waiter.waiter_id,
            "event": self.event(item.event),
            "waiting_for_event": qualified_name(waiter.event_type),
            "has_requirements": bool(waiter.requirements) or waiter.has_requirements,
            "requirements": encode_requirements(self.ser, waiter.requirements),
            "resolved_event": self.event(waiter.resolved_event),
            "bound_events": (
                {k: self.event(v) for k, v in item.bound_events.items()}
                if item.bound_events is not None
                else None
            ),
            "timed_out": waiter.timed_out,
            "scope_path": [*item.scope_path],
            "collection_release_payload": self.release_payload(item),
            "work_item_id": item.work_item_id,
            "timeout": waiter.timeout,
            "deadline": waiter.deadline,
            "waiter_event": self.event(waiter.waiter_event),
            "subclass_mode": waiter.subclass_mode,
            "work_item": self.item(item),
        }

    # -- sequences ---------------------------------------------------------------------

    def sequence(
        self,
        front: Any,
        back: Any,
        length: int,
        encode_one: Callable[[Any], Any],
        everything: Callable[[], Iterable[Any]],
        previous: _Seq | None,
        popped: dict[str, Any] | None = None,
    ) -> _Seq:
        """Encode a persistent sequence (front cells in order, then back cells reversed).

        When the cells are shared with ``previous`` the encoding is derived from it:
        pops advance the front, appends prepend back cells, so only the new elements
        are encoded, and the new version takes ``previous``'s private list over.  An
        unchanged sequence reuses ``previous`` as is.  ``popped`` (queues): the cache
        entries of the items that left the front move there (see ``_pop_entries``).
        """
        if previous is not None and not previous.spent:
            dropped = _advance(previous.front, front, len(previous.encoded))
            added = _new_cells(back, previous.back, length) if dropped is not None else None
            if dropped is not None and added is not None:
                self.touched += length
                if not (dropped or added):
                    return previous
                fresh = [encode_one(x) for x in reversed(added)]
                if popped is not None and dropped:
                    self._pop_entries(previous.front, dropped, popped)
                # Nothing raised: the new version takes the list over (no copy).
                encoded = previous.take()
                del encoded[:dropped]
                encoded += fresh
                return _Seq(front, back, encoded)
        return _Seq(front, back, [encode_one(x) for x in everything()])

    def queue(self, queue: PQueue[WorkItem], previous: _Seq | None) -> _Seq:
        """The encoded items of a step queue, in order."""
        front, back = queue.cells()
        return self.sequence(
            front, back, len(queue), self.cached_item, queue.to_list, previous, self.popped
        )

    def _pop_entries(self, cell: Any, count: int, popped: dict[str, Any]) -> None:
        """Move the cache entries of the ``count`` items from ``cell`` on (they left the
        queue's front) from ``values`` to ``popped``, by work item id.

        An item leaves a queue, as a rule, to be dispatched: its invocation, met later
        in this pass, takes the entry over (``keyed_invocation``).  Either way the item
        is in the queue no more, so the cache stops holding it (one still in the state
        elsewhere is only encoded again when met).
        """
        values = self.values
        for _ in range(count):
            item = cell[0]
            cell = cell[1]
            hit = values.pop(id(item), None)
            if hit is not None and hit[0] is item:
                popped[item.work_item_id] = hit

    def buffer(self, buffer: PList[Any], previous: _Seq | None) -> _Seq:
        """The serializer texts of an append-only buffer, oldest first."""
        return self.sequence(None, buffer.cell(), len(buffer), self.event, buffer.to_list, previous)

    # -- records -----------------------------------------------------------------------

    def worker_entry(self, name: str, step: StepRunState) -> _Entry:
        """The template of a step's worker entry, reused while the step state is the same."""
        previous = self.old_workers.get(name)
        if previous is not None and previous.source is step:
            self.touched += previous.weight
        else:
            before = self.touched
            parts: dict[str, Any] = {}
            template = self.worker_template(step, previous, parts)
            if previous is not None:
                ran = previous.parts.get("in_progress")
                if ran is not None and ran.source is not step.in_progress:
                    now = parts.get("in_progress")
                    self.retire(ran.parts, now.parts if now is not None else _NO_PARTS)
            previous = _Entry(step, template, self.touched - before, parts)
        self.workers[name] = previous
        return previous

    def retire(self, before: dict[str, Invocation], now: dict[str, Invocation]) -> None:
        """Drop the cached encodings of the invocations that ran ``before`` and no longer
        do ``now`` (both by invocation id), with those of their items and events.

        A finished invocation's item and event are, as a rule, in the state no more: kept
        in the cache, they would stay alive (a fan-out's thousands of them, for the
        garbage collector to walk again and again) until the cache is next pruned.  One
        still in the state elsewhere (a retried item, an event also buffered) is only
        encoded again when met.
        """
        drop = self.values.pop
        for key, inv in before.items():
            if now.get(key) is inv:  # a dict's get: these are the entries' own maps
                continue
            # An invocation carries its item's fields: its item's encoding is its own.  An
            # entry holds its value, so one found under the id of a live object is that
            # object's: no identity check is needed.
            drop(id(inv), None)
            drop(id(inv.event), None)

    def worker_template(
        self, step: StepRunState, previous: _Entry | None, parts: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Encode a changed step (``None``: no queue, invocations or buffers), reusing the
        containers that did not change."""
        if not (step.queue or step.in_progress or step.collect_buffers or step.join_buffer):
            return None
        old = previous.parts if previous is not None else _NO_PARTS
        queue: list[Any] = []
        if step.queue:
            parts["queue"] = seq = self.queue(step.queue, old.get("queue"))
            queue = seq.shared()
        collected_events, collect_generations = self.collect_buffers(step, old, parts)
        static: list[Any] = []
        if step.join_buffer:
            parts["join"] = seq = self.buffer(step.join_buffer, old.get("join"))
            static = seq.shared()
        return {
            "queue": queue,
            "in_progress": self.in_progress(step.in_progress, old, parts),
            "collected_events": collected_events,
            "collect_generations": collect_generations,
            "static_collect_events": static,
            "collected_waiters": [],
        }

    def in_progress(
        self, invocations: PMap[str, Invocation], old: dict[str, Any], parts: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """The running invocations of a step, in invocation order."""
        if not invocations:
            return []
        previous: _Entry | None = old.get("in_progress")
        if previous is not None and previous.source is invocations:
            parts["in_progress"] = previous
            self.touched += previous.weight
            reused: list[dict[str, Any]] = previous.template
            return reused
        # Each invocation's (sort key, encoding) is kept in values (_memo inline).
        old_values, values, keyed = self.old_values, self.values, self.keyed_invocation
        pairs = []
        running: dict[str, Any] = {}  # the entry's parts: what retire() compares
        for key, inv in invocations.items():
            running[key] = inv
            hit = old_values.get(id(inv))
            if hit is None or hit[0] is not inv:
                hit = values[id(inv)] = (inv, keyed(inv))
            elif values is not old_values:  # a pruning pass keeps what it meets
                values[id(inv)] = hit
            pairs.append(hit[1])
        self.touched += len(pairs)
        pairs.sort(key=_sort_key)
        encoded = [pair[1] for pair in pairs]
        parts["in_progress"] = _Entry(invocations, encoded, len(encoded), running)
        return encoded

    def collect_buffers(
        self, step: StepRunState, old: dict[str, Any], parts: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, int]]:
        """The ``collect_events`` buffers of a step and their generations."""
        buffers = step.collect_buffers
        if not buffers:
            return {}, {}
        previous: _Entry | None = old.get("collect")
        if previous is not None and previous.source is buffers:
            parts["collect"] = previous
            self.touched += previous.weight
            reused: tuple[dict[str, Any], dict[str, int]] = previous.template
            return reused
        before = self.touched
        old_seqs: dict[str, _Seq] = previous.parts if previous is not None else {}
        seqs = {bid: self.buffer(buf.events, old_seqs.get(bid)) for bid, buf in buffers.items()}
        encoded = (
            {bid: seq.shared() for bid, seq in seqs.items()},
            {bid: buf.generation for bid, buf in buffers.items()},
        )
        parts["collect"] = _Entry(buffers, encoded, self.touched - before, parts=dict(seqs))
        return encoded

    def stream_table(self, streams: PMap[str, StreamState]) -> dict[str, Any]:
        """The open fan-out streams by id (the template is reused while the map is the
        same, and each stream's while the stream record is)."""
        previous = self.old_tables.get("streams")
        if previous is None or previous.source is not streams:
            old = previous.parts if previous is not None else _NO_PARTS
            records: dict[str, Any] = {}
            table = {sid: self.stream(sid, st, old, records) for sid, st in sorted(streams.items())}
            previous = _Entry(streams, table, parts=records)
        self.tables["streams"] = previous
        template: dict[str, Any] = previous.template
        return template

    def stream(
        self, sid: str, st: StreamState, old: dict[str, Any], records: dict[str, Any]
    ) -> Any:
        """The template of one open fan-out stream."""
        previous: _Entry | None = old.get(sid)
        if previous is None or previous.source is not st:
            previous = _Entry(
                st,
                {
                    "stream_id": st.stream_id,
                    "source_step": st.source_step,
                    "scope_path": list(st.scope_path),
                    "open_work_items": st.open_work_items,
                    "accepting_binding_ids": sorted(st.accepting_binding_ids),
                },
            )
        records[sid] = previous
        return previous.template

    def release_table(self, releases: PMap[str, ReleaseState]) -> dict[str, Any]:
        """The join buffers by key (the template is reused while the map is the same, and
        each buffer's encoding is derived from the previous one's)."""
        previous = self.old_tables.get("releases")
        if previous is not None and previous.source is releases:
            self.touched += previous.weight
        else:
            before = self.touched
            old = previous.parts if previous is not None else _NO_PARTS
            records: dict[str, Any] = {}
            table = {
                key: self.release(key, rs, old, records) for key, rs in sorted(releases.items())
            }
            previous = _Entry(releases, table, self.touched - before, parts=records)
        self.tables["releases"] = previous
        template: dict[str, Any] = previous.template
        return template

    def release(
        self, key: str, rs: ReleaseState, old: dict[str, Any], records: dict[str, Any]
    ) -> Any:
        """The template of one join buffer."""
        previous: _Entry | None = old.get(key)
        if previous is None or previous.source is not rs:
            seq = self.buffer(rs.buffer, previous.parts["buffer"] if previous else None)
            template = {
                "binding_id": rs.binding_id,
                "stream_id": rs.stream_id,
                "buffer": seq.shared(),
                "released": rs.released,
            }
            previous = _Entry(rs, template, len(seq.encoded), parts={"buffer": seq})
        else:
            self.touched += previous.weight
        records[key] = previous
        return previous.template

    def frame(self, state: RunState) -> _Frame:
        """The templates of the snapshot of ``state``."""
        entry = self.worker_entry
        return _Frame(
            state,
            {name: entry(name, step).template for name, step in state.steps.items()},
            self.stream_table(state.streams),
            self.release_table(state.releases),
            frozenset(name for name, step in state.steps.items() if step.waiters),
        )

    def holdings(self, holdings: Holdings) -> dict[str, Any]:
        """The events kept for waiters still to come (api.md §23.1); rare, so not cached."""
        return {
            "unclaimed": [
                {
                    "event": self.event(u.event),
                    "producer": u.producer,
                    "taken_by": sorted(u.taken_by),
                }
                for u in holdings.unclaimed
            ],
            "held": [
                {
                    "event": self.event(h.event),
                    "target": h.target,
                    "recovery_counts": dict(h.recovery_counts),
                    "scope_path": list(h.scope_path),
                    "producer": h.producer,
                }
                for h in holdings.held
            ],
            "dropped": list(holdings.dropped),
            "questions": [self.event(q) for q in holdings.questions],
        }

    def snapshot(
        self, frame: _Frame, state_section: dict[str, Any] | None, one_off: bool = False
    ) -> dict[str, Any]:
        """The snapshot of ``frame``, with the waiters (encoded anew: their time moves);
        ``one_off``: no later snapshot reuses the frame (it gets no ``base``)."""
        snapshot = _build(frame, state_section) if one_off else _assemble(frame, state_section)
        if frame.state.holdings is not NO_HOLDINGS:
            snapshot["held_events"] = self.holdings(frame.state.holdings)
        if frame.has_waiters:
            state = frame.state
            workers = snapshot["workers"]
            for name, step in state.steps.items():
                if step.waiters:
                    workers[name]["collected_waiters"] = [
                        self.waiter(w)
                        for w in sorted(step.waiters.values(), key=lambda w: w.waiter_id)
                    ]
        return snapshot


class _Pruner(_Encoder):
    """A pass that reuses cached values but no templates, so it visits every value of
    the state; the values it did not visit are dropped from the cache."""

    def __init__(self, serializer: BaseSerializer, cache: SnapshotCache) -> None:
        super().__init__(serializer, cache)
        self.values = {}
        self.pruning = True
        self.old_workers = {}
        self.old_tables = {}


def _assemble(frame: _Frame, state_section: dict[str, Any] | None) -> dict[str, Any]:
    """A snapshot built from templates: a new top level, ``workers``, ``streams`` and
    ``collection_release_states`` map, the entries of steps with waiters new (their
    waiters are added to them), everything else shared with the cache and with other
    snapshots of the run (snapshots are read-only below those maps).

    The maps are copies of the frame's private ``base`` (C-level copies: a loop that
    snapshots after every step takes many snapshots of the same state)."""
    base = frame.base
    if base is None:
        base = frame.base = _build(frame, None)
    snapshot = base.copy()
    snapshot["state"] = state_section
    snapshot["workers"] = workers = base["workers"].copy()
    snapshot["deliveries"] = []
    snapshot["streams"] = base["streams"].copy()
    snapshot["collection_release_states"] = base["collection_release_states"].copy()
    for name in frame.waiting_steps:
        template = frame.workers[name]
        workers[name] = empty_worker() if template is None else _fresh_worker(template)
    return snapshot


def _build(frame: _Frame, state_section: dict[str, Any] | None) -> dict[str, Any]:
    """A snapshot built from templates without a ``base`` (see ``_assemble``)."""
    state = frame.state
    waiting = frame.waiting_steps
    return {
        "version": SNAPSHOT_VERSION,
        "state": state_section,
        "is_running": state.status in ("running", "cancelled"),
        "workers": {
            name: (
                (empty_worker() if template is None else _fresh_worker(template))
                if name in waiting
                else (_EMPTY_WORKER if template is None else template)
            )
            for name, template in frame.workers.items()
        },
        "stream_seq": state.stream_seq,
        "work_item_seq": state.work_item_seq,
        "invocation_seq": state.invocation_seq,
        "deliveries": [],
        "streams": dict(frame.streams),
        "collection_release_states": dict(frame.releases),
        "elapsed_alive": state.elapsed_alive,
        "last_alive_stamp": state.last_alive_stamp,
        "journal_seq": state.journal_seq,
    }


def _seq(identifier: str) -> int:
    """The number after the last "-" of an invocation id (0 if none): its sort key."""
    try:
        return int(identifier[identifier.rindex("-") + 1 :])
    except ValueError:
        return 0


def empty_worker() -> dict[str, Any]:
    """The worker entry of a step with nothing pending."""
    return {
        "queue": [],
        "in_progress": [],
        "collected_events": {},
        "collect_generations": {},
        "static_collect_events": [],
        "collected_waiters": [],
    }


# The entry of a step with nothing pending, shared by snapshots (they are read-only).
_EMPTY_WORKER = empty_worker()


def encode_snapshot(
    state: RunState,
    serializer: BaseSerializer,
    state_section: dict[str, Any] | None,
    cache: SnapshotCache | None = None,
) -> dict[str, Any]:
    """The snapshot of ``state`` (format version 3; O(size of the current state)).

    With a ``SnapshotCache``, whatever an earlier snapshot of the same run encoded
    and is still unchanged is reused (see the cache for what is shared).
    """
    if cache is not None:
        frame = cache.frame
        if (
            frame is not None
            and frame.state is state
            and frame.reusable
            and cache.serializer is serializer
        ):
            # The same state record as last time: only the maps are new (_assemble()
            # inline: a loop that snapshots after every step takes mostly these).
            base = frame.base
            if base is not None:
                snapshot = base.copy()
                snapshot["state"] = state_section
                snapshot["workers"] = base["workers"].copy()
                snapshot["deliveries"] = []
                snapshot["streams"] = base["streams"].copy()
                snapshot["collection_release_states"] = base["collection_release_states"].copy()
                return snapshot
            return _assemble(frame, state_section)
    one_off = cache is None
    if cache is None:
        idle = _idle_snapshot(state, state_section)
        if idle is not None:
            return idle
        cache = SnapshotCache()
    if cache.serializer is not serializer:
        cache.reset(serializer)
    encoder = _Encoder(serializer, cache)
    frame = encoder.frame(state)
    snapshot = encoder.snapshot(frame, state_section, one_off)
    if encoder.finish():
        # The cache outgrew the state: one more pass keeps only what it refers to.
        pruner = _Pruner(serializer, cache)
        frame = pruner.frame(state)
        pruner.snapshot(frame, state_section, True)  # registers the waiters' values
        pruner.finish()
    frame.reusable = not frame.waiting_steps and state.holdings is NO_HOLDINGS
    cache.frame = frame
    return snapshot


def _idle_snapshot(state: RunState, state_section: dict[str, Any] | None) -> dict[str, Any] | None:
    """The snapshot of a state with no event in it: no step has anything queued, running,
    buffered or waiting, no stream or join is open and nothing is held (a run just
    registered, or finished).  What an encoding pass makes for it, without the pass
    (nothing to encode: every worker entry is the shared empty one); ``None`` for any
    other state."""
    if state.streams or state.releases or state.holdings is not NO_HOLDINGS:
        return None
    for step in state.steps.values():
        if step.queue or step.in_progress or step.collect_buffers or step.join_buffer:
            return None
        if step.waiters:
            return None
    return _build(_Frame(state, dict.fromkeys(state.steps), {}, {}, frozenset()), state_section)
