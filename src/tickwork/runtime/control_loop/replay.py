"""Folding recorded ticks through the reducer: rebuild a run's state, replay its end.

These are pure folds.  They never run step bodies, resource factories or retry policies
(retry decisions are read from the recorded step results), never read the clock and
never modify the state they start from.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable, Iterator
from typing import Any

from tickwork.runtime.control_loop.reduce import reduce, reduce_all
from tickwork.runtime.types.commands import CompleteRun, FailWorkflow, Halt
from tickwork.runtime.types.state import RunState
from tickwork.serde.journal_codec import decode_tick
from tickwork.types import ExitCommand, JournalRecord, ReplayResult

__all__ = ["rebuild_state_from_ticks", "rebuild_state_from_ticks_stream", "replay_ticks_stream"]


def _as_tick(state: RunState, record: Any) -> Any | None:
    """The tick a record stands for, or ``None`` when it was already folded."""
    if not isinstance(record, JournalRecord):
        return record
    if record.seq < state.journal_seq:
        return None
    if record.seq != state.journal_seq:
        raise ValueError(f"journal gap: expected seq {state.journal_seq}, got seq {record.seq}")
    return decode_tick(record.data)


def _exit_of(commands: list[Any]) -> ExitCommand | None:
    for command in commands:
        if isinstance(command, CompleteRun):
            return ExitCommand("complete", result=command.stop_event)
        if isinstance(command, FailWorkflow):
            return ExitCommand("fail", step_name=command.step_name, exception=command.exception)
        if isinstance(command, Halt):
            return ExitCommand("halt", exception=command.exception)
    return None


def _fold_one(state: RunState, record: Any) -> tuple[RunState, ExitCommand | None]:
    tick = _as_tick(state, record)
    if tick is None:
        return state, None
    state, commands = reduce(state, tick)
    return state, _exit_of(commands)


def _fold_state(state: RunState, record: Any) -> RunState:
    """``_fold_one`` without looking for an exit command (rebuilds need only the state)."""
    tick = _as_tick(state, record)
    return state if tick is None else reduce(state, tick)[0]


def _ticks_after(journal_seq: int, records: Iterable[Any]) -> Iterator[Any]:
    """The ticks of ``records`` still to fold over a state at ``journal_seq``.

    The same checks as ``_as_tick``, keeping the sequence number the state would
    have: every tick folded advances it by one.
    """
    decode = decode_tick
    for record in records:
        if not isinstance(record, JournalRecord):
            yield record
        elif record.seq < journal_seq:
            continue
        elif record.seq != journal_seq:
            raise ValueError(f"journal gap: expected seq {journal_seq}, got seq {record.seq}")
        else:
            yield decode(record.data)
        journal_seq += 1


def rebuild_state_from_ticks(
    state: RunState, ticks: Iterable[Any], run_id: str | None = None
) -> RunState:
    """Fold ``ticks`` (tick objects or ``JournalRecord``s) over ``state``."""
    return reduce_all(state, _ticks_after(state.journal_seq, ticks))


async def rebuild_state_from_ticks_stream(
    state: RunState, ticks: AsyncIterable[Any], run_id: str | None = None
) -> RunState:
    """The same fold over an async iterable; memory is bounded by one record."""
    async for record in ticks:
        state = _fold_state(state, record)
    return state


async def replay_ticks_stream(
    state: RunState, ticks: AsyncIterable[Any], run_id: str | None = None
) -> ReplayResult:
    """Fold ``ticks`` and report the exit command of the record that ended the run."""
    exit_command: ExitCommand | None = None
    async for record in ticks:
        state, ended = _fold_one(state, record)
        if ended is not None:
            exit_command = ended
    return ReplayResult(state=state, exit_command=exit_command)
