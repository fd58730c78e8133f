"""Find the workflow a ``MODULE:WORKFLOW`` argument names, and the start event fields.

``MODULE`` is a dotted module name, importable from the current directory too, or a
path to a ``.py`` file.  ``WORKFLOW`` (dotted attributes allowed) must be a Workflow
class or instance.  Every problem is a :class:`~tickwork._cli.console.CliError`: exit
status 2 when the argument names nothing usable, 1 when the module's own code fails.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tickwork._cli.console import EXIT_FAILURE, CliError, one_line
from tickwork._cli.journal_view import journal_problem
from tickwork.journal import JournalError
from tickwork.workflow import Workflow

__all__ = ["load_target", "parse_assignments", "workflow_instance"]


def parse_assignments(items: Sequence[str]) -> dict[str, Any]:
    """``["name=Ada", "count=3"]`` → ``{"name": "Ada", "count": 3}``.

    Each value is parsed as JSON when it is valid JSON, else kept as a string.  Raises
    :class:`CliError` for an item without ``=``, a key that is not a Python identifier,
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
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
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
