"""One claimer of the SQLite claim race (test_sqlite_store.py).

    python claim_race_child.py DB OWNER BATCH START_AT

Waits until ``START_AT`` (epoch seconds) so that every claimer starts together, then
claims batches of ``BATCH`` runs of ``wf`` until none is left, printing each run id it
got on a line of its own, then ``DONE``.
"""

from __future__ import annotations

import sys
import time

import anyio

from tickwork.stores.sqlite import SqliteJournal


async def main(db: str, owner: str, batch: int, start_at: float) -> None:
    store = SqliteJournal(db)
    store.check()
    await anyio.sleep(max(0.0, start_at - time.time()))
    while True:
        claims = await store.claim_runs(owner, ["wf"], limit=batch, lease_seconds=600.0)
        if not claims:
            break
        sys.stdout.write("".join(f"{claim.lease.run_id}\n" for claim in claims))
    sys.stdout.write("DONE\n")
    store.close()


if __name__ == "__main__":
    db_arg, owner_arg, batch_arg, start_arg = sys.argv[1:5]
    anyio.run(main, db_arg, owner_arg, int(batch_arg), float(start_arg))
