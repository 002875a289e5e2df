"""Package-level properties: light imports, imports that run one way, and a working console
entry point."""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
from pathlib import Path


def test_pure_parts_import_without_heavy_dependencies():
    code = (
        "import sys, agentfly.estimators, agentfly.modules.losses, agentfly.core.registry;"
        "heavy = [m for m in ('ray', 'vllm', 'lightning', 'transformers', 'wandb') if m in sys.modules];"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_console_entry_point_reports_version():
    out = subprocess.run([sys.executable, "-m", "agentfly.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and "agentfly" in out.stdout


def _modules(root: Path) -> dict[str, Path]:
    """``{dotted module name: its file}`` for every ``.py`` file under the package ``root``."""
    return {".".join(p.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"): p
            for p in root.rglob("*.py")}


def _import_graph(paths: dict[str, Path]) -> dict[str, set[str]]:
    """``{module: the modules of ``paths`` it imports}``: every ``import`` statement counts, at
    the top, inside a function or under ``TYPE_CHECKING``."""
    top = next(iter(paths)).split(".")[0]

    def known(name: str) -> str | None:  # the module a dotted name lives in
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        names: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                names += [base, *(f"{base}.{a.name}" for a in node.names)]
        targets = {known(n) for n in names if n.split(".")[0] == top}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def _a_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle ``[a, b, ..., a]`` of ``graph``, or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_no_import_cycles():
    """No two files import each other, directly or through others; nor do two folders (the
    ``.py`` files directly in a folder are one node, the top-level ``agentfly/*.py`` files
    included). A cycle is named with one import for each of its steps."""
    root = Path(__file__).resolve().parents[1] / "agentfly"
    paths = _modules(root)
    graph = _import_graph(paths)
    cycle = _a_cycle(graph)
    assert cycle is None, "file import cycle: " + " -> ".join(cycle)

    def folder(module: str) -> str:
        return str(paths[module].parent.relative_to(root.parent))

    folders: dict[str, set[str]] = {}
    example: dict[tuple[str, str], str] = {}
    for a, targets in graph.items():
        for b in targets:
            if folder(a) != folder(b):
                folders.setdefault(folder(a), set()).add(folder(b))
                example.setdefault((folder(a), folder(b)), f"{a} imports {b}")
    cycle = _a_cycle(folders)
    assert cycle is None, (
        f"folder import cycle: {' -> '.join(cycle)} "
        f"({'; '.join(example[step] for step in itertools.pairwise(cycle))})"
    )
