"""A user's first run against a second one: each command from an empty numba cache (cold), then again (warm).

Commands, each in a new process with its own ``NUMBA_CACHE_DIR`` (emptied
before the cold run):

* ``tiny``: import taodist and fit ``TAOClassifier()`` on iris, then predict;
* ``demo``: ``taodist demo`` (the README's main job, on the embedded LocalCluster);
* ``compile``: the tiny fit after ``taodist compile`` (what the Docker image
  runs at build time; not timed), as in a container started from that image.

Prints each command's cold and warm wall time and their ratio. Rounds are
interleaved (cold, warm, next command) so that a change of the machine's load
falls on both alike. Run from the repository root::

    python bench/bench_first_run.py --rounds 2
    python bench/bench_first_run.py --commands tiny compile --rounds 3
    python bench/bench_first_run.py --profile     # where a cold tiny fit's seconds go

``--profile`` runs the tiny fit once from an empty cache with a listener on
numba's compile events and prints the import and fit seconds and each
kernel's own compile seconds (its callees' compiles subtracted), grouped by
the module that defines it.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

TINY = ("import time; t = time.perf_counter(); "
        "from sklearn.datasets import load_iris; from taodist import TAOClassifier; "
        "X, y = load_iris(return_X_y=True); TAOClassifier(random_state=0).fit(X, y).predict(X); "
        "print(f'tiny fit {time.perf_counter() - t:.2f} s')")

#: name -> (untimed set-up commands run first into the empty cache, the timed command)
COMMANDS = {
    "tiny": ([], [sys.executable, "-c", TINY]),
    "demo": ([], [sys.executable, "-m", "taodist.cli", "demo"]),
    "compile": ([[sys.executable, "-m", "taodist.cli", "compile"]], [sys.executable, "-c", TINY]),
}


PROFILE = """
import collections, time
t0 = time.perf_counter()
from numba.core import event
events = event.RecordingListener()
event.register("numba:compile", events)
from sklearn.datasets import load_iris
t1 = time.perf_counter()
from taodist import TAOClassifier
t2 = time.perf_counter()
X, y = load_iris(return_X_y=True)
TAOClassifier(random_state=0).fit(X, y).predict(X)
t3 = time.perf_counter()
own, stack = collections.Counter(), []
for stamp, ev in events.buffer:  # nested compiles: a kernel's own time is its span less its callees'
    if ev.is_start:
        stack.append([ev.data["dispatcher"].py_func, stamp, 0.0])
        continue
    func, start, callees = stack.pop()
    own[(func.__module__, func.__qualname__)] += stamp - start - callees
    if stack:
        stack[-1][2] += stamp - start
print(f"import scikit-learn + numba {t1 - t0:.2f} s, import taodist {t2 - t1:.2f} s, fit + predict {t3 - t2:.2f} s, "
      f"of which compiling {sum(own.values()):.2f} s")
by_module = collections.Counter()
for (module, name), s in own.items():
    by_module[module] += s
print("\\n| module | compile s | kernels (own s) |")
print("|---|---|---|")
for module, s in by_module.most_common():
    top = sorted(((v, n) for (m, n), v in own.items() if m == module), reverse=True)[:4]
    print(f"| {module} | {s:.2f} | " + ", ".join(f"{n} {v:.2f}" for v, n in top) + " |")
"""


def profile():
    """The tiny fit from an empty cache, its compile seconds per kernel (printed by the child process)."""
    cache = tempfile.mkdtemp(prefix="taodist-numba-cache-")
    try:
        done = subprocess.run([sys.executable, "-c", PROFILE], env={**os.environ, "NUMBA_CACHE_DIR": cache},
                              capture_output=True, text=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if done.returncode:
        raise SystemExit(f"the profiled tiny fit failed:\n{done.stderr}")
    print(f"load average {load():.1f}")
    print(done.stdout)


def run(command, cache):
    """Seconds to run ``command`` with numba's cache in ``cache``."""
    start = time.perf_counter()
    done = subprocess.run(command, env={**os.environ, "NUMBA_CACHE_DIR": cache}, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return time.perf_counter() - start


def load():
    return os.getloadavg()[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", nargs="+", default=list(COMMANDS), choices=list(COMMANDS))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="only the tiny fit's compile seconds per kernel")
    args = parser.parse_args(argv)
    if args.profile:
        profile()
        return
    rows = []
    for r in range(args.rounds):
        for name in args.commands:
            cache = tempfile.mkdtemp(prefix="taodist-numba-cache-")
            try:
                setup, command = COMMANDS[name]
                for step in setup:
                    run(step, cache)
                cold_load = load()
                cold = run(command, cache)
                warm_load = load()
                warm = run(command, cache)
            finally:
                shutil.rmtree(cache, ignore_errors=True)
            rows.append((name, r, cold, warm, cold_load, warm_load))
            print(f"{name:8s} round {r}: cold {cold:6.1f} s, warm {warm:6.1f} s, cold/warm {cold / warm:.2f} "
                  f"(load {cold_load:.1f} / {warm_load:.1f})", flush=True)
    print("\n| command | round | cold s | warm s | cold / warm | load average (cold / warm) |")
    print("|---|---|---|---|---|---|")
    for name, r, cold, warm, cl, wl in rows:
        print(f"| {name} | {r} | {cold:.1f} | {warm:.1f} | {cold / warm:.2f} | {cl:.1f} / {wl:.1f} |")


if __name__ == "__main__":
    main()
