"""A fan-out member's one-phase tick gives what the general phases give.

``join_member_and_refill`` (``control_loop/_routing.py``) reduces, as one phase, the
tick of a fan-out's member whose returned event joins its stream's ``list[E]`` batch
while its slot takes the next queued item.  Every run below is recorded (each
``(state, tick)`` its loop reduced), then each pair is reduced again with the phase and
without it (the general phases: finish, deliver to the collect step, settle, drain);
the states and the commands must be the same, and so must a fold of every tick.  The
flows where the phase must decline (a ``Take`` binding, a second route, a single
worker, a delayed retry at the front of the queue, nested streams) are checked to
take the general path, and recorded states changed into rarer ones (a retried item, a
stream's last member, a fired binding...) are reduced both ways too.
"""

from __future__ import annotations

from typing import Annotated, Any

import pytest

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.collect import Collect, Take
from tickwork.retry_policy import retry_policy, stop_after_attempt, wait_fixed
from tickwork.runtime.control_loop import _routing, runner
from tickwork.runtime.control_loop import reduce as reduce_module
from tickwork.runtime.control_loop.reduce import reduce, reduce_all
from tickwork.runtime.types.evolve import evolve as replace
from tickwork.runtime.types.persistent import PMap
from tickwork.runtime.types.slots import SlotPool
from tickwork.runtime.types.state import NO_SENDS, RunState
from tickwork.runtime.types.ticks import StepResult, Tick
from tickwork.testing import ReducerKit

from .reducer_helpers import fingerprint

pytestmark = pytest.mark.anyio


class Item(Event):
    n: int


class Result(Event):
    n: int


class Batch(Event):
    ns: list[int]


class Fanout(Workflow):
    """The benchmark's shape: every member's tick but the last few takes the phase."""

    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=n) for n in range(ev.size)]

    @step(num_workers=3)
    async def work(self, ev: Item) -> Result:
        return Result(n=ev.n)

    @step
    async def join(self, events: list[Result]) -> StopEvent:
        return StopEvent(result=sorted(ev.n for ev in events))


class OneWorker(Fanout):
    """A single worker: its in-flight map is one pair, not a ``dict``."""

    @step(num_workers=1)
    async def work(self, ev: Item) -> Result:
        return Result(n=ev.n)


class TakeSome(Workflow):
    """A ``Take`` binding may fire on a member: the general path."""

    @step
    async def split(self, ev: StartEvent) -> list[Item]:
        return [Item(n=n) for n in range(ev.size)]

    @step(num_workers=3)
    async def work(self, ev: Item) -> Result:
        return Result(n=ev.n)

    @step
    async def join(self, events: Annotated[list[Result], Collect(Take(5))]) -> Batch:
        return Batch(ns=sorted(ev.n for ev in events))

    @step
    async def end(self, ev: Batch) -> StopEvent:
        return StopEvent(result=ev.ns)


class AlsoAudited(Fanout):
    """A second step takes every ``Result`` too: two routes, the general path."""

    @step
    async def audit(self, ev: Result) -> None:
        return None


class RetriedLater(Fanout):
    """Member 0 fails once and is retried later: the phase declines while that delayed
    retry waits at the front of the queue."""

    @step(
        num_workers=3,
        retry_policy=retry_policy(wait=wait_fixed(0.01), stop=stop_after_attempt(2)),
    )
    async def work(self, ctx: Context, ev: Item) -> Result:
        if ev.n == 0 and ctx.retry_info().retry_number == 0:
            raise ConnectionError("once")
        return Result(n=ev.n)


class Nested(Workflow):
    """Members of an inner stream while the outer one is open: two open streams."""

    @step
    async def outer(self, ev: StartEvent) -> list[Batch]:
        return [Batch(ns=list(range(k * 10, k * 10 + ev.size))) for k in range(2)]

    @step
    async def inner(self, ev: Batch) -> list[Item]:
        return [Item(n=n) for n in ev.ns]

    @step(num_workers=2)
    async def work(self, ev: Item) -> Result:
        return Result(n=ev.n)

    @step
    async def join(self, events: list[Result]) -> StopEvent:
        return StopEvent(result=sorted(ev.n for ev in events))


