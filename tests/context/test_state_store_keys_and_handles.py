"""State paths over keys named like methods, and writes through objects that cannot be copied.

Dict states and dicts are walked by key only, so a key called ``items`` or ``get`` is a key
like any other (missing until set, never the bound method). ``set`` copies the containers
on its path, except an object that cannot be copied, which it writes through in place.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import anyio
import pytest
from pydantic import BaseModel, ConfigDict

from tickwork._step_threads import step_thread
from tickwork.context.state_store import (
    DictState,
    InMemoryStateStore,
    apply_state_patch,
    copy_state_for_edit,
    deserialize_state_from_dict,
    get_by_path,
    set_by_path,
    set_by_path_copy,
)
from tickwork.events import DictLikeModel, StartEvent, StopEvent
from tickwork.serde.serializers import JsonSerializer

# Every public method of dict and of the dict state (mapping API and pydantic API), plus
# a few dunder names that attribute access would also have found.
METHOD_NAMES = sorted(
    {name for name in dir(dict) if not name.startswith("_")}
    | {name for name in dir(DictState) if not name.startswith("_")}
    | {"__class__", "__dict__", "__len__", "__getitem__", "__init__"}
)


class TypedDictLike(DictLikeModel):
    """A typed state that also takes dynamic keys."""

    count: int = 0


class ReadOnlyMapping(Mapping[str, Any]):
    """A mapping that is not a dict (so it is not walked by the dict fast path)."""

    def __init__(self, **data: Any) -> None:
        self._entries = data

    def __getitem__(self, key: str) -> Any:
        return self._entries[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


class Handle:
    """A live handle: it refuses to be copied, like a connection or a lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.x = 0
        self.inner: dict[str, Any] = {"y": 0}

    def __copy__(self) -> Handle:
        raise TypeError("cannot copy a live Handle")

    def __deepcopy__(self, memo: dict[int, Any]) -> Handle:
        raise TypeError("cannot deep-copy a live Handle")


class LockHolder:
    """Holds a lock but copies fine (``copy.copy`` shares the lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.x = 0


class Frozen(BaseModel):
    """A typed state that cannot be assigned to in place."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    handle: Any = None


def _store(**data: Any) -> InMemoryStateStore[DictState]:
    return InMemoryStateStore(DictState(_data=data))


