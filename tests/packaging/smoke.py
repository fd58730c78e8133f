"""Smoke test of an installed tickwork (``nox -s build`` runs it in a fresh venv).

Run from outside the checkout, so that ``import tickwork`` finds the installed package:
it must import, carry its ``py.typed`` marker and license, and run a two-step workflow
under asyncio (and under trio when trio is installed).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

import tickwork
from tickwork import Event, StartEvent, StopEvent, Workflow, step


class Greeting(Event):
    text: str


class Hello(Workflow):
    @step
    async def greet(self, ev: StartEvent) -> Greeting:
        return Greeting(text=f"hello {ev.name}")

    @step
    async def finish(self, ev: Greeting) -> StopEvent:
        return StopEvent(result=ev.text.upper())


async def main() -> None:
    assert await Hello(timeout=10).run(name="wheel") == "HELLO WHEEL"


def check_installation() -> None:
    package_dir = Path(tickwork.__file__).resolve().parent
    assert "site-packages" in package_dir.parts, f"not the installed copy: {package_dir}"
    assert (package_dir / "py.typed").is_file(), "py.typed is missing from the package"
    distribution = importlib.metadata.distribution("tickwork")
    assert distribution.version == tickwork.__version__
    files = [str(f) for f in distribution.files or ()]
    assert any(f.endswith("LICENSE") for f in files), f"no LICENSE among {files}"
    assert distribution.metadata["License-Expression"] == "MIT"


if __name__ == "__main__":
    check_installation()
    asyncio.run(main())
    if importlib.util.find_spec("trio") is not None:
        import anyio

        anyio.run(main, backend="trio")
    print(f"tickwork {tickwork.__version__} from {Path(tickwork.__file__).parent}: ok")
    sys.exit(0)
