"""Quickstart: fan work out to parallel workers, join the results, stream progress.

Run it with ``python examples/quickstart.py`` (asyncio) or
``python examples/quickstart.py --backend trio`` (after ``pip install "tickwork[trio]"``).

The workflow:

1. ``fan_out`` receives the sentence, remembers how many words it has in the run's store,
   and sends one ``Task`` per word with ``ctx.send_event``.
2. ``work`` (up to 4 at a time) "processes" a word: it waits a little, as if calling a
   service, upper-cases it, writes a ``Progress`` event to the run's stream for the caller,
   and returns a ``Done``.
3. ``join`` collects one ``Done`` per word with ``ctx.collect_events`` and, once all of
   them have arrived, returns the ``StopEvent`` with the words back in their original order.

The caller prints every ``Progress`` event as it arrives, then the final result.
"""

import argparse

import anyio

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step

SENTENCE = "tickwork runs steps as events arrive and joins them again"


class Sentence(StartEvent):
    """The start event: ``Quickstart().run(text=...)`` builds it from the keyword."""

    text: str


class Task(Event):
    index: int
    word: str


class Done(Event):
    index: int
    shouted: str


class Progress(Event):
    """Written to the event stream for the caller; no step receives it."""

    index: int
    word: str
    shouted: str


class Quickstart(Workflow):
    @step
    async def fan_out(self, ctx: Context, ev: Sentence) -> Task | None:
        words = ev.text.split()
        # The join step reads the count to know how many results to wait for.
        await ctx.store.set("num_tasks", len(words))
        for index, word in enumerate(words):
            ctx.send_event(Task(index=index, word=word))
        # Annotating `-> Task | None` and returning None is the documented idiom: the
        # graph checks see that Task is produced, and the tasks were sent above.
        return None

    @step(num_workers=4)
    async def work(self, ctx: Context, ev: Task) -> Done:
        # Simulate I/O of varying length so tasks finish out of order.
        await anyio.sleep(0.01 * (len(ev.word) % 4))
        shouted = ev.word.upper()
        ctx.write_event_to_stream(Progress(index=ev.index, word=ev.word, shouted=shouted))
        return Done(index=ev.index, shouted=shouted)

    @step
    async def join(self, ctx: Context, ev: Done) -> StopEvent | None:
        # Everything before collect_events may run more than once for one event, so it
        # only reads: see "collect_events" in the docs.
        num_tasks = await ctx.store.get("num_tasks")
        results = ctx.collect_events(ev, [Done] * num_tasks)
        if results is None:
            return None  # still waiting for the rest
        ordered = sorted(results, key=lambda done: done.index)
        return StopEvent(result=" ".join(done.shouted for done in ordered))


async def main() -> None:
    total = len(SENTENCE.split())
    handler = Quickstart(timeout=60).run(text=SENTENCE)
    finished = 0
    async for ev in handler.stream_events():
        if isinstance(ev, Progress):
            finished += 1
            print(f"[{finished}/{total}] task {ev.index}: {ev.word} -> {ev.shouted}", flush=True)
    result = await handler
    print(f"result: {result}")


def require_backend(parser: argparse.ArgumentParser, backend: str) -> None:
    """Exit with one line saying how to install trio when it is asked for and missing."""
    if backend != "trio":
        return
    try:
        import trio  # noqa: F401
    except ImportError:
        parser.exit(2, 'trio is not installed; install it with: pip install "tickwork[trio]"\n')


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    backend = parser.parse_args().backend
    require_backend(parser, backend)
    anyio.run(main, backend=backend)
