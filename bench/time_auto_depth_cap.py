"""Cost of the classification depth cap of ``max_depth="auto"``: CART, its 5-fold CV depth (one thread, every core) and ``TAOClassifier()`` timed in turn.

On the dev group's classification sets under 10,000 training rows (validation split 0), best of 3
of each, interleaved so that the machine's load falls on all three alike. Run from the repository
root::

    python bench/time_auto_depth_cap.py
"""

import sys
import time

import numpy as np
import pandas as pd
from sklearn.preprocessing import LabelEncoder
from sklearn.tree import DecisionTreeClassifier

from taodist import TAOClassifier
from taodist.estimators.auto import cv_cart_depth

sys.path.insert(0, "bench")
from bench_suite import splits  # noqa: E402
from suite_data import suite  # noqa: E402


def best_of(f, k=3):
    """The least wall time of ``k`` calls of ``f``."""
    times = []
    for _ in range(k):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    TAOClassifier(max_iter=1).fit(np.random.rand(50, 3), np.arange(50) % 2)  # compile first
    rows = []
    for entry in suite("dev"):
        if entry.task != "classification":
            continue
        X, y = entry.load()
        if len(y) * 0.6 > 10_000:  # the validation split's training part
            continue
        y = pd.Series(LabelEncoder().fit_transform(y.astype(str)), index=y.index)
        _, A, y_a, _, _ = next(splits((X, y), "classification", 1, "validation", None))
        A = np.asarray(A, dtype=np.float64)
        cart = best_of(lambda: DecisionTreeClassifier(random_state=0).fit(A, y_a))
        cv = best_of(lambda: cv_cart_depth(A, y_a, np.ones(len(y_a)), random_state=0, task="classification",
                                           n_jobs=1))
        cv_threads = best_of(lambda: cv_cart_depth(A, y_a, np.ones(len(y_a)), random_state=0,
                                                   task="classification", n_jobs=-1))
        tao = best_of(lambda: TAOClassifier(random_state=0).fit(A, y_a))
        rows.append((cart, cv, cv_threads, tao))
        print(f"{entry.name:14s} {len(y_a):6d} rows  CART {cart:.4f} s  CV depth {cv:.4f} s (threads {cv_threads:.4f} s)"
              f"  TAOClassifier() {tao:.3f} s  TAO/CART {tao / cart:.1f}x  CV/CART {cv / cart:.1f}x"
              f" ({cv_threads / cart:.1f}x)  CV/TAO {cv_threads / tao:.2f}", flush=True)
    cart, cv, cv_threads, tao = np.array(rows).T
    print(f"median: TAO/CART {np.median(tao / cart):.1f}x, CV/CART {np.median(cv / cart):.1f}x one thread, "
          f"{np.median(cv_threads / cart):.1f}x on every core; CV share of TAOClassifier() {np.median(cv_threads / tao):.2f}")


if __name__ == "__main__":
    main()
