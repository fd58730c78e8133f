"""The layers of ``architecture.md`` §2, checked on the source with ``ast``.

Nothing here imports tickwork: every module under ``src/tickwork`` is parsed, its imports
are resolved to module names, and the rules below are asserted on that graph.

**Every import counts**: at module level (including inside ``try``/``if`` and class
bodies), inside functions (a lazy import hides a cycle, it does not remove it), under
``if TYPE_CHECKING:`` (an annotation still couples the two modules) and in the table of
a package's lazily re-exported names (``tickwork._lazy.lazy_exports``: the module each
name comes from is imported on first use).  On that graph:

* there is no import cycle anywhere;
* each module belongs to exactly one layer of :data:`LAYERS`, and imports only from its
  own layer or lower ones;
* the pure core (the reducer and ``streams.py``) keeps its finer rules: no runner, no
  event loop, no clock.

A rule about a file that does not exist yet is skipped with the reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "tickwork"

CONTROL_LOOP = "tickwork.runtime.control_loop"
RUNNER = f"{CONTROL_LOOP}.runner"
REDUCE = f"{CONTROL_LOOP}.reduce"
STREAMS = f"{CONTROL_LOOP}.streams"
# The reducer's phases, split out of reduce.py along its seams; they are reducer code and
# obey the same rules (pure, below the runner, above streams and types).
REDUCER_PHASES = (
    f"{CONTROL_LOOP}._tx",
    f"{CONTROL_LOOP}._holding",
    f"{CONTROL_LOOP}._waiters",
    f"{CONTROL_LOOP}._routing",
)
RUNTIME_TYPES = "tickwork.runtime.types"

# The public leaf modules of the package: plain data and exceptions that import nothing
# above them (``test_foundation_modules_stay_at_the_bottom`` holds them to that), so every
# layer, the pure core included, may use them. ``_serde_fields`` is the private helper
# that ``events`` is built on.
FOUNDATION = ("tickwork.events", "tickwork.errors", "tickwork.collect", "tickwork._serde_fields")

# Libraries whose use means waiting, spawning or reading a clock: none of that belongs in
# the pure reducer (architecture.md §1: time arrives inside ticks).
EFFECTFUL_LIBRARIES = ("anyio", "asyncio", "trio", "time", "threading")

FACADE_EXPORTS = {
    "control_loop",
    "rebuild_state_from_ticks",
    "rebuild_state_from_ticks_stream",
    "replay_ticks_stream",
}


# The layers, lowest first (docs/architecture.md lists them with what lives where).  A
# module belongs to the layer of its longest matching prefix.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "values",
        (
            "tickwork._version",
            "tickwork._deprecation",
            "tickwork._lazy",
            "tickwork._otel",
            "tickwork.retry_policy._adapters",
            "tickwork._serde_fields",
            "tickwork._step_threads",
            "tickwork._event_loop",
            "tickwork.errors",
            "tickwork.types",
            "tickwork.collect",
            "tickwork.retry_policy",
            "tickwork.events",
            RUNTIME_TYPES,
        ),
    ),
    ("serialization", ("tickwork.serde",)),
    ("stores", ("tickwork.stores",)),
    ("core", ("tickwork.runtime",)),
    (
        "user API",
        (
            "tickwork.context",
            "tickwork.handler",
            "tickwork._signature",
            "tickwork.decorators",
            "tickwork.resource",
            "tickwork.resource_checks",
            "tickwork.workflow",
            "tickwork.representation",
        ),
    ),
    (
        "composition",
        (
            PACKAGE,
            "tickwork.journal",
            "tickwork.fleet",
            "tickwork.testing",
            "tickwork.cli",
            "tickwork._cli",
            "tickwork.utils",
        ),
    ),
)

# What the core must never reach (it learns about them through data and protocols).
ABOVE_THE_CORE = (
    "tickwork.context",
    "tickwork.handler",
    "tickwork.workflow",
    "tickwork.decorators",
    "tickwork.representation",
    "tickwork.testing",
    "tickwork.cli",
    "tickwork._cli",
)


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of ``module`` (its longest matching prefix wins)."""
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for position, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[0]
            ):
                best = (len(prefix), position)
    # The root package is a prefix of everything: only the root itself is composition.
    if best is not None and best[0] == len(PACKAGE) and module != PACKAGE:
        return None
    return None if best is None else best[1]


