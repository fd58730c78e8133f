"""Instructions per item of a scenario, counted by valgrind's callgrind: a figure that a
loaded machine does not disturb (wall-clock medians do drift).

    python bench/instructions.py chain 1000 3000
    python bench/instructions.py concurrent_runs 1000 2000 --raw baseline_runs

Each size runs once under ``valgrind --tool=callgrind`` in a fresh interpreter (one
warm-up run at size 3 first, as the scenarios do); the figure is
``(I(n2) - I(n1)) / (n2 - n1)``, which cancels the interpreter's start-up and imports.
Everything a run does is counted, the garbage collector included.  ``--raw`` gives the
same figure for a reference scenario and their ratio.  Needs ``valgrind`` on the PATH;
``PYTHONHASHSEED=0`` keeps the counts repeatable.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Scenario -> the body to run at size n (after a warm-up at size 3), as Python source.
BODIES = {
    "baseline": "from bench.baseline import _hops as body",
    "chain_floor": "from bench.chain_floor import _floor as body",
    "chain": (
        "from bench.chain import Chain\n"
        "workflow = Chain(timeout=None)\n"
        "async def body(n):\n"
        "    assert await workflow.run(hops=n) == n"
    ),
    "fanout_floor": "from bench.fanout_floor import _floor as body",
    "fanout_collect": (
        "from bench.fanout_collect import FanoutCollect\n"
        "workflow = FanoutCollect(timeout=None)\n"
        "async def body(n):\n"
        "    await workflow.run(size=n)"
    ),
    "send_collect": (
        "from bench.send_collect import SendCollect\n"
        "workflow = SendCollect(timeout=None)\n"
        "async def body(n):\n"
        "    await workflow.run(tasks=n)"
    ),
    "concurrent_runs": (
        "from bench.concurrent_runs import ThreeSteps, _run_all\n"
        "workflow = ThreeSteps(timeout=None)\n"
        "async def body(n):\n"
        "    await _run_all(workflow, n)"
    ),
    "baseline_runs": "from bench.baseline_runs import _run_all_raw as body",
    "stream": (
        "from bench.stream import Producer, _consume\n"
        "workflow = Producer(timeout=None)\n"
        "async def body(n):\n"
        "    await _consume(workflow, n)"
    ),
    "stream_raw": "from bench.stream_raw import _consume_raw as body",
    "stream_runs": "from bench.stream_runs import _streams as body",
    "snapshot": (
        "from bench.snapshot import _run\n"
        "async def body(n):\n"
        "    assert (await _run(n, True))[0] == n * (n - 1) // 2"
    ),
    "durable_concurrent": (
        "import tempfile\n"
        "from pathlib import Path\n"
        "from bench.concurrent_runs import ThreeSteps\n"
        "from bench.durable_concurrent import _await_all\n"
        "from tickwork.journal import SqliteJournal\n"
        "from tickwork.runtime.ownership import Ownership\n"
        "# Under valgrind a lease renewal can take longer than the default lease (30 s):\n"
        "# the runs would fence themselves.\n"
        "Ownership.__init__.__kwdefaults__['lease_seconds'] = 3600.0\n"
        "folder = tempfile.TemporaryDirectory()\n"
        "store = SqliteJournal(Path(folder.name) / 'runs.db')\n"
        "workflow = ThreeSteps(timeout=None, journal=store)\n"
        "async def body(n):\n"
        "    await _await_all([workflow.run(value=i) for i in range(n)])"
    ),
    "snapshot_off": (
        "from bench.snapshot import _run\n"
        "async def body(n):\n"
        "    assert (await _run(n, False))[0] == n * (n - 1) // 2"
    ),
}

_DRIVER = """
import sys
sys.path[:0] = [{root!r}, {src!r}]
import anyio
{body}
async def main():
    await body(3)
    await body({n})
anyio.run(main)
"""


def instructions(scenario: str, n: int) -> int:
    """The instructions callgrind counts for one process running ``scenario`` at ``n``."""
    return count(_DRIVER.format(root=str(ROOT), src=str(ROOT / "src"), body=BODIES[scenario], n=n))


def count(driver: str) -> int:
    """The instructions callgrind counts for one interpreter running ``driver`` (source)."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "driver.py"
        script.write_text(driver)
        proc = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={tmp}/callgrind.out",
                sys.executable,
                str(script),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            check=True,
        )
    found = re.search(r"Collected : (\d+)", proc.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in callgrind's output:\n{proc.stderr}")
    return int(found.group(1))


def per_item(scenario: str, n1: int, n2: int) -> float:
    """``(I(n2) - I(n1)) / (n2 - n1)``."""
    return (instructions(scenario, n2) - instructions(scenario, n1)) / (n2 - n1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("scenario", choices=sorted(BODIES))
    parser.add_argument("n1", type=int)
    parser.add_argument("n2", type=int)
    parser.add_argument("--raw", choices=sorted(BODIES), help="a reference scenario")
    args = parser.parse_args(argv)
    figure = per_item(args.scenario, args.n1, args.n2)
    print(f"{args.scenario}: {figure:,.0f} instructions per item")
    if args.raw:
        raw = per_item(args.raw, args.n1, args.n2)
        print(f"{args.raw}: {raw:,.0f} instructions per item; ratio {figure / raw:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
