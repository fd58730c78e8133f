"""Keeping a process's leases alive: one renewal thread per store and owner.

A worker (or a process running journaled runs with ``Workflow.run()``) owns runs through
leases that expire unless renewed.  ``LeaseKeeper`` renews every lease of one owner
in one statement every third of the lease time, from a dedicated thread, so that an
event loop blocked by a step cannot starve the heartbeat.  A run missing from a renewal's
result was lost (another worker took it over): its ``on_lost`` callback runs at once, in
the keeper's thread.  When renewals keep failing (the database is unreachable: a
partition) until the leases are about to expire, the keeper *fences itself*: every held
run is reported lost, so that its sessions stop before another worker may take over.

``process_owner`` names this process for the leases it takes.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from tickwork._otel import span
from tickwork.stores import metrics
from tickwork.stores.records import Lease
from tickwork.stores.store import JournalStore

__all__ = ["LeaseKeeper", "keeper_for", "owner_is_dead_local_process", "process_owner"]

_log = logging.getLogger("tickwork.journal")

_OWNER = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

# Renewal failures are tolerated until this fraction of the lease time has passed since
# the last successful renewal; then the keeper fences itself.
_SELF_FENCE_AT = 0.8


def process_owner() -> str:
    """This process's owner id: ``host:pid:random`` (new in every process)."""
    if _OWNER.split(":")[1] != str(os.getpid()):  # forked: a new process, a new id
        _refresh_owner()
    return _OWNER


def _refresh_owner() -> None:
    global _OWNER
    _OWNER = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def owner_is_dead_local_process(owner: str) -> bool:
    """Whether ``owner`` names a process of this host that no longer exists.

    Recovery on one machine uses it to take over the runs of a crashed process at once,
    instead of waiting for their leases to expire.
    """
    parts = owner.split(":")
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@dataclass
class _Held:
    lease: Lease
    on_lost: Callable[[str], None]


class _Renewal:
    """One renewal statement, run on a thread of its own so that the keeper can give up
    waiting for it: a database that does not answer must not keep the keeper from
    fencing itself in time."""

    def __init__(self, store: JournalStore, owner: str, leases: list[Lease], seconds: float):
        self.leases = leases
        self.began = time.monotonic()
        self.kept: set[str] = set()
        self.error: Exception | None = None
        self.done = threading.Event()
        threading.Thread(
            target=self._run, args=(store, owner, seconds), name="tickwork-renewal", daemon=True
        ).start()

    def _run(self, store: JournalStore, owner: str, seconds: float) -> None:
        try:
            attributes: dict[str, str | int] = {
                "tickwork.owner": owner,
                "tickwork.leases": len(self.leases),
            }
            with span("tickwork.fleet.renew", attributes):
                self.kept = store.renew_leases(owner, self.leases, seconds)
        except Exception as error:
            self.error = error
        finally:
            self.done.set()


