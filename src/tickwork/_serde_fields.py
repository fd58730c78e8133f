"""Encoding of events, exceptions and event classes inside pydantic fields.

Used by the ``Serializable*`` annotated types of ``tickwork.events``.  While a
serializer's ``validation_context()`` is active, class names are resolved through it (so
its allow-list applies); otherwise they are resolved by import.
"""

from __future__ import annotations

import builtins
import importlib
import keyword
import sys
from collections.abc import Callable
from contextvars import ContextVar, Token
from pathlib import Path
from typing import Any

__all__ = [
    "active_resolver",
    "dump_event",
    "dump_event_type",
    "dump_exception",
    "load_event",
    "load_event_type",
    "load_exception",
    "main_module_name",
    "qualified_name",
    "RESOLVER",
    "resolve_by_import",
    "using_resolver",
]

ClassResolver = Callable[[str], type]

RESOLVER: ContextVar[ClassResolver | None] = ContextVar("tickwork_class_resolver", default=None)
"""The class resolver of the active serializer (see ``using_resolver``)."""


def qualified_name(cls: type) -> str:
    """``module.qualname`` of a class: the name envelopes and exception dicts carry.

    A class of the ``__main__`` module is named after the module's importable name
    (see ``main_module_name``), so that what a script journals can be read by
    another process that imports the script as a module.
    """
    module = cls.__module__
    if module == "__main__":
        module = main_module_name()
    return f"{module}.{cls.__qualname__}"


# (the __main__ module object, its importable name): recomputed only when __main__ changes.
_MAIN_NAME: tuple[object, str] | None = None


def main_module_name() -> str:
    """The name under which the running ``__main__`` module can be imported, else
    ``"__main__"``.

    ``python -m pkg.flows`` gives ``pkg.flows``; ``python flows.py`` gives ``flows`` when
    ``flows.py`` sits in the directory ``sys.path[0]`` names (as Python puts it there),
    ``flows`` is a valid module name and no other module of that name is loaded.  Any
    other ``__main__`` (an interactive session, ``python -c``, a console script, a
    package's ``__main__.py``) keeps ``"__main__"``.  Decided once per ``__main__``
    module, so names stay stable within a process.
    """
    global _MAIN_NAME
    main = sys.modules.get("__main__")
    if _MAIN_NAME is not None and _MAIN_NAME[0] is main:
        return _MAIN_NAME[1]
    name = _importable_main_name(main)
    _MAIN_NAME = (main, name)
    return name


def _importable_main_name(main: Any) -> str:
    spec = getattr(main, "__spec__", None)
    candidate = getattr(spec, "name", None)
    if not isinstance(candidate, str) or not candidate:
        candidate = _script_module_name(getattr(main, "__file__", None))
    if candidate is None or candidate.rpartition(".")[2] == "__main__":
        return "__main__"
    loaded = sys.modules.get(candidate)
    return candidate if loaded is None or loaded is main else "__main__"


def _script_module_name(file: Any) -> str | None:
    """``flows`` for a script ``flows.py`` found in ``sys.path[0]``, else ``None``."""
    if not isinstance(file, str) or not file.endswith(".py") or not sys.path:
        return None
    script = Path(file)
    stem = script.stem
    if not stem.isidentifier() or keyword.iskeyword(stem):
        return None
    try:
        same_place = script.resolve().parent == Path(sys.path[0] or ".").resolve()
    except OSError:
        return None
    return stem if same_place else None


# Where each resolved name was found: (module name, attribute path).  A hit re-walks the
# path from ``sys.modules`` (two or three getattrs), so a re-executed or reloaded module
# resolves to its current class, while the costly part (finding which prefix of the name
# is an importable module) runs once per name.
_LOCATIONS: dict[str, tuple[str, tuple[str, ...]]] = {}


def _walk(module_name: str, attrs: tuple[str, ...]) -> Any:
    obj: Any = sys.modules.get(module_name)
    if obj is None:
        return None
    for attr in attrs:
        obj = getattr(obj, attr, None)
        if obj is None:
            return None
    return obj


