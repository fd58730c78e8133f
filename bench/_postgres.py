"""What the Postgres scenarios share: the server, a throwaway schema, the server's settings.

The server:

- ``TW_BENCH_PG_DSN=<dsn>``: that server, as it is configured (the notes print its
  ``fsync`` setting);
- ``TW_BENCH_PG_DSN=off``: none, the Postgres scenarios are skipped;
- unset: the bench starts a throwaway cluster of its own with **fsync and
  synchronous_commit on**, as a journal in production needs them (a temp dir under
  ``/tmp``, a unix socket only, this machine's server binaries run as the ``postgres``
  user when we are root), on first use, and stops it when the bench ends.  The test
  cluster (``TW_PG_DSN``, ``.ci/postgres.sh``) is never used: it runs with fsync off,
  which makes commits several times cheaper than they are.

Every measurement gets a fresh schema, dropped with everything in it afterwards.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DSN_VARIABLE = "TW_BENCH_PG_DSN"
OFF = "off"
SERVER_SETTINGS = "-c listen_addresses= -c fsync=on -c synchronous_commit=on -c max_connections=200"


def server_bin() -> Path | None:
    """The newest directory with ``initdb`` and ``pg_ctl`` (``$PGBIN`` first)."""
    candidates = [Path(os.environ["PGBIN"])] if os.environ.get("PGBIN") else []
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates += found
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).parent)
    for candidate in candidates:
        if (candidate / "initdb").exists() and (candidate / "pg_ctl").exists():
            return candidate
    return None


def postgres_missing() -> str | None:
    """Why the Postgres scenarios cannot run here (``None`` when they can)."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'tickwork[postgres]')"
    choice = os.environ.get(DSN_VARIABLE, "").strip()
    if choice == OFF:
        return f"{DSN_VARIABLE}={OFF}"
    if choice:
        return None
    if server_bin() is None:
        return (
            "no PostgreSQL server binaries to start a cluster with (Debian: apt-get install "
            f"postgresql), and {DSN_VARIABLE} names no server"
        )
    return None


class Cluster:
    """A throwaway PostgreSQL cluster with fsync on, in a temp dir; :meth:`stop` deletes it."""

    def __init__(self) -> None:
        bin_dir = server_bin()
        if bin_dir is None:
            raise RuntimeError(postgres_missing() or "no PostgreSQL server binaries")
        self._bin = bin_dir
        # /tmp: the postgres user must reach it, and a socket path has ~100 bytes at most.
        self.dir = Path(tempfile.mkdtemp(prefix="tw-bench-pg.", dir="/tmp"))
        self.dir.chmod(0o755)
        if os.getuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        self.dsn = f"postgresql://postgres@/postgres?host={self.dir}"
        try:
            # initdb's --no-sync only skips syncing its own files, not the server's fsync.
            self._as_pg(
                "initdb", "-D", self._data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
                "--locale=C", "--no-sync",
            )  # fmt: skip
            self._as_pg(
                "pg_ctl", "-D", self._data, "-l", str(self.dir / "server.log"), "-w",
                "-t", "60", "-o", f"-k {self.dir} {SERVER_SETTINGS}", "start",
            )  # fmt: skip
        except BaseException:
            self.stop()
            raise

    @property
    def _data(self) -> str:
        return str(self.dir / "data")

    def _as_pg(self, program: str, *args: str) -> None:
        command = [str(self._bin / program), *args]
        if os.getuid() == 0:  # initdb and postgres refuse to run as root
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            log = self.dir / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{program} failed: {result.stderr.strip()}\n{tail}")

    def stop(self) -> None:
        """Stop the server (fast shutdown, waiting for it) and delete its files."""
        pid_file = self.dir / "data" / "postmaster.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text().split()[0])
            try:
                self._as_pg("pg_ctl", "-D", self._data, "-m", "fast", "-w", "-t", "30", "stop")
            except RuntimeError:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGQUIT)  # immediate shutdown
            for _ in range(100):  # pg_ctl returns once the pid file is gone
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
        shutil.rmtree(self.dir, ignore_errors=True)


_cluster: Cluster | None = None


def dsn() -> str:
    """The server's DSN: ``TW_BENCH_PG_DSN``'s, or the bench's own cluster (started now
    if it is not yet)."""
    global _cluster
    choice = os.environ.get(DSN_VARIABLE, "").strip()
    if choice and choice != OFF:
        return choice
    if _cluster is None:
        _cluster = Cluster()
        atexit.register(shutdown)
    return _cluster.dsn


def shutdown() -> None:
    """Stop the bench's own cluster, if it started one (the runner calls it at the end)."""
    global _cluster
    cluster, _cluster = _cluster, None
    if cluster is not None:
        cluster.stop()


@contextmanager
def fresh_schema() -> Iterator[str]:
    """A new, uniquely named schema name; the schema is dropped (CASCADE) on exit.

    The store creates it on first use (``PostgresJournal(..., migrate=True)``).
    """
    import psycopg
    from psycopg import sql

    name = f"tw_bench_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        with psycopg.connect(dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def durability() -> str:
    """The server's fsync and synchronous_commit settings, for the notes."""
    import psycopg

    with psycopg.connect(dsn(), autocommit=True) as conn:
        fsync = conn.execute("SHOW fsync").fetchone()
        sync = conn.execute("SHOW synchronous_commit").fetchone()
    return f"fsync {fsync[0] if fsync else '?'}, synchronous_commit {sync[0] if sync else '?'}"


def backend_pids() -> list[int]:
    """The process ids of the server's backends and background processes."""
    import psycopg

    with psycopg.connect(dsn(), autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity").fetchall()
    return [int(row[0]) for row in rows]