class LeaseKeeper:
    """Renews the leases of ``owner`` on ``store`` from a daemon thread.

    ``hold(lease, on_lost)`` starts renewing a lease; ``drop(run_id)`` stops (the run
    ended, was parked or handed back).  The thread runs while leases are held.

    The keeper fences itself (every held run is lost) when no renewal has succeeded for
    0.8 x the lease time, counted from the start of the last successful one (when the
    store extended the leases at the latest): whether renewals fail or hang, the
    sessions stop before the leases expire and another worker may take the runs over.
    """

    def __init__(self, store: JournalStore, owner: str, lease_seconds: float) -> None:
        self.store = store
        self.owner = owner
        self.lease_seconds = lease_seconds
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_success = time.monotonic()
        self._renewal: _Renewal | None = None

    def hold(self, lease: Lease, on_lost: Callable[[str], None]) -> None:
        """Keep ``lease`` alive until ``drop``; ``on_lost(reason)`` if it is lost."""
        with self._lock:
            if not self._held:
                self._last_success = time.monotonic()
            self._held[lease.run_id] = _Held(lease, on_lost)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name=f"tickwork-leases-{self.owner}", daemon=True
                )
                self._thread.start()

    def drop(self, run_id: str) -> None:
        """Stop renewing the lease of ``run_id``."""
        with self._lock:
            self._held.pop(run_id, None)

    def held(self) -> list[Lease]:
        """The leases currently renewed."""
        with self._lock:
            return [h.lease for h in self._held.values()]

    def renew_now(self) -> None:
        """Renew at once (tests, and a worker that was paused)."""
        self._renew()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._held:
                    self._thread = None
                    _forget(self)
                    return
            self._wake.wait(self._until_next_renewal())
            self._wake.clear()
            self._renew()

    def _fence_at(self) -> float:
        """When the keeper fences itself unless a renewal succeeds first (monotonic)."""
        return self._last_success + self.lease_seconds * _SELF_FENCE_AT

    def _until_next_renewal(self) -> float:
        """A third of the lease time, or less when the self-fence is due sooner (renewals
        were failing): the keeper must be awake to fence itself in time."""
        return max(0.0, min(self.lease_seconds / 3, self._fence_at() - time.monotonic()))

    def _renew(self) -> None:
        leases = self.held()
        if not leases:
            return
        renewal = self._renewal
        if renewal is None:  # else the last one is still waiting for the database
            renewal = self._renewal = _Renewal(self.store, self.owner, leases, self.lease_seconds)
        if not renewal.done.wait(max(0.0, self._fence_at() - time.monotonic())):
            # The database does not answer (a partition): the statement may still
            # arrive, but these leases cannot be counted on any more.
            self._renewal = None
            self._fence_self(leases, "the database did not answer")
            return
        self._renewal = None
        if renewal.error is not None:
            silent_for = time.monotonic() - self._last_success
            _log.warning(
                "renewing %d lease(s) of %s failed (%s); last success %.1f s ago",
                len(renewal.leases),
                self.owner,
                renewal.error,
                silent_for,
            )
            if time.monotonic() >= self._fence_at():
                self._fence_self(leases, str(renewal.error))
            return
        self._last_success = renewal.began
        metrics.record("tickwork.fleet.renew_latency", time.monotonic() - renewal.began)
        lost = [lease.run_id for lease in renewal.leases if lease.run_id not in renewal.kept]
        if lost:
            self._lose(lost, "its lease was taken over by another worker")

    def _fence_self(self, leases: list[Lease], why: str) -> None:
        silent_for = time.monotonic() - self._last_success
        _log.warning(
            "no lease of %s renewed for %.1f s (%s): fencing itself, %d run(s) stop here",
            self.owner,
            silent_for,
            why,
            len(leases),
        )
        self._lose(
            [lease.run_id for lease in leases],
            f"its lease could not be renewed for {silent_for:.1f} s ({why}); this worker "
            "fenced itself so that another may take the run over",
        )

    def _lose(self, run_ids: list[str], reason: str) -> None:
        for run_id in run_ids:
            with self._lock:
                held = self._held.pop(run_id, None)
            if held is not None:
                metrics.add("tickwork.fleet.lost_leases")
                attributes = {"tickwork.run_id": run_id, "tickwork.reason": reason}
                with span("tickwork.fleet.lease_lost", attributes):
                    try:
                        held.on_lost(reason)
                    except Exception:
                        _log.exception("the lease-lost callback of run %s failed", run_id)


_KEEPERS: dict[tuple[int, str, float], LeaseKeeper] = {}
_KEEPERS_LOCK = threading.Lock()


def keeper_for(store: JournalStore, owner: str, lease_seconds: float) -> LeaseKeeper:
    """The process's keeper for ``owner``'s leases of ``lease_seconds`` on ``store`` (one
    renewal thread each, renewing every third of ``lease_seconds``)."""
    key = (id(store), owner, lease_seconds)
    with _KEEPERS_LOCK:
        keeper = _KEEPERS.get(key)
        if keeper is None or keeper.store is not store:
            keeper = _KEEPERS[key] = LeaseKeeper(store, owner, lease_seconds)
        return keeper


def _forget(keeper: LeaseKeeper) -> None:
    """An idle keeper lets go of its store (a new one is made when needed)."""
    with _KEEPERS_LOCK:
        key = (id(keeper.store), keeper.owner, keeper.lease_seconds)
        if _KEEPERS.get(key) is keeper:
            del _KEEPERS[key]
