"""The static graph of a workflow: a JSON-friendly model and its builder (api.md §16).

``get_workflow_representation(MyWorkflow)`` returns a ``WorkflowGraph`` of steps,
events, the external actor and resources, built from annotations without running or
validating anything.  Validation checks live in the ``checks`` submodule, which the
Workflow class imports when it first validates.

The names below are imported on first use (PEP 562): validating a workflow imports
``checks`` alone, never the graph model or the drawing code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tickwork._lazy import lazy_exports

if TYPE_CHECKING:
    from tickwork.representation.build import (
        get_workflow_representation as get_workflow_representation,
    )
    from tickwork.representation.model import WorkflowEventNode as WorkflowEventNode
    from tickwork.representation.model import WorkflowExternalNode as WorkflowExternalNode
    from tickwork.representation.model import WorkflowGenericNode as WorkflowGenericNode
    from tickwork.representation.model import WorkflowGraph as WorkflowGraph
    from tickwork.representation.model import WorkflowGraphEdge as WorkflowGraphEdge
    from tickwork.representation.model import WorkflowGraphNode as WorkflowGraphNode
    from tickwork.representation.model import WorkflowNodeBase as WorkflowNodeBase
    from tickwork.representation.model import (
        WorkflowResourceConfigNode as WorkflowResourceConfigNode,
    )
    from tickwork.representation.model import WorkflowResourceNode as WorkflowResourceNode
    from tickwork.representation.model import WorkflowStepNode as WorkflowStepNode

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

# Run time only: type checkers read the imports above; a module __getattr__ would
# have them accept any name, a typo included, as ``Any``.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "get_workflow_representation": "tickwork.representation.build",
            "WorkflowNodeBase": "tickwork.representation.model",
            "WorkflowStepNode": "tickwork.representation.model",
            "WorkflowEventNode": "tickwork.representation.model",
            "WorkflowExternalNode": "tickwork.representation.model",
            "WorkflowResourceNode": "tickwork.representation.model",
            "WorkflowResourceConfigNode": "tickwork.representation.model",
            "WorkflowGenericNode": "tickwork.representation.model",
            "WorkflowGraphNode": "tickwork.representation.model",
            "WorkflowGraphEdge": "tickwork.representation.model",
            "WorkflowGraph": "tickwork.representation.model",
        },
    )
