"""The workflows the multi-process fleet tests run, the child processes that run them,
and how the tests start and watch those processes.

Workers are real ``tickwork worker`` processes (``python -m tickwork.cli worker
fleet.fleet_child:ALL --dsn ...``); this module is imported there as
``fleet.fleet_child`` (the tests directory is on ``PYTHONPATH``), the name pytest gives
it too, so the events the workers journal decode in the test process.

Steps report what they do in a *side log*: one line per action, written with a single
``write`` on an ``O_APPEND`` descriptor (``<word>... pid=<pid> t=<time>``), so lines of
concurrent processes never interleave and a killed process leaves whole lines only.
Steps that must wait for the test poll a *gate* (a file the test creates).

Run as a script (``python -m fleet.fleet_child MODE ...``) it is a child of its own:

* ``claim DSN SCHEMA OWNER``: prints ``READY``, waits for a line on stdin, then claims
  runs of ``RaceFlow`` in batches of 10 until none is left, printing ``CLAIMED <run>
  <epoch>`` for each, then ``DONE``;
* ``send DSN SCHEMA RUN KEY...``: prints ``READY``, waits for a line on stdin, then sends
  ``Ping(key=KEY)`` with idempotency key ``KEY`` for each key, printing ``SENT <key>
  <delivered>``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import anyio

import tickwork
from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step
from tickwork.events import HumanResponseEvent, InputRequiredEvent

TESTS_DIR = Path(__file__).resolve().parents[1]
SRC_DIR = Path(tickwork.__file__).resolve().parents[1]
MODULE = "fleet.fleet_child"
GATE_POLL_SECONDS = 0.02

# -- side logs and gates -------------------------------------------------------------------


def note(log: str, *words: object) -> None:
    """Append one line (``words``, this pid and the time) to the side log ``log``."""
    line = " ".join(str(word) for word in words) + f" pid={os.getpid()} t={time.time():.3f}\n"
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class Line:
    """One side-log line: its words, and the pid and time that wrote it."""

    def __init__(self, text: str) -> None:
        *words, pid, stamp = text.split()
        self.words = words
        self.pid = int(pid.removeprefix("pid="))
        self.time = float(stamp.removeprefix("t="))

    def __repr__(self) -> str:
        return f"Line({' '.join(self.words)!r}, pid={self.pid}, t={self.time:.3f})"


def read_log(log: str | Path) -> list[Line]:
    """The lines of side log ``log`` (none when it does not exist yet)."""
    path = Path(log)
    if not path.exists():
        return []
    return [Line(text) for text in path.read_text().splitlines()]


async def gate(path: str) -> None:
    """Wait until the file ``path`` exists."""
    while not os.path.exists(path):
        await anyio.sleep(GATE_POLL_SECONDS)


# -- the workflows -------------------------------------------------------------------------


class Progress(Event):
    """Published by ``Gated``: which step got past its gate, in which process."""

    step: str
    pid: int


class Mid(Event):
    log: str
    gate: str


class Gated(Workflow):
    """Two steps, each waiting for a gate the test opens (the zombie-fencing test)."""

    @step
    async def first(self, ctx: Context, ev: StartEvent) -> Mid:
        note(ev.log, "first")
        await gate(ev.gate1)
        ctx.write_event_to_stream(Progress(step="first", pid=os.getpid()))
        return Mid(log=ev.log, gate=ev.gate2)

    @step
    async def second(self, ctx: Context, ev: Mid) -> StopEvent:
        note(ev.log, "second")
        await gate(ev.gate)
        ctx.write_event_to_stream(Progress(step="second", pid=os.getpid()))
        return StopEvent(result=os.getpid())


class Link(Event):
    n: int
    last: int
    hold_at: int
    log: str
    gate: str


class Numbered(Event):
    """Published by ``Chain``: the ``n``-th event of the run, by the process ``pid``."""

    n: int
    pid: int


class Chain(Workflow):
    """A chain of steps, each publishing one numbered event; the step of ``hold_at``
    waits for a gate before it publishes (the stream-across-owners test)."""

    @step
    async def begin(self, ev: StartEvent) -> Link:
        return Link(n=0, last=ev.count - 1, hold_at=ev.hold_at, log=ev.log, gate=ev.gate)

    @step
    async def link(self, ctx: Context, ev: Link) -> Link | StopEvent:
        if ev.n == ev.hold_at:
            note(ev.log, "hold", ev.n)
            await gate(ev.gate)
        ctx.write_event_to_stream(Numbered(n=ev.n, pid=os.getpid()))
        note(ev.log, "emit", ev.n)
        if ev.n == ev.last:
            return StopEvent(result=ev.n + 1)
        return ev.model_copy(update={"n": ev.n + 1})


class Ping(HumanResponseEvent):
    """Sent from outside the run (a human response: no step needs to produce it)."""

    key: str
    sender: int


class Counted(Event):
    key: str
    sender: int


class Finish(Event):
    pass


class Pings(Workflow):
    """Counts the ``Ping`` events it receives until a ``Finish`` (duplicate sends)."""

    @step
    async def count(self, ctx: Context, ev: Ping) -> None:
        log = await ctx.store.get("log")
        note(log, "ping", ev.key, ev.sender)
        ctx.write_event_to_stream(Counted(key=ev.key, sender=ev.sender))

    @step
    async def finish(self, ctx: Context, ev: StartEvent) -> StopEvent:
        await ctx.store.set("log", ev.log)
        note(ev.log, "listening")
        await ctx.wait_for_event(Finish, timeout=None)
        return StopEvent(result="finished")


class Question(InputRequiredEvent):
    prompt: str


class Answer(Event):
    value: str


class Asker(Workflow):
    """Asks a question and waits for its answer with no deadline (parked runs)."""

    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        note(ev.log, "ask", ev.name)
        answer = await ctx.wait_for_event(
            Answer, waiter_event=Question(prompt=ev.name), timeout=None
        )
        note(ev.log, "answered", ev.name, answer.value)
        return StopEvent(result={"answer": answer.value, "pid": os.getpid()})


class Deadline(Workflow):
    """Waits for an answer that never comes, for ``seconds`` (a parked deadline)."""

    @step
    async def wait(self, ctx: Context, ev: StartEvent) -> StopEvent:
        note(ev.log, "wait")
        try:
            await ctx.wait_for_event(Answer, timeout=ev.seconds)
        except TimeoutError:
            note(ev.log, "timeout")
            return StopEvent(result={"timed_out_at": time.time(), "pid": os.getpid()})
        return StopEvent(result="answered")


class Alpha(Workflow):
    @step
    async def done(self, ev: StartEvent) -> StopEvent:
        return StopEvent(result=os.getpid())


class Beta(Workflow):
    @step
    async def done(self, ev: StartEvent) -> StopEvent:
        return StopEvent(result=os.getpid())


class Killer(Workflow):
    """Sleeps ``delay`` s, then kills its own process when ``kill`` is set (poison runs)."""

    @step
    async def act(self, ev: StartEvent) -> StopEvent:
        note(ev.log, "run", ev.name)
        await anyio.sleep(ev.delay)
        if ev.kill:
            note(ev.log, "kill", ev.name)
            os.kill(os.getpid(), signal.SIGKILL)
        return StopEvent(result=os.getpid())


ALL = [Gated, Chain, Pings, Asker, Deadline, Alpha, Beta, Killer]
"""What a worker serving every workflow here is given (``fleet.fleet_child:ALL``)."""

ALPHA_ONLY = [Alpha, Killer]
"""A worker that does not serve ``Beta`` (``fleet.fleet_child:ALPHA_ONLY``)."""

# -- starting and watching processes (the tests' side) -------------------------------------


def child_env() -> dict[str, str]:
    """The environment of a child: this tickwork and the tests' modules importable."""
    env = dict(os.environ)
    paths = [str(SRC_DIR), str(TESTS_DIR)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Child:
    """A child process whose stdout and stderr go to files (read them any time)."""

    def __init__(self, name: str, argv: Sequence[str], workdir: Path, stdin: bool) -> None:
        self.name = name
        self.out_path = workdir / f"{name}.out"
        self.err_path = workdir / f"{name}.err"
        self._out = self.out_path.open("w")
        self._err = self.err_path.open("w")
        self.proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=self._out,
            stderr=self._err,
            env=child_env(),
            text=True,
        )
        self.pid = self.proc.pid

    def __repr__(self) -> str:
        return f"Child({self.name!r}, pid={self.pid}, returncode={self.proc.poll()})"

    def stdout(self) -> str:
        return self.out_path.read_text()

    def stderr(self) -> str:
        return self.err_path.read_text()

    def tell(self, line: str) -> None:
        """Write ``line`` to the child's stdin."""
        stdin: TextIO | None = self.proc.stdin
        assert stdin is not None
        stdin.write(line + "\n")
        stdin.flush()

    def signal(self, signum: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, signum)

    def close(self) -> None:
        """Kill the child if it still runs, reap it, close its files."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGCONT)  # a stopped process must be able to die
            self.proc.kill()
        self.proc.wait(timeout=10)
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self._out.close()
        self._err.close()


class Children:
    """The child processes of one test; :meth:`close` kills whichever still run."""

    def __init__(self, workdir: Path, dsn: str, schema: str) -> None:
        self.workdir = workdir
        self.dsn = dsn
        self.schema = schema
        self.started: list[Child] = []

    def start(self, name: str, argv: Sequence[str], *, stdin: bool = False) -> Child:
        child = Child(name, argv, self.workdir, stdin)
        self.started.append(child)
        return child

    def worker(
        self,
        name: str,
        *options: str,
        target: str = "ALL",
        backend: str = "asyncio",
    ) -> Child:
        """A ``tickwork worker`` serving ``fleet.fleet_child:<target>``."""
        argv = [
            sys.executable,
            "-m",
            "tickwork.cli",
            "worker",
            f"{MODULE}:{target}",
            "--dsn",
            self.dsn,
            "--schema",
            self.schema,
            "--backend",
            backend,
            *options,
        ]
        return self.start(name, argv)

    def script(self, name: str, *arguments: str) -> Child:
        """This module as a child (``claim`` or ``send`` mode), told to go on stdin."""
        argv = [sys.executable, "-m", MODULE, *arguments, self.dsn, self.schema]
        return self.start(name, argv, stdin=True)

    def report(self) -> str:
        """What every child printed on stderr (for failure messages)."""
        return "\n".join(
            f"--- {child.name} (pid {child.pid}, exit {child.proc.poll()}):\n{child.stderr()}"
            for child in self.started
        )

    def close(self) -> None:
        for child in self.started:
            child.close()


async def wait_until(
    condition: Callable[[], Any], timeout: float, what: str, children: Children | None = None
) -> Any:
    """Poll the (sync) ``condition`` until it is truthy; its value.  Fails naming ``what``
    (and what the children printed) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = "" if children is None else "\n" + children.report()
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{detail}")
        await anyio.sleep(0.02)


