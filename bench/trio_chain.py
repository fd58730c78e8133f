"""trio: the chain scenario under ``anyio.run(..., backend="trio")``.

Named ``trio_chain`` so that the module can never shadow the ``trio`` package.
"""

from __future__ import annotations

from bench._harness import Scenario, run_timed
from bench.chain import timed_chain


def measure(n: int) -> float:
    return run_timed(timed_chain, n, backend="trio")


SCENARIO = Scenario(
    name="trio",
    summary="the chain scenario under trio",
    unit="hop",
    sizes=(1_000, 10_000),
    quick_sizes=(100, 1_000),
    measure=measure,
    vs_scenario="chain",
    goal="the same order as the chain under asyncio",
)
