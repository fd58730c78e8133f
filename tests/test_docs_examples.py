"""Every Python example in the docs, the README and ``examples/`` runs and does what it says.

Each fenced ``python`` block of ``docs/**/*.md`` and ``README.md`` is a complete program.
A block is executed as the code of a fresh module (registered in ``sys.modules`` under a
unique name while it runs, so annotations and pydantic models resolve as in a real file).
Its ``if __name__ == "__main__":`` guard therefore does not fire; instead, a block that
defines ``async def main()`` has ``main`` run here with ``anyio.run`` under asyncio **and**
trio, so the docs cannot drift into backend-specific code. Tracebacks point at the line of
the Markdown file.

A block whose first line is ``# notest`` is skipped (use it for deliberate fragments).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import types
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

import tickwork

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.py"

BACKENDS = ("asyncio", "trio")
NOTEST_MARKER = "# notest"
# An example that runs longer than this is stuck; fail it instead of hanging the suite.
EXAMPLE_DEADLINE_SECONDS = 60.0

_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*)$")

RUNTIME_MISSING = not all(hasattr(tickwork, name) for name in ("Workflow", "Context", "step"))
needs_runtime = pytest.mark.skipif(
    RUNTIME_MISSING,
    reason="tickwork.Workflow/Context/step are not importable yet (the runtime has not landed)",
)


@dataclass(frozen=True)
class CodeBlock:
    """One fenced ``python`` block of a Markdown file."""

    path: Path
    index: int  # position among the file's python blocks, from 0
    first_line: int  # 1-based line number of the block's first code line
    source: str

    @property
    def label(self) -> str:
        return f"{self.path.relative_to(ROOT).as_posix()}#{self.index}"

    @property
    def module_name(self) -> str:
        stem = re.sub(r"\W", "_", self.path.relative_to(ROOT).with_suffix("").as_posix())
        return f"_docs_example_{stem}_{self.index}"

    @property
    def is_notest(self) -> bool:
        lines = self.source.lstrip("\n").splitlines()
        return bool(lines) and lines[0].strip() == NOTEST_MARKER

    def compile(self) -> types.CodeType:
        # Leading blank lines make line numbers in tracebacks match the Markdown file.
        padded = "\n" * (self.first_line - 1) + self.source
        return compile(padded, str(self.path), "exec", dont_inherit=True)

    def defines_async_main(self) -> bool:
        tree = ast.parse(self.source)
        return any(
            isinstance(node, ast.AsyncFunctionDef) and node.name == "main" for node in tree.body
        )


def extract_python_blocks(path: Path) -> list[CodeBlock]:
    """The fenced blocks whose info string starts with ``python``, in file order.

    Handles backtick and tilde fences, longer closing fences and indented blocks (inside
    list items; the fence's indentation is removed from every line).
    """
    blocks: list[CodeBlock] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE_OPEN.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        words = opening["info"].split()
        language = words[0].lstrip("{.").rstrip("}") if words else ""
        body: list[str] = []
        i += 1
        while i < len(lines):
            stripped = lines[i].strip()
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                break
            line = lines[i]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            i += 1
        start_line = i - len(body) + 1  # 1-based line of the first body line
        i += 1  # past the closing fence
        if language == "python":
            source = "\n".join(body) + "\n"
            blocks.append(CodeBlock(path, len(blocks), start_line, source))
    return blocks


def _documentation_files() -> list[Path]:
    files = sorted((ROOT / "docs").rglob("*.md"))
    readme = ROOT / "README.md"
    if readme.exists():
        files.append(readme)
    return files


ALL_BLOCKS = [block for path in _documentation_files() for block in extract_python_blocks(path)]
TESTED_BLOCKS = [block for block in ALL_BLOCKS if not block.is_notest]


def _run_cases() -> Iterator[object]:
    for block in TESTED_BLOCKS:
        try:
            has_main = block.defines_async_main()
        except SyntaxError:
            has_main = False  # reported by test_doc_example_compiles
        if has_main:
            for backend in BACKENDS:
                yield pytest.param(block, backend, id=f"{block.label}-{backend}")
        else:
            yield pytest.param(block, None, id=f"{block.label}-module")


@pytest.fixture
def fresh_module() -> Iterator[Callable[[CodeBlock], types.ModuleType]]:
    """Execute a block as a new module; the module is unregistered afterwards."""
    registered: list[str] = []

    def load(block: CodeBlock) -> types.ModuleType:
        module = types.ModuleType(block.module_name)
        module.__file__ = str(block.path)
        sys.modules[block.module_name] = module
        registered.append(block.module_name)
        exec(block.compile(), module.__dict__)
        return module

    yield load
    for name in registered:
        sys.modules.pop(name, None)


async def _with_deadline(main: Callable[[], Awaitable[object]]) -> None:
    with anyio.fail_after(EXAMPLE_DEADLINE_SECONDS):
        await main()


def test_docs_have_python_examples() -> None:
    """Guards the extractor: an empty result would make every other test here vacuous."""
    assert (ROOT / "docs" / "getting-started.md").exists()
    labels = {block.path.name for block in TESTED_BLOCKS}
    assert {"index.md", "getting-started.md", "architecture.md"} <= labels
    assert any(block.defines_async_main() for block in TESTED_BLOCKS)


def test_extractor_handles_fence_variants(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n"
        "```python\nx = 1\n```\n"
        "```bash\necho no\n```\n"
        "- item\n\n"
        "    ```python\n    if True:\n        y = 2\n    ```\n"
        "~~~~ python title='t'\n# notest\n```\nstill inside\n~~~~\n",
        encoding="utf-8",
    )
    blocks = extract_python_blocks(page)
    assert [b.source for b in blocks] == [
        "x = 1\n",
        "if True:\n    y = 2\n",
        "# notest\n```\nstill inside\n",
    ]
    assert [b.first_line for b in blocks] == [3, 11, 15]
    assert [b.is_notest for b in blocks] == [False, False, True]


@pytest.mark.parametrize("block", TESTED_BLOCKS, ids=[b.label for b in TESTED_BLOCKS])
def test_doc_example_compiles(block: CodeBlock) -> None:
    block.compile()


@needs_runtime
@pytest.mark.parametrize(("block", "backend"), list(_run_cases()))
def test_doc_example_runs(
    block: CodeBlock,
    backend: str | None,
    fresh_module: Callable[[CodeBlock], types.ModuleType],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # an example that writes files writes them here
    module = fresh_module(block)
    if backend is not None:
        anyio.run(_with_deadline, module.main, backend=backend)


def _quickstart_sentence() -> str:
    """Read ``SENTENCE`` from the example without importing it (it needs the runtime)."""
    tree = ast.parse(QUICKSTART.read_text(encoding="utf-8"))
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "SENTENCE" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    raise AssertionError(f"{QUICKSTART} no longer defines SENTENCE = '...'")


_PROGRESS_LINE = re.compile(
    r"^\[(?P<done>\d+)/(?P<total>\d+)\] task (?P<index>\d+): (\S+) -> (\S+)$"
)


@needs_runtime
@pytest.mark.parametrize("backend", BACKENDS)
def test_quickstart_example(backend: str, tmp_path: Path) -> None:
    """``python examples/quickstart.py`` streams one progress line per task, then the result."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, str(QUICKSTART), "--backend", backend],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    words = _quickstart_sentence().split()
    lines = proc.stdout.splitlines()
    progress = [_PROGRESS_LINE.match(line) for line in lines[:-1]]
    assert all(progress), f"unexpected output:\n{proc.stdout}"
    matches = [m for m in progress if m is not None]
    assert [(int(m["done"]), int(m["total"])) for m in matches] == [
        (k, len(words)) for k in range(1, len(words) + 1)
    ]
    assert sorted(int(m["index"]) for m in matches) == list(range(len(words)))
    for m in matches:
        word, shouted = m.group(4), m.group(5)
        assert word == words[int(m["index"])] and shouted == word.upper()
    assert lines[-1] == "result: " + " ".join(w.upper() for w in words)


def test_docs_build_strict(tmp_path: Path) -> None:
    """``mkdocs build --strict``: no broken links, no missing pages, no bad config."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
