"""A network partition between one worker and the database (scale-out.md §7.5).

Worker P reaches Postgres through a TCP proxy the test runs on 127.0.0.1 (the test
server listens on a unix socket only: the proxy forwards to it); worker D connects
directly.  P claims every run, then the proxy black-holes P's connections: it stops
forwarding in both directions and keeps the sockets open, so P's statements neither
fail nor return.  Then:

* P fences itself: its renewals do not come back for 0.8 x the lease time, so it drops
  its runs and starts no step body from then on (before anyone may take them over);
* D takes P's runs over once their leases expire and finishes them;
* after the heal, P's statements that were held in the proxy reach the server: every
  write of a run D took over is refused (no stale write: each run's journal is written
  once per seq, in order, never under an older epoch), and P goes on serving.
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from tests.fleet.fault_support import (
    Fleet,
    Followed,
    audited,
    check_executions,
    check_journal,
    check_settled,
    check_stream,
    check_trial_journal,
    executions,
    follow_trial,
    install_audit,
    query,
    run_history,
    running_fleet,
    stream_rows,
)
from tests.fleet.trial_child import Trial, reference_result

from postgres_support import PgSchema

pytestmark = pytest.mark.postgres

LEASE = 2.0
SELF_FENCE_AT = 0.8 * LEASE
SLACK = 0.25  # scheduling delays of a loaded machine


class BlackHoleProxy:
    """Forwards TCP connections on 127.0.0.1 to a Postgres unix socket; on
    :meth:`black_hole` it stops forwarding both ways (sockets stay open) until
    :meth:`heal`."""

    def __init__(self, unix_path: str) -> None:
        self.unix_path = unix_path
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port: int = self.listener.getsockname()[1]
        self.flowing = threading.Event()
        self.flowing.set()
        self.closed = threading.Event()
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.connections = 0
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                server.connect(self.unix_path)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.sockets += [client, server]
                self.connections += 1
            for source, target in ((client, server), (server, client)):
                threading.Thread(
                    target=self._pump, args=(source, target), name="proxy-pump", daemon=True
                ).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        source.settimeout(0.05)
        while not self.closed.is_set():
            # Black-holed: read nothing, send nothing; what was sent stays in the kernel
            # buffers (acknowledged, as a network would hold it) until the heal.
            if not self.flowing.wait(0.05):
                continue
            try:
                data = source.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                break
            while not self.flowing.is_set() and not self.closed.is_set():
                time.sleep(0.05)  # a chunk read just as the hole opened waits too
            try:
                target.sendall(data)
            except OSError:
                break
        for end in (source, target):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def black_hole(self) -> None:
        self.flowing.clear()

    def heal(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self.closed.set()
        self.flowing.set()
        self.listener.close()
        with self.lock:
            for end in self.sockets:
                end.close()


def _proxied(dsn: str) -> tuple[str, str]:
    """The unix socket path ``dsn`` names, and a DSN reaching it through 127.0.0.1."""
    parts = conninfo_to_dict(dsn)
    host = str(parts.get("host", ""))
    if not host.startswith("/"):
        pytest.skip(f"the partition test needs a server on a unix socket, not {host!r}")
    return f"{host}/.s.PGSQL.{parts.get('port', 5432)}", make_conninfo(dsn, host="127.0.0.1")


async def _wait_for(condition: Any, what: str, timeout: float) -> None:
    with anyio.fail_after(timeout):
        while not condition():
            await anyio.sleep(0.05)


def _owners(dsn: str, schema: str) -> dict[str, tuple[str, str | None, int]]:
    rows = query(dsn, "SELECT run_id, status, owner, epoch FROM {s}.runs", schema=schema)
    return {run_id: (status, owner, epoch) for run_id, status, owner, epoch in rows}


def test_a_partitioned_worker_fences_itself_and_another_takes_its_runs_over(
    pg_schema: PgSchema, tmp_path: Path
) -> None:
    dsn, schema = pg_schema
    unix_path, _ = _proxied(dsn)
    install_audit(dsn, schema)
    proxy = BlackHoleProxy(unix_path)
    proxied_dsn = make_conninfo(dsn, host="127.0.0.1", port=str(proxy.port))
    side_log = tmp_path / "executions.log"
    fleet = Fleet(dsn, schema, tmp_path, lease=LEASE, idle_release=0.5, side_log=side_log)
    runs = 4
    seen = {f"part-{n}": Followed(f"part-{n}") for n in range(runs)}
    marks: dict[str, float] = {}
    began = time.monotonic()
    try:
        with running_fleet(fleet):
            fleet.start(0, backend="asyncio", dsn=f"{proxied_dsn} application_name=proxied")
            fleet.wait_serving([0])
            proxied_id = fleet.workers[0].worker_id()
            proxied_pid = fleet.workers[0].pid

            async def main() -> None:
                from tickwork.stores.postgres import PostgresJournal

                store = PostgresJournal(dsn, schema)
                try:
                    async with anyio.create_task_group() as callers:
                        for number in range(runs):
                            run_id = f"part-{number}"
                            flow = Trial(journal=store, timeout=None)
                            handler = await flow.submit(run_id=run_id, width=6, pause=3.0)
                            callers.start_soon(
                                follow_trial,
                                handler,
                                number + 2,
                                random.Random(number),
                                seen[run_id],
                            )
                        await _wait_for(
                            lambda: all(o[1] == proxied_id for o in _owners(dsn, schema).values()),
                            "worker P claims every run",
                            20,
                        )
                        fleet.start(1, backend="trio")
                        await anyio.to_thread.run_sync(fleet.wait_serving, [1])
                        await anyio.sleep(0.3)  # P's step bodies are under way
                        marks["hole"] = time.time()
                        proxy.black_hole()
                        # D takes every run over (P's leases expire after LEASE s).
                        await _wait_for(
                            lambda: all(
                                o[1] != proxied_id or o[0] != "running"
                                for o in _owners(dsn, schema).values()
                            ),
                            "worker D takes P's runs over",
                            LEASE + 10,
                        )
                        marks["taken"] = time.time()
                        await anyio.sleep(1.0)
                        marks["heal"] = time.time()
                        proxy.heal()
                finally:
                    store.close()

            async def bounded() -> None:
                with anyio.fail_after(60):
                    await main()

            try:
                anyio.run(bounded)
            except BaseException as error:
                raise AssertionError(f"{error!r}\n{fleet.logs()}") from error
            # P survived the partition and serves again: it is alive, and claims.
            assert fleet.workers[0].process.poll() is None, fleet.logs()
            proxied_log = fleet.workers[0].log()
    finally:
        proxy.close()
    context = f"marks {marks}\n{fleet.logs()}"
    journals = audited(dsn, schema)
    streams = stream_rows(dsn, schema)
    last_seqs = dict(query(dsn, "SELECT run_id, last_seq FROM {s}.runs", schema=schema))
    for number in range(runs):
        run_id = f"part-{number}"
        assert seen[run_id].result == reference_result(6, number + 2), context
        check_journal(run_id, journals[run_id], last_seqs[run_id])
        check_trial_journal(run_id, journals[run_id], 6, streams[run_id])
        check_stream(seen[run_id], streams[run_id])
        epochs = {w.epoch for w in journals[run_id]}
        assert len(epochs) >= 2, (
            f"{run_id} was never taken over:\n{run_history(dsn, schema, run_id)}"
        )
    ran = executions(side_log)
    # Between its self-fence and the heal, P starts no step body, and none of its bodies
    # outlives its lease: it cancelled them before another worker could run them again.
    during = [e for e in ran if e.pid == proxied_pid and marks["hole"] < e.at < marks["heal"]]
    late_starts = [
        e
        for e in during
        if not e.step.endswith(".end") and e.at > marks["hole"] + SELF_FENCE_AT + SLACK
    ]
    assert not late_starts, f"P started step bodies after fencing itself: {late_starts}\n{context}"
    late_ends = [e for e in during if e.step == "work.end" and e.at > marks["hole"] + LEASE]
    assert not late_ends, f"P's step bodies ran on after its lease: {late_ends}\n{context}"
    check_executions(journals, ran, {proxied_pid})
    check_settled(dsn, schema)
    assert "fenced itself" in proxied_log, proxied_log
    print(
        f"\npartition: {runs} runs taken over {marks['taken'] - marks['hole']:.1f} s after "
        f"the black hole; total {time.monotonic() - began:.1f} s"
    )