def _as_step(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Run ``fn`` the way tickwork runs a sync step body: in a marked step thread."""

    def body() -> Any:
        with step_thread():
            return fn()

    return body


def test_the_names_cover_the_mapping_api() -> None:
    assert {"keys", "values", "items", "get", "update", "pop", "setdefault", "copy", "clear"} <= (
        set(METHOD_NAMES)
    )
    assert {"to_dict", "model_dump", "model_copy"} <= set(METHOD_NAMES)


# --- helpers: get_by_path, set_by_path, set_by_path_copy --------------------------------


@pytest.mark.parametrize(
    "state", [DictState(), TypedDictLike(), {}, {"d": 1}], ids=["dict-state", "typed", "dict", "d"]
)
def test_method_names_are_missing_keys(state: Any) -> None:
    for name in METHOD_NAMES:
        assert get_by_path(state, name, "default") == "default", name
        assert get_by_path(state, f"{name}.deeper", None) is None, name
        with pytest.raises(ValueError, match=f"no '{name}'"):
            get_by_path(state, name)


def test_method_names_are_missing_keys_of_nested_containers() -> None:
    state = DictState(
        _data={"d": {}, "m": ReadOnlyMapping(k=1), "p": MappingProxyType({}), "ev": StartEvent()}
    )
    for name in METHOD_NAMES:
        for container in ("d", "m", "p", "ev"):
            assert get_by_path(state, f"{container}.{name}", "default") == "default", name
    assert get_by_path(state, "m.k") == 1


def test_stored_method_names_return_the_stored_values() -> None:
    data = {name: f"value of {name}" for name in METHOD_NAMES}
    for state in (DictState(_data=data), {"nested": DictState(_data=data)}):
        prefix = "" if isinstance(state, DictState) else "nested."
        for name in METHOD_NAMES:
            assert get_by_path(state, prefix + name) == f"value of {name}", name


def test_set_by_path_creates_method_named_keys() -> None:
    for name in METHOD_NAMES:
        state = DictState()
        set_by_path(state, f"{name}.nested", 1)
        assert state.to_dict() == {name: {"nested": 1}}, name
        plain: dict[str, Any] = {}
        set_by_path(plain, f"{name}.nested", 1)
        assert plain == {name: {"nested": 1}}, name


def test_set_by_path_copy_creates_method_named_keys() -> None:
    original = DictState(_data={"kept": [1]})
    for name in METHOD_NAMES:
        new = set_by_path_copy(original, f"{name}.nested", 1)
        assert new.to_dict() == {"kept": [1], name: {"nested": 1}}, name
        assert new.to_dict()["kept"] is original.to_dict()["kept"]
    assert original.to_dict() == {"kept": [1]}
    # "__class__.nested" used to reach the class itself and set an attribute on it.
    assert not hasattr(DictState, "nested")


def test_declared_fields_and_properties_still_resolve() -> None:
    state = DictState(_data={"typed": TypedDictLike(count=3), "stop": StopEvent(result=7)})
    assert get_by_path(state, "typed.count") == 3
    assert get_by_path(state, "stop.result") == 7
    new = set_by_path_copy(state, "typed.count", 4)
    assert get_by_path(new, "typed.count") == 4


def test_typed_models_and_objects_keep_attribute_access() -> None:
    class Plain:
        def __init__(self) -> None:
            self.attr = 1

    state = DictState(_data={"obj": Plain()})
    assert get_by_path(state, "obj.attr") == 1
    # Only dicts and dict-like states are walked by key: a method of a plain object or a
    # typed (non dict-like) model is still reachable as an attribute.
    assert callable(get_by_path(state, "obj.__init__"))


def test_read_only_mappings_refuse_writes_naming_the_path() -> None:
    state = DictState(_data={"p": MappingProxyType({"k": 1})})
    with pytest.raises(ValueError, match=r"p\.k"):
        set_by_path_copy(state, "p.k", 2)
    with pytest.raises(ValueError, match=r"p\.k"):
        set_by_path(state, "p.k", 2)


# --- the store: get, set, sync view, edit_state, patches --------------------------------


@pytest.mark.anyio
async def test_store_get_and_set_with_method_named_keys() -> None:
    store = _store()
    for name in METHOD_NAMES:
        assert await store.get(name, default=None) is None, name
        with pytest.raises(ValueError, match=f"no '{name}'"):
            await store.get(name)
        await store.set(f"{name}.nested", 1)
        assert await store.get(name) == {"nested": 1}, name
        assert await store.get(f"{name}.nested") == 1, name
    assert (await store.get_state()).to_dict() == {name: {"nested": 1} for name in METHOD_NAMES}


@pytest.mark.anyio
async def test_sync_view_with_method_named_keys() -> None:
    store = _store()

    def sync_step() -> list[Any]:
        seen = []
        for name in ("items", "keys", "values", "get", "update", "pop", "copy", "clear"):
            seen.append(store.sync.get(name, "default"))
            with pytest.raises(ValueError, match=name):
                store.sync.get(name)
            store.sync.set(f"{name}.nested", name)
            seen.append(store.sync.get(f"{name}.nested"))
        return seen

    seen = await anyio.to_thread.run_sync(_as_step(sync_step))
    assert seen[::2] == ["default"] * 8
    assert seen[1::2] == ["items", "keys", "values", "get", "update", "pop", "copy", "clear"]


@pytest.mark.anyio
async def test_edit_state_and_patches_with_method_named_keys() -> None:
    store = _store(items=[1])
    store._bind_serializer(JsonSerializer())
    before = store.checkpoint()
    async with store.edit_state() as state:
        state["keys"] = {"nested": 1}
        state["items"].append(2)
    await store.set("values.nested", 3)
    assert await store.get("items") == [1, 2]
    assert await store.get("keys.nested") == 1
    patch = store.checkpoint().diff(before)
    assert any(op["path"].startswith("/state_data/_data/values") for op in patch)
    section = apply_state_patch(before.to_dict(), patch)
    rebuilt = deserialize_state_from_dict(section, JsonSerializer())
    assert rebuilt.to_dict() == {"items": [1, 2], "keys": {"nested": 1}, "values": {"nested": 3}}
    assert get_by_path(rebuilt, "get", None) is None


# --- writes through objects that cannot be copied ---------------------------------------


def test_the_handle_cannot_be_copied_but_the_holder_can() -> None:
    with pytest.raises(TypeError):
        copy.copy(Handle())
    with pytest.raises(TypeError):
        copy.copy(threading.Lock())
    holder = LockHolder()
    assert copy.copy(holder).lock is holder.lock


@pytest.mark.anyio
async def test_set_writes_through_an_uncopyable_object() -> None:
    handle = Handle()
    kept = [1]
    store = _store(a={"handle": handle}, kept=kept)
    before = store.checkpoint()

    await store.set("a.handle.x", 5)

    assert await store.get("a.handle") is handle
    assert handle.x == 5
    assert await store.get("a.handle.x") == 5
    # Nothing above the handle had to change: it already holds the handle.
    assert store.checkpoint().state is before.state
    assert await store.get("kept") is kept


@pytest.mark.anyio
async def test_set_copies_below_an_uncopyable_object() -> None:
    handle = Handle()
    old_inner = handle.inner
    store = _store(a={"handle": handle})

    await store.set("a.handle.inner.y", 1)

    assert handle.inner is not old_inner
    assert handle.inner == {"y": 1}
    assert old_inner == {"y": 0}
    assert await store.get("a.handle.inner.y") == 1


@pytest.mark.anyio
async def test_set_still_copies_copyable_objects() -> None:
    holder = LockHolder()
    a = {"holder": holder}
    store = _store(a=a)
    before = store.checkpoint()

    await store.set("a.holder.x", 5)

    new_holder = await store.get("a.holder")
    assert new_holder is not holder
    assert new_holder.lock is holder.lock
    assert (new_holder.x, holder.x) == (5, 0)
    assert await store.get("a") is not a
    assert a == {"holder": holder}
    assert store.checkpoint().state is not before.state


@pytest.mark.anyio
async def test_a_refused_write_through_changes_nothing() -> None:
    class Sealed(Handle):
        sealed = False

        def __setattr__(self, name: str, value: Any) -> None:
            if self.sealed:
                raise AttributeError(f"{name} is read-only")
            super().__setattr__(name, value)

    sealed = Sealed()
    sealed.sealed = True
    store = _store(a={"sealed": sealed, "other": 1})
    before = store.checkpoint()
    with pytest.raises(ValueError, match=r"a\.sealed\.x"):
        await store.set("a.sealed.x", 5)
    assert store.checkpoint().state is before.state
    assert sealed.x == 0
    assert await store.get("a") == {"sealed": sealed, "other": 1}


def test_a_write_through_is_the_only_mutation() -> None:
    # The frozen model above the handle could not take a new child; writing through the
    # handle means it never has to, so the set succeeds and nothing is left half-done.
    handle = Handle()
    state = DictState(_data={"frozen": Frozen(handle=handle), "outer": {"h": handle}})
    assert set_by_path_copy(state, "frozen.handle.x", 1) is state
    assert handle.x == 1
    assert set_by_path_copy(state, "outer.h.inner.y", 2) is state
    assert handle.inner == {"y": 2}


def test_set_by_path_copy_writes_through_uncopyable_mappings() -> None:
    class Registry(dict[str, Any]):
        def __copy__(self) -> Registry:
            raise TypeError("registries are live")

    registry = Registry(k=1)
    state = DictState(_data={"registry": registry})
    assert set_by_path_copy(state, "registry.k", 2) is state
    assert registry == {"k": 2}


@pytest.mark.anyio
async def test_edit_state_shares_uncopyable_objects() -> None:
    handle = Handle()
    store = _store(handle=handle, n=0)
    async with store.edit_state() as state:
        assert state["handle"] is handle
        state["n"] = 1
    assert await store.get("n") == 1
    assert copy_state_for_edit(DictState(_data={"h": handle})).to_dict()["h"] is handle


@pytest.mark.anyio
async def test_sync_view_writes_through_an_uncopyable_object() -> None:
    handle = Handle()
    store = _store(a={"handle": handle})

    def sync_step() -> Any:
        store.sync.set("a.handle.x", 9)
        return store.sync.get("a.handle.x")

    assert await anyio.to_thread.run_sync(_as_step(sync_step)) == 9
    assert handle.x == 9
