"""Developer sessions: ``nox -s tests``, ``nox -s lint``, ``nox -s docs``, ``nox -s bench``,
``nox -s compat``, ``nox -s build``, ``nox -s fleet``.

Sessions use the interpreter that runs nox (no pinned Python version), so they work on a
fresh machine with whatever Python >= 3.10 is installed. Each session gets its own venv
under ``.nox/`` and installs the project with the extra it needs, so nothing depends on
packages installed by hand.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

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
def fleet(session: nox.Session) -> None:
    """The fleet's long fault tests (marked ``fleet_slow``): 30 crash trials with random
    SIGKILLs, a network partition, immediate database restarts, a 1,000-run soak.

    They need PostgreSQL (a missing server fails them): the server ``TW_PG_DSN`` names,
    or else a throwaway cluster started for the session from this machine's server
    binaries (``.ci/postgres.sh``) and stopped after.  The database restart test
    always starts a cluster of its own.  Takes several minutes; arguments after ``--``
    go to pytest.
    """
    session.install("-e", ".[test]")
    pytest = ["python", "-m", "pytest", "-m", "fleet_slow", "-rA", "-s", *session.posargs]
    env = {"TW_REQUIRE_POSTGRES": "1"}
    if os.environ.get("TW_PG_DSN"):
        session.run(*pytest, env=env)
        return
    command = " ".join(shlex.quote(part) for part in pytest)
    script = f"source .ci/postgres.sh && pg_start >/dev/null && trap pg_stop EXIT && {command}"
    session.run("bash", "-c", script, env=env, external=True)


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


@nox.session
def build(session: nox.Session) -> None:
    """Build the sdist and the wheel, ``twine check`` them, and install each in a fresh
    venv that runs ``tests/packaging/smoke.py`` (import, ``py.typed``, license, a
    two-step workflow) from outside the checkout. Not a default session."""
    session.install("build", "twine")
    tmp = Path(session.create_tmp()).resolve()
    dist = tmp / "dist"
    session.run("python", "-c", f"import shutil; shutil.rmtree({str(dist)!r}, True)")
    session.run("python", "-m", "build", "--outdir", str(dist))
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        session.error(f"expected one wheel and one sdist in {dist}, got {wheels + sdists}")
    session.run("twine", "check", "--strict", str(wheels[0]), str(sdists[0]))
    smoke = Path("tests/packaging/smoke.py").resolve()
    for artifact in (wheels[0], sdists[0]):
        venv = tmp / f"venv-{artifact.suffix.lstrip('.')}"
        session.run(sys.executable, "-m", "venv", "--clear", str(venv), external=True)
        python = str(venv / ("Scripts" if sys.platform == "win32" else "bin") / "python")
        session.run(python, "-m", "pip", "install", "-q", "-U", "pip", external=True)
        session.run(python, "-m", "pip", "install", "-q", str(artifact), external=True)
        with session.chdir(tmp):  # not the checkout: import the installed package
            session.run(python, str(smoke), external=True)
