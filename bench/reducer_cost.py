"""Instructions per tick of the pure reducer alone, on the ticks a scenario's run reduces.

    python bench/reducer_cost.py chain 3000
    python bench/reducer_cost.py fanout_collect 3000

One run of the scenario at size ``n`` is recorded: every ``(state, tick)`` pair its loop
hands to ``reduce``.  The recorded pairs are then reduced again, once in one interpreter
and twice in another, both under valgrind's callgrind; the difference of the two counts,
divided by the number of ticks, is what ``reduce`` costs per tick (the run itself, the
recording and the interpreter's start-up cancel out).  The reducer is pure, so reducing a
recorded pair again does exactly the work the run's loop did.  Subtracting this from the
scenario's figure in ``bench/instructions.py`` leaves the async side's share (the
runner, the step worker, the step scope, asyncio).  Needs ``valgrind`` on the PATH.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

if not __package__:  # run as ``python bench/reducer_cost.py``: import ``bench`` from the root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench.instructions import ROOT, count

# Scenario -> (workflow class, the run's keyword for its size).
WORKFLOWS = {
    "chain": ("bench.chain", "Chain", "hops"),
    "fanout_collect": ("bench.fanout_collect", "FanoutCollect", "size"),
    "send_collect": ("bench.send_collect", "SendCollect", "tasks"),
}

_DRIVER = """
import sys
sys.path[:0] = [{root!r}, {src!r}]
import anyio
from {module} import {cls} as Flow
import tickwork.runtime.control_loop.runner as runner
reduce = runner.reduce
pairs = []

def recording(state, tick):
    pairs.append((state, tick))
    return reduce(state, tick)

runner.reduce = recording
async def main():
    await Flow(timeout=None).run({size}={n})
anyio.run(main)
runner.reduce = reduce
for _ in range({passes}):
    for state, tick in pairs:
        reduce(state, tick)
print(len(pairs))
"""


def per_tick(scenario: str, n: int) -> tuple[float, int]:
    """``(instructions per tick of reduce, ticks)`` for one run of ``scenario`` at ``n``."""
    module, cls, size = WORKFLOWS[scenario]
    fields = {"root": str(ROOT), "src": str(ROOT / "src"), "module": module, "cls": cls}
    once = count(_DRIVER.format(**fields, size=size, n=n, passes=1))
    twice = count(_DRIVER.format(**fields, size=size, n=n, passes=2))
    ticks = _ticks(scenario, n)
    return (twice - once) / ticks, ticks


def _ticks(scenario: str, n: int) -> int:
    """How many ticks one run of ``scenario`` at ``n`` reduces (counted without valgrind)."""
    module, cls, size = WORKFLOWS[scenario]
    driver = _DRIVER.format(
        root=str(ROOT), src=str(ROOT / "src"), module=module, cls=cls, size=size, n=n, passes=0
    )
    out = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("scenario", choices=sorted(WORKFLOWS))
    parser.add_argument("n", type=int)
    args = parser.parse_args(argv)
    figure, ticks = per_tick(args.scenario, args.n)
    print(f"{args.scenario}: reduce costs {figure:,.0f} instructions per tick ({ticks:,} ticks)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
