"""Reading snapshots (format versions 2 and 3, api.md §10.3) back into a run state.

``decode_snapshot`` validates a snapshot and rebuilds the run state; every problem is
a ``ContextSerdeError`` that names the key, step or class.  Writing them is
``tickwork.serde.snapshot``'s job.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from tickwork._serde_fields import load_exception
from tickwork.errors import ContextSerdeError
from tickwork.runtime.types.persistent import PList, PMap, PQueue
from tickwork.runtime.types.slots import SlotPool
from tickwork.runtime.types.state import (
    NO_HOLDINGS,
    CollectBuffer,
    HeldEvent,
    Holdings,
    Invocation,
    ReleaseState,
    RunConfig,
    RunState,
    SendIndexes,
    StepRunState,
    StreamState,
    UnclaimedEvent,
    Waiter,
    WorkItem,
)
from tickwork.runtime.types.waiter_index import WaiterIndex
from tickwork.serde.requirements import decode_requirements
from tickwork.serde.serializers import BaseSerializer

__all__ = ["SNAPSHOT_VERSION", "decode_snapshot"]

SNAPSHOT_VERSION = 3
"""The format version this package writes (it also reads version 2).

Version 3 stores a waiter's timeout as a wall-clock ``deadline``; version 2 stored the
alive time it had spent (``timeout_spent``), which is read as a deadline counted from
the moment the snapshot is loaded."""

OLDEST_READABLE_VERSION = 2


class _Decoder:
    def __init__(self, serializer: BaseSerializer, config: RunConfig) -> None:
        self.ser = serializer
        self.config = config
        self.where = "snapshot"

    def fail(self, what: str, error: BaseException | None = None) -> ContextSerdeError:
        message = f"cannot load snapshot: {what} (at {self.where})"
        if error is not None:
            message += f": {error}"
        exc = ContextSerdeError(message)
        exc.__cause__ = error
        return exc

    def event(self, value: Any) -> Any:
        if value is None:
            return None
        try:
            with self.ser.validation_context():
                return self.ser.deserialize(value)
        except Exception as error:
            raise self.fail(
                "an event could not be decoded; if its class is not importable (e.g. "
                "defined inside a function) add it to JsonSerializer(allowed_types=[...])",
                error,
            ) from error

    def events(self, values: Any) -> list[Any]:
        if not isinstance(values, list):
            raise self.fail(f"expected a list of events, got {type(values).__name__}")
        return [self.event(v) for v in values]

    def exception(self, value: Any) -> BaseException | None:
        if value is None:
            return None
        with self.ser.validation_context():
            loaded: BaseException = load_exception(value)
        return loaded

    def event_type(self, name: str) -> type:
        try:
            return self.ser.resolve_class(name)
        except Exception as error:
            raise self.fail(
                f"the event class {name!r} cannot be resolved; add it to "
                "JsonSerializer(allowed_types=[...])",
                error,
            ) from error

    def item(self, data: Mapping[str, Any], step: str) -> WorkItem:
        bound = data.get("bound_events")
        return WorkItem(
            work_item_id=str(data["work_item_id"]),
            step=step,
            event=self.event(data.get("event")),
            bound_events={k: self.event(v) for k, v in bound.items()} if bound else None,
            scope_path=tuple(data.get("scope_path") or ()),
            recovery_counts=dict(data.get("recovery_counts") or {}),
            attempts=int(data.get("attempts") or 0),
            first_attempt_at=data.get("first_attempt_at"),
            last_exception=self.exception(data.get("last_exception")),
            last_failed_at=data.get("last_failed_at"),
            not_before=data.get("not_before"),
        )

    def buffers(
        self, events: Mapping[str, Any], generations: Mapping[str, Any]
    ) -> dict[str, CollectBuffer]:
        out: dict[str, CollectBuffer] = {}
        for bid, values in events.items():
            decoded = self.events(values)
            counts: dict[type, int] = {}
            for ev in decoded:
                counts[type(ev)] = counts.get(type(ev), 0) + 1
            out[bid] = CollectBuffer(PList.of(decoded), counts, int(generations.get(bid, 0)))
        return out

    def invocation(self, data: Mapping[str, Any], step: str) -> Invocation:
        item = self.item(data, step)
        return Invocation(
            invocation_id=str(data["invocation_id"]),
            step=step,
            worker_id=int(data.get("worker_id") or 0),
            item=item,
            dispatched_at=float(data.get("first_attempt_at") or 0.0),
            received=SendIndexes.of(int(i) for i in data.get("received") or ()),
            collect_view=self.buffers(
                data.get("collected_events") or {}, data.get("collect_generations") or {}
            ),
        )

    def waiter(self, data: Mapping[str, Any], step: str) -> Waiter:
        item_data = data.get("work_item") or data
        item = self.item(item_data, step)
        timeout = data.get("timeout")
        return Waiter(
            waiter_id=str(data["waiter_id"]),
            item=item,
            event_type=self.event_type(str(data["waiting_for_event"])),
            requirements=self.requirements(data.get("requirements")),
            waiter_event=self.event(data.get("waiter_event")),
            timeout=None if timeout is None else float(timeout),
            deadline=self.deadline(data, timeout),
            subclass_mode=bool(data.get("subclass_mode", False)),
            resolved_event=self.event(data.get("resolved_event")),
            timed_out=bool(data.get("timed_out", False)),
            has_requirements=bool(data.get("has_requirements", False)),
        )

    def deadline(self, data: Mapping[str, Any], timeout: Any) -> float | None:
        """A waiter's wall-clock deadline (version 2: what was left, counted from now)."""
        if timeout is None:
            return None
        if "deadline" in data:
            deadline = data["deadline"]
            return None if deadline is None else float(deadline)
        left = float(timeout) - float(data.get("timeout_spent") or 0.0)
        return time.time() + max(0.0, left)

    def requirements(self, text: Any) -> dict[str, Any] | None:
        try:
            with self.ser.validation_context():
                return decode_requirements(self.ser, text)
        except Exception as error:
            raise self.fail("a waiter's requirements could not be decoded", error) from error

    def holdings(self, data: Any, blind: PMap[tuple[str, str], Waiter]) -> Holdings:
        """The events kept for waiters still to come, and the blind waiters."""
        self.where = "held_events"
        data = data or {}
        holdings = Holdings(
            unclaimed=PList.of(
                UnclaimedEvent(
                    self.event(u["event"]), u.get("producer"), frozenset(u.get("taken_by") or ())
                )
                for u in data.get("unclaimed") or ()
            ),
            blind=blind,
            held=PList.of(
                HeldEvent(
                    self.event(h["event"]),
                    h.get("target"),
                    dict(h.get("recovery_counts") or {}),
                    tuple(h.get("scope_path") or ()),
                    h.get("producer"),
                )
                for h in data.get("held") or ()
            ),
            dropped=tuple(str(d) for d in data.get("dropped") or ()),
            questions=tuple(self.event(q) for q in data.get("questions") or ()),
        )
        if not (
            holdings.unclaimed
            or blind.size
            or holdings.held
            or holdings.dropped
            or holdings.questions
        ):
            return NO_HOLDINGS
        return holdings

    def worker(self, data: Mapping[str, Any], step: str) -> StepRunState:
        self.where = f"workers[{step!r}]"
        in_progress = [self.invocation(d, step) for d in data.get("in_progress") or ()]
        waiters = [self.waiter(d, step) for d in data.get("collected_waiters") or ()]
        by_item: dict[str, frozenset[str]] = {}
        for w in waiters:
            by_item[w.item.work_item_id] = by_item.get(w.item.work_item_id, frozenset()) | {
                w.waiter_id
            }
        return StepRunState(
            queue=PQueue.of(self.item(d, step) for d in data.get("queue") or ()),
            in_progress=PMap.of((inv.invocation_id, inv) for inv in in_progress),
            slots=SlotPool.with_busy(inv.worker_id for inv in in_progress),
            collect_buffers=self.buffers(
                data.get("collected_events") or {}, data.get("collect_generations") or {}
            ),
            join_buffer=PList.of(joined := self.events(data.get("static_collect_events") or [])),
            join_counts=_type_counts(joined),
            waiters=PMap.of((w.waiter_id, w) for w in waiters),
            waiters_by_item=PMap.of(by_item.items()),
        )


