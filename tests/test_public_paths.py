"""Every public import path of the API contract (api.md §2) works, and names one object.

Moving code between layers (serialization, stores, the core) must never move a name
away from the path users import it from: each row of the contract's table is imported
here, name by name, and objects listed under several paths must be the same object.
"""

from __future__ import annotations

import importlib

import pytest

PUBLIC_NAMES: dict[str, tuple[str, ...]] = {
    "tickwork": (
        "Context",
        "Workflow",
        "catch_error",
        "step",
        "Event",
        "StartEvent",
        "StopEvent",
        "InputRequiredEvent",
        "HumanResponseEvent",
    ),
    "tickwork.workflow": ("Workflow", "WorkflowMeta"),
    "tickwork.decorators": (
        "step",
        "catch_error",
        "make_step_function",
        "StepConfig",
        "CatchErrorHandler",
        "StepFunction",
        "WorkflowGraphCheck",
        "StepGraphCheck",
        "StepRole",
    ),
    "tickwork.events": (
        "DictLikeModel",
        "Event",
        "StartEvent",
        "StopEvent",
        "WorkflowTimedOutEvent",
        "WorkflowCancelledEvent",
        "WorkflowFailedEvent",
        "IdleReleasedEvent",
        "InputRequiredEvent",
        "HumanResponseEvent",
        "StepFailedEvent",
        "CollectionReleaseEvent",
        "InternalDispatchEvent",
        "StepState",
        "StepStateChanged",
        "WorkflowIdleEvent",
        "UnhandledEvent",
        "UnreconstructedException",
        "SerializableEvent",
        "SerializableOptionalEvent",
        "SerializableException",
        "SerializableOptionalException",
        "SerializableEventType",
        "EventType",
    ),
    "tickwork.context": ("Context", "BaseSerializer", "JsonSerializer", "PickleSerializer"),
    "tickwork.context.serializers": (
        "BaseSerializer",
        "JsonSerializer",
        "PickleSerializer",
        "JsonPickleSerializer",
    ),
    "tickwork.context.state_store": (
        "StateStore",
        "InMemoryStateStore",
        "SyncStateStore",
        "DictState",
        "InMemorySerializedState",
        "StateCheckpoint",
        "parse_in_memory_state",
        "deserialize_state_from_dict",
        "apply_state_patch",
        "copy_state_for_edit",
        "get_by_path",
        "set_by_path",
        "set_by_path_copy",
        "merge_state",
        "infer_state_type",
        "UnserializableKeyWarning",
        "KNOWN_UNSERIALIZABLE_KEYS",
        "MAX_DEPTH",
    ),
    "tickwork.errors": (
        "WorkflowValidationError",
        "WorkflowTimeoutError",
        "WorkflowRuntimeError",
        "WorkflowDone",
        "WorkflowCancelledByUser",
        "WorkflowStepDoesNotExistError",
        "WorkflowConfigurationError",
        "ContextSerdeError",
        "ContextStateError",
        "StepTimeoutError",
    ),
    "tickwork.retry_policy": (
        "RetryPolicy",
        "RetryCondition",
        "WaitStrategy",
        "StopCondition",
        "RetryInfo",
        "retry_policy",
        "retry_if_exception_type",
        "retry_any",
        "wait_fixed",
        "wait_chain",
        "stop_after_attempt",
        "stop_any",
        "ConstantDelayRetryPolicy",
        "ExponentialBackoffRetryPolicy",
    ),
    "tickwork.resource": (
        "Resource",
        "ResourceConfig",
        "ResourceManager",
        "ResourceDescriptor",
        "ResourceDefinition",
        "_Resource",
        "_ResourceConfig",
    ),
    "tickwork.collect": ("Cardinality", "All", "Take", "Collect"),
    "tickwork.handler": ("WorkflowHandler",),
    "tickwork.testing": ("WorkflowTestRunner", "WorkflowTestResult"),
    "tickwork.testing.runner": ("WorkflowTestRunner", "WorkflowTestResult"),
    "tickwork.representation": (
        "get_workflow_representation",
        "WorkflowNodeBase",
        "WorkflowStepNode",
        "WorkflowEventNode",
        "WorkflowExternalNode",
        "WorkflowResourceNode",
        "WorkflowResourceConfigNode",
        "WorkflowGenericNode",
        "WorkflowGraphNode",
        "WorkflowGraphEdge",
        "WorkflowGraph",
    ),
    "tickwork.types": ("StopEventT", "RunResultT", "JournalRecord", "ExitCommand", "ReplayResult"),
    "tickwork.runtime.control_loop": (
        "control_loop",
        "rebuild_state_from_ticks",
        "rebuild_state_from_ticks_stream",
        "replay_ticks_stream",
    ),
    "tickwork.journal": (
        "InMemoryJournal",
        "JournalError",
        "JournalStore",
        "RecoveryResult",
        "RunEntry",
        "SqliteJournal",
        "StatePatch",
        "load_run",
        "recover_runs",
        "resume_run",
    ),
}

ROWS = [(module, name) for module, names in PUBLIC_NAMES.items() for name in names]


@pytest.mark.parametrize(("module", "name"), ROWS, ids=[f"{m}.{n}" for m, n in ROWS])
def test_the_name_is_importable_from_its_public_path(module: str, name: str) -> None:
    assert hasattr(importlib.import_module(module), name)


def test_names_listed_under_several_paths_are_the_same_object() -> None:
    seen: dict[str, object] = {}
    for module, name in ROWS:
        value = getattr(importlib.import_module(module), name)
        if name in seen and not name.startswith("_"):
            assert value is seen[name], f"{module}.{name} is another object"
        seen.setdefault(name, value)


def test_the_root_exports_exactly_the_nine_names() -> None:
    root = importlib.import_module("tickwork")
    assert sorted(root.__all__) == sorted(PUBLIC_NAMES["tickwork"])


def test_dir_of_the_root_shows_only_the_public_names() -> None:
    root = importlib.import_module("tickwork")
    importlib.import_module("tickwork.journal")  # loaded submodules stay out of dir()
    assert dir(root) == sorted([*PUBLIC_NAMES["tickwork"], "__version__"])
    assert "annotations" not in dir(root) and "journal" not in dir(root)
    assert all(hasattr(root, name) for name in dir(root))
    assert root.journal is importlib.import_module("tickwork.journal")  # still reachable


def test_the_control_loop_facade_exports_exactly_four_names() -> None:
    facade = importlib.import_module("tickwork.runtime.control_loop")
    assert sorted(facade.__all__) == sorted(PUBLIC_NAMES["tickwork.runtime.control_loop"])
