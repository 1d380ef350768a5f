"""The first-run notice: whether numba's cache holds the node solver's compiled code."""

import os
import subprocess
import sys


def _first_run_compiles(cache_dir):
    code = "from taodist.solvers.l1_logistic import first_run_compiles; print(first_run_compiles())"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_an_empty_numba_cache_means_the_first_fit_compiles(tmp_path):
    assert _first_run_compiles(tmp_path) == "True"
    # a fit fills the cache: the next process loads the kernels
    code = ("from sklearn.datasets import load_iris; from taodist import TAOClassifier; "
            "TAOClassifier(max_depth=2, max_iter=2, random_state=0).fit(*load_iris(return_X_y=True))")
    subprocess.run([sys.executable, "-c", code], env={**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}, check=True)
    assert _first_run_compiles(tmp_path) == "False"
