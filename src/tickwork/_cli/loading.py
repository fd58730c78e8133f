"""Find the workflow a ``MODULE:WORKFLOW`` argument names, and the start event fields.

``MODULE`` is a dotted module name, importable from the current directory too, or a
path to a ``.py`` file.  ``WORKFLOW`` (dotted attributes allowed) must be a Workflow
class or instance.  Every problem is a ``CliError``: exit
status 2 when the argument names nothing usable, 1 when the module's own code fails.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tickwork._cli.console import EXIT_FAILURE, CliError, Console, one_line
from tickwork._cli.journal_view import journal_problem
from tickwork._serde_fields import resolve_by_import
from tickwork.journal import JournalError, RunEntry
from tickwork.workflow import Workflow

__all__ = [
    "check_run_workflow",
    "load_target",
    "parse_assignments",
    "run_workflow_class",
    "workflow_instance",
]


def parse_assignments(items: Sequence[str]) -> dict[str, Any]:
    """``["name=Ada", "count=3"]`` → ``{"name": "Ada", "count": 3}``.

    Each value is parsed as JSON when it is valid JSON, else kept as a string.  Raises
    ``CliError`` for an item without ``=``, a key that is not a Python identifier,
    or a key given twice.
    """
    values: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.isidentifier():
            raise CliError(
                f"bad argument {item!r}: expected key=value with an identifier as key "
                "(for example name=Ada or count=3)"
            )
        if key in values:
            raise CliError(f"bad argument {item!r}: {key!r} is given twice")
        try:
            values[key] = json.loads(raw)
        except ValueError:
            values[key] = raw
    return values


def load_target(spec: str) -> Any:
    """The Workflow class or instance named by ``MODULE:ATTRIBUTE``."""
    module_name, sep, attribute = spec.rpartition(":")
    if not sep or not module_name or not attribute:
        raise CliError(f"expected MODULE:WORKFLOW, got {spec!r} (for example myapp.flows:MyFlow)")
    module = _import_module(module_name)
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise CliError(f"module {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    is_class = isinstance(target, type) and issubclass(target, Workflow)
    if not is_class and not isinstance(target, Workflow):
        kind = "class" if isinstance(target, type) else type(target).__name__
        raise CliError(f"{spec} is not a Workflow class or instance (got {kind} {target!r:.60})")
    return target


def _import_module(name: str) -> Any:
    if name.endswith(".py") or os.sep in name or "/" in name:
        return _import_file(Path(name))
    _current_directory_importable()
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is not None and (name == error.name or name.startswith(error.name + ".")):
            raise CliError(
                f"cannot import module {name!r}: no module named {error.name!r}"
            ) from None
        raise CliError(f"importing {name!r} failed: {one_line(error)}", EXIT_FAILURE) from None
    except Exception as error:
        raise CliError(f"importing {name!r} failed: {one_line(error)}", EXIT_FAILURE) from None


def _current_directory_importable() -> None:
    """Modules in the current directory import, as with ``python -m`` (the installed
    ``tickwork`` script does not put the directory on ``sys.path``)."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise CliError(f"cannot import module {str(path)!r}: no such file")
    module_name = path.stem
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise CliError(f"cannot import module {str(path)!r}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # annotations and pydantic models resolve through it
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        sys.modules.pop(module_name, None)
        raise CliError(f"importing {str(path)!r} failed: {one_line(error)}", EXIT_FAILURE) from None
    return module


def workflow_instance(spec: str, target: Any, options: dict[str, Any]) -> Workflow:
    """An instance of ``target`` created with ``options``, or ``target`` itself."""
    if isinstance(target, Workflow):
        if options:
            names = " and ".join(f"--{name}" for name in options)
            raise CliError(
                f"{names} needs a Workflow class, but {spec} is an instance; name the class "
                "or configure the instance where it is created"
            )
        return target
    try:
        workflow: Workflow = target(**options)
    except JournalError as error:  # its journal store cannot be used: a usage error
        raise journal_problem(error) from None
    except Exception as error:
        raise CliError(f"cannot create {spec}: {one_line(error)}", EXIT_FAILURE) from None
    return workflow


def run_workflow_class(entry: RunEntry, spec: str | None, command: str) -> type[Workflow]:
    """The Workflow class that resumes or shows the run ``entry``: the one ``spec``
    (``MODULE:WORKFLOW``) names, else the class its recorded workflow name imports."""
    if spec is not None:
        target = load_target(spec)
        if isinstance(target, Workflow):
            raise CliError(
                f"{command} needs a Workflow class, but {spec} is an instance (the command "
                "creates it with this journal)"
            )
        workflow_class: type[Workflow] = target
        return workflow_class
    name = entry.workflow_name
    if name.startswith("__main__."):
        raise CliError(
            f"run {entry.run_id!r} was started by a script as {name}, which no other process "
            f"can import; name its workflow with --workflow MODULE:{name.removeprefix('__main__.')}"
        )
    _current_directory_importable()
    try:
        found = resolve_by_import(name)
    except ImportError:
        raise CliError(
            f"cannot import the workflow {name} of run {entry.run_id!r}; name it with "
            "--workflow MODULE:WORKFLOW"
        ) from None
    except Exception as error:
        raise CliError(f"importing {name} failed: {one_line(error)}", EXIT_FAILURE) from None
    if not issubclass(found, Workflow):
        raise CliError(
            f"{name}, the workflow name of run {entry.run_id!r}, is not a Workflow class; "
            "name its workflow with --workflow MODULE:WORKFLOW"
        )
    return found


def check_run_workflow(
    workflow: Workflow, entry: RunEntry, console: Console
) -> contextlib.AbstractContextManager[None]:
    """Refuse a workflow other than the run's; the context to act on the run in.

    A run a script recorded as ``__main__.Name`` may be taken over by a workflow of
    another name, after a warning: in the context, the classes the journal names
    ``__main__.X`` are read as those of the workflow's module.
    """
    if workflow.workflow_name == entry.workflow_name:
        return contextlib.nullcontext()
    if not entry.workflow_name.startswith("__main__."):
        raise CliError(
            f"run {entry.run_id!r} belongs to workflow {entry.workflow_name}, "
            f"not {workflow.workflow_name}"
        )
    module = sys.modules[type(workflow).__module__]
    console.warning(
        f"run {entry.run_id!r} was recorded by a script as {entry.workflow_name}; it is "
        f"taken as {workflow.workflow_name}, and the classes its journal names __main__.X "
        f"as those of module {module.__name__} (they must be the script's classes)"
    )
    return _main_module_as(module)


@contextlib.contextmanager
def _main_module_as(module: Any) -> Iterator[None]:
    """Resolve ``__main__.X`` names to ``module.X`` in the block (the command's own
    ``__main__`` is not looked up by name meanwhile)."""
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = module
    try:
        yield
    finally:
        sys.modules["__main__"] = saved
