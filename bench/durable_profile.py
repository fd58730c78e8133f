"""Where the instructions of ``durable_concurrent`` go, phase by phase and bucket by bucket.

    python bench/durable_profile.py callgrind 300   # exact, ~2 min
    python bench/durable_profile.py sample 300 30   # Python-level shares, ~1 min

``callgrind`` runs the scenario's body once under ``valgrind --tool=callgrind`` and has
``callgrind_control`` dump the counts between its phases (warm-up, registering ``m``
runs, running them), so each phase is counted alone; it prints the instructions per run
of each phase with the collector on and off, and the inclusive cost of the C functions
that make whole buckets (the JSON encoder, the SQLite statements, the worker thread of
the group commit, the collector).  ``sample`` samples the Python stack of the loop's
thread on the process's CPU clock (collector off) while the runs step, and prints the
share of each bucket; the worker thread's CPU lands on whatever the loop's thread does
beside it (when it waits: "epoll wait").  ``PYTHONHASHSEED=0`` is set for valgrind.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_DRIVER = """
import sys, os, time, tempfile
sys.path[:0] = [{root!r}, {src!r}]
import anyio
from pathlib import Path
from bench.concurrent_runs import ThreeSteps
from bench.durable_concurrent import _await_all
from tickwork.journal import SqliteJournal
from tickwork.runtime.ownership import Ownership
Ownership.__init__.__kwdefaults__['lease_seconds'] = 3600.0  # valgrind is slow
if {nogc}:
    import gc
    gc.disable()
folder = tempfile.TemporaryDirectory()
store = SqliteJournal(Path(folder.name) / 'runs.db')
workflow = ThreeSteps(timeout=None, journal=store)
def phase(name):
    open({marks!r} + name, 'w').write(str(os.getpid()))
    while not os.path.exists({marks!r} + name + '.done'):
        time.sleep(0.2)
async def main():
    await _await_all([workflow.run(value=i) for i in range(3)])
    phase('registering')
    handlers = [workflow.run(value=i) for i in range({m})]
    phase('stepping')
    await _await_all(handlers)
    phase('end')
