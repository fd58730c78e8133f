"""Resources, configs and the ResourceManager (api.md §14)."""

import functools
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel, ValidationError

from tickwork.resource import (
    Resource,
    ResourceConfig,
    ResourceDefinition,
    ResourceDescriptor,
    ResourceManager,
    _Resource,
    _ResourceConfig,
)

# ---------------------------------------------------------------------------------------
# Module-level factories (names are their qualnames)
# ---------------------------------------------------------------------------------------

calls: dict[str, int] = {}


def _count(name: str) -> int:
    calls[name] = calls.get(name, 0) + 1
    return calls[name]


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    calls.clear()


def get_db() -> dict[str, int]:
    return {"db": _count("get_db")}


async def get_async_client() -> dict[str, int]:
    await anyio.sleep(0)
    return {"client": _count("get_async_client")}


def get_token() -> object:
    _count("get_token")
    return object()


def get_service(
    token: Annotated[object, Resource(get_token, cache=False)],
    again: Annotated[object, Resource(get_token, cache=False)],
    retries: int = 3,
    *args: Any,
    **kwargs: Any,
) -> tuple[object, object, int]:
    return (token, again, retries)


def get_other_service(token: Annotated[object, Resource(get_token, cache=False)]) -> object:
    return token


def get_a(b: "Annotated[int, Resource(get_b)]") -> int:
    return b


def get_b(a: "Annotated[int, Resource(get_a)]") -> int:
    return a


def get_self(me: "Annotated[int, Resource(get_self)]") -> int:
    return me


def get_entry(a: "Annotated[int, Resource(get_a)]") -> int:
    return a


def needs_plain(value: int) -> int:
    return value


def get_unresolvable(x: "Annotated[int, Resource(missing_factory)]") -> int:  # noqa: F821
    return x


class Settings(BaseModel):
    name: str
    level: int = 0


def write_json(path: Path, data: Any) -> str:
    path.write_text(json.dumps(data))
    return str(path)


# ---------------------------------------------------------------------------------------
# Declarations (§14.1)
# ---------------------------------------------------------------------------------------


def test_resource_attributes_and_protocol() -> None:
    declared = Resource(get_db)
    assert isinstance(declared, _Resource)
    assert isinstance(declared, ResourceDescriptor)
    assert (declared.name, declared.cache, declared.scope) == ("get_db", True, "workflow")
    assert declared.factory is get_db
    run_scoped = Resource(get_db, True, scope="run")
    assert run_scoped.scope == "run"
    assert Resource(get_db, cache=False).cache is False


def test_resource_name_falls_back_to_the_type_name() -> None:
    class Factory:
        def __call__(self) -> int:
            return 1

    assert Resource(Factory()).name == "Factory"
    assert Resource(Factory).name.endswith("Factory")


def test_resource_scope_validation() -> None:
    with pytest.raises(ValueError, match="scope"):
        Resource(get_db, scope="session")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cache=False"):
        Resource(get_db, cache=False, scope="run")
    with pytest.raises(TypeError, match="callable"):
        Resource(42)  # type: ignore[arg-type]


def test_resource_definition_model() -> None:
    declared = Resource(get_db)
    definition = ResourceDefinition(name="db", resource=declared, type_annotation=dict)
    assert definition.resource is declared
    with pytest.raises(ValidationError):
        ResourceDefinition(name="db", resource=3, type_annotation=int)


def test_get_dependencies() -> None:
    dependencies = Resource(get_service).get_dependencies()
    assert [(name, annotation) for name, _, annotation in dependencies] == [
        ("token", object),
        ("again", object),
    ]
    assert all(isinstance(d, _Resource) and d.factory is get_token for _, d, _ in dependencies)
    assert Resource(get_db).get_dependencies() == []


def test_factory_parameter_without_default_is_rejected() -> None:
    with pytest.raises(ValueError) as info:
        Resource(needs_plain).get_dependencies()
    assert "needs_plain" in str(info.value)
    assert "'value'" in str(info.value)


def test_unresolvable_factory_annotation() -> None:
    with pytest.raises(ValueError) as info:
        Resource(get_unresolvable).get_dependencies()
    assert "get_unresolvable" in str(info.value)
    assert "missing_factory" in str(info.value)


