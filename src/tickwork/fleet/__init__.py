"""Running journaled runs on a fleet of worker processes (scale-out.md).

``Worker`` claims runs from a shared journal store and runs
them; ``tickwork worker`` runs one from the command line.
"""

from __future__ import annotations

from tickwork.fleet.worker import Worker, WorkerOptions

__all__ = ["Worker", "WorkerOptions"]
