"""llama-index-core on tickwork, reached through the import name ``workflows``.

Runs under ``nox -s compat``, which installs llama-index-core without
llama-index-workflows and aliases ``workflows`` to ``tickwork``.  Anywhere else (no
llama-index-core, or a real ``workflows`` package) the module is skipped.

Async tests run under asyncio only: llama-index-core itself is asyncio-bound (its chat
memory hands work to ``asyncio.to_thread``, which needs a running asyncio loop), so an
agent fails under trio before tickwork is involved.

No ``from __future__ import annotations`` here: llama-index-core's ``FunctionTool`` finds a
tool's ``Context`` parameter by its evaluated annotation, not by a string.
"""

import importlib
import warnings
from collections.abc import Sequence
from typing import Any

import pytest

import tickwork

try:
    import workflows  # type: ignore[import-not-found]
except ImportError:
    pytest.skip("'workflows' is not importable: run `nox -s compat`", allow_module_level=True)
if workflows is not tickwork:
    pytest.skip("'workflows' is not aliased to tickwork here", allow_module_level=True)
pytest.importorskip("llama_index.core", reason="llama-index-core is not installed")

from llama_index.core.agent.workflow import (
    AgentOutput,
    FunctionAgent,
    ToolCall,
    ToolCallResult,
)
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import (
    Context,
    HumanResponseEvent,
    InputRequiredEvent,
    StopEvent,
)


@pytest.fixture
def anyio_backend() -> str:
    """asyncio only (see the module docstring)."""
    return "asyncio"


@pytest.mark.parametrize(
    "module",
    [
        "llama_index.core.workflow",
        "llama_index.core.agent.workflow",
        "llama_index.core.workflow.utils",
        "llama_index.core.workflow.drawing",
        "llama_index.core.workflow.context_serializers",
        "llama_index.core.workflow.errors",
        "llama_index.core.workflow.types",
    ],
)
def test_llama_index_workflow_modules_import(module: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        importlib.import_module(module)


def test_llama_index_names_are_tickwork_objects() -> None:
    from llama_index.core.workflow import utils

    import tickwork.context.utils
    import tickwork.utils

    assert Context is tickwork.Context
    assert StopEvent is tickwork.StopEvent
    assert utils.get_steps_from_class is tickwork.utils.get_steps_from_class
    assert utils.get_qualified_name is tickwork.context.utils.get_qualified_name
    assert issubclass(FunctionAgent, tickwork.Workflow)
    steps = utils.get_steps_from_class(FunctionAgent)
    assert {"init_run", "run_agent_step", "call_tool", "aggregate_tool_results"} <= set(steps)


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def tool_then_answer(tool_name: str, **tool_kwargs: Any) -> Any:
    """A scripted LLM turn: call ``tool_name`` first, then answer with the tool's output."""

    def respond(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        tool_replies = [m for m in messages if m.role == MessageRole.TOOL]
        if tool_replies:
            return ChatMessage(
                role=MessageRole.ASSISTANT, content=f"The answer is {tool_replies[-1].content}"
            )
        call = ToolCallBlock(tool_call_id="call-1", tool_name=tool_name, tool_kwargs=tool_kwargs)
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])

    return respond


@pytest.mark.anyio
async def test_function_agent_runs_a_tool_call_end_to_end() -> None:
    llm = MockFunctionCallingLLM(response_generator=tool_then_answer("multiply", a=6, b=7))
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(multiply)], llm=llm)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        handler = agent.run(user_msg="What is 6 times 7?")
        streamed = [event async for event in handler.stream_events()]
        output = await handler
    assert isinstance(output, AgentOutput)
    assert str(output) == "The answer is 42"
    assert [(c.tool_name, c.tool_kwargs, c.tool_output.raw_output) for c in output.tool_calls] == [
        ("multiply", {"a": 6, "b": 7}, 42)
    ]
    kinds = [type(event) for event in streamed]
    assert kinds.index(ToolCall) < kinds.index(ToolCallResult) < kinds.index(StopEvent)
    assert [w for w in caught if issubclass(w.category, DeprecationWarning)] == []


@pytest.mark.anyio
async def test_a_tool_waiting_for_a_human_pauses_the_agent_and_resumes() -> None:
    """The tool's ``wait_for_event`` unwinds through llama-index-core's ``except Exception``
    around tool calls (it re-raises ``WaitingForEvent``) and the step re-runs on the reply."""
    attempts: list[str] = []

    async def deploy(ctx: Context, target: str) -> str:
        """Deploy ``target`` once a human approves."""
        attempts.append(target)
        reply = await ctx.wait_for_event(
            HumanResponseEvent, waiter_event=InputRequiredEvent(prefix=f"deploy {target}?")
        )
        return f"{target}: {reply.response}"

    llm = MockFunctionCallingLLM(response_generator=tool_then_answer("deploy", target="prod"))
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(deploy)], llm=llm)
    handler = agent.run(user_msg="ship it")
    prompts = []
    async for event in handler.stream_events():
        if isinstance(event, InputRequiredEvent):
            prompts.append(event.prefix)
            handler.ctx.send_event(HumanResponseEvent(response="approved"))
    output = await handler
    assert prompts == ["deploy prod?"]
    assert str(output) == "The answer is prod: approved"
    assert attempts == ["prod", "prod"]  # paused once, then re-run with the reply