def test_factory_annotations_use_declaration_site_locals_without_shadowing_globals() -> None:
    class Local:
        pass

    def make_local() -> Local:
        return Local()

    def factory(dep: "Annotated[Local, Resource(make_local)]") -> Local:
        return dep

    declared = Resource(factory)
    # ``Resource`` is also a local name here, but the module's global wins.
    declared.set_localns({"Local": Local, "make_local": make_local, "Resource": None})
    ((name, dependency, annotation),) = declared.get_dependencies()
    assert name == "dep"
    assert annotation is Local
    assert isinstance(dependency, _Resource) and dependency.factory is make_local


def test_resource_config_declaration(tmp_path: Path) -> None:
    path = write_json(tmp_path / "settings.json", {"name": "x"})
    config = ResourceConfig(path, path_selector=None, label="Settings", description="d")
    assert isinstance(config, _ResourceConfig)
    assert isinstance(config, ResourceDescriptor)
    assert config.cache is True
    assert config.name == path
    assert config.config_file == str(Path(path).resolve())
    assert (config.label, config.description, config.cls_factory) == ("Settings", "d", None)
    config.path_selector = "core.fs"
    assert config.name == f"{path}.core.fs"
    assert config.get_dependencies() == []


def test_resource_config_requires_a_json_file() -> None:
    with pytest.raises(ValueError, match="json"):
        ResourceConfig("settings.yaml")


def test_resource_config_missing_file_is_lazy(tmp_path: Path) -> None:
    config = ResourceConfig("does/not/exist.json")
    assert config.name == "does/not/exist.json"
    with pytest.raises(FileNotFoundError, match=r"does/not/exist\.json"):
        _ = config.config_file
    config.set_type_annotation(Settings)
    with pytest.raises(FileNotFoundError, match=r"does/not/exist\.json"):
        config.call()


def test_resource_config_call(tmp_path: Path) -> None:
    path = write_json(tmp_path / "c.json", {"core": {"fs": {"name": "fs", "level": 2}}})
    config = ResourceConfig(path, path_selector="core.fs")
    with pytest.raises(ValueError, match="BaseModel"):
        config.call()
    config.set_type_annotation(int)  # not a model: ignored
    assert config.cls_factory is None
    config.set_type_annotation(Settings)
    assert config.cls_factory is Settings
    assert config.call() == Settings(name="fs", level=2)
    assert config.load_data() == {"name": "fs", "level": 2}


def test_resource_config_contents_are_cached(tmp_path: Path) -> None:
    target = tmp_path / "cached.json"
    path = write_json(target, {"name": "before"})
    config = ResourceConfig(path)
    config.cls_factory = Settings
    assert config.call() == Settings(name="before")
    write_json(target, {"name": "after"})
    assert ResourceConfig(path).load_data() == {"name": "before"}


def test_resource_config_selector_errors(tmp_path: Path) -> None:
    path = write_json(tmp_path / "sel.json", {"core": {"fs": 3}})
    for selector, prefix, found in [
        ("core.fs", "core.fs", "int"),
        ("core.db.x", "core.db", "no key 'db'"),
    ]:
        config = ResourceConfig(path, path_selector=selector)
        config.cls_factory = Settings
        with pytest.raises(ValueError) as info:
            config.call()
        message = str(info.value)
        assert "sel.json" in message
        assert repr(prefix) in message
        assert found in message


def test_resource_config_validation_error(tmp_path: Path) -> None:
    path = write_json(tmp_path / "bad.json", {"level": 1})
    config = ResourceConfig(path)
    config.cls_factory = Settings
    with pytest.raises(ValidationError, match="name"):
        config.call()


# ---------------------------------------------------------------------------------------
# Resolution and caching (§14.2)
# ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_workflow_scope_is_shared_per_manager() -> None:
    manager = ResourceManager()
    first = await manager.get(Resource(get_db))
    second = await manager.get(Resource(get_db))
    assert first is second
    assert calls == {"get_db": 1}
    assert manager.resources == {"get_db": first}
    assert manager.get_all() is manager.resources
    # A new manager (a new Workflow instance) gets a new value.
    assert await ResourceManager().get(Resource(get_db)) is not first


@pytest.mark.anyio
async def test_async_factories() -> None:
    manager = ResourceManager()
    value = await manager.get(Resource(get_async_client))
    assert value == {"client": 1}
    assert await manager.get(Resource(get_async_client)) is value


