"""The run's state store: typed or dict-like state shared by every step of a run.

Readers never wait: ``get()`` and ``get_state()`` read the committed state. Writers
(``set``, ``set_state``, ``clear``, ``edit_state``) take a FIFO writer lock and replace the
committed state with a new object built by path copying, so a reader or a checkpoint that
holds the old object keeps seeing it unchanged. ``edit_state()`` hands out an isolated
deep copy and commits it only when its block exits normally.

Public names follow §9 of the API contract. Paths and copies live in ``_state_paths``,
JSON Patch in ``_state_patch``, state sections and checkpoints in ``_state_section``; all
their public names are re-exported here.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any, Generic, Protocol, TypeVar

import anyio
import anyio.lowlevel
from pydantic import BaseModel

from tickwork._step_threads import in_step_thread
from tickwork.context._state_patch import apply_state_patch
from tickwork.context._state_paths import (
    MAX_DEPTH,
    copy_state_for_edit,
    get_by_path,
    merge_state,
    set_by_path,
    set_by_path_copy,
)
from tickwork.context._state_section import (
    KNOWN_UNSERIALIZABLE_KEYS,
    MODEL_T,
    DictState,
    InMemorySerializedState,
    StateCheckpoint,
    UnserializableKeyWarning,
    deserialize_state_from_dict,
    parse_in_memory_state,
    string_section,
)
from tickwork.serde.serializers import BaseSerializer

__all__ = [
    "KNOWN_UNSERIALIZABLE_KEYS",
    "MAX_DEPTH",
    "DictState",
    "InMemorySerializedState",
    "InMemoryStateStore",
    "StateCheckpoint",
    "StateStore",
    "SyncStateStore",
    "UnserializableKeyWarning",
    "apply_state_patch",
    "copy_state_for_edit",
    "deserialize_state_from_dict",
    "get_by_path",
    "infer_state_type",
    "merge_state",
    "parse_in_memory_state",
    "set_by_path",
    "set_by_path_copy",
]

_T = TypeVar("_T")


# ---------------------------------------------------------------------------------------
# The store (§9.1, §9.4 - §9.6)
# ---------------------------------------------------------------------------------------


class _FifoLock:
    """A writer lock that hands ownership to waiters strictly in arrival order.

    It is not tied to a task, so the blocking view can acquire it in one call from a worker
    thread and release it in another. Built on ``anyio.Event``: works on asyncio and trio.
    """

    __slots__ = ("_locked", "_waiters")

    def __init__(self) -> None:
        self._locked = False
        # Created on first contention: most stores never have a waiting writer, and an
        # empty deque costs a 64-slot block per run.
        self._waiters: deque[anyio.Event] | None = None

    async def acquire(self) -> None:
        """Wait for the lock; a cancelled waiter gives up its place (or passes the lock on)."""
        if not self._locked:
            self._locked = True
            return
        ticket = anyio.Event()
        if self._waiters is None:
            self._waiters = deque()
        self._waiters.append(ticket)
        try:
            await ticket.wait()
        except BaseException:
            if ticket.is_set():
                self.release()
            else:
                self._waiters.remove(ticket)
            raise

    def release(self) -> None:
        """Hand the lock to the longest waiter, or unlock it."""
        if self._waiters:
            self._waiters.popleft().set()
        else:
            self._locked = False

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()


class StateStore(Protocol[MODEL_T]):
    """What a run's state store offers; ``InMemoryStateStore`` is the implementation."""

    @property
    def state_type(self) -> type[MODEL_T]:
        """The type of the current state."""
        ...

    async def get_state(self) -> MODEL_T:
        """A shallow copy of the committed state."""
        ...

    async def set_state(self, state: BaseModel) -> None:
        """Replace (or merge into) the committed state."""
        ...

    async def get(self, path: str, default: Any = ...) -> Any:
        """The live committed value at ``path``."""
        ...

    async def set(self, path: str, value: Any) -> None:
        """Commit ``value`` at ``path``."""
        ...

    async def clear(self) -> None:
        """Reset to the defaults of the current state type."""
        ...

    def edit_state(self) -> AbstractAsyncContextManager[MODEL_T]:
        """Lock, yield an isolated copy, commit it on normal exit."""
        ...

    def to_dict(self, serializer: BaseSerializer) -> dict[str, Any]:
        """The serialized state section."""
        ...

    @property
    def sync(self) -> SyncStateStore[MODEL_T]:
        """The blocking view for sync steps."""
        ...


