"""Import directions between epochal's packages (docs/architecture.md, "Import rules").

Every import in src/epochal counts, also those inside functions; imports under
``if TYPE_CHECKING:`` do not (they exist for type checkers only). ``runtime``'s sub-packages are
components (layers) of their own. A worker process must never import driver code: the static
rules say so, and a fresh interpreter that loads each job kind's worker (from the registry,
``epochal.kinds``) checks it for real. Every job kind has the same five modules. Inside
``connectors``, the sub-packages (one per external system) never import each other, and the
modules every connector shares import none of them.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import subprocess
import sys

import pytest

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "epochal"

#: The layers, lowest first: a component (a package, or a top-level module) may import itself
#: and the components of lower layers, never those of its own or a higher layer.
LAYERS: list[tuple[str, set[str]]] = [
    ("leaves", {"errors", "filesystems", "machines", "moved", "processes", "serialization", "tracebacks"}),
    ("clients of external systems", {"postgres_client"}),
    ("messages", {"messages"}),
    ("validation", {"validation"}),
    ("config", {"config"}),
    ("connectors", {"connectors"}),
    ("plan", {"plan"}),
    ("state", {"state"}),
    ("worker host", {"runtime.host"}),
    ("operators", {"runtime.operators"}),
    ("windows", {"runtime.windows"}),
    ("columnar operators", {"runtime.columnar"}),
    ("queryable state protocol", {"runtime.queries"}),
    ("driver", {"control"}),
    ("REST API", {"rest"}),
    ("job kinds", {"dataflow", "cec", "graph"}),
    ("user API", {"api"}),
    ("command line", {"cli"}),
    ("tools and the kind registry", {"testing", "kinds", "daemon", "__main__", "__init__"}),
]
RUNTIME = {"runtime.host", "runtime.operators", "runtime.windows", "runtime.columnar", "runtime.queries"}
#: What runs in a worker process; none of it may import these.
WORKER_SIDE = {"errors", "filesystems", "machines", "postgres_client", "processes", "serialization", "tracebacks",
               "messages",
               "validation", "config",
               "connectors", "plan", "state", *RUNTIME}
DRIVER_SIDE = {"control", "rest", "api", "cli", "testing"}
#: The modules every job kind has (docs/architecture.md, "Job kinds").
KIND_MODULES = ("protocol", "worker_machine", "worker", "coordination", "job")
#: The state backends' sub-packages: the rest of ``state`` is generic and reaches them only
#: through ``epochal.state.registry`` (by name, loaded on first use); none imports another.
STATE_BACKENDS = ("epochal.state.heap", "epochal.state.rocksdb", "epochal.state.postgres")

_LAYER_OF = {component: index for index, (_, members) in enumerate(LAYERS) for component in members}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _component(module: str) -> str:
    """``epochal.runtime.host.shell`` -> ``runtime.host``; ``epochal.dataflow.worker`` -> ``dataflow``;
    ``epochal.config`` -> ``config``; ``epochal`` -> ``__init__``; any ``__main__`` -> ``__main__``."""
    parts = module.split(".")
    if parts[-1] == "__main__":  # an entry point (python -m epochal.graph): above everything
        return "__main__"
    if len(parts) > 2 and parts[1] == "runtime":
        return f"runtime.{parts[2]}"
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


def imports_of(path: pathlib.Path, module: str | None = None, *,
               type_checking: bool = False) -> list[tuple[int, str]]:
    """(line, imported epochal module) for every run-time import in ``path`` (module ``module``);
    with ``type_checking`` also those under ``if TYPE_CHECKING:``."""
    module = module or _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    skipped = set() if type_checking else _type_checking_only(tree)
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
    components = {_component(_module_name(path)) for path in _sources() if _module_name(path) != "epochal.runtime"}
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


def test_nothing_below_the_user_api_imports_it_not_even_for_type_checking():
    """The API builds a JobSpec and hands it to the job kind (epochal.control.jobspec): a kind,
    the driver and everything under them know nothing of ``Environment`` or the streams."""
    above = {component for component, layer in _LAYER_OF.items() if layer >= _LAYER_OF["api"]}
    found = [f"{path.relative_to(SRC.parent)}:{line}: {module}"
             for path in _sources() if _component(_module_name(path)) not in above
             for line, module in imports_of(path, type_checking=True) if _component(module) == "api"]
    assert not found, "modules below the user API import it:\n" + "\n".join(found)


def test_the_driver_imports_no_job_kind_not_even_for_type_checking():
    """The JobMaster, the launcher and HA serve every kind: a kind is handed to them as an object
    (its coordinator, its HaJob), never named."""
    kinds = {"dataflow", "cec", "graph"}
    found = [f"{path.relative_to(SRC.parent)}:{line}: {module}"
             for path in _sources() if _component(_module_name(path)) in {"control", "rest"}
             for line, module in imports_of(path, type_checking=True) if _component(module) in kinds]
    assert not found, "the driver names a job kind:\n" + "\n".join(found)


def test_no_job_kind_imports_another():
    kinds = {"dataflow", "cec", "graph"}
    assert {_LAYER_OF[k] for k in kinds} == {_LAYER_OF["dataflow"]}
    found = [f"{path.relative_to(SRC.parent)}:{line}: {module}"
             for path in _sources() if (kind := _component(_module_name(path))) in kinds
             for line, module in imports_of(path, type_checking=True) if _component(module) in kinds - {kind}]
    assert not found, "a job kind imports another (what kinds share lives in control/):\n" + "\n".join(found)


#: The one import circle allowed: the API builders' own (a DataStream makes KeyedStreams, which
#: make WindowedStreams and DataStreams again; the environment makes DataStreams).
API_BUILDERS = "epochal.api."


def _circles() -> list[list[str]]:
    """Every set of modules that import each other (strongly connected, more than one module),
    counting function-level and type-only imports as the circle finder of docs/architecture.md does."""
    # the package's own __init__ only names what it exports (loaded lazily): no part of a circle
    modules = {_module_name(path): path for path in _sources() if _module_name(path) != "epochal"}
    graph = {name: sorted({m for _, m in imports_of(path, type_checking=True) if m in modules and m != name})
             for name, path in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for name in graph:
        if name not in index:
            visit(name)
    return found


def test_no_import_circles_but_the_api_builders_own():
    """Split by concern, never by size: modules that import each other (even for type checking,
    even inside a function) are one concern in two files, or two concerns tangled."""
    circles = [c for c in _circles() if not all(m.startswith(API_BUILDERS) for m in c)]
    assert not circles, "import circles:\n" + "\n".join(", ".join(c) for c in circles)


def test_the_checker_sees_function_level_imports_and_skips_type_checking_ones(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n    from epochal.control.jobmaster import JobMaster\n"
                     "def f():\n    from epochal.api.environment import Environment\n"
                     "    from epochal import JobClient\n    from epochal import serialization\n"
                     "    from . import tasks\n    from ...state import keyed\n")
    found = imports_of(probe, "epochal.dataflow.dataplane.probe")
    assert found == [(5, "epochal.api.environment"), (6, "epochal.control.client"), (7, "epochal.serialization"),
                     (8, "epochal.dataflow.dataplane.tasks"), (9, "epochal.state.keyed")]
    assert not _allowed("runtime.windows", "api") and not _allowed("runtime.host", "control")
    assert _allowed("runtime.windows", "state") and _allowed("runtime.windows", "runtime.host")
    assert not _allowed("runtime.host", "runtime.operators") and not _allowed("runtime.windows", "dataflow")
    assert not _allowed("plan", "runtime.operators") and not _allowed("config", "runtime.host")
    assert _allowed("state", "plan")
    assert not _allowed("dataflow", "cec") and not _allowed("control", "dataflow") and _allowed("api", "dataflow")
    assert not _allowed("graph", "api") and not _allowed("graph", "dataflow") and _allowed("cli", "graph")
    assert _component("epochal.graph.__main__") == "__main__" and _allowed("__main__", "cli")


def _connector_subpackage(module: str) -> str | None:
    """``epochal.connectors.kafka.reader`` -> ``kafka``; None for a module outside the connector
    sub-packages (``epochal.connectors.base``, one of the modules every connector shares)."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "connectors" and (PACKAGE / "connectors" / parts[2] / "__init__.py").exists():
        return parts[2]
    return None