@pytest.mark.anyio
async def test_sync_factories_run_on_the_event_loop_thread() -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def factory() -> int:
        seen.append(threading.get_ident())
        return 1

    await ResourceManager().get(Resource(factory))
    assert seen == [loop_thread]


@pytest.mark.anyio
async def test_sync_callable_returning_an_awaitable_is_awaited() -> None:
    async def produce() -> str:
        return "value"

    assert await ResourceManager().get(Resource(lambda: produce())) == "value"


@pytest.mark.anyio
async def test_distinct_lambdas_never_collide() -> None:
    manager = ResourceManager()
    first = await manager.get(Resource(lambda: 1))
    second = await manager.get(Resource(lambda: 2))
    assert (first, second) == (1, 2)


@pytest.mark.anyio
async def test_class_and_callable_object_factories() -> None:
    class Client:
        def __init__(self, token: Annotated[object, Resource(get_token)], retries: int = 1):
            self.token = token

    class Builder:
        def __call__(self, token: Annotated[object, Resource(get_token)]) -> object:
            return ("built", token)

    manager = ResourceManager()
    client = await manager.get(Resource(Client))
    built = await manager.get(Resource(Builder()))
    assert isinstance(client, Client)
    assert built == ("built", client.token)
    assert calls == {"get_token": 1}


@pytest.mark.anyio
async def test_partial_factories() -> None:
    declared = Resource(functools.partial(get_service, retries=5))
    assert declared.name == "partial"
    assert [name for name, _, _ in declared.get_dependencies()] == ["token", "again"]
    token, again, retries = await ResourceManager().get(declared)
    assert token is again
    assert retries == 5


@pytest.mark.anyio
async def test_uncached_values_are_new_per_resolution_but_shared_within_one() -> None:
    manager = ResourceManager()
    token_a, token_b, retries = await manager.get(Resource(get_service, cache=False))
    assert token_a is token_b
    assert retries == 3
    first = await manager.get(Resource(get_token, cache=False))
    second = await manager.get(Resource(get_token, cache=False))
    assert first is not second
    assert first is not token_a
    assert manager.resources == {}


@pytest.mark.anyio
async def test_uncached_declaration_never_reuses_a_cached_value() -> None:
    manager = ResourceManager()
    cached = await manager.get(Resource(get_token))
    uncached = await manager.get(Resource(get_token, cache=False))
    assert cached is not uncached
    assert await manager.get(Resource(get_token)) is cached


@pytest.mark.anyio
async def test_resolution_scope_shares_uncached_values_until_the_outermost_exit() -> None:
    manager = ResourceManager()
    with manager.resolution_scope():
        first = await manager.get(Resource(get_token, cache=False))
        with manager.resolution_scope():
            nested = await manager.get(Resource(get_token, cache=False))
            service = await manager.get(Resource(get_other_service))
        assert nested is first
        assert service is first
    assert await manager.get(Resource(get_token, cache=False)) is not first


@pytest.mark.anyio
async def test_resolve_invocation() -> None:
    manager = ResourceManager()
    definitions = [
        ResourceDefinition(
            name="token", resource=Resource(get_token, cache=False), type_annotation=object
        ),
        ResourceDefinition(
            name="service", resource=Resource(get_other_service), type_annotation=object
        ),
        ResourceDefinition(name="db", resource=Resource(get_db), type_annotation=dict),
    ]
    values = await manager.resolve_invocation(definitions)
    assert list(values) == ["token", "service", "db"]
    assert values["service"] is values["token"]
    again = await manager.resolve_invocation(definitions)
    assert again["token"] is not values["token"]
    assert again["service"] is values["service"]  # cached with workflow scope
    assert again["db"] is values["db"]


@pytest.mark.anyio
async def test_run_scope_uses_the_run_cache() -> None:
    manager = ResourceManager()
    declared = Resource(get_token, scope="run")
    run_one: dict[Any, Any] = {}
    run_two: dict[Any, Any] = {}
    first = await manager.get(declared, run_one)
    assert await manager.get(Resource(get_token, scope="run"), run_cache=run_one) is first
    second = await manager.get(declared, run_cache=run_two)
    assert second is not first
    with manager.resolution_scope(run_cache=run_one):
        assert await manager.get(declared) is first
        with manager.resolution_scope():
            assert await manager.get(declared) is first  # inherited run cache
    assert manager.resources == {}
    # Distinct from the workflow-scoped value of the same factory.
    assert await manager.get(Resource(get_token), run_one) is not first


