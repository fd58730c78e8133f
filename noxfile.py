"""Developer sessions: ``nox -s tests``, ``nox -s lint``, ``nox -s docs``, ``nox -s bench``,
``nox -s compat``.

Sessions use the interpreter that runs nox (no pinned Python version), so they work on a
fresh machine with whatever Python >= 3.10 is installed. Each session gets its own venv
under ``.nox/`` and installs the project with the extra it needs, so nothing depends on
packages installed by hand.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["tests", "lint", "docs"]

# Everything ruff checks. ``examples`` and this file are included so that the code users
# copy first is held to the same bar as the package.
LINT_PATHS = ("src", "tests", "bench", "examples", "noxfile.py")


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite; extra arguments go to pytest (``nox -s tests -- -k docs``)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint + format check) on the code, mypy in strict mode on the package."""
    session.install("-e", ".[lint]")
    session.run("ruff", "check", *LINT_PATHS)
    session.run("ruff", "format", "--check", *LINT_PATHS)
    session.run("mypy", "--strict", "src/tickwork")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site; any warning (broken link, missing page) fails."""
    session.install("-e", ".[docs]")
    # No posargs here: `nox -s docs bench -- --quick` passes them to every session listed.
    # NO_MKDOCS_2_WARNING silences a release banner of mkdocs-material, not a build warning.
    session.run("mkdocs", "build", "--strict", env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session
def bench(session: nox.Session) -> None:
    """Run the benchmark suite (``nox -s bench -- --quick --only chain``)."""
    session.install("-e", ".[bench]")
    session.run("python", "-m", "bench", *session.posargs)


# The llama-index-core line the compat session checks tickwork against.
LLAMA_INDEX_CORE = "llama-index-core>=0.14,<0.15"


@nox.session
def compat(session: nox.Session) -> None:
    """llama-index-core's agents on tickwork, through the import name ``workflows``.

    Not a default session: it downloads llama-index-core and its dependencies. It installs
    llama-index-core, removes the llama-index-workflows package it pulls in, aliases
    ``workflows`` to ``tickwork`` for every process of the venv (a ``.pth`` file installs
    ``tests/compat/shim``'s import finder at start-up) and runs ``tests/compat``.
    """
    session.install("-e", ".", "pytest")
    session.install(LLAMA_INDEX_CORE)
    # Installed as a dependency of llama-index-core; the point is to run without it.
    session.run("python", "-m", "pip", "uninstall", "--yes", "llama-index-workflows")
    session.run("python", "tests/compat/shim/tickwork_workflows_alias.py", "--install-pth")
    session.run("python", "-m", "pytest", "tests/compat", *session.posargs)
