"""The exceptions tickwork raises.

Every class subclasses ``Exception`` directly (``StepTimeoutError`` subclasses the
builtin ``TimeoutError``, so retry conditions on ``TimeoutError`` match it).  None of
them subclasses another, so ``except`` clauses never catch more than their name says.
"""

from __future__ import annotations

__all__ = [
    "ContextSerdeError",
    "ContextStateError",
    "StepTimeoutError",
    "WorkflowCancelledByUser",
    "WorkflowConfigurationError",
    "WorkflowDone",
    "WorkflowRuntimeError",
    "WorkflowStepDoesNotExistError",
    "WorkflowTimeoutError",
    "WorkflowValidationError",
]


class WorkflowValidationError(Exception):
    """A step signature, a workflow option or the workflow's graph is invalid."""


class WorkflowConfigurationError(Exception):
    """The workflow cannot be built: no steps, no unique start or stop event, bad runtime."""


class WorkflowRuntimeError(Exception):
    """A run broke a runtime contract (bad send target, non-event return, stuck stream...)."""


class WorkflowTimeoutError(Exception):
    """The run spent its alive-time budget (``Workflow(timeout=...)``)."""


class WorkflowCancelledByUser(Exception):
    """The run was cancelled with ``handler.cancel_run()`` (or hard-aborted under trio)."""


class WorkflowDone(Exception):
    """Kept for compatibility; tickwork never raises it."""


class WorkflowStepDoesNotExistError(Exception):
    """Kept for compatibility; an unknown send target raises ``WorkflowRuntimeError``."""


class ContextSerdeError(Exception):
    """A snapshot cannot be loaded; the message names the key, step or class at fault."""


class ContextStateError(Exception):
    """A ``Context`` member was used in the wrong face, or a Context was run twice at once."""


class StepTimeoutError(TimeoutError):
    """One invocation of a step exceeded its ``@step(timeout=...)`` limit.

    It can be built from a message alone so that it survives a snapshot round trip; the
    runtime sets ``step_name`` and ``timeout`` when it raises it.
    """

    def __init__(
        self, message: str, step_name: str | None = None, timeout: float | None = None
    ) -> None:
        super().__init__(message)
        self.step_name = step_name
        self.timeout = timeout
