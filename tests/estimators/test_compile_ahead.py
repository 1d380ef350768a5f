"""Compiling ahead on the workers: after it, the fit itself compiles nothing there."""

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.dask

_SCRIPT = textwrap.dedent("""
    import numpy as np
    from distributed import Client, LocalCluster, wait

    from taodist import TAOClassifier
    from taodist.estimators.compile_ahead import compile_ahead


    def record_compiles(dask_worker):
        from numba.core import event

        class Names(event.Listener):
            def on_start(self, ev):
                dask_worker.compiled.append(ev.data["dispatcher"].py_func.__qualname__)

            def on_end(self, ev):
                pass

        dask_worker.compiled = []
        event.register("numba:compile", Names())


    if __name__ == "__main__":
        rng = np.random.default_rng(0)
        X = rng.random((600, 20)).astype(np.float32)
        y = (X[:, 0] + X[:, 1] > 1).astype(int)
        clf = TAOClassifier(max_depth=2, max_iter=2, random_state=0)
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \\
                Client(cluster) as client:
            futures = compile_ahead(client, clf, X.shape[1], dtype=np.float32)
            wait(futures)
            print("first", [f.result() for f in futures])
            client.run(record_compiles)
            clf.fit(X, y, client=client)
            print("compiled in the fit", client.run(lambda dask_worker: dask_worker.compiled))
            print("leaves", clf.tree_.n_leaves())
            print("again", [f.result() for f in compile_ahead(client, clf, X.shape[1], dtype=np.float32)])
""")


def test_workers_compile_ahead_so_the_fit_compiles_nothing(tmp_path):
    script = tmp_path / "compile_ahead.py"
    script.write_text(_SCRIPT)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}  # empty: a first run
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if line.startswith(("first", "again")))
    assert lines["first"] == "[True]"  # the empty cache: the worker compiled
    assert lines["again"] == "[False]"  # the cache now has the kernels: nothing to do
    compiled = [line for line in out.stdout.splitlines() if line.startswith("compiled in the fit")]
    assert compiled and compiled[0].endswith(": []}"), out.stdout
    assert "leaves 1" not in out.stdout  # a tree that TAO optimised, its node solver run on the worker
