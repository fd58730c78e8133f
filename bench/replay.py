"""replay: rebuild a run's state from its journal of about n ticks.

A chain run with ``journal=True`` records every tick; the timed region folds the JSON
round-tripped records through the reducer with ``rebuild_state_from_ticks`` (no step
body runs).  The rebuilt state must equal the live run's final state.
"""

from __future__ import annotations

import json

from bench._harness import Scenario, expect, run_timed
from bench.chain import Chain
from tickwork.context.serializers import JsonSerializer
from tickwork.runtime.control_loop import rebuild_state_from_ticks
from tickwork.runtime.control_loop.reduce import initial_state
from tickwork.serde.snapshot import encode_snapshot
from tickwork.types import JournalRecord


async def _timed(n: int) -> float:
    import time

    workflow = Chain(timeout=None, journal=True)
    handler = workflow.run(hops=max(1, n // 2))
    await handler
    records = [
        JournalRecord(r.seq, json.loads(json.dumps(r.data))) async for r in handler.journal()
    ]
    start_state = initial_state(workflow._reducer_config())
    started = time.perf_counter()
    rebuilt = rebuild_state_from_ticks(start_state, records)
    elapsed = time.perf_counter() - started
    live = handler._session.state
    serializer = JsonSerializer()
    expect(
        "rebuilt state",
        encode_snapshot(rebuilt, serializer, None),
        encode_snapshot(live, serializer, None),
    )
    _measured[n] = len(records)
    return elapsed


_measured: dict[int, int] = {}


def measure(n: int) -> float:
    return run_timed(_timed, n)


def _note(n: int, median: float) -> str:
    ticks = _measured.get(n, n)
    return f"{ticks:,} ticks, {ticks / median:,.0f} ticks/s"


SCENARIO = Scenario(
    name="replay",
    summary="rebuild the state of a chain run from its journal",
    unit="tick",
    sizes=(10_000, 100_000),
    quick_sizes=(1_000, 10_000),
    measure=measure,
    vs_baseline=False,
    note=_note,
    goal=">= 100k ticks/s; linear",
)
