"""Compatibility helpers: qualified names of classes and importing objects by such a name.

Code written for the ``workflows`` package imports these two functions (llama-index-core
re-exports them from ``llama_index.core.workflow.utils``).  They use the same
``module.qualname`` form tickwork writes into snapshots and event envelopes.
"""

from __future__ import annotations

import importlib
from typing import Any

from tickwork._serde_fields import qualified_name

__all__ = ["get_qualified_name", "import_module_from_qualified_name"]


def get_qualified_name(value: Any) -> str:
    """``module.qualname`` of a class, or of the class of an instance.

    ``get_qualified_name(StopEvent)`` and ``get_qualified_name(StopEvent())`` are both
    ``"tickwork.events.StopEvent"``.  The result imports back with
    ``import_module_from_qualified_name`` unless the class was defined inside a
    function (its qualname then contains ``<locals>``).
    """
    return qualified_name(value if isinstance(value, type) else type(value))


def import_module_from_qualified_name(name: str) -> Any:
    """Import the object a ``module.qualname`` string names and return it.

    The longest importable module prefix of ``name`` is imported and the rest is read as
    attributes, so nested classes (``pkg.mod.Outer.Inner``) resolve too, and a name that
    is itself a module gives the module.  Raises
    ``TypeError`` for a non-string, ``ValueError`` for a name that is empty, has an empty
    part or names a function-local class, and ``ImportError`` (naming what is missing)
    when no module or attribute matches.
    """
    parts = _split(name)
    missing_module = parts[0]
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # Only a missing prefix means "try a shorter one"; a module that exists but
            # fails on its own missing dependency is an error worth seeing as it is.
            if exc.name is None or not _is_prefix(exc.name, module_name):
                raise
            missing_module = exc.name
            continue
        for index, attr in enumerate(parts[cut:], start=cut):
            if not hasattr(obj, attr):
                raise ImportError(
                    f"cannot import {name!r}: {'.'.join(parts[:index])!r} has no attribute {attr!r}"
                )
            obj = getattr(obj, attr)
        return obj
    raise ImportError(
        f"cannot import {name!r}: no module named {missing_module!r}; a qualified name is "
        "'package.module.ClassName'"
    )


def _split(name: Any) -> list[str]:
    """The dotted parts of a well-formed qualified name with at least two parts."""
    if not isinstance(name, str):
        raise TypeError(
            f"a qualified name must be a str such as 'package.module.ClassName', got {name!r}"
        )
    parts = name.split(".")
    if len(parts) < 2 or not all(parts):
        raise ValueError(
            f"{name!r} is not a qualified name: expected 'package.module.ClassName' "
            "(a module path, a dot, then the object's name)"
        )
    if "<locals>" in parts:
        raise ValueError(
            f"cannot import {name!r}: it names something defined inside a function, which "
            "no import can reach; define it at module level"
        )
    return parts


def _is_prefix(module: str, name: str) -> bool:
    """``module`` is ``name`` or a package containing it."""
    return name == module or name.startswith(module + ".")