def _type_counts(events: list[Any]) -> dict[type, int]:
    counts: dict[type, int] = {}
    for event in events:
        counts[type(event)] = counts.get(type(event), 0) + 1
    return counts


def _has_pending_work(data: Mapping[str, Any]) -> bool:
    return any(
        data.get(key)
        for key in (
            "queue",
            "in_progress",
            "collected_waiters",
            "static_collect_events",
        )
    ) or any(bool(v) for v in (data.get("collected_events") or {}).values())


# Keys every snapshot tickwork wrote has (pre-run and finished ones included): a dict
# without them is something else, and loading it as a fresh run would hide the mistake.
_IDENTIFYING_KEYS = ("version", "is_running", "workers")


def _check_identity(data: Mapping[str, Any]) -> None:
    missing = [key for key in _IDENTIFYING_KEYS if key not in data]
    if not missing:
        return
    found = "an empty dict" if not data else f"a dict with keys {sorted(map(str, data))}"
    raise ContextSerdeError(
        f"cannot load snapshot: not a tickwork snapshot (got {found}); a snapshot always "
        f"has {', '.join(map(repr, _IDENTIFYING_KEYS))}, but "
        f"{', '.join(map(repr, missing))} {'is' if len(missing) == 1 else 'are'} missing. "
        "Pass what Context.to_dict() returned"
    )


