"""Import directions between epochal's packages (docs/architecture.md, "Import rules").

Every import in src/epochal counts, also those inside functions; imports under
``if TYPE_CHECKING:`` do not (they exist for type checkers only). A worker process must never
import driver code: the static rules say so, and a fresh interpreter that loads a worker checks
it for real.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "epochal"

#: The layers, lowest first: a component (a package, or a top-level module) may import itself
#: and the components of lower layers, never those of its own or a higher layer.
LAYERS: list[tuple[str, set[str]]] = [
    ("leaves", {"errors", "serialization", "tracebacks"}),
    ("messages", {"messages"}),
    ("validation", {"validation"}),
    ("config", {"config"}),
    ("connectors", {"connectors"}),
    ("plan", {"plan"}),
    ("state", {"state"}),
    ("worker", {"runtime"}),
    ("driver", {"control"}),
    ("user API", {"api"}),
    ("graph jobs", {"graph"}),
    ("continuous eventual checkpointing", {"cec"}),
    ("tools", {"testing", "__main__", "__init__"}),
]
#: What runs in a worker process; none of it may import these.
WORKER_SIDE = {"errors", "serialization", "tracebacks", "messages", "validation", "config", "connectors", "plan",
               "state", "runtime"}
DRIVER_SIDE = {"control", "api", "testing"}

_LAYER_OF = {component: index for index, (_, members) in enumerate(LAYERS) for component in members}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _component(module: str) -> str:
    """``epochal.runtime.worker`` -> ``runtime``; ``epochal.config`` -> ``config``; ``epochal`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _exports() -> dict[str, str]:
    """Names the package's lazy ``__init__`` exports -> the module defining each."""
    import epochal

    return dict(epochal._EXPORTS)


def _type_checking_only(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
            if name == "TYPE_CHECKING":
                skipped.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return skipped


def imports_of(path: pathlib.Path, module: str | None = None) -> list[tuple[int, str]]:
    """(line, imported epochal module) for every run-time import in ``path`` (module ``module``)."""
    module = module or _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    skipped = _type_checking_only(tree)
    exports = _exports()
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "epochal"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x, from ..state import y
                parent = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            if base.split(".")[0] != "epochal":
                continue
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if (PACKAGE.parent / (target.replace(".", "/") + ".py")).exists() or \
                        (PACKAGE.parent / target.replace(".", "/")).is_dir():
                    found.append((node.lineno, target))  # a module: from epochal import serialization
                elif base == "epochal" and alias.name in exports:
                    found.append((node.lineno, exports[alias.name]))  # a lazily exported name
                else:
                    found.append((node.lineno, base))
    return list(dict.fromkeys(found))  # once per line and module


def _allowed(importer: str, imported: str) -> bool:
    if importer == imported or imported == "__init__":  # ``import epochal`` alone loads nothing
        return True
    return _LAYER_OF[imported] < _LAYER_OF[importer]


def _sources() -> list[pathlib.Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_component_has_a_layer():
    components = {_component(_module_name(path)) for path in _sources()}
    assert components - set(_LAYER_OF) == set(), "put each new package or top-level module into LAYERS"
    assert WORKER_SIDE | DRIVER_SIDE <= set(_LAYER_OF)
    assert all(_LAYER_OF[w] < _LAYER_OF[d] for w in WORKER_SIDE for d in DRIVER_SIDE)


def test_imports_follow_the_layers():
    violations = []
    for path in _sources():
        importer = _component(_module_name(path))
        for line, module in imports_of(path):
            imported = _component(module)
            if not _allowed(importer, imported):
                violations.append(f"{path.relative_to(SRC.parent)}:{line}: {_module_name(path)} imports {module} "
                                  f"({importer}, layer '{LAYERS[_LAYER_OF[importer]][0]}', may not import "
                                  f"{imported}, layer '{LAYERS[_LAYER_OF[imported]][0]}')")
    assert not violations, "imports against docs/architecture.md's import rules:\n" + "\n".join(violations)


def test_the_checker_sees_function_level_imports_and_skips_type_checking_ones(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n    from epochal.control.jobmaster import JobMaster\n"
                     "def f():\n    from epochal.api.environment import Environment\n"
                     "    from epochal import JobClient\n    from epochal import serialization\n"
                     "    from . import tasks\n    from ..state import keyed\n")
    found = imports_of(probe, "epochal.runtime.probe")
    assert found == [(5, "epochal.api.environment"), (6, "epochal.control.client"), (7, "epochal.serialization"),
                     (8, "epochal.runtime.tasks"), (9, "epochal.state.keyed")]
    assert not _allowed("runtime", "api") and not _allowed("runtime", "control") and _allowed("runtime", "state")
    assert not _allowed("plan", "runtime") and not _allowed("config", "runtime") and _allowed("state", "plan")


@pytest.mark.parametrize("entry", [
    "import epochal.runtime.worker",
    # what a worker unpickles: the fault hook of chaos tests, a deployment's operators and sinks
    "import pickle; from epochal.runtime.hooks import Fault, FaultInjector; "
    "pickle.loads(pickle.dumps(FaultInjector.of([Fault('time')])))",
    "import epochal.runtime.operators, epochal.runtime.windows, epochal.runtime.iteration, "
    "epochal.connectors.memory, epochal.connectors.files, epochal.connectors.transactional",
    # a graph job's worker body, its engine and the built-in programs it unpickles
    "from epochal.runtime.kinds import worker_body; worker_body('graph'); import epochal.graph.algorithms",
    # a CEC job's worker body and what its deployment holds
    "from epochal.runtime.kinds import worker_body; worker_body('cec'); import epochal.cec.plan, "
    "epochal.runtime.count_windows",
])
def test_a_worker_process_loads_no_driver_code(entry):
    code = (f"{entry}; import sys; "
            "print(sorted(m for m in sys.modules if m.split('.')[:2] in "
            "(['epochal', 'control'], ['epochal', 'api'], ['epochal', 'testing'])))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=SRC.parent)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]", f"a worker process imported driver code: {run.stdout}"
