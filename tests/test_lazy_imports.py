"""Optional parts load on first use (quality.md: ``import tickwork`` stays cheap).

Each check runs in a fresh interpreter and reads its ``sys.modules``: ``import tickwork``
loads neither pydantic's models nor the runtime, and a program that defines and runs a
workflow loads no journal store, SQLite, drawing, replay, fleet, command line, testing
kit, OpenTelemetry or psycopg; the public import and a workflow class load no runtime,
state store or serializers before the first run.  The packages that re-export names
lazily still list them in ``dir()`` and resolve every one (``test_public_paths.py``
checks each path).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tickwork

SRC = Path(tickwork.__file__).resolve().parents[1]

# Modules (and packages, with everything under them) that only their own users load.
OPTIONAL = (
    "sqlite3",
    "psycopg",
    "psycopg_pool",
    "opentelemetry",
    "argparse",
    "tickwork.stores",
    "tickwork.journal",
    "tickwork.fleet",
    "tickwork.cli",
    "tickwork._cli",
    "tickwork.testing",
    "tickwork.representation.build",
    "tickwork.representation.model",
    "tickwork.representation.draw",
    "tickwork.representation._drawing",
    "tickwork.serde.journal_codec",
    "tickwork.serde.snapshot",
    "tickwork.runtime.control_loop.replay",
    "tickwork.runtime.journal_view",
    "tickwork.runtime.durable",
)

RUN_A_WORKFLOW = """
import asyncio

from tickwork import Context, Event, StartEvent, StopEvent, Workflow, step


class Doubled(Event):
    value: int


class Double(Workflow):
    @step
    async def double(self, ctx: Context, ev: StartEvent) -> Doubled:
        await ctx.store.set("seen", ev.value)
        return Doubled(value=ev.value * 2)

    @step
    async def finish(self, ev: Doubled) -> StopEvent:
        return StopEvent(result=ev.value)


async def main() -> None:
    handler = Double(timeout=10).run(value=21)
    assert await handler == 42


asyncio.run(main())
"""


def output_of(code: str, env: dict[str, str] | None = None) -> str:
    """What a fresh interpreter prints running ``code`` (tickwork from this checkout)."""
    child_env = {**os.environ, **(env or {})}
    child_env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(SRC), os.environ.get("PYTHONPATH")])
    )
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def loaded_after(code: str, env: dict[str, str] | None = None) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``code``."""
    probe = code + "\nimport json, sys\nsys.stdout.write(json.dumps(sorted(sys.modules)))\n"
    return set(json.loads(output_of(probe, env).splitlines()[-1]))


def under(modules: set[str], *packages: str) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


def test_import_tickwork_loads_only_the_root() -> None:
    modules = loaded_after("import tickwork")
    assert under(modules, "tickwork") == ["tickwork", "tickwork._lazy", "tickwork._version"]
    assert not under(modules, "pydantic", "anyio", *OPTIONAL)


def test_running_a_workflow_loads_no_optional_part() -> None:
    modules = loaded_after(RUN_A_WORKFLOW)
    assert "tickwork.workflow" in modules and "pydantic" in modules  # the probe ran
    assert not under(modules, *OPTIONAL)


def test_an_unconfigured_opentelemetry_is_not_imported_by_a_run() -> None:
    pytest.importorskip("opentelemetry.trace")
    modules = loaded_after(RUN_A_WORKFLOW, {"OTEL_PYTHON_TRACER_PROVIDER": ""})
    assert not under(modules, "opentelemetry")
    # Once the program has imported the API, each run asks it for a tracer provider.
    modules = loaded_after("import opentelemetry.trace\n" + RUN_A_WORKFLOW)
    assert "opentelemetry.trace" in modules


def test_the_in_memory_journal_does_not_load_sqlite() -> None:
    modules = loaded_after("from tickwork.journal import InMemoryJournal")
    assert "tickwork.stores.memory" in modules
    assert not under(modules, "sqlite3", "tickwork.stores.sqlite", "tickwork.stores.postgres")


