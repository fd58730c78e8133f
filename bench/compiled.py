"""Instructions per item with the pure core compiled by mypyc: an experiment, not a build.

    python bench/compiled.py chain 1000 3000 --raw baseline
    python bench/compiled.py --modules core --keep /tmp/tw-core chain 1000 3000
    python bench/compiled.py --src /tmp/tw-core/src fanout_collect 2000 6000

Copies ``src/`` into a temp dir, compiles the chosen modules there with
``python -m mypyc`` (the ``.so`` files land next to their ``.py``, which they shadow;
nothing is written to the worktree), then runs ``bench/instructions.py`` against that
copy.  ``--modules`` picks what to compile (``core``, ``wide`` or, by default, ``full``:
see ``MODULES``).  ``--keep DIR`` keeps the build (``DIR/src``: point ``PYTHONPATH`` at
it to run the tests against the compiled core); ``--src`` reuses a kept build instead
of compiling again (a build takes 2-3 minutes of CPU).  Needs mypy (with mypyc), a C
compiler and valgrind.  The reducer kit's ``fingerprint`` (tests/runtime) cannot read
a compiled record yet: it looks for ``__slots__``, compiled classes have
``__mypyc_attrs__``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import instructions  # noqa: E402

_LOOP = "tickwork/runtime/control_loop/"
_TYPES = "tickwork/runtime/types/"

# The reducer's pure phases and the modules it calls on every tick.
CORE = tuple(
    _LOOP + name
    for name in ("reduce.py", "streams.py", "_tx.py", "_routing.py", "_holding.py", "_waiters.py")
)
# ... plus the plain data they build and read: records, persistent containers, ids.
WIDE = CORE + tuple(
    _TYPES + name
    for name in (
        "commands.py",
        "evolve.py",
        "kinds.py",
        "persistent.py",
        "results.py",
        "slots.py",
        "state.py",
        "step_id.py",
        "ticks.py",
        "waiter_index.py",
    )
)
# ... plus the runner, the step worker and the session (async code; the event stream's
# async generators are refused: "async generators are unimplemented").
FULL = (
    *WIDE,
    _LOOP + "runner.py",
    _LOOP + "_task_pool.py",
    "tickwork/runtime/step_worker.py",
    "tickwork/runtime/step_scope.py",
    "tickwork/runtime/session.py",
)
MODULES = {"core": CORE, "wide": WIDE, "full": FULL}

# Edits the copy needs before mypyc takes it, as (file, old, new): each must still match,
# or the build stops.  The pure source stays as it is: these are part of what landing a
# compiled build would cost.
PATCHES = (
    # mypyc 2.4 crashes (an internal error) on a starred item inside an ``in (...)`` test.
    (
        _LOOP + "_routing.py",
        "if stream in (*st.scope_path, sid)]",
        "if sid == stream or stream in st.scope_path]",
    ),
    # A native dataclass's annotations are looked up in the module's globals, where the
    # builtin exception types are not: the module fails to import (KeyError).
    (
        _TYPES + "results.py",
        "    exception: BaseException\n",
        "    exception: builtins.BaseException\n",
    ),
    (
        _TYPES + "commands.py",
        "    exception: BaseException\n",
        "    exception: builtins.BaseException\n",
    ),
    # A native class does not take its rich comparison from a Python base class:
    # ``EMPTY_MAPPING == {}`` (``Mapping.__eq__``) would turn false.  (It cannot stay a
    # Python class either: its base's ABCMeta conflicts with the compiled module's.)
    (
        _TYPES + "persistent.py",
        "    def __len__(self) -> int:\n        return 0\n",
        "    def __len__(self) -> int:\n        return 0\n\n"
        "    def __eq__(self, other: object) -> bool:\n"
        "        return isinstance(other, Mapping) and not other\n",
    ),
    # A native class cannot be weakly referenced (live runs, the current step scope).
    (
        "tickwork/runtime/session.py",
        "\nclass RunSession:",
        "\n@mypyc_attr(native_class=False)\nclass RunSession:",
    ),
    (
        "tickwork/runtime/step_scope.py",
        "\nclass StepScope:",
        "\n@mypyc_attr(native_class=False)\nclass StepScope:",
    ),
    # mypyc fails to store a module in a native instance's attribute of inferred type
    # (``AttributeError: 'TrioPool' object has no attribute '_trio'`` under trio).
    (_LOOP + "_task_pool.py", "        self._trio = trio\n", "        self._trio: Any = trio\n"),
    # mypy keeps ``self.exit`` narrowed to None across the call that sets it; mypyc
    # trusts the narrowing and raises TypeError ("None object expected") at run time.
    (
        _LOOP + "runner.py",
        "                elif self.exit is PARKED:",
        "                elif cast(Any, self).exit is PARKED:",
    ),
    # The reducer caches per-config values in the frozen config's ``__dict__``, which a
    # native class does not have: keep RunConfig a plain Python class.
    (
        _TYPES + "state.py",
        "@dataclass(frozen=True)\nclass RunConfig:",
        "@mypyc_attr(native_class=False)\n@dataclass(frozen=True)\nclass RunConfig:",
    ),
)
# Imports the patched files then need, put after their ``from __future__`` line.
IMPORTS = {
    _TYPES + "results.py": "import builtins",
    _TYPES + "commands.py": "import builtins",
    _TYPES + "state.py": "from mypy_extensions import mypyc_attr",
    _LOOP + "runner.py": "from typing import cast",
    "tickwork/runtime/session.py": "from mypy_extensions import mypyc_attr",
    "tickwork/runtime/step_scope.py": "from mypy_extensions import mypyc_attr",
}


def patch(src: Path, modules: tuple[str, ...]) -> None:
    """Apply ``PATCHES`` (and their ``IMPORTS``) to the compiled ``modules`` of ``src``."""
    for name, old, new in PATCHES:
        if name not in modules:
            continue
        path = src / name
        text = path.read_text()
        if old not in text:
            raise RuntimeError(f"{name}: the patch for {old!r} no longer applies")
        text = text.replace(old, new)
        if name in IMPORTS and IMPORTS[name] not in text:
            future = "from __future__ import annotations\n"
            text = text.replace(future, f"{future}\n{IMPORTS[name]}\n", 1)
        path.write_text(text)


def build(folder: Path, modules: tuple[str, ...]) -> Path:
    """Copy ``src/`` into ``folder`` and compile ``modules`` there; the copy's path."""
    src = folder / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
    patch(src, modules)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "mypyc", *modules], cwd=src, check=True)
    print(f"compiled {len(modules)} modules in {time.perf_counter() - started:.0f} s")
    return src


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--modules", choices=sorted(MODULES), default="full")
    parser.add_argument("--keep", type=Path, help="build here and keep it")
    parser.add_argument("--src", type=Path, help="a kept build's src/ (no compiling)")
    args, rest = parser.parse_known_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if args.src is not None:
            src = args.src.resolve()
        else:
            folder = args.keep.resolve() if args.keep is not None else Path(tmp)
            folder.mkdir(parents=True, exist_ok=True)
            src = build(folder, MODULES[args.modules])
        if not rest:
            return 0
        # The driver puts the worktree's src/ first on sys.path: point it at the copy.
        instructions._DRIVER = instructions._DRIVER.replace("{src!r}", repr(str(src)))
        return instructions.main(rest)


if __name__ == "__main__":
    raise SystemExit(main())