# --------------------------------------------------------------------------------------
# Building the import graph


@dataclass(frozen=True)
class Import:
    """One imported module, as written in ``importer`` at ``line``."""

    importer: str
    target: str
    line: int
    top_level: bool  # executed at import time (not inside a function)
    type_checking: bool  # under ``if TYPE_CHECKING:``

    @property
    def executed(self) -> bool:
        return not self.type_checking

    def __str__(self) -> str:
        return f"{self.importer}:{self.line} imports {self.target}"


@dataclass
class ModuleInfo:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module
    imports: list[Import] = field(default_factory=list)


def module_name_for(path: Path, src: Path) -> tuple[str, bool]:
    """``src/tickwork/a/b.py`` -> ``("tickwork.a.b", False)``; ``__init__.py`` names its package."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def _is_type_checking_test(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _resolve_from(module: ModuleInfo, node: ast.ImportFrom) -> str:
    """The absolute module a ``from X import ...`` statement reads from."""
    if node.level == 0:
        return node.module or ""
    package_parts = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    if node.level > 1:
        package_parts = package_parts[: len(package_parts) - (node.level - 1)]
    parts = [*package_parts, node.module] if node.module else package_parts
    return ".".join(parts)


def _targets(
    module: ModuleInfo, node: ast.Import | ast.ImportFrom, known: set[str]
) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    base = _resolve_from(module, node)
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        # ``from pkg import sub`` imports the submodule; ``from mod import name`` the module.
        yield submodule if submodule in known else base


def _is_lazy_exports_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    return name == "lazy_exports"


def lazy_export_tables(tree: ast.AST) -> Iterator[tuple[ast.Call, dict[str, str]]]:
    """Each ``lazy_exports(__name__, {...})`` call under ``tree`` and its table (name ->
    module).  The table must be a plain dict literal, so that it can be read here."""
    for node in ast.walk(tree):
        if not _is_lazy_exports_call(node):
            continue
        assert isinstance(node, ast.Call)
        literal = next((a for a in node.args if isinstance(a, ast.Dict)), None)
        assert literal is not None, f"line {node.lineno}: lazy_exports needs a dict literal"
        table: dict[str, str] = {}
        for key, value in zip(literal.keys, literal.values, strict=True):
            assert key is not None, f"line {node.lineno}: no ** in a lazy_exports table"
            table[ast.literal_eval(key)] = ast.literal_eval(value)
        yield node, table


def collect_imports(module: ModuleInfo, known: set[str]) -> list[Import]:
    found: list[Import] = []

    def visit(nodes: Iterable[ast.stmt], *, top_level: bool, type_checking: bool) -> None:
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(module, node, known):
                    found.append(Import(module.name, target, node.lineno, top_level, type_checking))
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.Expr)):
                # A lazy re-export imports its module when the name is first read.
                for call, table in lazy_export_tables(node):
                    for target in sorted(set(table.values())):
                        found.append(Import(module.name, target, call.lineno, False, type_checking))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(node.body, top_level=False, type_checking=type_checking)
            elif isinstance(node, ast.If) and _is_type_checking_test(node.test):
                visit(node.body, top_level=top_level, type_checking=True)
                visit(node.orelse, top_level=top_level, type_checking=type_checking)
            else:
                for child_field in ("body", "orelse", "finalbody", "handlers", "cases"):
                    children = getattr(node, child_field, None)
                    if isinstance(children, list):
                        stmts = [c for c in children if isinstance(c, ast.stmt)]
                        # except handlers and match cases hold their statements one level down
                        for c in children:
                            if isinstance(c, (ast.ExceptHandler, ast.match_case)):
                                stmts.extend(c.body)
                        visit(stmts, top_level=top_level, type_checking=type_checking)

    visit(module.tree.body, top_level=True, type_checking=False)
    return found


def load_package(src: Path, package: str = PACKAGE) -> dict[str, ModuleInfo]:
    """Parse every module of ``package`` under ``src`` and resolve its imports."""
    modules: dict[str, ModuleInfo] = {}
    for path in sorted((src / package).rglob("*.py")):
        name, is_package = module_name_for(path, src)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        modules[name] = ModuleInfo(name, path, is_package, tree)
    known = set(modules)
    for module in modules.values():
        module.imports = collect_imports(module, known)
    return modules


def within(name: str, prefix: str) -> bool:
    """``name`` is the module ``prefix`` or lives inside the package ``prefix``."""
    return name == prefix or name.startswith(prefix + ".")


def find_cycles(modules: dict[str, ModuleInfo]) -> list[list[str]]:
    """Each import cycle between package modules, as a closed path.

    Every import counts: lazy ones inside functions and ``TYPE_CHECKING`` ones too.
    """
    graph: dict[str, list[str]] = {
        name: sorted({imp.target for imp in info.imports if imp.target in modules})
        for name, info in modules.items()
    }
    # Tarjan's strongly connected components, iterative to stay clear of recursion limits.
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, child_pos = work.pop()
            if child_pos == 0:
                index[node] = lowlink[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            children = graph[node]
            if child_pos < len(children):
                work.append((node, child_pos + 1))
                child = children[child_pos]
                if child not in index:
                    work.append((child, 0))
                elif child in on_stack:
                    lowlink[node] = min(lowlink[node], index[child])
                continue
            if lowlink[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    components.append(component)
            if work:
                parent = work[-1][0]
                lowlink[parent] = min(lowlink[parent], lowlink[node])
    return [_cycle_path(graph, set(component)) for component in components]


def _cycle_path(graph: dict[str, list[str]], component: set[str]) -> list[str]:
    """One concrete cycle through a strongly connected component, for the error message."""
    start = min(component)
    path = [start]
    seen = {start}
    node = start
    while True:
        nxt = next(c for c in graph[node] if c in component)
        if nxt in seen:
            return [*path[path.index(nxt) :], nxt]
        path.append(nxt)
        seen.add(nxt)
        node = nxt


# --------------------------------------------------------------------------------------
# Rules on the real package


@pytest.fixture(scope="module")
def modules() -> dict[str, ModuleInfo]:
    return load_package(SRC)


def _require(modules: dict[str, ModuleInfo], *names: str) -> None:
    missing = [n for n in names if n not in modules]
    if missing:
        pytest.skip(f"not written yet: {', '.join(missing)}")


def _executed_imports(modules: dict[str, ModuleInfo], importer_prefix: str) -> list[Import]:
    return [
        imp
        for name, info in modules.items()
        if within(name, importer_prefix)
        for imp in info.imports
        if imp.executed
    ]


def _violations(imports: Iterable[Import], *forbidden: str) -> list[str]:
    return [str(imp) for imp in imports if any(within(imp.target, f) for f in forbidden)]


def _outside(imports: Iterable[Import], *allowed: str) -> list[str]:
    """Imports of package modules that are not under any of the ``allowed`` prefixes."""
    return [
        str(imp)
        for imp in imports
        if within(imp.target, PACKAGE) and not any(within(imp.target, a) for a in allowed)
    ]


def test_package_is_found(modules: dict[str, ModuleInfo]) -> None:
    assert PACKAGE in modules, f"no {PACKAGE}/__init__.py under {SRC}"


@pytest.mark.parametrize("reducer_module", [REDUCE, *REDUCER_PHASES])
def test_reduce_imports_only_streams_types_and_foundation(
    modules: dict[str, ModuleInfo], reducer_module: str
) -> None:
    _require(modules, reducer_module)
    imports = _executed_imports(modules, reducer_module)
    assert not _violations(imports, RUNNER), "the reducer must never import the runner"
    # The facade package re-exports the runner, so importing it would pull the runner in.
    assert not [str(i) for i in imports if i.target == CONTROL_LOOP], (
        "the reducer must import its siblings directly, not through the control_loop facade"
    )
    assert not _outside(imports, STREAMS, *REDUCER_PHASES, RUNTIME_TYPES, *FOUNDATION)


def test_streams_imports_only_types_and_foundation(modules: dict[str, ModuleInfo]) -> None:
    _require(modules, STREAMS)
    imports = _executed_imports(modules, STREAMS)
    assert not _violations(imports, REDUCE, *REDUCER_PHASES, RUNNER), (
        "streams.py returns releases as data; reduce.py dispatches them (architecture.md §1)"
    )
    assert not _outside(imports, RUNTIME_TYPES, *FOUNDATION)


@pytest.mark.parametrize("pure_module", [REDUCE, *REDUCER_PHASES, STREAMS])
def test_pure_core_does_no_io_no_waiting_no_clock(
    modules: dict[str, ModuleInfo], pure_module: str
) -> None:
    _require(modules, pure_module)
    assert not _violations(_executed_imports(modules, pure_module), *EFFECTFUL_LIBRARIES), (
        "the reducer is pure: time arrives inside ticks; awaiting and clocks are the runner's"
    )


def test_every_module_belongs_to_one_layer(modules: dict[str, ModuleInfo]) -> None:
    unassigned = sorted(name for name in modules if layer_of(name) is None)
    assert not unassigned, (
        "modules with no layer (add them to LAYERS and to docs/architecture.md): "
        + ", ".join(unassigned)
    )


def test_imports_point_down_the_layers(modules: dict[str, ModuleInfo]) -> None:
    """A module imports only from its own layer or lower ones (every import counts)."""
    upward = []
    for name, info in modules.items():
        own = layer_of(name)
        for imp in info.imports:
            target = layer_of(imp.target) if imp.target in modules else None
            if own is not None and target is not None and target > own:
                upward.append(f"{imp} ({LAYERS[own][0]} -> {LAYERS[target][0]})")
    assert not upward, "imports that point up:\n" + "\n".join(upward)


def test_the_core_knows_nothing_above_it(modules: dict[str, ModuleInfo]) -> None:
    """architecture.md §2: what the runtime needs from above comes as data or protocols."""
    imports = [
        imp
        for name, info in modules.items()
        if within(name, "tickwork.runtime")
        for imp in info.imports
    ]
    bad = _violations(imports, *ABOVE_THE_CORE)
    bad += [str(i) for i in imports if i.target == PACKAGE]
    assert not bad


def test_nothing_imports_the_package_root(modules: dict[str, ModuleInfo]) -> None:
    """The root re-exports the user API; importing it from inside reaches the top."""
    bad = [str(i) for info in modules.values() for i in info.imports if i.target == PACKAGE]
    assert not bad


@pytest.mark.parametrize("helpers", ["tickwork.utils", "tickwork.context.utils"])
def test_compatibility_helpers_are_imported_by_nothing(
    modules: dict[str, ModuleInfo], helpers: str
) -> None:
    """The compatibility helpers sit on top: they are for user code, never for tickwork's."""
    _require(modules, helpers)
    bad = [
        str(imp)
        for name, info in modules.items()
        if name != helpers
        for imp in info.imports
        if imp.target == helpers
    ]
    assert not bad