anyio.run(main)
"""

PHASES = ("registering", "stepping", "end")

# Inclusive C costs reported per run (names as callgrind_annotate writes them).
C_BUCKETS = {
    "JSON encoder (json.dumps)": "Modules/_json.c:encoder_call",
    "worker thread (group-commit batches)": "nptl/pthread_create.c:start_thread",
    "sqlite3 statements (all, as the cursor runs them)": "_sqlite/cursor.c:_pysqlite_query_execute",
    "garbage collector": "Modules/gcmodule.c:gc_collect_main",
}


def _callgrind(m: int, nogc: bool) -> list[tuple[int, dict[str, int]]]:
    """Per phase: (total instructions, inclusive cost of each C bucket)."""
    with tempfile.TemporaryDirectory() as tmp:
        marks = f"{tmp}/mark-"
        script = Path(tmp) / "driver.py"
        script.write_text(
            _DRIVER.format(root=str(ROOT), src=str(ROOT / "src"), nogc=nogc, marks=marks, m=m)
        )
        out = f"{tmp}/callgrind.out"
        proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, script],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        for name in PHASES:  # dump the counts so far at each phase's start
            while not os.path.exists(marks + name):
                time.sleep(0.2)
            pid = Path(marks + name).read_text()
            subprocess.run(["callgrind_control", "-d", name, pid], capture_output=True, check=True)
            Path(marks + name + ".done").touch()
        proc.wait()
        # out.1: start-up and warm-up; out.2: registering; out.3: stepping.
        return [_annotate(f"{out}.{part}") for part in (2, 3)]


def _annotate(path: str) -> tuple[int, dict[str, int]]:
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    total = 0
    found: dict[str, int] = dict.fromkeys(C_BUCKETS, 0)
    for line in text.splitlines():
        hit = re.match(r"\s*([\d,]+) \([^)]*\)\s+(\S+)", line)
        if hit is None:
            continue
        count, name = int(hit.group(1).replace(",", "")), hit.group(2)
        if name == "PROGRAM":
            total = count
        for bucket, symbol in C_BUCKETS.items():
            if name.endswith(symbol):  # not the recursive ('2) entries
                found[bucket] += count
    return total, found


# Python buckets: the first rule matching any frame of the sampled stack wins.
RULES = [
    ("final snapshot: encode", ("durable.py:_final_snapshot", "durable.py:_compacting_snapshot")),
    ("records: encode_tick / to_record", ("durable.py:_encode", "durable.py:_event_record")),
    ("records: outcome", ("durable.py:_outcome",)),
    ("json.dumps in the store's append", ("sqlite.py:append",)),
    ("state patch", ("durable.py:_state_patch",)),
    ("group commit + thread hand-off", ("group_commit.py:", "sqlite.py:_run_batch", "to_thread")),
    ("durable writer other", ("durable.py:",)),
    ("inbox watcher", ("inbox_watcher.py:",)),
    ("reduce", ("reduce.py:", "_tx.py:", "_routing.py:")),
    ("step workers + bodies", ("step_worker.py:", "runner.py:_run_worker", "runner.py:_report")),
    ("epoll wait", ("selectors.py:select",)),
    ("run loop / session / handler", ("runner.py:", "session.py:", "handler.py:")),
    ("bench harness", ("durable_concurrent.py:",)),
]


def _sample(m: int, reps: int) -> collections.Counter[str]:
    import gc
    import signal

    import anyio

    sys.path[:0] = [str(ROOT), str(ROOT / "src")]
    from bench.concurrent_runs import ThreeSteps
    from bench.durable_concurrent import _await_all
    from tickwork.journal import SqliteJournal

    counts: collections.Counter[str] = collections.Counter()

    def on_tick(_signum: int, frame: Any) -> None:
        keys = []
        while frame is not None:
            keys.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")
            frame = frame.f_back
        for name, parts in RULES:
            if any(part in key for key in keys for part in parts):
                counts[name] += 1
                return
        counts["asyncio / anyio other"] += 1

    async def main() -> None:
        with tempfile.TemporaryDirectory() as folder:
            store = SqliteJournal(Path(folder) / "runs.db")
            workflow = ThreeSteps(timeout=None, journal=store)
            await _await_all([workflow.run(value=i) for i in range(3)])
            signal.signal(signal.SIGVTALRM, on_tick)
            for _ in range(reps):
                handlers = [workflow.run(value=i) for i in range(m)]
                signal.setitimer(signal.ITIMER_VIRTUAL, 0.0005, 0.0005)
                await _await_all(handlers)
                signal.setitimer(signal.ITIMER_VIRTUAL, 0, 0)
                gc.collect()
            store.close()

    gc.disable()
    anyio.run(main)
    return counts


def main(argv: list[str]) -> int:
    mode, m = argv[0], int(argv[1])
    if mode == "callgrind":
        for nogc in (False, True):
            label = "collector off" if nogc else "collector on"
            for phase, (total, found) in zip(
                ("registering", "stepping"), _callgrind(m, nogc), strict=True
            ):
                print(f"{label}, {phase}: {total / m:,.0f} instructions per run")
                # The worker thread's share varies from pass to pass (the WAL checkpoint
                # lands in whichever commit crosses its threshold): compare the event
                # loop's thread alone as well.
                loop_thread = total - found["worker thread (group-commit batches)"]
                print(f"    event loop's thread: {loop_thread / m:,.0f}")
                for bucket, count in found.items():
                    print(f"    {bucket}: {count / m:,.0f}")
    else:
        counts = _sample(m, int(argv[2]))
        total = sum(counts.values())
        for name, count in counts.most_common():
            print(f"{count / total:6.1%}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
