"""retry: the chain scenario where every hop fails once and is retried with ``wait_fixed(0)``.

Steps ``a`` -> ``b`` -> ``c`` -> ``a`` ... each raise on their first attempt and succeed
on the retry (``ctx.retry_info().retry_number == 1``), so every one of the ``n`` hops costs
two invocations plus a retry decision. The result must be exactly ``n`` hops and ``n``
failures. The per-hop time is the cost of one item that fails once; the notes compare it
with the plain ``chain`` scenario at the same size.
"""

from __future__ import annotations

from bench._harness import Scenario, expect, run_timed, stopwatch
from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.retry_policy import retry_policy, stop_after_attempt, wait_fixed

RETRY_ONCE = retry_policy(wait=wait_fixed(0), stop=stop_after_attempt(2))


class Hop(Event):
    hop: int
    limit: int


class ToA(Hop):
    pass


class ToB(Hop):
    pass


class ToC(Hop):
    pass


class Flaky(Exception):
    """The first attempt of every hop raises this."""


class RetryChain(Workflow):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.failures = 0

    def _next(self, ctx: Context, ev: Hop, following: type[Hop]) -> Hop | StopEvent:
        if ctx.retry_info().retry_number == 0:
            self.failures += 1
            raise Flaky(f"hop {ev.hop} fails once")
        hop = ev.hop + 1
        if hop >= ev.limit:
            return StopEvent(result=hop)
        return following(hop=hop, limit=ev.limit)

    @step
    async def begin(self, ev: StartEvent) -> ToA:
        return ToA(hop=0, limit=ev.hops)

    @step(retry_policy=RETRY_ONCE)
    async def a(self, ctx: Context, ev: ToA) -> ToB | StopEvent:
        return self._next(ctx, ev, ToB)

    @step(retry_policy=RETRY_ONCE)
    async def b(self, ctx: Context, ev: ToB) -> ToC | StopEvent:
        return self._next(ctx, ev, ToC)

    @step(retry_policy=RETRY_ONCE)
    async def c(self, ctx: Context, ev: ToC) -> ToA | StopEvent:
        return self._next(ctx, ev, ToA)


async def _timed(n: int) -> float:
    workflow = RetryChain(timeout=None)
    expect("warm-up hops", await workflow.run(hops=3), 3)
    workflow.failures = 0
    hops, elapsed = await stopwatch(workflow.run(hops=n))
    expect("hops made", hops, n)
    expect("failed first attempts", workflow.failures, n)
    return elapsed


def measure(n: int) -> float:
    return run_timed(_timed, n)


SCENARIO = Scenario(
    name="retry",
    summary="chain of n hops, each fails once and is retried with wait_fixed(0)",
    unit="hop",
    sizes=(1_000, 10_000),
    quick_sizes=(100, 1_000),
    measure=measure,
    vs_scenario="chain",
    goal="per-hop cost reported (no quality.md target); linear growth",
)