class InMemoryStateStore(Generic[MODEL_T]):
    """The state store of a run: committed state in memory, FIFO writer lock.

    Readers are lockless and see only committed state. Writers are serialized in arrival
    order and replace the committed object instead of mutating it, so checkpoints stay
    valid. Works under asyncio and trio.
    """

    def __init__(self, initial_state: MODEL_T) -> None:
        # ``None``: an empty ``DictState`` not built yet (see ``_empty_dict_state``).
        self._committed: MODEL_T | None = initial_state
        self._lock: _FifoLock | None = None
        self._edit_task: int | None = None
        self._edit_thread: int | None = None
        self._serializer: BaseSerializer | None = None
        self._sync: SyncStateStore[MODEL_T] | None = None
        # (state, serializer, section) of the last to_dict() of an empty DictState.
        self._empty_section: tuple[Any, BaseSerializer, dict[str, Any]] | None = None

    @classmethod
    def _empty_dict_state(cls) -> InMemoryStateStore[Any]:
        """A store of an empty ``DictState``, built on first use: a run that never
        touches its store (one parked waiting for a human, say) keeps no state object."""
        return cls(None)  # type: ignore[arg-type]

    @property
    def _state(self) -> MODEL_T:
        state = self._committed
        if state is None:
            state = self._committed = DictState()  # type: ignore[assignment]
        return state  # type: ignore[return-value]

    @_state.setter
    def _state(self, state: MODEL_T) -> None:
        self._committed = state

    @property
    def _writer_lock(self) -> _FifoLock:
        lock = self._lock
        if lock is None:
            lock = self._lock = _FifoLock()
        return lock

    def _bind_serializer(self, serializer: BaseSerializer) -> None:
        """Use ``serializer`` for checkpoints (the Context binds the run's serializer)."""
        self._serializer = serializer

    @property
    def state_type(self) -> type[MODEL_T]:
        """The type of the current state."""
        state = self._committed
        return DictState if state is None else type(state)  # type: ignore[return-value]

    @property
    def sync(self) -> SyncStateStore[MODEL_T]:
        """The blocking view of this store, for sync steps running in worker threads."""
        if self._sync is None:
            self._sync = SyncStateStore(self)
        return self._sync

    async def get(self, path: str, default: Any = ...) -> Any:
        """The committed value at dotted ``path`` (lockless, read-committed).

        It is the live object: mutating it in place changes committed state without the
        lock and without any checkpoint noticing. Raises ``ValueError`` naming the path
        when it is missing and no default was given.
        """
        return get_by_path(self._state, path, default)

    async def get_state(self) -> MODEL_T:
        """A shallow copy (``model_copy()``) of the committed state; nested values are shared."""
        return self._state.model_copy()

    async def set(self, path: str, value: Any) -> None:
        """Commit ``value`` at dotted ``path``, copying only the containers on the path."""
        self._refuse_inside_edit("set")
        async with self._writer_lock:
            self._state = set_by_path_copy(self._state, path, value)

    async def set_state(self, state: BaseModel) -> None:
        """Replace the state with ``state``, or merge it into a derived current state.

        An instance of the current type (or a subclass) replaces the state. An instance
        of a base class of the current type is merged with ``merge_state``, so fields only
        the derived type has survive. Anything else raises ``ValueError``.
        """
        self._refuse_inside_edit("set_state")
        async with self._writer_lock:
            self._state = self._accept_state(state)

    def _accept_state(self, state: BaseModel) -> MODEL_T:
        current_type = type(self._state)
        if isinstance(state, current_type):
            return state
        if isinstance(state, BaseModel) and issubclass(current_type, type(state)):
            return merge_state(self._state, state)
        raise ValueError(
            f"set_state() expected a {current_type.__name__} (or a subclass or base of it), "
            f"got {type(state).__name__}"
        )

    async def clear(self) -> None:
        """Reset to the defaults of the current state type.

        Raises ``ValueError`` when the type cannot be built without arguments.
        """
        self._refuse_inside_edit("clear")
        async with self._writer_lock:
            self._state = _default_state(type(self._state))

    @asynccontextmanager
    async def edit_state(self) -> AsyncIterator[MODEL_T]:
        """Hold the writer lock and yield an isolated copy of the state.

        The copy is committed when the block exits normally and discarded when it
        raises; readers see the old state until then. Any writer on this store called
        from the task holding the edit raises ``RuntimeError``.
        """
        task = self._refuse_inside_edit("edit_state")
        async with self._writer_lock:
            self._edit_task = task
            try:
                draft = copy_state_for_edit(self._state)
                yield draft
                self._state = draft
            finally:
                self._edit_task = None

    def _refuse_inside_edit(self, operation: str) -> int:
        """The current task id; ``RuntimeError`` if that task holds this store's edit."""
        task = anyio.get_current_task().id
        if task == self._edit_task:
            raise _writer_inside_edit_error(operation)
        return task

    async def _begin_thread_edit(self, thread: int) -> MODEL_T:
        """Lock for a blocking ``edit_state`` held by worker thread ``thread``."""
        await self._writer_lock.acquire()
        try:
            draft = copy_state_for_edit(self._state)
        except BaseException:
            self._writer_lock.release()
            raise
        self._edit_thread = thread
        return draft

    async def _end_thread_edit(self, draft: MODEL_T | None) -> None:
        """Commit ``draft`` (unless ``None``) and release a blocking edit's lock."""
        if draft is not None:
            self._state = draft
        self._edit_thread = None
        self._writer_lock.release()

    def checkpoint(self) -> StateCheckpoint[MODEL_T]:
        """A reference to the committed state, taken without copying."""
        return StateCheckpoint(self._state, self._serializer)

    def to_dict(self, serializer: BaseSerializer) -> dict[str, Any]:
        """The state section in string form (§9.7).

        Raises ``ValueError`` naming the key (``DictState``) or the state type that cannot
        be encoded; known-unserializable keys are skipped with an
        ``UnserializableKeyWarning``.
        """
        # An empty dict state changes only by being replaced (writes copy it), so its
        # section is reused while the state object is the same: snapshot loops call this
        # after every step, and most runs never touch the store.  Only such a state's
        # section is kept, so a hit needs no other check (nor the ``_state`` property:
        # a kept section is of a state already built).
        cached = self._empty_section
        if cached is not None and cached[0] is self._committed and cached[1] is serializer:
            return cached[2]
        state = self._state
        if type(state) is not DictState or (state.__pydantic_private__ or {}).get("_data"):
            return string_section(state, serializer)
        cached = self._empty_section = (state, serializer, string_section(state, serializer))
        return cached[2]

    @classmethod
    def from_dict(cls, data: dict[str, Any], serializer: BaseSerializer) -> InMemoryStateStore[Any]:
        """A store rebuilt from a state section in string or tree form.

        Raises ``ValueError`` naming the store type in quotes when it is not
        ``"in_memory"``, or when the state cannot be decoded.
        """
        state: Any = deserialize_state_from_dict(data, serializer)
        store: InMemoryStateStore[Any] = cls(state)
        store._bind_serializer(serializer)
        return store


