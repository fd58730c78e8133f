"""tickwork: an embeddable, event-driven workflow runtime driven by a pure reducer.

Every public name is imported on first use (PEP 562): ``import tickwork`` loads neither
pydantic's models nor the runtime, so the command line and code that imports a single
submodule (``tickwork.errors``, say) start fast; ``from tickwork import Workflow`` loads
what a run needs, and the journal stores, drawing, OpenTelemetry, the fleet and the
testing kit still wait for their own first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tickwork._lazy import lazy_exports
from tickwork._version import __version__ as __version__

if TYPE_CHECKING:
    from tickwork.context.context import Context as Context
    from tickwork.decorators import catch_error as catch_error
    from tickwork.decorators import step as step
    from tickwork.events import Event as Event
    from tickwork.events import HumanResponseEvent as HumanResponseEvent
    from tickwork.events import InputRequiredEvent as InputRequiredEvent
    from tickwork.events import StartEvent as StartEvent
    from tickwork.events import StopEvent as StopEvent
    from tickwork.workflow import Workflow as Workflow

__all__ = [
    "Context",
    "Event",
    "HumanResponseEvent",
    "InputRequiredEvent",
    "StartEvent",
    "StopEvent",
    "Workflow",
    "catch_error",
    "step",
]

# Run time only: type checkers read the imports above; a module __getattr__ would
# have them accept any name, a typo included, as ``Any``.
if not TYPE_CHECKING:
    __getattr__ = lazy_exports(
        __name__,
        {
            "Context": "tickwork.context.context",
            "Event": "tickwork.events",
            "HumanResponseEvent": "tickwork.events",
            "InputRequiredEvent": "tickwork.events",
            "StartEvent": "tickwork.events",
            "StopEvent": "tickwork.events",
            "Workflow": "tickwork.workflow",
            "catch_error": "tickwork.decorators",
            "step": "tickwork.decorators",
        },
    )[0]


def __dir__() -> list[str]:
    """The public names only: ``dir(tickwork)`` and completion do not offer the
    submodules loaded since, nor ``annotations``."""
    return sorted([*__all__, "__version__"])