def test_decorators_do_not_import_context_or_workflow(modules: dict[str, ModuleInfo]) -> None:
    _require(modules, "tickwork.decorators")
    imports = _executed_imports(modules, "tickwork.decorators")
    assert not _violations(imports, "tickwork.context", "tickwork.workflow"), (
        "decorators sit below Workflow and Context; detect Context parameters by class name "
        "(api.md §5.5.2) and import Workflow only under TYPE_CHECKING"
    )


def test_runner_is_imported_only_from_above(modules: dict[str, ModuleInfo]) -> None:
    _require(modules, RUNNER)
    lower = [m for m in modules if within(m, RUNTIME_TYPES) or m in (REDUCE, STREAMS)]
    lower += [m for m in FOUNDATION if m in modules]
    bad = [str(i) for m in lower for i in modules[m].imports if i.executed and i.target == RUNNER]
    assert not bad


def test_no_import_cycles(modules: dict[str, ModuleInfo]) -> None:
    cycles = find_cycles(modules)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def _names_bound_at_module_level(tree: ast.Module) -> set[str]:
    """Names a module binds at its top level, counting the ``if TYPE_CHECKING:`` imports
    of a module that re-exports them lazily (PEP 562); ``test_public_paths.py`` checks
    that they resolve at run time."""
    bound: set[str] = set()
    nodes = list(tree.body)
    for node in nodes:
        if isinstance(node, ast.If) and _is_type_checking_test(node.test):
            nodes.extend(node.body)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            bound.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            bound.add(node.target.id)
    return bound