async def _record(
    monkeypatch: pytest.MonkeyPatch, flow: type[Workflow], size: int
) -> tuple[Any, list[tuple[RunState, Tick]]]:
    """The result of a run of ``flow`` and every ``(state, tick)`` its loop reduced."""
    pairs: list[tuple[RunState, Tick]] = []

    def recording(state: RunState, tick: Tick) -> Any:
        pairs.append((state, tick))
        return reduce(state, tick)

    with monkeypatch.context() as patch:
        patch.setattr(runner, "reduce", recording)
        result = await flow(timeout=None).run(size=size)
    return result, pairs


def _declining(*args: Any) -> bool:
    return False


def _both_ways(
    monkeypatch: pytest.MonkeyPatch, pairs: list[tuple[RunState, Tick]]
) -> tuple[list[Any], list[Any], int]:
    """Each pair reduced with the phase and without it (fingerprints), and how many
    ticks the phase took."""
    taken = 0
    phase = _routing.join_member_and_refill

    def counting(*args: Any) -> bool:
        nonlocal taken
        took = phase(*args)
        taken += took
        return took

    with monkeypatch.context() as patch:
        patch.setattr(reduce_module, "join_member_and_refill", counting)
        fast = [fingerprint(reduce(state, tick)) for state, tick in pairs]
    with monkeypatch.context() as patch:
        patch.setattr(reduce_module, "join_member_and_refill", _declining)
        slow = [fingerprint(reduce(state, tick)) for state, tick in pairs]
    return fast, slow, taken


@pytest.mark.parametrize(
    ("flow", "size", "takes_the_phase"),
    [
        (Fanout, 30, True),
        (RetriedLater, 12, None),
        (OneWorker, 12, False),
        (TakeSome, 12, False),
        (AlsoAudited, 12, False),
        (Nested, 6, False),
    ],
)
async def test_the_member_phase_gives_what_the_general_phases_give(
    monkeypatch: pytest.MonkeyPatch,
    flow: type[Workflow],
    size: int,
    takes_the_phase: bool | None,
) -> None:
    result, pairs = await _record(monkeypatch, flow, size)
    assert result  # the run finished with its batch
    fast, slow, taken = _both_ways(monkeypatch, pairs)
    for index, (with_phase, without) in enumerate(zip(fast, slow, strict=True)):
        assert with_phase == without, f"tick {index}: {type(pairs[index][1]).__name__}"
    if takes_the_phase:
        assert taken >= size - 2 * 3  # all but the last members (and a retry's ticks)
    elif takes_the_phase is not None:  # (None: how many depends on the timing)
        assert taken == 0


