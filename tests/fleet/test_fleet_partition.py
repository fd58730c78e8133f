"""A network partition between one worker and the database (scale-out.md §7.5).

Worker P reaches Postgres through a TCP proxy the test runs on 127.0.0.1 (forwarding
to the server's unix socket: the test server listens on no TCP port); worker D
connects directly.  P claims every run, then the proxy black-holes P's connections: it stops
forwarding in both directions and keeps the sockets open, so P's statements neither
fail nor return.  Then:

* P fences itself: its renewals do not come back for 0.8 x the lease time, so it drops
  its runs, cancels their step bodies and starts none from then on (before anyone may
  take them over: no body of P runs past the lease time after the black hole);
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
from tests.fleet.fault_checks import (
    check_executions,
    check_settled,
    check_trial_runs,
    executions,
    wait_compacted,
)
from tests.fleet.fault_support import (
    Fleet,
    Followed,
    drive,
    follow_trial,
    install_audit,
    query,
    run_history,
    running_fleet,
    takeover_delays,
)
from tests.fleet.trial_child import Trial

from postgres_support import PgSchema

pytestmark = [pytest.mark.postgres, pytest.mark.fleet_slow]

LEASE = 2.0


class BlackHoleProxy:
    """Forwards TCP connections on 127.0.0.1 to the server (a unix socket path, or a
    ``(host, port)``); on :meth:`black_hole` it stops forwarding both ways (sockets stay
    open) until :meth:`heal`."""

    def __init__(self, server: str | tuple[str, int]) -> None:
        self.server = server
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
            family = socket.AF_UNIX if isinstance(self.server, str) else socket.AF_INET
            server = socket.socket(family, socket.SOCK_STREAM)
            try:
                server.connect(self.server)
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


def _server_address(dsn: str) -> str | tuple[str, int]:
    """Where ``dsn``'s server listens: a unix socket path, or a TCP ``(host, port)``."""
    parts = conninfo_to_dict(dsn)
    host = str(parts.get("host") or "/var/run/postgresql").split(",")[0]
    port = int(str(parts.get("port") or 5432).split(",")[0])
    return f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)


async def _wait_for(condition: Any, what: str, timeout: float) -> None:
    with anyio.move_on_after(timeout):
        while not condition():
            await anyio.sleep(0.05)
        return
    raise AssertionError(f"{what}: not within {timeout} s")


def _owners(dsn: str, schema: str) -> dict[str, tuple[str, str | None, int]]:
    rows = query(dsn, "SELECT run_id, status, owner, epoch FROM {s}.runs", schema=schema)
    return {run_id: (status, owner, epoch) for run_id, status, owner, epoch in rows}


def _last_seqs(dsn: str, schema: str) -> dict[str, int]:
    rows = query(dsn, "SELECT run_id, last_seq FROM {s}.runs", schema=schema)
    return {run_id: last_seq for run_id, last_seq in rows}


def test_a_partitioned_worker_fences_itself_and_another_takes_its_runs_over(
    pg_schema: PgSchema, tmp_path: Path
) -> None:
    dsn, schema = pg_schema
    install_audit(dsn, schema)
    proxy = BlackHoleProxy(_server_address(dsn))
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
                answer = anyio.Event()  # no run may finish before the heal
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
                                answer,
                            )
                        await _wait_for(
                            lambda: all(o[1] == proxied_id for o in _owners(dsn, schema).values()),
                            "worker P claims every run",
                            60,
                        )
                        # P has written to every run (so the journals show the
                        # takeover), and its step bodies are under way.
                        await _wait_for(
                            lambda: min(_last_seqs(dsn, schema).values()) >= 0,
                            "worker P writes to every run",
                            60,
                        )
                        await anyio.sleep(0.3)
                        marks["hole"] = time.time()
                        proxy.black_hole()
                        # D starts now (not before: P's runs must still be running
                        # however long a start takes on a busy machine).
                        fleet.start(1, backend="trio")
                        await anyio.to_thread.run_sync(fleet.wait_serving, [1], 60.0)
                        marks["serving"] = time.time()
                        # D takes every run over (P's leases expire after LEASE s).
                        await _wait_for(
                            lambda: all(o[2] >= 2 for o in _owners(dsn, schema).values()),
                            "worker D takes P's runs over",
                            LEASE + 30,
                        )
                        marks["taken"] = time.time()
                        await anyio.sleep(1.0)
                        marks["heal"] = time.time()
                        proxy.heal()
                        answer.set()
                finally:
                    store.close()

            drive(main, 180, fleet)
            try:
                marks["compacted_after"] = wait_compacted(dsn, schema)
            except AssertionError as error:
                fleet.dump_stacks()
                raise AssertionError(f"{error}\n{fleet.logs(tail=400)}") from None
            # P survived the partition and serves again: it is alive, and claims.
            assert fleet.workers[0].process.poll() is None, fleet.logs()
            proxied_log = fleet.workers[0].log()
    finally:
        proxy.close()
    context = f"marks {marks}\n{fleet.logs()}"
    shapes = {f"part-{number}": (6, number + 2) for number in range(runs)}
    journals = check_trial_runs(dsn, schema, seen, shapes, context)
    for run_id in shapes:
        epochs = {w.epoch for w in journals[run_id]}
        assert len(epochs) >= 2, (
            f"{run_id} was never taken over:\n{run_history(dsn, schema, run_id)}"
        )
    ran = executions(side_log)
    # Between its self-fence and the heal, P starts no step body, and none of its bodies
    # outlives its lease: it cancelled them before another worker could run them again.
    expired = marks["hole"] + LEASE  # P renewed its leases last before the hole
    during = [e for e in ran if e.pid == proxied_pid and marks["hole"] < e.at < marks["heal"]]
    late_starts = [e for e in during if not e.step.endswith(".end") and e.at > expired]
    assert not late_starts, f"P started step bodies after fencing itself: {late_starts}\n{context}"
    late_ends = [e for e in during if e.step == "work.end" and e.at > expired]
    assert not late_ends, f"P's step bodies ran on after its lease: {late_ends}\n{context}"
    check_executions(journals, ran, {proxied_pid}, lost_sessions=fleet.lost_sessions())
    check_settled(dsn, schema)
    assert "fenced itself" in proxied_log, proxied_log
    hole = marks["hole"]
    delays = takeover_delays(dsn, schema, str(proxied_id), hole)
    last_start = max((e.at for e in during if e.step == "work"), default=hole) - hole
    last_end = max((e.at for e in during if e.step == "work.end"), default=hole) - hole
    print(
        f"\npartition: {runs}/{runs} runs completed, 0 duplicated, no stale write; P fenced "
        f"itself, D (serving {marks['serving'] - hole:.1f} s after the black hole) took the "
        f"runs over {[round(d, 1) for d in sorted(delays)]} s after it; P's step bodies: "
        f"last start {last_start:.1f} s, last end {last_end:.1f} s after it; "
        f"total {time.monotonic() - began:.1f} s"
    )