def _check_version(data: Mapping[str, Any]) -> None:
    version = data["version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise ContextSerdeError(
            f"cannot load snapshot: 'version' must be an integer, got {version!r}"
        )
    if version > SNAPSHOT_VERSION:
        raise ContextSerdeError(
            f"cannot load snapshot: version {version} is newer than the highest supported "
            f"version {SNAPSHOT_VERSION}; upgrade tickwork to load it"
        )
    if version < OLDEST_READABLE_VERSION:
        raise ContextSerdeError(
            f"cannot load snapshot: version {version} (a legacy format) is not supported; "
            f"versions {OLDEST_READABLE_VERSION} to {SNAPSHOT_VERSION} can be loaded"
        )


def _waiter_index(
    steps: Mapping[str, StepRunState],
) -> tuple[WaiterIndex, PMap[tuple[str, str], Waiter]]:
    """The index of the pending waiters, and apart from it the blind ones (requirements
    the snapshot could not store: they match nothing until registered again)."""
    index = WaiterIndex()
    blind: PMap[tuple[str, str], Waiter] = PMap()
    for name, step in steps.items():
        for waiter in step.waiters.values():
            if not waiter.pending:
                continue
            if waiter.blind:
                blind = blind.set((name, waiter.waiter_id), waiter)
            else:
                index = index.add(waiter.event_type, waiter.requirements, (name, waiter.waiter_id))
    return index, blind


_REQUIRED_WHEN_RUNNING = (
    "workers",
    "stream_seq",
    "work_item_seq",
    "invocation_seq",
    "journal_seq",
    "elapsed_alive",
)


