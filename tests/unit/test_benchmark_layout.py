"""benchmarks/ keeps one home per helper (issue 56): what several benchmarks share lives in
benchmarks/common, no benchmark reaches into another benchmark's private names, and nothing that
benchmarks/common defines is written again elsewhere. Read from the source with ``ast``: nothing
is imported or run."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
COMMON = BENCHMARKS / "common"


def module_of(path: Path) -> str:
    """``benchmarks/graph/peers.py`` -> ``benchmarks.graph.peers``; a package's ``__init__`` is the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    """Whether ``name`` (dotted) is a module or package of the repository."""
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


SOURCES = {module_of(path): (path, ast.parse(path.read_text(), str(path)))
           for path in sorted(BENCHMARKS.rglob("*.py"))}


def absolute(node: ast.ImportFrom, module: str, path: Path) -> str:
    """The module an ``import from`` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[:len(package) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def reaches(module: str, path: Path, tree: ast.Module) -> list[str]:
    """Every private name of another benchmarks module that ``module`` imports or reads."""
    found = []
    aliases: dict[str, str] = {}  # a local name -> the benchmarks module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = absolute(node, module, path)
            if not source.startswith("benchmarks"):
                continue
            for alias in node.names:
                if is_module(f"{source}.{alias.name}"):
                    aliases[alias.asname or alias.name] = f"{source}.{alias.name}"
                elif source != module and private(alias.name):
                    found.append(f"line {node.lineno}: from {source} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("benchmarks") and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases \
                and aliases[node.value.id] != module and private(node.attr):
            found.append(f"line {node.lineno}: {aliases[node.value.id]}.{node.attr}")
    return found


def common_names() -> dict[str, str]:
    """The public functions, classes and constants of benchmarks/common: name -> its module."""
    names = {}
    for module, (path, tree) in SOURCES.items():
        if not path.is_relative_to(COMMON):
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not private(node.name):
                names[node.name] = module
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    names.update({n.id: module for n in ast.walk(target)
                                  if isinstance(n, ast.Name) and n.id.isupper()})
    return names


def definitions(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, name) of the functions and classes a module defines, at any depth but as methods, and
    of its module-level constants (UPPER_CASE)."""
    found = []

    def visit(node: ast.AST, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if not in_class:
                    found.append((child.lineno, child.name))
                visit(child, isinstance(child, ast.ClassDef))
            else:
                visit(child, in_class)

    visit(tree, False)
    for node in tree.body:
        if isinstance(node, ast.Assign):
            found += [(node.lineno, n.id) for target in node.targets for n in ast.walk(target)
                      if isinstance(n, ast.Name) and n.id.isupper()]
    return found


def test_the_scan_sees_the_benchmarks_and_common():
    assert "benchmarks.throughput" in SOURCES and "benchmarks.peers.spec" in SOURCES
    assert {"percentile", "ratio_interval", "write_csv", "rotate"} <= set(common_names())


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_no_benchmark_uses_another_benchmarks_private_names(module):
    """A helper two benchmarks share is public: in benchmarks/common, or documented in the one
    module that owns it."""
    path, tree = SOURCES[module]
    assert reaches(module, path, tree) == []


@pytest.mark.parametrize("module", sorted(m for m, (p, _) in SOURCES.items() if not p.is_relative_to(COMMON)))
def test_nothing_of_common_is_defined_again(module):
    """``def percentile`` (or ``median``, ``write_csv``, ``ROOT`` ...) outside benchmarks/common is
    a second home: import the one in common."""
    names = common_names()
    again = [f"line {line}: {name} (in {names[name]})" for line, name in definitions(SOURCES[module][1])
             if name in names]
    assert again == []


def test_the_check_catches_a_private_import_and_a_second_percentile():
    tree = ast.parse("from benchmarks.graph.peers import _first\nfrom benchmarks.graph import checkpoint\n"
                     "checkpoint._timeline(1)\ndef percentile(values, q):\n    return 0\n")
    path = BENCHMARKS / "graph" / "executor_loading.py"
    assert len(reaches("benchmarks.graph.executor_loading", path, tree)) == 2
    assert (4, "percentile") in definitions(tree)