@pytest.mark.anyio
async def test_run_scope_without_a_run_cache_lives_for_one_resolution() -> None:
    manager = ResourceManager()
    declared = Resource(get_token, scope="run")
    with manager.resolution_scope():
        first = await manager.get(declared)
        assert await manager.get(declared) is first
    assert await manager.get(declared) is not first


@pytest.mark.anyio
async def test_resource_configs_are_cached_per_file_selector_and_model(tmp_path: Path) -> None:
    class Other(BaseModel):
        name: str

    path = write_json(tmp_path / "m.json", {"name": "n"})
    manager = ResourceManager()

    def declare(model: type[BaseModel]) -> _ResourceConfig:
        config = ResourceConfig(path)
        config.set_type_annotation(model)
        return config

    first = await manager.get(declare(Settings))
    assert await manager.get(declare(Settings)) is first
    other = await manager.get(declare(Other))
    assert isinstance(other, Other)
    assert manager.resources[path] is other  # last write wins on name collisions


@pytest.mark.anyio
async def test_factories_depending_on_configs(tmp_path: Path) -> None:
    path = write_json(tmp_path / "dep.json", {"name": "from-file"})

    def factory(settings: Annotated[Settings, ResourceConfig(path)]) -> str:
        return settings.name.upper()

    assert await ResourceManager().get(Resource(factory)) == "FROM-FILE"


@pytest.mark.anyio
async def test_missing_config_file_raises_when_resolved() -> None:
    config = ResourceConfig("nowhere/settings.json")
    config.set_type_annotation(Settings)
    with pytest.raises(FileNotFoundError, match=r"nowhere/settings\.json"):
        await ResourceManager().get(config)


@pytest.mark.anyio
async def test_call_never_caches() -> None:
    manager = ResourceManager()
    declared = Resource(get_token)
    first = await declared.call(manager)
    second = await declared.call(manager)
    assert first is not second
    assert manager.resources == {}


# ---------------------------------------------------------------------------------------
# Seeding and the informational mapping (§14.3)
# ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_set_seeds_values_for_cached_declarations() -> None:
    manager = ResourceManager()
    await manager.set("x", 42)
    assert manager.get_all() == {"x": 42}
    await manager.set("get_db", {"db": "seeded"})
    assert await manager.get(Resource(get_db)) == {"db": "seeded"}
    assert await manager.get(Resource(get_db, scope="run"), {}) == {"db": "seeded"}
    assert calls == {}
    # An uncached declaration is not covered by the seed.
    assert await manager.get(Resource(get_db, cache=False)) == {"db": 1}


@pytest.mark.anyio
async def test_set_seeds_configs_by_name() -> None:
    manager = ResourceManager()
    await manager.set("missing.json", Settings(name="seeded"))
    config = ResourceConfig("missing.json")
    config.set_type_annotation(Settings)
    assert await manager.get(config) == Settings(name="seeded")


@pytest.mark.anyio
async def test_seeding_breaks_a_cycle() -> None:
    manager = ResourceManager()
    await manager.set("get_b", 5)
    assert await manager.get(Resource(get_a)) == 5


# ---------------------------------------------------------------------------------------
# Cycles
# ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_cycles_raise_value_error_with_the_chain() -> None:
    with pytest.raises(ValueError) as info:
        await ResourceManager().get(Resource(get_a))
    assert "get_a -> get_b -> get_a" in str(info.value)
    with pytest.raises(ValueError, match="get_self -> get_self"):
        await ResourceManager().get(Resource(get_self))
    with pytest.raises(ValueError, match="get_a -> get_b -> get_a"):
        await ResourceManager().get(Resource(get_entry))


@pytest.mark.anyio
async def test_concurrent_entries_into_a_cycle_fail_instead_of_deadlocking() -> None:
    manager = ResourceManager()
    errors: list[BaseException] = []

    async def resolve(factory: Any) -> None:
        try:
            await manager.get(Resource(factory))
        except ValueError as exc:
            errors.append(exc)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(resolve, get_a)
            tg.start_soon(resolve, get_b)
    assert len(errors) == 2
    assert all(" -> " in str(e) for e in errors)


