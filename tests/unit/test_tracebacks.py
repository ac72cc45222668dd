"""A user function that fails on a worker shows the user's file, line and source line.

Shipping pickles user code by value (``serialization.dumps_by_value``); the "worker" here is a
fresh interpreter that loads the shipped bytes, calls the function and sends back the
:class:`UserTraceback` it took, as a worker's ``Failed`` report carries it; the test process
formats it as the driver does. No Spark: the worker is a plain subprocess.
"""

from __future__ import annotations

import base64
import importlib.util
import linecache
import pickle
import subprocess
import sys
import textwrap
import types

import pytest

from epochal.plan.execution import ship_module_by_value
from epochal.serialization import dumps_by_value
from epochal.tracebacks import UserFrame, UserTraceback

WORKER = textwrap.dedent("""
    import base64, pickle, sys
    from epochal.tracebacks import UserTraceback
    fn, arg = pickle.loads(base64.b64decode(sys.stdin.read()))
    try:
        fn(arg)
    except Exception as error:  # without this script's own frame, as a worker leaves out epochal's
        error = error.with_traceback(error.__traceback__.tb_next)
        print(base64.b64encode(pickle.dumps(UserTraceback.of(error))).decode())
""")

SCRIPT = '''\
import math


def parse(value):
    return int(value)


def fails_in_helper(value):
    return parse(value) + 1


def returns_lambda():
    return lambda value: 1 / value


def makes_nested():
    def nested(value):
        inner = [math.sqrt(value)]
        return inner
    return nested


def calls_a_closure_made_on_the_worker(value):
    def made_here(v):
        return {}[v]
    return made_here(value)


class Scorer:
    def __call__(self, value):
        return self.score(value)

    def score(self, value):
        raise ValueError(f"no score for {value!r}")
'''


def on_worker(fn, arg) -> UserTraceback:
    """Ship ``fn`` as a deployment does, call it with ``arg`` in another process, return its traceback."""
    ship_module_by_value(fn)
    ship_module_by_value(type(fn))
    blob = base64.b64encode(dumps_by_value((fn, arg))).decode()
    run = subprocess.run([sys.executable, "-c", WORKER], input=blob, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip(), run.stderr
    return pickle.loads(base64.b64decode(run.stdout))


@pytest.fixture
def script(tmp_path, monkeypatch):
    """The user's own script, importable here but not in the worker process (shipped by value)."""
    path = tmp_path / "my_job.py"
    path.write_text(SCRIPT)
    spec = importlib.util.spec_from_file_location("my_job", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "my_job", module)
    spec.loader.exec_module(module)
    return module


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(SCRIPT.splitlines(), 1) if text in line)


def assert_frame(frame: UserFrame, path, name: str, source: str) -> None:
    assert (frame.filename, frame.name, frame.lineno) == (str(path), name, line_of(source))


def test_a_script_function_names_the_script_its_line_and_source(script):
    shown = on_worker(script.fails_in_helper, "seven")
    assert [f.name for f in shown.frames] == ["fails_in_helper", "parse"]
    assert_frame(shown.frames[0], script.__file__, "fails_in_helper", "return parse(value) + 1")
    assert_frame(shown.frames[1], script.__file__, "parse", "return int(value)")
    assert shown.exception == "ValueError: invalid literal for int() with base 10: 'seven'\n"
    text = shown.format()
    assert text == (
        "Traceback (most recent call last):\n"
        f'  File "{script.__file__}", line {line_of("parse(value) + 1")}, in fails_in_helper\n'
        "    return parse(value) + 1\n"
        f'  File "{script.__file__}", line {line_of("int(value)")}, in parse\n'
        "    return int(value)\n"
        "ValueError: invalid literal for int() with base 10: 'seven'\n")
    assert "<dynamic-code>" not in text


def test_lambdas_nested_functions_and_methods_keep_their_file_and_line(script):
    lam = on_worker(script.returns_lambda(), 0)
    assert_frame(lam.frames[-1], script.__file__, "<lambda>", "lambda value: 1 / value")
    nested = on_worker(script.makes_nested(), -1)
    assert_frame(nested.frames[-1], script.__file__, "nested", "inner = [math.sqrt(value)]")
    # a function whose code is a constant of the shipped code, created on the worker
    closure = on_worker(script.calls_a_closure_made_on_the_worker, "k")
    assert [f.name for f in closure.frames] == ["calls_a_closure_made_on_the_worker", "made_here"]
    assert_frame(closure.frames[-1], script.__file__, "made_here", "return {}[v]")
    method = on_worker(script.Scorer(), 3)
    assert [f.name for f in method.frames] == ["__call__", "score"]
    assert_frame(method.frames[-1], script.__file__, "score", 'raise ValueError(f"no score for {value!r}")')
    assert "ValueError: no score for 3" in method.format()


def test_the_driver_fills_source_lines_the_worker_could_not_read(script, tmp_path):
    # on a cluster the executor has no copy of the user's script: the driver reads the line
    moved = UserTraceback((UserFrame(script.__file__, line_of("int(value)"), "parse"),), "ValueError: x\n")
    assert "    return int(value)\n" in moved.format()
    gone = UserTraceback((UserFrame(str(tmp_path / "deleted.py"), 3, "f"),), "ValueError: x\n")
    assert gone.format() == (f'Traceback (most recent call last):\n  File "{tmp_path / "deleted.py"}", line 3, in f\n'
                             "ValueError: x\n")


def notebook_cell(monkeypatch, name: str, source: str) -> types.FunctionType:
    """A function defined in a notebook cell: IPython compiles the cell under a made-up file
    name (no such file exists) and keeps its source in the driver's linecache."""
    monkeypatch.setitem(linecache.cache, name, (len(source), None, source.splitlines(True), name))
    namespace = {"__name__": "__main__"}
    exec(compile(source, name, "exec"), namespace)
    return namespace["total"]


def test_a_notebook_cell_shows_the_cells_source_from_the_driver(monkeypatch):
    cell = "/tmp/ipykernel_4242/2271580735.py"
    fn = notebook_cell(monkeypatch, cell, "def total(value):\n    return sum(value)\n")
    shown = on_worker(fn, 5)
    assert shown.frames == (UserFrame(cell, 2, "total", ""),)  # the worker has no source for it
    text = shown.format()
    assert f'File "{cell}", line 2, in total\n    return sum(value)\n' in text
    # inside IPython the frame is named as IPython names a cell in its own tracebacks
    compiler = types.SimpleNamespace(_filename_map={cell: 7})
    ipython = types.SimpleNamespace(get_ipython=lambda: types.SimpleNamespace(compile=compiler))
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    assert "  Cell In[7], line 2, in total\n    return sum(value)\n" in shown.format()


def test_epochal_frames_are_left_out():
    from epochal.runtime.operators.functions import as_process_function

    def boom(value, ctx):
        raise KeyError(value)

    try:
        as_process_function(boom).process_element(1, None)
    except KeyError as error:
        shown = UserTraceback.of(error)
    assert [f.name for f in shown.frames] == ["test_epochal_frames_are_left_out", "boom"]