async def test_a_fold_with_the_member_phase_gives_the_general_fold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``reduce_all`` (a journal's replay: no commands built) takes the phase too."""
    _, pairs = await _record(monkeypatch, Fanout, 20)
    ticks = [tick for _, tick in pairs]
    start = pairs[0][0]
    folded = fingerprint(reduce_all(start, ticks))
    with monkeypatch.context() as patch:
        patch.setattr(reduce_module, "join_member_and_refill", _declining)
        assert fingerprint(reduce_all(start, ticks)) == folded


async def test_the_member_phase_changes_nothing_when_it_declines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Declining leaves the accumulator as it found it: the general path starts clean."""
    _, pairs = await _record(monkeypatch, TakeSome, 12)
    calls: list[tuple[Any, Any]] = []
    phase = _routing.join_member_and_refill

    def checking(tx: Any, invocation: Any, value: Any, current: Any) -> bool:
        before = fingerprint(tx), list(tx.commands)
        took = phase(tx, invocation, value, current)
        assert not took
        calls.append(before)
        assert (fingerprint(tx), list(tx.commands)) == before
        return took

    with monkeypatch.context() as patch:
        patch.setattr(reduce_module, "join_member_and_refill", checking)
        for state, tick in pairs:
            reduce(state, tick)
    assert calls  # the members' ticks asked, and the phase declined each


def _variant(state: RunState, **changes: Any) -> RunState:
    """``state`` with the front item of ``work``'s queue, its stream or its release
    state changed (``item``/``stream``/``release``: the fields to change)."""
    steps = dict(state.steps)
    if "item" in changes:
        work = steps["work"]
        front, rest = work.queue.popleft()
        steps["work"] = replace(work, queue=rest.appendleft(replace(front, **changes["item"])))
    streams, releases = state.streams, state.releases
    if "stream" in changes:
        ((sid, stream),) = streams.items()
        streams = PMap.of([(sid, replace(stream, **changes["stream"]))])
    if "release" in changes:
        ((key, release),) = releases.items()
        releases = PMap.of([(key, replace(release, **changes["release"]))])
    return replace(state, steps=steps, streams=streams, releases=releases)


@pytest.mark.parametrize(
    ("changes", "takes_the_phase"),
    [
        # A retried item's attempts and failure go to its invocation.
        (
            {
                "item": {
                    "attempts": 2,
                    "first_attempt_at": 1.5,
                    "last_exception": ValueError("x"),
                    "last_failed_at": 2.5,
                }
            },
            True,
        ),
        # The member is the stream's last open work item: it closes at the end of the
        # tick (its batch released to ``join``).
        ({"stream": {"open_work_items": 1}}, True),
        # A count that would go negative: the general path fails the run loudly.
        ({"stream": {"open_work_items": 0}}, False),
        # The binding fired already: the general path drops the member.
        ({"release": {"released": True}}, False),
        # A rewound invocation at the front: the general path resumes its identity.
        ({"item": {"resume_identity": ("inv-999", NO_SENDS)}}, False),
    ],
)
async def test_the_member_phase_on_rarer_states(
    monkeypatch: pytest.MonkeyPatch, changes: dict[str, Any], takes_the_phase: bool
) -> None:
    _, pairs = await _record(monkeypatch, Fanout, 30)
    taken_before = [
        (state, tick)
        for state, tick in pairs
        if type(tick) is StepResult and state.steps["work"].queue.size > 3
    ]
    state, tick = taken_before[len(taken_before) // 2]
    varied = [(_variant(state, **changes), tick)]
    fast, slow, taken = _both_ways(monkeypatch, varied)
    assert fast == slow
    assert taken == (1 if takes_the_phase else 0)


@pytest.mark.parametrize(
    ("flow", "joins"),
    [(Fanout, True), (OneWorker, True), (TakeSome, False), (AlsoAudited, False)],
)
def test_the_config_tells_which_members_join_a_batch(flow: type[Workflow], joins: bool) -> None:
    """``RunConfig.member_joins``: the binding of the one ``list[E]`` step (without
    ``Take``) a member of that type goes to, else ``None``."""
    config = ReducerKit(flow(timeout=None)).config
    binding = config.member_joins["split", Result]
    if joins:
        assert binding is not None and binding.target == "join" and binding.take is None
        assert binding is config.collectors["split", "join", Result]
    else:
        assert binding is None
    assert config.member_joins["split", Item] is None  # it goes to a plain step
    assert config.member_joins["work", Result] is None  # work opens no stream


def test_a_full_step_takes_back_the_slot_it_freed_and_its_pool() -> None:
    """What the phase relies on to refill a slot without asking the pool: a full step's
    shared gapless pool, with any one slot freed and taken back, is itself again."""
    for workers in range(1, 16):
        pool = SlotPool().acquire()[1]
        for _ in range(workers - 1):
            pool = pool.acquire()[1]
        assert pool.released is not None  # a shared one
        for slot in range(workers):
            freed = pool.released[slot]
            assert freed.acquired is not None
            assert freed.acquired[0] == slot and freed.acquired[1] is pool