# -- the child modes -----------------------------------------------------------------------


async def _claim(dsn: str, schema: str, owner: str) -> None:
    from tickwork.stores.postgres import PostgresJournal

    store = PostgresJournal(dsn, schema, pool_size=1, migrate=False)
    try:
        await anyio.to_thread.run_sync(store.check)
        print("READY", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        while batch := await store.claim_runs(owner, ["RaceFlow"], limit=10):
            print("\n".join(f"CLAIMED {c.lease.run_id} {c.lease.epoch}" for c in batch))
        print("DONE", flush=True)
    finally:
        store.close()


async def _send(run_id: str, keys: Sequence[str], dsn: str, schema: str) -> None:
    # This file runs as ``__main__``: send the events under the module's own name.
    import fleet.fleet_child as flows
    from tickwork.stores.postgres import PostgresJournal

    store = PostgresJournal(dsn, schema, pool_size=1, migrate=False)
    try:
        handler = await store.attach(run_id)
        print("READY", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        for key in keys:
            ping = flows.Ping(key=key, sender=os.getpid())
            delivered = await handler.send_event(ping, idempotency_key=key)
            print(f"SENT {key} {delivered}", flush=True)
    finally:
        store.close()


def main(argv: Sequence[str]) -> None:
    mode, *rest = argv
    if mode == "claim":
        owner, dsn, schema = rest
        anyio.run(_claim, dsn, schema, owner)
    elif mode == "send":
        run_id, *keys, dsn, schema = rest
        anyio.run(_send, run_id, keys, dsn, schema)
    else:
        raise SystemExit(f"unknown mode {mode!r}: claim or send")


if __name__ == "__main__":
    main(sys.argv[1:])
