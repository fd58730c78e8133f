"""The built-in in-process runtime: runs are tasks on the caller's event loop.

The runtime boundary is internal for now; ``Workflow(runtime=...)`` accepts only
instances of ``InProcessRuntime`` so that durable or multi-process runtimes can
plug in later without changing user code.
"""

from __future__ import annotations

__all__ = ["DEFAULT_RUNTIME", "InProcessRuntime"]


class InProcessRuntime:
    """Hosts each run as a task in the process that called ``Workflow.run()``."""

    def __repr__(self) -> str:
        return "InProcessRuntime()"


DEFAULT_RUNTIME = InProcessRuntime()
