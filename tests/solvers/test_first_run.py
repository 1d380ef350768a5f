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
    code = ("import numpy as np; from taodist import TAOClassifier; rng = np.random.RandomState(0); "
            "X = rng.randn(60, 3); TAOClassifier(max_depth=1, max_iter=1).fit(X, X[:, 0] > 0)")
    subprocess.run([sys.executable, "-c", code], env={**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}, check=True)
    assert _first_run_compiles(tmp_path) == "False"
