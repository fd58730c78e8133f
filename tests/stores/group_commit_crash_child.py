"""A process appending to many runs at once until it is killed (test_sqlite_group_commit.py).

    python group_commit_crash_child.py DB RUNS

Registers ``RUNS`` runs (``r0``, ``r1``, ...) owned by ``w1``, then appends to all of
them concurrently, one record per append, forever: the appends of different runs share
transactions (group commit).  After each append returns (durable, by the store's
contract) it prints ``RUN SEQ`` on a line of its own; ``READY`` once every run is
registered.  The parent kills it with SIGKILL in the middle of this.
"""

from __future__ import annotations

import sys

import anyio

from tickwork.stores.records import Lease
from tickwork.stores.sqlite import SqliteJournal
from tickwork.types import JournalRecord


async def _append_forever(store: SqliteJournal, lease: Lease) -> None:
    seq = 0
    while True:
        record = JournalRecord(seq=seq, data={"type": "idle_check", "stamped_at": 1000.0 + seq})
        await store.append(lease.run_id, [record], lease=lease)
        sys.stdout.write(f"{lease.run_id} {seq}\n")
        sys.stdout.flush()
        seq += 1


async def main(db: str, runs: int) -> None:
    store = SqliteJournal(db)
    leases = []
    for n in range(runs):
        lease = store.register_run(f"r{n}", "wf", {"journal_seq": 0}, owner="w1")
        assert lease is not None
        leases.append(lease)
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    async with anyio.create_task_group() as group:
        for lease in leases:
            group.start_soon(_append_forever, store, lease)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], int(sys.argv[2]))