def _crosses_connectors(importer: str, imported: str) -> bool:
    """Whether ``importer`` (a module of ``epochal.connectors``) may not import ``imported``: the
    connector sub-packages (one per external system) are independent of each other, and the shared
    modules of ``connectors`` are below them all."""
    target = _connector_subpackage(imported)
    return target is not None and target != _connector_subpackage(importer)


def test_no_connector_sub_package_imports_another():
    assert _crosses_connectors("epochal.connectors.delta.source", "epochal.connectors.files.sinks")
    assert _crosses_connectors("epochal.connectors.kafka.sink", "epochal.connectors.postgres")
    assert _crosses_connectors("epochal.connectors.parquet_split", "epochal.connectors.files")
    assert not _crosses_connectors("epochal.connectors.delta.source", "epochal.connectors.parquet_split")
    assert not _crosses_connectors("epochal.connectors.kafka.reader", "epochal.connectors.kafka.partitions")
    assert not _crosses_connectors("epochal.connectors.files.sinks", "epochal.filesystems")
    assert {"files", "kafka", "delta", "postgres"} <= {
        p.parent.name for p in (PACKAGE / "connectors").glob("*/__init__.py")}
    violations = []
    for path in sorted((PACKAGE / "connectors").rglob("*.py")):
        importer = _module_name(path)
        violations += [f"{path.relative_to(SRC.parent)}:{line}: {importer} imports {module}"
                       for line, module in imports_of(path) if _crosses_connectors(importer, module)]
    assert not violations, ("a connector sub-package imports another, or a shared connector module imports a "
                            "sub-package:\n" + "\n".join(violations))