def _declared_all(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            value = node.value
            assert isinstance(value, (ast.List, ast.Tuple)), "__all__ must be a literal list"
            return [ast.literal_eval(elt) for elt in value.elts]
    return None


def _type_checking_imports(tree: ast.Module) -> set[tuple[str, str]]:
    """``(module, bound name)`` of each ``from module import ...`` under a top-level
    ``if TYPE_CHECKING:``."""
    found: set[tuple[str, str]] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and _is_type_checking_test(node.test):
            for child in node.body:
                if isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                    found.update((child.module, a.asname or a.name) for a in child.names)
    return found


def test_lazily_exported_names_are_visible_to_type_checkers(
    modules: dict[str, ModuleInfo],
) -> None:
    """A name re-exported on first use (PEP 562) is imported under ``TYPE_CHECKING`` from
    the module its table names, so that mypy and IDEs see it where users import it."""
    tables = [
        (name, table)
        for name, info in modules.items()
        for _call, table in lazy_export_tables(info.tree)
    ]
    assert tables, "no lazy_exports table found: did the helper move?"
    missing = [
        f"{name}: {export} from {source}"
        for name, table in tables
        for export, source in table.items()
        if (source, export) not in _type_checking_imports(modules[name].tree)
    ]
    assert not missing, "lazy names without an `if TYPE_CHECKING:` import:\n" + "\n".join(missing)
    unknown = [
        f"{name}: {source}" for name, t in tables for source in t.values() if source not in modules
    ]
    assert not unknown, f"lazy_exports tables name modules that do not exist: {unknown}"


def test_control_loop_facade_exports_exactly_the_four_names(
    modules: dict[str, ModuleInfo],
) -> None:
    _require(modules, CONTROL_LOOP)
    tree = modules[CONTROL_LOOP].tree
    exported = _declared_all(tree)
    if exported is None:
        is_placeholder = all(
            isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in tree.body
        )
        if is_placeholder:
            pytest.skip(f"{CONTROL_LOOP} is still a placeholder without __all__")
        pytest.fail(f"{CONTROL_LOOP}/__init__.py defines no __all__ (api.md §2)")
    assert sorted(exported) == sorted(FACADE_EXPORTS), "api.md §2: exactly these four names"
    assert len(exported) == len(set(exported)), "duplicate names in __all__"
    unbound = set(exported) - _names_bound_at_module_level(tree)
    assert not unbound, f"__all__ names not defined or imported in the facade: {unbound}"


# --------------------------------------------------------------------------------------
# The checker itself, on a small synthetic package (runs whatever state src/ is in)


def _write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_checker_resolves_imports_of_every_kind(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.a import thing\n",
            "pkg/a.py": (
                "from __future__ import annotations\n"
                "import os.path\n"
                "from typing import TYPE_CHECKING\n"
                "from . import b\n"
                "from .sub import c as see\n"
                "from .sub.c import value\n"
                "if TYPE_CHECKING:\n"
                "    from pkg.sub import d\n"
                "else:\n"
                "    import pkg.sub.d\n"
                "try:\n"
                "    import anyio\n"
                "except ImportError:\n"
                "    import trio\n"
                "def later():\n"
                "    from ..outside import x\n"
                "class K:\n"
                "    import time\n"
                "thing = 1\n"
            ),
            "pkg/b.py": "",
            "pkg/sub/__init__.py": "from .c import value\n",
            "pkg/sub/c.py": "value = 1\n",
            "pkg/sub/d.py": "import typing as t\nif t.TYPE_CHECKING:\n    import pkg.a\n",
        },
    )
    mods = load_package(tmp_path, "pkg")
    seen = {(i.target, i.top_level, i.type_checking) for i in mods["pkg.a"].imports}
    assert ("os.path", True, False) in seen
    assert ("pkg.b", True, False) in seen
    assert ("pkg.sub.c", True, False) in seen
    assert ("pkg.sub.d", True, True) in seen  # TYPE_CHECKING branch
    assert ("pkg.sub.d", True, False) in seen  # its else branch runs
    assert ("anyio", True, False) in seen and ("trio", True, False) in seen
    assert ("outside", False, False) in seen  # relative import beyond pkg, inside a function
    assert ("time", True, False) in seen  # class bodies run at import time
    assert {i.target for i in mods["pkg.sub"].imports} == {"pkg.sub.c"}
    assert {i.target for i in mods["pkg"].imports} == {"pkg.a"}
    assert [i.type_checking for i in mods["pkg.sub.d"].imports] == [False, True]
    # pkg.sub.d -> pkg.a is under TYPE_CHECKING only, and still a cycle.
    assert find_cycles(mods) == [["pkg.a", "pkg.sub.d", "pkg.a"]]


