"""The static graph of a workflow: a JSON-friendly model and its builder (api.md §16).

``get_workflow_representation(MyWorkflow)`` returns a ``WorkflowGraph`` of steps,
events, the external actor and resources, built from annotations without running or
validating anything.  Validation checks and stream bindings live in the ``checks`` and
``streams`` submodules, which the Workflow class and the runtime import directly.
"""

from __future__ import annotations

from tickwork.representation.build import get_workflow_representation
from tickwork.representation.model import (
    WorkflowEventNode,
    WorkflowExternalNode,
    WorkflowGenericNode,
    WorkflowGraph,
    WorkflowGraphEdge,
    WorkflowGraphNode,
    WorkflowNodeBase,
    WorkflowResourceConfigNode,
    WorkflowResourceNode,
    WorkflowStepNode,
)

__all__ = [
    "get_workflow_representation",
    "WorkflowNodeBase",
    "WorkflowStepNode",
    "WorkflowEventNode",
    "WorkflowExternalNode",
    "WorkflowResourceNode",
    "WorkflowResourceConfigNode",
    "WorkflowGenericNode",
    "WorkflowGraphNode",
    "WorkflowGraphEdge",
    "WorkflowGraph",
]
