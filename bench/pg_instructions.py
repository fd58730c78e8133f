"""The PostgreSQL server's instructions per journal append, counted by callgrind.

    python bench/pg_instructions.py [--appends 20 220]

Starts a throwaway cluster (fsync on) whose postmaster runs under ``valgrind
--tool=callgrind``, so that every backend writes its own count when its connection
closes.  Each figure is ``(I(n2) - I(n1)) / (n2 - n1)`` over two connections that make
``n1`` and ``n2`` writes, which cancels the backend's start-up; a second pair checks the
first.  It prints the figure of the append a sequential step makes (one record, fenced,
on a run whose page it shares with 60 other runs, through the store's own statement,
prepared as psycopg prepares it) and of a bare one-row ``INSERT`` for scale.  The
client's and the commit's (fsync) time are not in it: this is the server's CPU work,
which a loaded machine does not disturb.  Needs ``valgrind`` and the server binaries
(found as :mod:`bench._postgres` finds them); takes a few minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from bench._postgres import server_bin  # noqa: E402

RUNS_ON_THE_PAGE = 60
OWNER = "vm:1:bench"
RECORD = json.dumps(
    {
        "type": "step_result",
        "stamped_at": 1796173727.6223788,
        "step": "b",
        "invocation_id": "inv-149",
        "outcome": {
            "kind": "completed",
            "value": {
                "event": {
                    "__is_pydantic": True,
                    "value": {"hop": 149, "limit": 300},
                    "qualified_name": "bench.chain.ToC",
                }
            },
            "collect_ops": [],
            "sends": 0,
            "deleted_waiters": [],
        },
    }
)


class CallgrindCluster:
    """A cluster in a temp dir whose postmaster (and so every backend) runs under
    callgrind; :meth:`stop` deletes it."""

    def __init__(self) -> None:
        bin_dir = server_bin()
        if bin_dir is None or shutil.which("valgrind") is None:
            raise SystemExit("needs valgrind and the PostgreSQL server binaries")
        self.bin = bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="tw-pg-cg.", dir="/tmp"))
        self.counts = self.dir / "cg"
        self.counts.mkdir()
        for path in (self.dir, self.counts):
            path.chmod(0o777)
        self.dsn = f"postgresql://postgres@/postgres?host={self.dir}"
        self._run("initdb", "-D", str(self.dir / "data"), "-U", "postgres", "-A", "trust",
                  "-E", "UTF8", "--locale=C", "--no-sync")  # fmt: skip
        command = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={self.counts}/cg.%p",
            str(self.bin / "postgres"), "-D", str(self.dir / "data"), "-k", str(self.dir),
            "-c", "listen_addresses=", "-c", "fsync=on", "-c", "synchronous_commit=on",
            "-c", "autovacuum=off",
        ]  # fmt: skip
        log = (self.dir / "server.log").open("w")
        self._server = subprocess.Popen(self._as_pg(command), stdout=log, stderr=log)
        self._wait_ready()

    def _as_pg(self, command: list[str]) -> list[str]:
        # initdb and postgres refuse to run as root
        return ["runuser", "-u", "postgres", "--", *command] if os.getuid() == 0 else command

    def _run(self, program: str, *args: str) -> None:
        if os.getuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        subprocess.run(self._as_pg([str(self.bin / program), *args]), check=True,
                       capture_output=True)  # fmt: skip

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + 120
        while True:
            try:
                with psycopg.connect(self.dsn, connect_timeout=5):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline or self._server.poll() is not None:
                    raise
                time.sleep(1)

    def instructions(self, pid: int) -> int:
        """The instructions backend ``pid`` ran (it writes them when it exits)."""
        path = self.counts / f"cg.{pid}"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if path.exists():
                found = re.search(r"^(?:summary|totals): (\d+)", path.read_text(), re.M)
                if found:
                    return int(found.group(1))
            time.sleep(0.5)
        raise SystemExit(f"backend {pid} left no count in {path}")

    def stop(self) -> None:
        subprocess.run(self._as_pg([str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"),
                                    "-m", "fast", "-w", "-t", "120", "stop"]),
                       capture_output=True, check=False)  # fmt: skip
        self._server.wait(60)
        shutil.rmtree(self.dir, ignore_errors=True)


def _prepare(dsn: str, schema: str) -> None:
    """The store's tables, with runs that share their pages as in a busy store."""
    import psycopg

    from tickwork.stores.postgres_schema import migrate_schema

    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate_schema(conn, schema, "bench")
        conn.execute(f'CREATE TABLE "{schema}".bare (id serial, data text)')
        for index in range(RUNS_ON_THE_PAGE):
            conn.execute(
                f'INSERT INTO "{schema}".runs (run_id, workflow_name, status, owner, epoch, '
                "lease_until, start_event, options) VALUES (%s, 'bench.chain.Chain', "
                "'running', %s, 1, now() + interval '1 hour', %s::json, '{}'::json)",
                (f"run-{index:03}", OWNER, '{"value": {"hops": 1000}}'),
            )


def _appends(dsn: str, schema: str, run_id: str, count: int) -> int:
    """Make ``count`` one-record appends to ``run_id`` in a new connection; its pid."""
    import psycopg

    from tickwork.stores.postgres_sql import append_statement

    flags = dict(fenced=True, records=True, progress=True, patch=False, consumed=False,
                 stream=False, final=False)  # fmt: skip
    try:
        statement = append_statement(schema, one_record=True, **flags)
    except TypeError:  # a tickwork from before the one-record form, for comparison
        statement = append_statement(schema, **flags)
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
        for seq in range(count):
            params: dict[str, Any] = {
                "run_id": run_id, "owner": OWNER, "epoch": 1, "first": seq, "last": seq,
                "seqs": [seq], "datas": [RECORD], "data": RECORD,
            }  # fmt: skip
            row = conn.execute(statement, params).fetchone()
            assert row is not None, "the fence refused an append"
    return pid


def _inserts(dsn: str, schema: str, count: int) -> int:
    """Make ``count`` one-row inserts in a new connection; its pid."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        pid = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
        for _ in range(count):
            conn.execute(f'INSERT INTO "{schema}".bare (data) VALUES (%s)', ("x" * 200,))
    return pid


def main() -> None:
    import psycopg

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", nargs=2, type=int, default=(20, 220), metavar=("N1", "N2"))
    args = parser.parse_args()
    small, large = args.appends
    cluster = CallgrindCluster()
    try:
        schema = "bench"
        _prepare(cluster.dsn, schema)
        runs = iter(f"run-{index:03}" for index in range(10, 20))  # a fresh run per connection
        writes = {
            "append (one record)": lambda n: _appends(cluster.dsn, schema, next(runs), n),
            "bare one-row INSERT": lambda n: _inserts(cluster.dsn, schema, n),
        }
        for name, write in writes.items():
            pairs = []
            for _ in range(2):
                low = cluster.instructions(write(small))
                high = cluster.instructions(write(large))
                pairs.append((high - low) / (large - small))
            print(
                f"{name}: {sum(pairs) / 2:,.0f} instructions per write in the server "
                f"(pairs: {', '.join(f'{p:,.0f}' for p in pairs)})"
            )
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            hot = conn.execute(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                "WHERE schemaname = %s AND relname = 'runs'",
                (schema,),
            ).fetchone()
        print(f"updates of runs rows: {hot[0] if hot else '?'}, HOT: {hot[1] if hot else '?'}")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
