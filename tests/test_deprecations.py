"""Every DeprecationWarning tickwork emits is emitted once per process per member.

``conftest.py`` resets the memory of :func:`tickwork._deprecation.warn_once` around each
test, so every test here starts with no member having warned.  Async tests run under
asyncio and trio.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tickwork import Context, StartEvent, StopEvent, Workflow, step
from tickwork._deprecation import _reset_warned, warn_once
from tickwork.handler import WorkflowHandler
from tickwork.retry_policy import ConstantDelayRetryPolicy, ExponentialBackoffRetryPolicy

pytestmark = pytest.mark.anyio


@contextmanager
def recorded() -> Iterator[list[warnings.WarningMessage]]:
    """Record every warning, repeats included (``"always"`` defeats the registry)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def deprecations(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in caught if issubclass(w.category, DeprecationWarning)]


# --------------------------------------------------------------------------- the helper


def test_warn_once_warns_for_the_first_call_of_each_key_only() -> None:
    with recorded() as caught:
        # stacklevel=1: attributed to this call, as warnings.warn(...) written here would be.
        warn_once("test.member", "test.member is deprecated", stacklevel=1)
        warn_once("test.member", "test.member is deprecated", stacklevel=1)
        warn_once("test.other", "test.other is deprecated", stacklevel=1)
    assert [str(w.message) for w in caught] == [
        "test.member is deprecated",
        "test.other is deprecated",
    ]
    assert all(w.category is DeprecationWarning and w.filename == __file__ for w in caught)


def test_reset_hook_makes_a_key_warn_again() -> None:
    with recorded() as caught:
        warn_once("test.member", "first")
        _reset_warned()
        warn_once("test.member", "second")
    assert [str(w.message) for w in caught] == ["first", "second"]


def test_a_hidden_first_warning_still_counts() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warn_once("test.member", "hidden")
    with recorded() as caught:
        warn_once("test.member", "shown?")
    assert caught == []


# --------------------------------------------------------------------------- the members


class Quick(Workflow):
    @step
    async def only(self, ev: StartEvent) -> StopEvent:
        return StopEvent(result="done")


class PollsIsRunning(Workflow):
    """Reads ``ctx.is_running`` in a loop, as agents built on the anchor do."""

    @step
    async def only(self, ctx: Context, ev: StartEvent) -> StopEvent:
        with recorded() as caught:
            flags = [ctx.is_running for _ in range(50)]
        return StopEvent(result=(flags, [(str(w.message), w.filename) for w in caught]))


async def test_is_running_inside_a_step_warns_once() -> None:
    flags, caught = await PollsIsRunning(timeout=5).run()
    assert flags == [True] * 50
    assert len(caught) == 1
    message, filename = caught[0]
    assert "is_running" in message
    assert filename == __file__  # attributed to the step body, not to tickwork


async def test_is_running_warns_once_across_runs() -> None:
    first = await PollsIsRunning(timeout=5).run()
    second = await PollsIsRunning(timeout=5).run()
    assert len(first[1]) == 1
    assert second[1] == []


HANDLER_MEMBERS: dict[str, Callable[[WorkflowHandler], Any]] = {
    "WorkflowHandler.done": lambda h: h.done(),
    "WorkflowHandler.cancel": lambda h: h.cancel(),
    "WorkflowHandler.exception": lambda h: h.exception(),
    "WorkflowHandler.cancelled": lambda h: h.cancelled(),
    "Context.get_result": lambda h: h.ctx.get_result(),
}


@pytest.mark.parametrize("member", sorted(HANDLER_MEMBERS))
async def test_deprecated_handler_and_context_members_warn_once(member: str) -> None:
    use = HANDLER_MEMBERS[member]
    handlers = [Quick(timeout=5).run(), Quick(timeout=5).run()]
    for handler in handlers:
        assert await handler == "done"
    with recorded() as caught:
        for handler in handlers + handlers:
            use(handler)
    found = deprecations(caught)
    assert len(found) == 1, [str(w.message) for w in found]
    assert member.split(".")[-1] in str(found[0].message)
    assert found[0].filename == __file__


async def test_streaming_queue_warns_once(anyio_backend: str) -> None:
    handler = Quick(timeout=5).run()
    with recorded() as caught:
        for _ in range(3):
            try:
                handler.ctx.streaming_queue  # noqa: B018
            except NotImplementedError:
                assert anyio_backend == "trio"  # the queue is an asyncio object
    assert await handler == "done"
    found = deprecations(caught)
    assert len(found) == 1
    assert "streaming_queue" in str(found[0].message)


@pytest.mark.parametrize(
    "factory", [ConstantDelayRetryPolicy, ExponentialBackoffRetryPolicy], ids=lambda f: f.__name__
)
def test_deprecated_retry_factories_warn_once(factory: Callable[[], Any]) -> None:
    with recorded() as caught:
        policies = [factory() for _ in range(3)]
    found = deprecations(caught)
    assert len(found) == 1
    assert factory.__name__ in str(found[0].message)
    assert found[0].filename == __file__
    # Every call still builds a working policy.
    assert all(policy.next(0.0, 1, RuntimeError("x")) is not None for policy in policies)
