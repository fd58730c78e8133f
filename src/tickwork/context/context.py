"""``Context``: the object steps and callers use to talk to a run.

A Context has three *faces*.  A new one is **pre-run** (it may carry a snapshot and a
staging store).  ``workflow.run(ctx=ctx)`` turns that same object into the **handler**
face of the run.  Each invocation gets its own **step** face.  Calling a member in the
wrong face raises ``ContextStateError`` naming the member and the
face it needs, because a silently wrong answer (a send into nowhere, a collect outside a
step) is much harder to debug than an error at the call.
"""

from __future__ import annotations

import functools
import math
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, cast

from pydantic import BaseModel
from typing_extensions import TypeVar

from tickwork._deprecation import warn_once
from tickwork.context._dict_state import DictState
from tickwork.errors import ContextSerdeError, ContextStateError, WorkflowRuntimeError
from tickwork.events import Event

if TYPE_CHECKING:
    from tickwork.context.state_store import InMemoryStateStore, infer_state_type
    from tickwork.retry_policy import RetryInfo
    from tickwork.runtime.control_loop.reduce import initial_state
    from tickwork.runtime.session import RunSession
    from tickwork.runtime.step_scope import StepScope, check_send_target, current_step_context
    from tickwork.runtime.types.evolve import evolve
    from tickwork.runtime.types.state import RunConfig, RunState
    from tickwork.serde.serializers import BaseSerializer, JsonSerializer
    from tickwork.serde.snapshot import SnapshotCache

__all__ = ["Context"]

MODEL_T = TypeVar("MODEL_T", bound=BaseModel, default=DictState)

_PRE_RUN = "a pre-run context (before the workflow has started)"
_RUNNING = "a running workflow (the handler's context)"
_HANDLER = "handler code (outside steps)"
_STEP = "a step (the context passed to a step function)"

_COMPOSED: weakref.WeakKeyDictionary[Any, dict[int, tuple[BaseSerializer, BaseSerializer]]] = (
    weakref.WeakKeyDictionary()
)


@functools.cache
def _snapshot_codec() -> tuple[type[SnapshotCache], Callable[..., dict[str, Any]]]:
    """The snapshot cache type and encoder, imported on the first ``to_dict()``
    (``import tickwork`` does not load them); an import statement in every call would
    cost more than encoding a small change."""
    from tickwork.serde.snapshot import SnapshotCache, encode_snapshot

    global _encode_snapshot
    _encode_snapshot = encode_snapshot
    return SnapshotCache, encode_snapshot


_encode_snapshot: Callable[..., dict[str, Any]] | None = None
"""``encode_snapshot`` once ``_snapshot_codec`` has imported it (a global read per
``to_dict()`` instead of a call)."""


_runtime_bound = False

# Read per stream write: a module global saves the attribute lookup on ``threading``.
_get_ident = threading.get_ident

_DEFAULT_SERIALIZER: JsonSerializer = cast("JsonSerializer", None)  # set by _bind_runtime
"""The serializer of a context given none: it has no allow-list, hence no state, and is
shared by every such context (one per run would be a third of a kilobyte each)."""


def _bind_runtime() -> None:
    """Import the run machinery this module calls and bind its names here, once.

    ``from tickwork import Context`` and defining workflows need none of the runtime (the
    reducer, the session, the step scopes), the state store or the serializers, so
    ``import`` does not load them: the first ``Context`` built does (every run builds one
    or binds a pre-run one, which was built too).  Binding module globals, rather than an
    import statement in each method, keeps the per-run and per-send paths as they were.
    """
    global _runtime_bound, _DEFAULT_SERIALIZER
    from tickwork.context.state_store import InMemoryStateStore, infer_state_type
    from tickwork.runtime.control_loop.reduce import initial_state
    from tickwork.runtime.step_scope import check_send_target, current_step_context
    from tickwork.runtime.types.evolve import evolve
    from tickwork.serde.serializers import JsonSerializer

    globals().update(
        InMemoryStateStore=InMemoryStateStore,
        infer_state_type=infer_state_type,
        JsonSerializer=JsonSerializer,
        initial_state=initial_state,
        check_send_target=check_send_target,
        current_step_context=current_step_context,
        evolve=evolve,
    )
    _DEFAULT_SERIALIZER = JsonSerializer()
    _runtime_bound = True


