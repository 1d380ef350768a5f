"""The first-run notice and ``taodist compile``: whether numba's cache holds the compiled kernels."""

import os
import subprocess
import sys

_FIT_AND_LIST_COMPILES = """
from numba.core import event

compiled = []


class Names(event.Listener):
    def on_start(self, ev):
        compiled.append(ev.data["dispatcher"].py_func.__qualname__)

    def on_end(self, ev):
        pass


event.register("numba:compile", Names())
from sklearn.datasets import load_iris
from taodist import TAOClassifier

X, y = load_iris(return_X_y=True)
TAOClassifier(random_state=0).fit(X, y).predict(X)
print(compiled)
"""


def _run(args, cache_dir):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)}
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, check=True,
                          timeout=900).stdout.strip()


def _first_run_compiles(cache_dir):
    return _run(["-c", "from taodist.solvers.l1_logistic import first_run_compiles; print(first_run_compiles())"],
                cache_dir)


def test_taodist_compile_fills_the_cache_so_a_first_fit_compiles_nothing(tmp_path):
    assert _first_run_compiles(tmp_path) == "True"  # an empty cache: the first fit would compile
    out = _run(["-m", "taodist.cli", "compile"], tmp_path)
    assert f"numba's cache: {tmp_path}" in out
    assert _first_run_compiles(tmp_path) == "False"
    # a new process's default fit (and its prediction) loads every kernel it runs from the cache
    assert _run(["-c", _FIT_AND_LIST_COMPILES], tmp_path) == "[]"


_TINY_FIT_KERNELS = """
from numba.core import event

compiled = []


class Kernels(event.Listener):
    def on_start(self, ev):
        d = ev.data["dispatcher"]
        compiled.append((d.py_func.__qualname__, bool(d.targetoptions.get("parallel")), str(ev.data["args"])))

    def on_end(self, ev):
        pass


event.register("numba:compile", Kernels())
from sklearn.datasets import load_iris
from taodist import TAOClassifier

X, y = load_iris(return_X_y=True)
TAOClassifier(random_state=0).fit(X, y).predict(X)
print(repr(compiled))
"""


def test_a_first_tiny_dense_fit_compiles_no_parallel_or_sparse_kernel(tmp_path):
    # What a first run compiles from an empty cache: a parallel kernel takes several times as long to
    # compile as a serial one, and a tiny dense fit runs none (no node spans two blocks of rows, the
    # prediction has few rows), nor any kernel for CSR rows.
    compiled = eval(_run(["-c", _TINY_FIT_KERNELS], tmp_path))
    names = {name for name, _, _ in compiled}
    assert "_solve_nodes" in names and "_route_serial" in names  # it did compile (the cache was empty)
    assert [name for name, parallel, _ in compiled if parallel] == []
    assert [name for name, _, args in compiled if "csr" in name.lower() or "CSRRows" in args] == []
    assert "_solve_node" not in names  # inlined into _solve_nodes, not compiled on its own