def decode_snapshot(data: Any, config: RunConfig, serializer: BaseSerializer) -> RunState:
    """Validate ``data`` and rebuild the run state it describes.

    Raises ``ContextSerdeError`` (with the underlying error as ``__cause__``) naming the
    offending key, step or class.  A finished snapshot (``is_running: false``) may come
    from another workflow: only its state section matters then.
    """
    if not isinstance(data, Mapping):
        raise ContextSerdeError(f"cannot load snapshot: expected a dict, got {type(data).__name__}")
    if "version" in data:
        _check_version(data)  # first: a newer format may have other keys
    _check_identity(data)
    running = data["is_running"]
    if not isinstance(running, bool):
        raise ContextSerdeError(
            f"cannot load snapshot: 'is_running' must be a boolean, got {running!r}"
        )
    if running:
        missing = [key for key in _REQUIRED_WHEN_RUNNING if key not in data]
        if missing:
            raise ContextSerdeError(
                f"cannot load snapshot: the snapshot of a running workflow is missing "
                f"{', '.join(repr(k) for k in missing)} (truncated or not a tickwork "
                "snapshot?)"
            )
    decoder = _Decoder(serializer, config)
    steps: dict[str, StepRunState] = {name: StepRunState() for name in config.steps}
    workers = data["workers"]
    if not isinstance(workers, Mapping):
        raise ContextSerdeError(
            f"cannot load snapshot: 'workers' must be a dict, got {type(workers).__name__}"
        )
    elapsed = _float(data, "elapsed_alive", 0.0)
    try:
        for name, worker in workers.items():
            if not isinstance(worker, Mapping):
                raise ContextSerdeError(f"cannot load snapshot: workers[{name!r}] must be a dict")
            if name not in config.steps:
                if running and _has_pending_work(worker):
                    raise ContextSerdeError(
                        f"cannot load snapshot: workers[{name!r}] holds pending work for a "
                        f"step the workflow {config.workflow_name} does not have"
                    )
                continue
            if running:
                steps[name] = decoder.worker(worker, name)
        streams, releases = _decode_streams(data, decoder) if running else (PMap(), PMap())
        index, blind = _waiter_index(steps) if running else (WaiterIndex(), PMap())
        holdings = decoder.holdings(data.get("held_events"), blind) if running else NO_HOLDINGS
    except ContextSerdeError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise decoder.fail(f"malformed entry ({type(error).__name__})", error) from error
    queued = sum(len(st.queue) for st in steps.values())
    in_flight = sum(len(st.in_progress) for st in steps.values())
    return RunState(
        config=config,
        steps=steps,
        status="running" if running else "pending",
        is_running=running,
        queued=queued if running else 0,
        running=in_flight if running else 0,
        waiter_index=index,
        streams=streams,
        releases=releases,
        stream_seq=_int(data, "stream_seq"),
        work_item_seq=_int(data, "work_item_seq"),
        invocation_seq=_int(data, "invocation_seq"),
        journal_seq=_int(data, "journal_seq"),
        elapsed_alive=elapsed,
        last_alive_stamp=data.get("last_alive_stamp"),
        holdings=holdings,
    )


def _decode_streams(
    data: Mapping[str, Any], decoder: _Decoder
) -> tuple[PMap[str, StreamState], PMap[str, ReleaseState]]:
    decoder.where = "streams"
    streams: PMap[str, StreamState] = PMap()
    for sid, st in (data.get("streams") or {}).items():
        streams = streams.set(
            sid,
            StreamState(
                stream_id=str(st["stream_id"]),
                source_step=str(st["source_step"]),
                scope_path=tuple(st.get("scope_path") or ()),
                open_work_items=int(st["open_work_items"]),
                accepting_binding_ids=frozenset(st.get("accepting_binding_ids") or ()),
            ),
        )
    decoder.where = "collection_release_states"
    releases: PMap[str, ReleaseState] = PMap()
    for key, rs in (data.get("collection_release_states") or {}).items():
        releases = releases.set(
            key,
            ReleaseState(
                binding_id=str(rs["binding_id"]),
                stream_id=str(rs["stream_id"]),
                buffer=PList.of(decoder.events(rs.get("buffer") or [])),
                released=bool(rs.get("released", False)),
            ),
        )
    return streams, releases


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ContextSerdeError(f"cannot load snapshot: {key!r} must be an integer >= 0")
    return value


def _float(data: Mapping[str, Any], key: str, default: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ContextSerdeError(f"cannot load snapshot: {key!r} must be a number")
    return float(value)