def test_checker_reports_cycles_through_lazy_imports_too(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": "import pkg.c\n",
            "pkg/c.py": "from . import a\n",
            "pkg/d.py": "def f():\n    import pkg.e\n",
            "pkg/e.py": "import pkg.d\n",
            "pkg/f.py": "import pkg.f\n",
        },
    )
    cycles = find_cycles(load_package(tmp_path, "pkg"))
    assert sorted(cycles) == [
        ["pkg.a", "pkg.b", "pkg.c", "pkg.a"],
        ["pkg.d", "pkg.e", "pkg.d"],
        ["pkg.f", "pkg.f"],
    ]


def test_checker_counts_lazily_exported_names_as_imports(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": (
                "from pkg._lazy import lazy_exports\n"
                "__getattr__, __dir__ = lazy_exports(__name__, {'Thing': 'pkg.a'})\n"
            ),
            "pkg/_lazy.py": "def lazy_exports(package, table): ...\n",
            "pkg/a.py": "import pkg.b\nThing = 1\n",
            "pkg/b.py": "from pkg._lazy import lazy_exports\n"
            "__getattr__, __dir__ = lazy_exports(__name__, {'Thing': 'pkg.a'})\n",
        },
    )
    mods = load_package(tmp_path, "pkg")
    seen = {(i.target, i.top_level, i.type_checking) for i in mods["pkg"].imports}
    assert seen == {("pkg._lazy", True, False), ("pkg.a", False, False)}
    # pkg.b -> pkg.a only through its lazy table, and still a cycle.
    assert find_cycles(mods) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_layer_of_picks_the_longest_prefix() -> None:
    assert LAYERS[layer_of("tickwork.runtime.types.state") or 0][0] == "values"
    assert LAYERS[layer_of("tickwork.runtime.session") or 0][0] == "core"
    assert LAYERS[layer_of(PACKAGE) or 0][0] == "composition"
    assert layer_of("tickwork.something_new") is None
