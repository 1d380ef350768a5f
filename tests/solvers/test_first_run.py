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