def _check_wait_timeout(timeout: Any) -> None:
    valid = (
        not isinstance(timeout, bool)
        and isinstance(timeout, (int, float))
        and math.isfinite(timeout)
        and timeout > 0
    )
    if not valid:
        raise ValueError(
            f"wait_for_event(timeout={timeout!r}): timeout must be None (no deadline) or "
            "a positive finite number of seconds"
        )


def _compose_serializer(
    serializer: BaseSerializer, workflow: Any, state_type: type[BaseModel]
) -> BaseSerializer:
    """Extend an allow-listed ``JsonSerializer`` with the workflow's own event and state
    types, so users list only the extra classes their payloads carry.

    Cached per workflow instance (weakly), keyed by the serializer given.
    """
    if not isinstance(serializer, JsonSerializer) or serializer.allowed_types is None:
        return serializer
    try:
        per_workflow = _COMPOSED.setdefault(workflow, {})
    except TypeError:
        per_workflow = {}
    cached = per_workflow.get(id(serializer))
    if cached is not None and cached[0] is serializer:
        return cached[1]
    composed = serializer.with_types(*getattr(workflow, "events", ()), state_type)
    per_workflow[id(serializer)] = (serializer, composed)
    return composed


def _empty_store(state_type: type[BaseModel]) -> InMemoryStateStore[Any]:
    """An empty state store of ``state_type``."""
    if state_type is DictState:
        return InMemoryStateStore._empty_dict_state()
    return InMemoryStateStore(state_type())