def _writer_inside_edit_error(operation: str) -> RuntimeError:
    return RuntimeError(
        f"{operation}() was called on a state store while the same caller holds its "
        "edit_state(); this would deadlock. Mutate the state yielded by edit_state() "
        "instead"
    )


def _default_state(state_type: type[_T]) -> _T:
    try:
        return state_type()
    except Exception as err:
        raise ValueError(
            f"cannot reset state of type {state_type.__name__}: it must be constructible "
            f"with no arguments (give every field a default) ({err})"
        ) from err


class SyncStateStore(Generic[MODEL_T]):
    """The blocking view of a state store (``store.sync``), for sync (``def``) steps.

    Each call runs the async operation on the run's event loop and blocks the calling
    worker thread until it is done. Calling it from the event-loop thread, or from a
    thread that anyio did not start for a step, raises ``RuntimeError``.
    """

    def __init__(self, store: InMemoryStateStore[MODEL_T]) -> None:
        self._store = store

    def _run(self, func: Callable[..., Awaitable[_T]], *args: Any) -> _T:
        try:
            anyio.lowlevel.current_token()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "store.sync was called from the event-loop thread, where blocking would "
                "freeze the loop; use the async store API (await ctx.store...) instead"
            )
        if not in_step_thread():
            raise RuntimeError(
                "store.sync cannot reach the run's event loop from this thread: it only "
                "works inside a sync step's worker thread started by tickwork (use the "
                "async store API elsewhere)"
            )
        reached_loop = False

        async def on_loop() -> _T:
            nonlocal reached_loop
            reached_loop = True
            return await func(*args)

        try:
            return anyio.from_thread.run(on_loop)
        except RuntimeError as err:
            if reached_loop:
                raise
            raise RuntimeError(
                "store.sync cannot reach the run's event loop from this thread; it only "
                "works inside a sync step's worker thread"
            ) from err

    def _refuse_inside_edit(self, operation: str) -> None:
        if self._store._edit_thread == threading.get_ident():
            raise _writer_inside_edit_error(operation)

    def get(self, path: str, default: Any = ...) -> Any:
        """Blocking ``InMemoryStateStore.get``."""
        return self._run(self._store.get, path, default)

    def set(self, path: str, value: Any) -> None:
        """Blocking ``InMemoryStateStore.set``."""
        self._refuse_inside_edit("set")
        self._run(self._store.set, path, value)

    def get_state(self) -> MODEL_T:
        """Blocking ``InMemoryStateStore.get_state``."""
        return self._run(self._store.get_state)

    def set_state(self, state: BaseModel) -> None:
        """Blocking ``InMemoryStateStore.set_state``."""
        self._refuse_inside_edit("set_state")
        self._run(self._store.set_state, state)

    def clear(self) -> None:
        """Blocking ``InMemoryStateStore.clear``."""
        self._refuse_inside_edit("clear")
        self._run(self._store.clear)

    @contextmanager
    def edit_state(self) -> Iterator[MODEL_T]:
        """Blocking ``InMemoryStateStore.edit_state``, as a plain context manager."""
        self._refuse_inside_edit("edit_state")
        draft = self._run(self._store._begin_thread_edit, threading.get_ident())
        try:
            yield draft
        except BaseException:
            self._run(self._store._end_thread_edit, None)
            raise
        self._run(self._store._end_thread_edit, draft)