def resolve_by_import(name: str) -> type:
    """Import the longest importable module prefix of ``name`` and walk the rest.

    Raises ``ImportError`` naming ``name`` when nothing resolves (classes defined inside
    functions, with ``<locals>`` in their qualname, can never be imported).
    """
    location = _LOCATIONS.get(name)
    if location is not None:
        found = _walk(*location)
        if isinstance(found, type):
            return found
    main_name = main_module_name()
    if (
        main_name != "__main__"
        and name.startswith(main_name + ".")
        and main_name not in sys.modules
    ):
        # This process runs the script whose classes carry its importable name: they are
        # the classes of __main__ (importing the script again would make copies).
        attrs = tuple(name[len(main_name) + 1 :].split("."))
        found = _walk("__main__", attrs)
        if isinstance(found, type):
            _LOCATIONS[name] = ("__main__", attrs)
            return found
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            importlib.import_module(module_name)
        except ImportError:
            continue
        attrs = tuple(parts[cut:])
        obj = _walk(module_name, attrs)
        if isinstance(obj, type):
            _LOCATIONS[name] = (module_name, attrs)
            return obj
        if obj is not None:
            break
    raise ImportError(f"cannot resolve class {name!r} by import")


def active_resolver() -> ClassResolver:
    """The class resolver of the active serializer, or import-based resolution."""
    return RESOLVER.get() or resolve_by_import


class using_resolver:
    """Resolve class names through ``resolver`` inside the ``with`` block.

    A plain class rather than ``@contextmanager``: it is entered once per decoded event,
    and a generator-based manager costs several times more.
    """

    __slots__ = ("_resolver", "_token")

    def __init__(self, resolver: ClassResolver) -> None:
        self._resolver = resolver
        self._token: Token[ClassResolver | None] | None = None

    def __enter__(self) -> None:
        self._token = RESOLVER.set(self._resolver)

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            RESOLVER.reset(self._token)
            self._token = None


def dump_event(event: Any) -> dict[str, Any]:
    """The JSON envelope of an event (or any pydantic model)."""
    return {
        "__is_pydantic": True,
        # model_dump(mode="json") without its Python-level argument handling
        "value": type(event).__pydantic_serializer__.to_python(event, mode="json"),
        "qualified_name": qualified_name(type(event)),
    }


def load_event(value: Any) -> Any:
    """An event from an instance (kept as-is) or an envelope dict / JSON string."""
    if isinstance(value, str):
        import json

        value = json.loads(value)
    if isinstance(value, dict) and value.get("__is_pydantic"):
        cls = active_resolver()(value["qualified_name"])
        return cls.model_validate(value["value"])  # type: ignore[attr-defined]
    return value


class UnreconstructedException(Exception):
    """Stands in for an exception whose class could not be rebuilt from a snapshot.

    ``str()`` is the original message and ``original_type`` the original qualified name;
    serializing it again writes that name, so round trips never wrap it twice.  Defined
    here, below the events that carry exceptions; its public home is
    ``tickwork.events``.
    """

    def __init__(self, message: str, original_type: str = "") -> None:
        super().__init__(message)
        self.original_type = original_type


UnreconstructedException.__module__ = "tickwork.events"


def dump_exception(exc: Any) -> dict[str, str]:
    """``{"exception_type": "module.qualname", "exception_message": str(exc)}``."""
    if isinstance(exc, UnreconstructedException) and exc.original_type:
        name = exc.original_type
    else:
        name = qualified_name(type(exc))
    return {"exception_type": name, "exception_message": str(exc)}


def load_exception(value: Any) -> Any:
    """A live exception (kept as-is) or one rebuilt from its dict, never failing.

    Only ``Exception`` subclasses are rebuilt, always as ``cls(message)``; anything that
    cannot be rebuilt becomes an ``UnreconstructedException`` carrying the original name.
    """
    if isinstance(value, BaseException) or not isinstance(value, dict):
        return value
    name = str(value.get("exception_type", ""))
    message = str(value.get("exception_message", ""))
    try:
        if name.startswith("builtins."):
            cls = getattr(builtins, name.split(".", 1)[1])
        else:
            cls = active_resolver()(name)
        if not (isinstance(cls, type) and issubclass(cls, Exception)):
            raise TypeError(name)
        return cls(message)
    except Exception:
        return UnreconstructedException(message, original_type=name)


def dump_event_type(cls: Any) -> str:
    """An event class as ``module.qualname``."""
    return qualified_name(cls) if isinstance(cls, type) else str(cls)


def load_event_type(value: Any) -> Any:
    """An event class from itself or its qualified name."""
    if isinstance(value, str):
        return active_resolver()(value)
    return value