def _state_backend(module: str) -> str | None:
    return next((b for b in STATE_BACKENDS if module == b or module.startswith(b + ".")), None)


def _every_import(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, imported module) for every absolute import of an epochal module in ``path``, those
    under ``if TYPE_CHECKING:`` included (a type-only import ties two modules together too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
            found.append((node.lineno, node.module))
    return [(line, module) for line, module in found if module.split(".")[0] == "epochal"]


def test_generic_state_code_imports_no_backend_and_no_backend_imports_another():
    assert {_module_name(path) for path in (PACKAGE / "state").iterdir() if path.is_dir()} >= set(STATE_BACKENDS)
    violations = []
    for path in sorted((PACKAGE / "state").rglob("*.py")):
        importer = _module_name(path)
        for line, module in _every_import(path):
            imported = _state_backend(module)
            if imported is not None and imported != _state_backend(importer):
                violations.append(f"{path.relative_to(SRC.parent)}:{line}: {importer} imports {module}")
    assert not violations, ("generic state code finds a backend through epochal.state.registry, and a backend "
                            "imports no other backend:\n" + "\n".join(violations))


def test_every_job_kind_is_registered_and_has_the_same_five_modules():
    from epochal import kinds

    packages = {path.parent.name for path in PACKAGE.glob("*/coordination.py")}
    assert set(kinds.JOB_KINDS) == packages, "register each job kind in epochal/kinds.py"
    for kind, body in kinds.JOB_KINDS.items():
        missing = [m for m in KIND_MODULES if not (PACKAGE / kind / f"{m}.py").exists()]
        assert not missing, f"job kind '{kind}' lacks {missing}"
        assert body.__module__ == f"epochal.{kind}.worker"
        coordination = importlib.import_module(f"epochal.{kind}.coordination")
        coordinators = [c for c in vars(coordination).values()
                        if isinstance(c, type) and c.__module__ == coordination.__name__ and hasattr(c, "worker_body")]
        assert [c.worker_body for c in coordinators] == [body], f"{kind}'s coordinator names another worker body"
    assert "epochal.kinds" in importlib.import_module("epochal.daemon").PRELOAD


@pytest.mark.parametrize("entry", [
    # the kind registry: every kind's worker body, what the PySpark daemon preloads
    "import epochal.kinds, epochal.daemon",
    # what a worker unpickles: the fault hook of chaos tests, a deployment's operators and sinks
    "import pickle; from epochal.runtime.host.hooks import Fault, FaultInjector; "
    "pickle.loads(pickle.dumps(FaultInjector.of([Fault('time')])))",
    "import epochal.runtime.operators.base, epochal.runtime.windows.time_windows, epochal.runtime.operators.iteration, "
    "epochal.connectors.memory, epochal.connectors.dataframe_source",
    # every connector sub-package (its sources, splits, sinks and writers)
    "import epochal.connectors.files, epochal.connectors.kafka, epochal.connectors.delta, epochal.connectors.postgres",
    # the built-in graph programs a graph worker unpickles, and what a CEC deployment holds
    "import epochal.graph.algorithms, epochal.cec.plan, epochal.runtime.windows.count_windows",
])
def test_a_worker_process_loads_no_driver_code(entry):
    code = (f"{entry}; import sys; "
            "print(sorted(m for m in sys.modules if m.split('.')[:2] in "
            "(['epochal', 'control'], ['epochal', 'api'], ['epochal', 'testing'])))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=SRC.parent)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]", f"a worker process imported driver code: {run.stdout}"