def test_drawing_is_loaded_by_its_first_use_only() -> None:
    modules = loaded_after("from tickwork.representation import get_workflow_representation")
    assert "tickwork.representation.build" in modules
    assert not under(modules, "tickwork.representation.draw", "tickwork.representation._html")


# What ``from tickwork import Context, Workflow, step, StartEvent, StopEvent`` (every
# program's import) leaves for the first run: the runtime, the reducer's types, the
# state store and the serializers.
RUN_MACHINERY = (
    "tickwork.runtime.session",
    "tickwork.runtime.step_worker",
    "tickwork.runtime.step_scope",
    "tickwork.runtime.control_loop",
    "tickwork.runtime.types",
    "tickwork.runtime.config",
    "tickwork.runtime.verbose",
    "tickwork.context.state_store",
    "tickwork.context._state_section",
    "tickwork.context._state_paths",
    "tickwork.serde.serializers",
    "pickle",
    "logging",
    "tickwork.retry_policy",
)

PUBLIC_IMPORT = "from tickwork import Context, Workflow, step, StartEvent, StopEvent"

DEFINE_A_WORKFLOW = f"""
{PUBLIC_IMPORT}


class Count(Workflow):
    @step
    async def count(self, ctx: Context, ev: StartEvent) -> StopEvent:
        return StopEvent(result=1)
"""

# A pre-run Context and the first run load what the import left out.
RUN_IT = f"""
{DEFINE_A_WORKFLOW}
import asyncio


async def main() -> None:
    workflow = Count(timeout=10)
    ctx = Context(workflow)
    await ctx.store.set("before", 1)
    assert await workflow.run(ctx=ctx) == 1
    assert await ctx.store.get("before") == 1
    print("ran")


asyncio.run(main())
"""


def test_the_public_import_and_a_workflow_class_leave_the_run_machinery_for_the_run() -> None:
    for code in (PUBLIC_IMPORT, DEFINE_A_WORKFLOW):
        modules = loaded_after(code)
        assert "tickwork.workflow" in modules and "tickwork.context.context" in modules
        assert not under(modules, *RUN_MACHINERY), code


def test_a_workflow_runs_after_the_public_import_alone() -> None:
    assert output_of(RUN_IT).strip() == "ran"
    modules = loaded_after(RUN_IT)
    assert "tickwork.runtime.session" in modules and "tickwork.context.state_store" in modules


LAZY_PACKAGES = (
    "tickwork",
    "tickwork.context",
    "tickwork.journal",
    "tickwork.stores",
    "tickwork.representation",
    "tickwork.runtime.control_loop",
)


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_dir_lists_the_lazy_names_and_each_resolves(name: str) -> None:
    package = importlib.import_module(name)
    listed = dir(package)
    assert set(package.__all__) <= set(listed)
    for export in package.__all__:
        assert getattr(package, export) is getattr(package, export)
        assert export in vars(package)  # kept: later reads are plain lookups


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_an_unknown_name_is_an_attribute_error(name: str) -> None:
    package = importlib.import_module(name)
    with pytest.raises(AttributeError, match=f"module '{name}' has no attribute 'Nope'"):
        package.Nope  # noqa: B018
    with pytest.raises(ImportError):
        exec(f"from {name} import Nope")


def test_postgres_is_lazy_and_left_out_of_dir() -> None:
    # In a fresh interpreter: once any code has read the name, it is bound like any other.
    shown = output_of("import tickwork.journal as j; print('PostgresJournal' in dir(j))")
    assert shown.strip() == "False"  # help() and completion do not load psycopg
    pytest.importorskip("psycopg")
    from tickwork.journal import PostgresJournal
    from tickwork.stores.postgres import PostgresJournal as defined

    assert PostgresJournal is defined


def test_a_submodule_is_reachable_as_an_attribute_after_a_bare_import() -> None:
    # As with a package that imports its submodules eagerly (the anchor's does).
    code = "import tickwork; print(tickwork.events.StartEvent.__name__, tickwork.errors.__name__)"
    result = output_of(code)
    assert result.split() == ["StartEvent", "tickwork.errors"]