class Context(Generic[MODEL_T]):
    """The run's context: state store, event sending, streaming and step helpers."""

    def __init__(
        self,
        workflow: Any,
        previous_context: dict[str, Any] | None = None,
        serializer: BaseSerializer | None = None,
    ) -> None:
        if not _runtime_bound:
            _bind_runtime()
        self._workflow = workflow
        self._state_type: type[BaseModel] = infer_state_type(workflow)
        self._serializer: BaseSerializer = _compose_serializer(
            serializer or getattr(workflow, "serializer", None) or _DEFAULT_SERIALIZER,
            workflow,
            self._state_type,
        )
        self._snapshot = previous_context
        self._staging_store: InMemoryStateStore[Any] | None = None
        self._restored: RunState | None = None
        self._snapshot_cache: SnapshotCache | None = None
        if previous_context is not None:
            self._restored, self._staging_store = self._load_snapshot(previous_context)
        self._session: RunSession | None = None
        self._step: StepScope | None = None
        self._loop_thread: int | None = None
        self._queue: Any = None
        self._pump: Any = None

    # -- snapshots ---------------------------------------------------------------------

    def _load_snapshot(self, data: dict[str, Any]) -> tuple[RunState, InMemoryStateStore[Any]]:
        """Rebuild the run state and the store of a snapshot (``ContextSerdeError``)."""
        from tickwork.serde.snapshot import decode_snapshot  # the codec, on first snapshot

        config = self._workflow._reducer_config()
        state = decode_snapshot(data, config, self._serializer)
        section = data.get("state")
        if section is None:
            store: InMemoryStateStore[Any] = InMemoryStateStore(self._state_type())
        else:
            try:
                store = InMemoryStateStore.from_dict(section, self._serializer)
            except Exception as error:
                raise ContextSerdeError(
                    f"cannot load snapshot: the 'state' section is invalid: {error}"
                ) from error
        store._bind_serializer(self._serializer)
        return state, store

    def _current_run_state(self) -> RunState:
        session = self._session
        if session is not None:
            lane = session.stream_lane
            if lane is not None:  # stream writes are accounted in batches
                lane.settle_writes()
            return session.state
        if self._restored is not None:
            return self._restored
        return initial_state(self._workflow._reducer_config())

    def _resumable_state(self, config: RunConfig) -> RunState | None:
        """The state to resume from, if this context holds a resumable one."""
        if self._session is not None and self._session.live:
            return None
        state = self._current_run_state()
        if not state.is_running:
            return None
        return evolve(state, config=config)

    def _next_run_state(self, config: RunConfig) -> RunState:
        """A fresh run that keeps the journal numbering of the previous one."""
        fresh = initial_state(config)
        previous = self._current_run_state()
        return evolve(fresh, journal_seq=previous.journal_seq) if previous.journal_seq else fresh

    def to_dict(
        self, serializer: BaseSerializer | None = None, *, include_state: bool = True
    ) -> dict[str, Any]:
        """A snapshot of the run (api.md §10.3), at O(size of the current state)."""
        if self._step is not None:
            raise ContextStateError(
                "Context.to_dict() needs handler code or a pre-run context; it was called "
                "inside a step"
            )
        ser = serializer or self._serializer
        cache = self._snapshot_cache
        if cache is None:
            cache = self._snapshot_cache = _snapshot_codec()[0]()
        encode_snapshot = _encode_snapshot or _snapshot_codec()[1]
        session = self._session
        if session is None:
            section = self.store.to_dict(ser) if include_state else None
            return encode_snapshot(self._current_run_state(), ser, section, cache)
        # The handler face (loops call this after every step): the store, and the state
        # as _current_run_state() gives it, read inline.
        section = session.store.to_dict(ser) if include_state else None
        lane = session.stream_lane
        if lane is not None:
            lane.settle_writes()
        return encode_snapshot(session.state, ser, section, cache)

    @classmethod
    def from_dict(
        cls,
        workflow: Any,
        data: dict[str, Any],
        serializer: BaseSerializer | None = None,
    ) -> Context[Any]:
        """A pre-run Context rebuilt from a snapshot (``ContextSerdeError`` if invalid)."""
        if data is None:
            raise ContextSerdeError(
                "cannot load snapshot: expected the dict Context.to_dict() returned, got "
                "None; use Context(workflow) for a fresh run"
            )
        return cls(workflow, previous_context=data, serializer=serializer)

    # -- face plumbing ---------------------------------------------------------------

    @classmethod
    def _for_step(cls, scope: StepScope) -> Context[Any]:
        """A step-face Context for one invocation (built by the runtime)."""
        ctx: Context[Any] = cls.__new__(cls)
        # The workflow layer hosts every step scope in a RunSession.
        session = cast("RunSession", scope.session)
        ctx._workflow = session.workflow
        ctx._serializer = session.serializer or _DEFAULT_SERIALIZER
        ctx._state_type = session.store.state_type
        ctx._snapshot = None
        ctx._staging_store = None
        ctx._session = session
        ctx._step = scope
        ctx._loop_thread = None
        ctx._queue = None
        ctx._pump = None
        return ctx

    @property
    def _face(self) -> str:
        if self._step is not None:
            return "step"
        return "handler" if self._session is not None else "pre_run"

    def _face_name(self) -> str:
        return {"step": "a step", "handler": "the handler", "pre_run": "a pre-run context"}[
            self._face
        ]

    def _need(self, member: str, face: str, needed: str) -> None:
        if self._face != face:
            raise ContextStateError(
                f"Context.{member}() needs {needed}; it was called on {self._face_name()}"
            )

    def _need_session(self, member: str) -> RunSession:
        if self._session is None or self._step is not None:
            self._need(member, "handler", _RUNNING)
        assert self._session is not None
        return self._session

    def _step_scope(self, member: str) -> StepScope:
        if self._step is None:
            raise ContextStateError(
                f"Context.{member}() can only be called inside {_STEP}; it was called on "
                f"{self._face_name()}"
            )
        return self._step

    def _check_thread(self, member: str) -> None:
        if self._loop_thread is not None and threading.get_ident() != self._loop_thread:
            raise RuntimeError(
                f"Context.{member}() must be called from the event loop's thread "
                "(only sync steps may call it from their worker thread)"
            )

    def _bind_run(self, session: RunSession) -> None:
        """Turn this pre-run context into the handler face of ``session``."""
        self._session = session
        self._loop_thread = session.loop_thread  # the same int: one less object per run

    # -- state -------------------------------------------------------------------------

    @property
    def store(self) -> InMemoryStateStore[MODEL_T]:
        """The run's state store (in the pre-run face, the staging store)."""
        if self._session is not None:
            store: InMemoryStateStore[MODEL_T] = self._session.store
            return store
        if self._staging_store is None:
            self._staging_store = _empty_store(self._state_type)
        return self._staging_store

    @classmethod
    def _for_handler(cls, session: RunSession) -> Context[Any]:
        """The handler face of ``session``, a run started without a Context: the
        ``Context(workflow)`` it would have been given, bound to it (built when the
        handler's is first asked for: a live run then holds no Context of its own)."""
        ctx: Context[Any] = cls(session.workflow)
        ctx._bind_run(session)
        return ctx

    def _store_for_run(self) -> InMemoryStateStore[Any] | None:
        """The store a run started from this context gets: its staging store, or ``None``
        (made on first use, see ``_fresh_store``) when it would be an empty
        ``DictState`` store, whose making can neither fail nor differ later.  A typed
        state is built now: a state model that cannot be built fails the run's start."""
        if self._staging_store is None and self._state_type is DictState:
            return None
        return self.store

    @staticmethod
    def _fresh_store(workflow: Any) -> InMemoryStateStore[Any]:
        """The state store of a run started without a Context (built on first use, see
        ``RunSession.store``): the empty store ``Context(workflow).store`` would be."""
        if not _runtime_bound:
            _bind_runtime()
        return _empty_store(infer_state_type(workflow))

    @property
    def is_running(self) -> bool:
        """Whether the run is live (pre-run: the snapshot's flag)."""
        if self._step is not None:
            warn_once(
                "Context.is_running",
                "Context.is_running inside a step is always True and is deprecated",
            )
            return True
        if self._session is not None:
            return self._session.live
        return bool((self._snapshot or {}).get("is_running", False))

    @property
    def run_id(self) -> str | None:
        """The id of the run (``None`` before the run starts)."""
        return self._session.run_id if self._session is not None else None

    # -- events --------------------------------------------------------------------------

    def send_event(self, message: Event, step: str | None = None) -> None:
        """Add ``message`` to the run; with ``step``, deliver it to that step only."""
        if self._session is None:
            raise ContextStateError(
                "Context.send_event() needs a running workflow: the workflow has not "
                "started yet (run it with workflow.run(ctx=ctx) first)"
            )
        if self._step is not None:
            self._step.send(message, step)
            return
        self._check_thread("send_event")
        check_send_target(self._session.config.steps, message, step)
        self._session.send_from_handler(message, step)

    def write_event_to_stream(self, ev: Event | None) -> None:
        """Publish ``ev`` to the run's event stream (not routed to any step)."""
        step = self._step  # inlined _step_scope(): steps call this in tight loops
        if step is None:
            step = self._step_scope("write_event_to_stream")
        elif ev is not None and not step.returned and _get_ident() == step.loop_thread:
            # StepScope.write's common case, inlined: a frame is a third of a write's
            # cost.  Any other case (a late write, another thread) takes the full path.
            lane = step.session.stream_lane
            if lane is not None:  # else the loop has stopped: the run has ended
                lane.write(ev, step.invocation.invocation_id)
            return
        step.write(ev)

    def collect_events(
        self, ev: Event, expected: Sequence[type[Event]], buffer_id: str | None = None
    ) -> list[Event] | None:
        """Buffer ``ev`` until every type in ``expected`` has arrived, then return them."""
        return self._step_scope("collect_events").collect(ev, expected, buffer_id)

    async def wait_for_event(
        self,
        event_type: type[Event],
        waiter_event: Event | None = None,
        waiter_id: str | None = None,
        requirements: dict[str, Any] | None = None,
        timeout: float | None = 2000,
    ) -> Any:
        """Suspend this invocation until an event of ``event_type`` arrives (see docs).

        ``timeout`` is ``None`` (wait without a deadline) or a positive finite number of
        seconds; anything else raises ``ValueError`` naming it.
        """
        if timeout is not None:
            _check_wait_timeout(timeout)
        scope = self._step_scope("wait_for_event")
        return scope.wait_for(event_type, waiter_event, waiter_id, requirements, timeout)

    def retry_info(self) -> RetryInfo:
        """The retry state of the current invocation."""
        return self._step_scope("retry_info").retry_info()

    @property
    def idempotency_key(self) -> str:
        """A key for the external calls of this invocation: the run id, the invocation
        id and the attempt, stable when the invocation runs again after a crash or a
        failover (``run-id:invocation-id:attempt``).  Pass it to a payment API, an email
        service... so that a re-run does not do the same thing twice."""
        return self._step_scope("idempotency_key").idempotency_key()

    def stream_events(self) -> AsyncIterator[Event]:
        """Every published event (internal ones included) up to the terminal event."""
        session = self._need_session("stream_events")
        if session.stream.drained:
            raise WorkflowRuntimeError(
                "the event stream was already consumed: it can only be streamed once per run"
            )
        return session.stream.iterate(expose_internal=True)

    async def running_steps(self) -> list[str]:
        """Sorted names of the steps that have a running invocation."""
        return self._need_session("running_steps").running_steps()

    @property
    def streaming_queue(self) -> Any:
        """Deprecated: an ``asyncio.Queue`` fed with ``stream_events()`` (asyncio only)."""
        warn_once(
            "Context.streaming_queue",
            "Context.streaming_queue is deprecated; iterate handler.stream_events()",
        )
        session = self._need_session("streaming_queue")
        from tickwork.runtime.session import detect_backend  # loaded: the run is live

        if detect_backend() != "asyncio":
            raise NotImplementedError("Context.streaming_queue is only available under asyncio")
        if self._queue is None:
            import asyncio

            queue: asyncio.Queue[Any] = asyncio.Queue()

            async def pump() -> None:
                async for event in session.stream.iterate(expose_internal=True):
                    queue.put_nowait(event)

            self._queue = queue
            self._pump = asyncio.get_running_loop().create_task(pump())
        return self._queue

    def get_result(self) -> Any:
        """Deprecated: the run's result (raises before the run has ended)."""
        warn_once(
            "Context.get_result",
            "Context.get_result() is deprecated; await the handler instead",
        )
        session = self._need_session("get_result")
        if session.exit is None:
            raise WorkflowRuntimeError(f"run {session.run_id} has not finished yet")
        if session.exit.kind == "complete":
            stop = session.exit.stop_event
            return stop.result if type(stop).__name__ == "StopEvent" else stop
        assert session.exit.exception is not None
        raise session.exit.exception

    @staticmethod
    def get_step_context() -> Context[Any]:
        """The Context of the step invocation running in this task or thread."""
        if not _runtime_bound:  # no Context built yet in this process: no run either
            _bind_runtime()
        ctx = current_step_context()
        if ctx is None:
            raise WorkflowRuntimeError(
                "Context.get_step_context() works only inside a step invocation"
            )
        step_ctx: Context[Any] = ctx
        return step_ctx

    def __repr__(self) -> str:
        run = f" run_id={self.run_id!r}" if self._session is not None else ""
        return f"<Context face={self._face}{run}>"
