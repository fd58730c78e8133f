"""Make the import name ``workflows`` resolve to ``tickwork`` (for the compat session).

Code written for the ``workflows`` package (llama-index-core among others) imports
``workflows`` and ``workflows.X``.  :func:`install` puts a finder at the front of
``sys.meta_path`` that answers every such import with the module object of
``tickwork`` / ``tickwork.X``: nothing is copied, so ``workflows.Event is tickwork.Event``
and ``workflows.context.Context is tickwork.context.Context``.  A name tickwork does not
have fails as an ordinary ``ModuleNotFoundError`` naming the ``workflows`` module.

Run this file as a script (``python tickwork_workflows_alias.py --install-pth``) to write a
``.pth`` file into the running interpreter's site-packages, so that every process of that
environment gets the alias at start-up.  It is test tooling: nothing in ``src/`` imports it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

ALIAS = "workflows"
TARGET = "tickwork"
PTH_NAME = "tickwork_workflows_alias.pth"


def target_name(fullname: str) -> str | None:
    """``tickwork.X`` for ``workflows.X`` (and ``tickwork`` for ``workflows``), else ``None``."""
    if fullname == ALIAS:
        return TARGET
    if fullname.startswith(ALIAS + "."):
        return TARGET + fullname[len(ALIAS) :]
    return None


class _AliasLoader(importlib.abc.Loader):
    """Hands the import system the already-imported tickwork module."""

    def __init__(self, module: ModuleType) -> None:
        self._module = module
        self._own_spec = module.__spec__

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self._module

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamps the alias spec on the module it was given; the module
        # is tickwork's, so give it its own spec back (reload and pickling read it).
        module.__spec__ = self._own_spec


class WorkflowsAliasFinder(importlib.abc.MetaPathFinder):
    """Finds ``workflows`` and ``workflows.X`` as the tickwork modules of the same name."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        real = target_name(fullname)
        if real is None:
            return None
        try:
            module = importlib.import_module(real)
        except ModuleNotFoundError as exc:
            if exc.name != real:
                raise  # a genuine missing dependency inside tickwork: let it surface
            return None
        is_package = hasattr(module, "__path__")
        spec = importlib.util.spec_from_loader(
            fullname, _AliasLoader(module), is_package=is_package
        )
        if spec is not None and is_package:
            spec.submodule_search_locations = list(module.__path__)
        return spec


def install() -> None:
    """Put the alias finder first on ``sys.meta_path`` (idempotent)."""
    if not any(isinstance(finder, WorkflowsAliasFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, WorkflowsAliasFinder())


def is_active() -> bool:
    """Whether ``import workflows`` gives tickwork in this process."""
    try:
        import workflows  # type: ignore[import-not-found]
    except ImportError:
        return False
    return workflows is sys.modules.get(TARGET)


def install_pth() -> Path:
    """Write a ``.pth`` file that installs the alias at interpreter start-up."""
    site_packages = Path(sysconfig.get_paths()["purelib"])
    pth = site_packages / PTH_NAME
    here = Path(__file__).resolve().parent
    # A .pth line naming a directory adds it to sys.path; a line starting with "import"
    # is executed.  Both run at every start-up of this environment's interpreter.
    pth.write_text(f"{here}\nimport tickwork_workflows_alias; tickwork_workflows_alias.install()\n")
    return pth


if __name__ == "__main__":
    if sys.argv[1:] != ["--install-pth"]:
        sys.exit("usage: python tickwork_workflows_alias.py --install-pth")
    print(f"wrote {install_pth()}")
