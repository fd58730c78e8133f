"""The Postgres store's change listener never blocks the event loop.

A polling thread holds the listening connection's lock for up to a second; when the
task that started it is cancelled (a run ends, and its inbox pump with it), the thread is
abandoned and keeps the lock until its poll times out.  Dispatching what was received
runs on the event loop, so it must not wait for that lock: it used to, which stalled
every journaled run on Postgres for up to a second at its end.
"""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("psycopg")

from tickwork.stores.postgres_notify import ChangeListener


def _unused_connection() -> None:
    raise AssertionError("the listener must not connect in this test")


def test_dispatch_does_not_wait_for_a_polling_thread() -> None:
    listener = ChangeListener(_unused_connection, "tickwork_test")  # type: ignore[arg-type]
    polling = threading.Event()
    release = threading.Event()

    def poll() -> None:  # stands in for an abandoned thread inside conn.notifies()
        with listener._conn_lock:
            listener._received.append("r1")
            polling.set()
            release.wait(10)

    holder = threading.Thread(target=poll, daemon=True)
    holder.start()
    assert polling.wait(5)
    dispatcher = threading.Thread(target=listener._dispatch, daemon=True)
    dispatcher.start()
    dispatcher.join(5)
    blocked = dispatcher.is_alive()
    release.set()
    holder.join(5)
    assert not blocked, "_dispatch waited for the lock a polling thread holds"
    # What the busy thread received is kept for the next dispatch.
    assert listener._received == ["r1"]
    listener._dispatch()
    assert listener._received == []