# ---------------------------------------------------------------------------------------
# State type inference (§9.2)
# ---------------------------------------------------------------------------------------


def infer_state_type(workflow: Any) -> type[BaseModel]:
    """The run state type: the most-derived ``T`` among the steps' ``Context[T]``.

    ``workflow`` is a workflow (its ``_get_steps()`` step functions are read) or a plain
    iterable of state types. Returns ``DictState`` when there are none; raises
    ``ValueError`` naming the conflicting types when they do not form a single
    inheritance chain.
    """
    get_steps = getattr(workflow, "_get_steps", None)
    if get_steps is None:
        return _most_derived_state_type(workflow)
    steps = get_steps()
    # Every run asks: keep the answer beside the step table it was computed from (a
    # workflow rebuilds its table when its step registry changes).
    cached = getattr(workflow, "_state_type_cache", None)
    if cached is not None and cached[0] is steps:
        found: type[BaseModel] = cached[1]
        return found
    declared: list[type[BaseModel]] = []
    for step_function in steps.values():
        config = getattr(step_function, "_step_config", None)
        state_type = getattr(config, "context_state_type", None)
        if state_type is not None:
            declared.append(state_type)
    found = _most_derived_state_type(declared)
    with contextlib.suppress(AttributeError):  # a workflow-like object without attributes
        workflow._state_type_cache = (steps, found)
    return found


def _most_derived_state_type(types: Iterable[type[BaseModel]]) -> type[BaseModel]:
    """The one type in ``types`` that subclasses all the others (``DictState`` if empty).

    Raises ``ValueError`` naming two types neither of which subclasses the other.
    """
    most_derived: type[BaseModel] | None = None
    for candidate in types:
        if most_derived is None or issubclass(candidate, most_derived):
            most_derived = candidate
        elif not issubclass(most_derived, candidate):
            raise ValueError(
                f"the Context[...] state types {most_derived.__name__} and "
                f"{candidate.__name__} do not form a single inheritance chain; annotate "
                "every step with the same state type or with types that subclass each other"
            )
    return most_derived if most_derived is not None else DictState
