"""The control loop: a pure reducer folded over ticks, driven by an async runner.

Only four names are public here.  Users who unit-test the reducer import
``tickwork.runtime.control_loop.reduce`` directly, or use ``tickwork.testing``.
"""

from __future__ import annotations

from tickwork.runtime.control_loop.replay import (
    rebuild_state_from_ticks,
    rebuild_state_from_ticks_stream,
    replay_ticks_stream,
)
from tickwork.runtime.control_loop.runner import control_loop

__all__ = [
    "control_loop",
    "rebuild_state_from_ticks",
    "rebuild_state_from_ticks_stream",
    "replay_ticks_stream",
]
