"""The import graph of autoprune/, read from the source (imports inside functions count too):
no cycle, and the engine (the modules that work on any nn.Module) imports nothing above it."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "autoprune"
# the engine: groups, sensitivity and how points are evaluated, allocation, prune, checkpoints,
# measures, distributed helpers, data helpers; it imports no flow, task, profile or CLI module
ENGINE = {"allocate", "attributes", "checkpoint", "data", "distributed", "errors", "groups",
          "masking", "measure", "points", "prefix_cache", "prune", "sensitivity", "store"}


def _name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}``, at any depth of the source."""
    modules = {_name(p, package): p for p in package.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[:len(here) - node.level + 1] + [node.module or ""]
                                if node.level else [node.module or ""]).strip(".")
                found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                          for a in node.names}
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_reader_sees_imports_inside_functions_and_finds_cycles(tmp_path):
    pkg = tmp_path / "autoprune"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import x\n")
    graph = import_graph(pkg)
    assert graph["autoprune.a"] == {"autoprune.sub.b"} and graph["autoprune.sub.b"] == {"autoprune.a"}
    assert find_cycle(graph) == ["autoprune.a", "autoprune.sub.b", "autoprune.a"]
    assert find_cycle({"x": {"y"}, "y": set()}) is None


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_engine_imports_only_the_engine():
    graph = import_graph()
    engine = {f"autoprune.{m}" for m in ENGINE}
    assert engine <= set(graph), sorted(engine - set(graph))
    for module in sorted(engine):
        above = sorted(graph[module] - engine)
        assert not above, f"{module} (engine) imports {above}"


def test_no_control_flow_on_error_text():
    """Callers tell errors apart by class (errors.py), never by matching their message."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "in str(e)" in line and ('"' in line or "'" in line):
                offenders.append(f"{path.name}:{number}: {line.strip()}")
    allowed = ("inline_container", "PytorchStreamWriter")  # torch's full-disk RuntimeError
    assert [o for o in offenders if not any(a in o for a in allowed)] == []
