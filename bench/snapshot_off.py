"""snapshot_off: the reference run of the snapshot scenario (see ``bench.snapshot``)."""

from __future__ import annotations

from bench.snapshot import SCENARIO_OFF as SCENARIO

__all__ = ["SCENARIO"]
