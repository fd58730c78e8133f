"""The ``workflows`` -> ``tickwork`` import alias that ``nox -s compat`` installs.

Checked in a child interpreter, so this process's ``sys.meta_path`` is left alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SHIM_DIR = Path(__file__).parent / "shim"
SRC_DIR = Path(__file__).parents[2] / "src"

CHECKS = textwrap.dedent(
    """
    import sys
    import tickwork_workflows_alias as alias

    # The compat session's venv installs the alias at start-up: start without it.
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, alias.WorkflowsAliasFinder)]
    assert not alias.is_active()
    alias.install()
    alias.install()  # idempotent
    assert sum(isinstance(f, alias.WorkflowsAliasFinder) for f in sys.meta_path) == 1
    assert alias.is_active()

    import tickwork
    import tickwork.events
    import workflows
    import workflows.context.state_store
    import workflows.events
    from workflows.runtime.types.results import WaitingForEvent
    from workflows import Event, Context
    from workflows.utils import get_steps_from_class

    assert workflows is tickwork and Event is tickwork.Event
    assert workflows.context.state_store is sys.modules["tickwork.context.state_store"]
    assert workflows.events is tickwork.events is sys.modules["workflows.events"]
    # The modules keep their own names and specs.
    assert tickwork.events.__name__ == tickwork.events.__spec__.name == "tickwork.events"
    assert WaitingForEvent.__module__ == "tickwork.runtime.types.results"
    try:
        import workflows.no_such_module
    except ModuleNotFoundError as exc:
        assert exc.name == "workflows.no_such_module", exc.name
    else:
        raise AssertionError("workflows.no_such_module imported")
    print("ok")
    """
)


def test_alias_shares_tickwork_modules() -> None:
    result = subprocess.run(
        [sys.executable, "-c", CHECKS],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(SHIM_DIR), str(SRC_DIR)])},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
