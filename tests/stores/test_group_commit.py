"""The call queue behind group commit (``tickwork.stores.group_commit``), with a fake
store whose batches the test opens and closes: who takes which batch, in which order,
what each caller gets back, and what cancellation does."""

from __future__ import annotations

import functools
from typing import Any

import anyio
import pytest

from tickwork.stores.group_commit import GroupCommit, PendingCall
from tickwork.stores.records import JournalError

pytestmark = pytest.mark.anyio


class _Store:
    """Runs each batch when the test lets it: ``body`` is a value to return, or an
    exception to raise for that call alone."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []
        self.gate: anyio.Event | None = None
        self.fail_batch: BaseException | None = None
        self.queue = GroupCommit(self._run)

    async def _run(self, batch: list[PendingCall]) -> None:
        self.batches.append([pending.body for pending in batch])
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_batch is not None:
            raise self.fail_batch
        for pending in batch:
            if isinstance(pending.body, BaseException):
                pending.error = pending.body
            else:
                pending.result = pending.body

    def hold(self) -> anyio.Event:
        self.gate = anyio.Event()
        return self.gate


async def _until(condition: Any) -> None:
    with anyio.fail_after(10):
        while not condition():
            await anyio.sleep(0.001)


async def test_a_lone_call_goes_at_once_alone() -> None:
    store = _Store()
    assert await store.queue.call("a", action="x") == "a"
    assert await store.queue.call("b", action="x") == "b"
    assert store.batches == [["a"], ["b"]]
    assert not store.queue._busy


async def test_calls_made_during_a_batch_go_together_in_order_with_their_own_outcomes() -> None:
    store = _Store()
    results: dict[str, Any] = {}
    refused = JournalError("refused")

    async def call(body: Any, name: str) -> None:
        try:
            results[name] = await store.queue.call(body, run_id=name, action="x", write=True)
        except JournalError as error:
            results[name] = error

    gate = store.hold()
    async with anyio.create_task_group() as group:
        group.start_soon(call, "first", "first")
        await _until(lambda: store.batches)
        for name in ("b", "c", "d"):
            group.start_soon(call, refused if name == "c" else name, name)
            await _until(lambda n=name: n in [p.run_id for p in store.queue._queue])
        store.gate = None
        gate.set()
    assert store.batches == [["first"], ["b", refused, "d"]]
    assert results == {"first": "first", "b": "b", "c": refused, "d": "d"}


async def test_a_batch_that_fails_as_a_whole_fails_each_caller_with_its_own_error() -> None:
    store = _Store()
    errors: dict[str, BaseException] = {}

    async def call(name: str) -> None:
        try:
            await store.queue.call(name, run_id=name, action="appending records")
        except JournalError as error:
            errors[name] = error

    gate = store.hold()
    async with anyio.create_task_group() as group:
        group.start_soon(call, "first")
        await _until(lambda: store.batches)
        group.start_soon(call, "b")
        group.start_soon(call, "c")
        await _until(lambda: len(store.queue._queue) == 2)
        store.fail_batch = JournalError("journal 'x.db': cannot be opened")
        gate.set()
    assert errors["first"] is store.fail_batch  # alone in its batch: the error itself
    assert errors["b"] is not errors["c"]
    assert all(str(errors[name]) == "journal 'x.db': cannot be opened" for name in "bc")
    assert all(errors[name].__cause__ is store.fail_batch for name in "bc")
    assert not store.queue._busy


async def test_a_caller_cancelled_when_its_turn_came_hands_the_batch_on() -> None:
    store = _Store()
    scope = anyio.CancelScope()
    results: dict[str, Any] = {}

    async def cancelled() -> None:
        with scope:
            results["a"] = await store.queue.call("a", action="x")

    async def call(name: str) -> None:
        results[name] = await store.queue.call(name, action="x")

    async def first() -> None:
        results["first"] = await store.queue.call("first", action="x")

    gate = store.hold()
    async with anyio.create_task_group() as group:
        group.start_soon(first)
        await _until(lambda: store.batches)
        group.start_soon(cancelled)  # queued first: it takes the next batch...
        await _until(lambda: len(store.queue._queue) == 1)
        group.start_soon(call, "b")
        await _until(lambda: len(store.queue._queue) == 2)
        store.gate = None
        # ...but is cancelled just as the first batch ends and hands it the turn.
        scope.cancel()
        gate.set()
    assert scope.cancelled_caught
    assert results == {"first": "first", "b": "b"}
    assert store.batches == [["first"], ["b"]]
    assert not store.queue._busy


async def test_a_waiting_caller_cancelled_while_its_batch_runs_learns_its_outcome_first() -> None:
    store = _Store()
    scope = anyio.CancelScope()
    seen: list[str] = []

    async def waiter() -> None:
        with scope:
            try:
                await store.queue.call("w", action="x")
            finally:
                seen.append("settled" if store.batches[-1] == ["lead", "w"] else "early")

    async def lead() -> None:
        await store.queue.call("lead", action="x")

    gate = store.hold()
    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(store.queue.call, "first", action="x"))
        await _until(lambda: store.batches)
        group.start_soon(lead)
        await _until(lambda: len(store.queue._queue) == 1)
        group.start_soon(waiter)
        await _until(lambda: len(store.queue._queue) == 2)
        second = store.hold()
        gate.set()  # "lead" takes the second batch, which holds "w" too
        await _until(lambda: len(store.batches) == 2)
        scope.cancel()
        await anyio.sleep(0.01)
        assert seen == []  # still waiting for the batch that holds its call
        store.gate = None
        second.set()
    assert scope.cancelled_caught
    assert seen == ["settled"]


async def test_callers_cancelled_before_their_turn_leave_the_others_their_batch() -> None:
    # The first queued caller waits for the hand-over, the others share one event for
    # the end of their batch: with the first one gone, one of the others takes it.
    store = _Store()
    scopes = {name: anyio.CancelScope() for name in "ac"}
    results: dict[str, Any] = {}

    async def call(name: str) -> None:
        with scopes.get(name, anyio.CancelScope()):
            results[name] = await store.queue.call(name, action="x")

    gate = store.hold()
    async with anyio.create_task_group() as group:
        group.start_soon(call, "first")
        await _until(lambda: store.batches)
        for name in "abcd":
            group.start_soon(call, name)
            await _until(lambda n=name: n in [p.body for p in store.queue._queue])
        scopes["a"].cancel()
        scopes["c"].cancel()
        await _until(lambda: [p.body for p in store.queue._queue] == ["b", "d"])
        store.gate = None
        gate.set()
    assert all(scope.cancelled_caught for scope in scopes.values())
    assert results == {"first": "first", "b": "b", "d": "d"}
    assert store.batches == [["first"], ["b", "d"]]
    assert not store.queue._busy


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
async def test_a_caller_cancelled_before_it_calls_makes_no_call(busy: bool) -> None:
    # Idle, it would take a batch at once (shielded); busy, it would wait for one:
    # either way its call is never made, and it raises the cancellation.
    store = _Store()
    gate = store.hold() if busy else None
    async with anyio.create_task_group() as group:
        if busy:
            group.start_soon(functools.partial(store.queue.call, "first", action="x"))
            await _until(lambda: store.batches)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await store.queue.call("late", action="x")
        assert scope.cancelled_caught
        assert store.queue._queue == []
        if gate is not None:
            store.gate = None
            gate.set()
    assert store.batches == ([["first"]] if busy else [])
    assert not store.queue._busy
