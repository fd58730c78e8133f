"""Deferring import-time work: lazily re-exported names and models built on first use.

``lazy_exports`` gives a package names it re-exports but imports only when first read.

``import tickwork`` must stay cheap, so the package root, and the packages whose names
pull in optional machinery (journal stores, SQLite, drawing, replay), re-export them
lazily, through a module-level ``__getattr__`` and ``__dir__`` (PEP 562)::

    if TYPE_CHECKING:  # what type checkers see
        from tickwork.stores.sqlite import SqliteJournal as SqliteJournal

    if not TYPE_CHECKING:  # hidden from them, or they would accept any name as ``Any``
        __getattr__, __dir__ = lazy_exports(
            __name__, {"SqliteJournal": "tickwork.stores.sqlite"}
        )

The first read of a name imports its module and stores the value in the package's
namespace, so later reads are plain attribute lookups and ``from pkg import Name`` works
as if the import had been eager.  The table is a plain dict literal: the layering test
reads it, counts each module it names as an import of the package, and checks that every
name is imported under ``TYPE_CHECKING`` from that module.

``built_on_first_use`` keeps one of tickwork's own pydantic models unbuilt until it is
first used, without deferring the models users derive from it.

This module imports nothing from tickwork, so every layer may use it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["built_on_first_use", "lazy_exports"]

_Model = TypeVar("_Model", bound="type[BaseModel]")


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` for its lazily imported names.

    ``exports`` maps each lazy name to the module that defines it.  Any other name that
    is a submodule of ``package`` is imported too (``import tickwork`` then
    ``tickwork.events.StartEvent`` works, as it would after eager imports); the rest
    raise ``AttributeError``.  ``__dir__`` lists what ``dir()``
    would list after eager imports: the package's namespace plus its lazy names, except
    those left out of its ``__all__`` (an optional dependency, such as PostgreSQL's, is
    then imported only by code that names it, never by ``help()`` or completion).
    """
    table = dict(exports)

    def __getattr__(name: str) -> Any:
        source = table.get(name)
        if source is None:
            return _submodule(package, name)
        value = getattr(importlib.import_module(source), name)
        # Later reads find the name in the namespace and never come back here.
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        namespace = vars(sys.modules[package])
        public = namespace.get("__all__", table)
        return sorted({*namespace, *(name for name in table if name in public)})

    return __getattr__, __dir__


def _submodule(package: str, name: str) -> Any:
    """The submodule ``name`` of ``package``, imported (``AttributeError`` if none)."""
    qualified = f"{package}.{name}"
    if not name.startswith("__") and importlib.util.find_spec(qualified) is not None:
        return importlib.import_module(qualified)  # the import binds it on the package
    raise AttributeError(f"module {package!r} has no attribute {name!r}")


def built_on_first_use(cls: _Model) -> _Model:
    """Keep ``cls`` (declared with ``defer_build=True``) unbuilt until its first use, and
    let its subclasses be built when they are declared, as usual.

    Building a model's validator and serializer is most of what defining it costs, and
    the first build loads the rest of pydantic, so loading tickwork builds none of its
    own models: a program pays for those it uses.  Pydantic copies a base's config into
    its subclasses, so the flag is taken off the class once it exists: a user's
    ``class MyEvent(Event)`` is still checked and built where it is declared.  ``cls``
    builds itself the first time it validates or serializes anything (or on
    ``model_rebuild()``).
    """
    cls.model_config.pop("defer_build", None)
    return cls