class SelfReferencing:
    """A third-party descriptor whose ``resolve`` asks for itself: a run-time cycle."""

    name = "self_referencing"
    cache = True

    async def resolve(self, manager: ResourceManager) -> Any:
        return await manager.get(self)

    def set_type_annotation(self, type_annotation: Any) -> None:
        pass

    def set_localns(self, localns: Mapping[str, Any] | None) -> None:
        pass

    def get_dependencies(self) -> list[Any]:
        return []


@pytest.mark.anyio
async def test_runtime_cycles_of_third_party_descriptors() -> None:
    with pytest.raises(ValueError, match="self_referencing -> self_referencing"):
        await ResourceManager().get(SelfReferencing())


# ---------------------------------------------------------------------------------------
# Third-party descriptors
# ---------------------------------------------------------------------------------------


class Counter:
    """A third-party descriptor without a ``scope`` attribute (workflow scope assumed)."""

    def __init__(self, cache: bool = True) -> None:
        self.name = "counter"
        self.cache = cache
        self.made = 0

    async def resolve(self, manager: ResourceManager) -> int:
        self.made += 1
        return self.made

    def set_type_annotation(self, type_annotation: Any) -> None:
        pass

    def set_localns(self, localns: Mapping[str, Any] | None) -> None:
        pass

    def get_dependencies(self) -> list[Any]:
        return []


@pytest.mark.anyio
async def test_third_party_descriptors_are_keyed_by_identity() -> None:
    manager = ResourceManager()
    first, second = Counter(), Counter()
    assert isinstance(first, ResourceDescriptor)
    assert await manager.get(first) == 1
    assert await manager.get(first) == 1
    assert await manager.get(second) == 1
    assert first.made == 1 and second.made == 1
    uncached = Counter(cache=False)
    assert [await manager.get(uncached) for _ in range(2)] == [1, 2]


# ---------------------------------------------------------------------------------------
# Concurrency
# ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_concurrent_resolutions_call_the_factory_once() -> None:
    manager = ResourceManager()
    started = 0

    async def slow() -> object:
        nonlocal started
        started += 1
        await anyio.sleep(0.01)
        return object()

    results: list[object] = []

    async def resolve() -> None:
        results.append(await manager.get(Resource(slow)))

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(resolve)
    assert started == 1
    assert len(results) == 10 and all(r is results[0] for r in results)


@pytest.mark.anyio
async def test_a_failing_factory_caches_nothing_and_waiters_retry() -> None:
    manager = ResourceManager()
    attempts = 0

    async def flaky() -> str:
        nonlocal attempts
        attempts += 1
        await anyio.sleep(0.01)
        if attempts == 1:
            raise RuntimeError("first call fails")
        return "ok"

    outcomes: list[str] = []

    async def resolve() -> None:
        try:
            outcomes.append(await manager.get(Resource(flaky)))
        except RuntimeError as exc:
            outcomes.append(str(exc))

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(resolve)
    assert sorted(outcomes) == ["first call fails", "ok", "ok"]
    assert attempts == 2
    assert await manager.get(Resource(flaky)) == "ok"


@pytest.mark.anyio
async def test_a_cancelled_resolution_does_not_block_the_others() -> None:
    manager = ResourceManager()
    attempts = 0

    async def slow() -> int:
        nonlocal attempts
        attempts += 1
        await anyio.sleep(0.05 if attempts == 1 else 0)
        return attempts

    async def cancelled() -> None:
        with anyio.move_on_after(0.01):
            await manager.get(Resource(slow))

    results: list[int] = []

    async def waiter() -> None:
        await anyio.sleep(0.001)
        results.append(await manager.get(Resource(slow)))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(cancelled)
            tg.start_soon(waiter)
    assert results == [2]


@pytest.mark.anyio
async def test_concurrent_uncached_resolutions_in_one_scope_share_a_value() -> None:
    manager = ResourceManager()
    made = 0

    async def fresh() -> int:
        nonlocal made
        made += 1
        await anyio.sleep(0.01)
        return made

    results: list[int] = []
    with manager.resolution_scope():
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(lambda: _append(results, manager.get(Resource(fresh, cache=False))))
    assert results == [1, 1, 1]


async def _append(results: list[Any], awaitable: Any) -> None:
    results.append(await awaitable)
