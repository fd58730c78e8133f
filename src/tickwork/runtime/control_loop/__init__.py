"""The control loop: a pure reducer folded over ticks, driven by an async runner.

Only four names are public here.  Users who unit-test the reducer import
``tickwork.runtime.control_loop.reduce`` directly, or use ``tickwork.testing``.
They are imported on first use (PEP 562): the runtime imports the runner and the
reducer directly, and a run that is never replayed does not load the journal codec.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tickwork._lazy import lazy_exports

if TYPE_CHECKING:
    from tickwork.runtime.control_loop.replay import (
        rebuild_state_from_ticks as rebuild_state_from_ticks,
    )
    from tickwork.runtime.control_loop.replay import (
        rebuild_state_from_ticks_stream as rebuild_state_from_ticks_stream,
    )
    from tickwork.runtime.control_loop.replay import (
        replay_ticks_stream as replay_ticks_stream,
    )
    from tickwork.runtime.control_loop.runner import control_loop as control_loop

__all__ = [
    "control_loop",
    "rebuild_state_from_ticks",
    "rebuild_state_from_ticks_stream",
    "replay_ticks_stream",
]

# Run time only: type checkers read the imports above; a module __getattr__ would
# have them accept any name, a typo included, as ``Any``.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "control_loop": "tickwork.runtime.control_loop.runner",
            "rebuild_state_from_ticks": "tickwork.runtime.control_loop.replay",
            "rebuild_state_from_ticks_stream": "tickwork.runtime.control_loop.replay",
            "replay_ticks_stream": "tickwork.runtime.control_loop.replay",
        },
    )
