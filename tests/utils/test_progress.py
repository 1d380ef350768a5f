"""Progress events of long fits, and stopping a fit from its reporter (what `taodist cancel` relies on)."""

import re

import numpy as np
import pytest

from taodist import TAOClassifier, TAOForestClassifier
from taodist.testing import make_oblique_classification
from taodist.utils.progress import report, reporting


class Stop(Exception):
    pass


def test_tao_reports_every_level_and_iteration_with_the_objective():
    X, y = make_oblique_classification(400, 4, random_state=0)
    events = []
    with reporting(lambda event, info: events.append((event, info))):
        clf = TAOClassifier(max_depth=3, max_iter=4, tol=0.0, random_state=0).fit(X, y)
    iterations = [info for event, info in events if event == "tao_iteration"]
    assert [i["iteration"] for i in iterations] == list(range(1, clf.n_iter_ + 1))
    np.testing.assert_allclose([i["objective"] for i in iterations], clf.history_[1:])
    levels = [info for event, info in events if event == "tao_level"]
    # every depth 3, 2, 1, 0 once per iteration, bottom-up
    assert [(lv["iteration"], lv["depth"]) for lv in levels] == [
        (it, d) for it in range(1, clf.n_iter_ + 1) for d in (3, 2, 1, 0)]


def test_a_raising_reporter_stops_the_fit_at_that_checkpoint():
    X, y = make_oblique_classification(400, 4, random_state=0)
    seen = []

    def stop_at_iteration_two(event, info):
        seen.append(event)
        if event == "tao_iteration" and info["iteration"] == 2:
            raise Stop

    clf = TAOClassifier(max_depth=3, max_iter=50, tol=0.0, random_state=0)
    with reporting(stop_at_iteration_two), pytest.raises(Stop):
        clf.fit(X, y)
    assert seen.count("tao_iteration") == 2
    assert not hasattr(clf, "tree_")  # nothing half-fitted is left on the estimator


def test_forest_reports_each_tree_and_nothing_without_a_reporter():
    X, y = make_oblique_classification(300, 4, random_state=1)
    done = []
    with reporting(lambda event, info: done.append(info["done"]) if event == "forest_tree" else None):
        TAOForestClassifier(n_estimators=4, max_depth=2, max_iter=2, random_state=0, n_jobs=2).fit(X, y)
    assert done == [1, 2, 3, 4]
    report("tao_iteration", iteration=1)  # no reporter installed: a no-op


# ---------------------------------------------------------------- the printer behind `taodist demo` and `fit`
class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_printer_writes_one_line_per_iteration_with_objective_elapsed_and_an_eta_when_piped():
    from taodist.utils.progress import ProgressPrinter

    clock, out = Clock(), []
    printer = ProgressPrinter(write=out.append, tty=False, quiet_seconds=5.0, clock=clock)
    clock.now += 1.0
    printer("tao_level", {"iteration": 1, "depth": 2, "n_nodes": 4})  # 1 s into a silence: not printed
    clock.now += 5.0
    printer("tao_level", {"iteration": 1, "depth": 1, "n_nodes": 2})  # 6 s of silence: a sign of life
    clock.now += 2.0
    printer("tao_iteration", {"iteration": 1, "max_iter": 5, "objective": 200.0, "seconds": 8.0})
    clock.now += 4.0
    printer("tao_level", {"iteration": 2, "depth": 2, "n_nodes": 4})
    clock.now += 2.0
    printer("tao_iteration", {"iteration": 2, "max_iter": 5, "objective": 150.0, "seconds": 6.0})
    printer.finish()
    assert "".join(out).splitlines() == [
        "[   6.0s] TAO iteration 1: level 2/3 done (depth 1, 2 nodes)",
        "[   8.0s] TAO iteration 1/5: objective 200, 8.0s, ETA <= 32.0s",
        "[  14.0s] TAO iteration 2/5: objective 150 (-25.00%), 6.0s, ETA <= 21.0s",
    ]
    assert all(chunk.endswith("\n") and "\r" not in chunk and "\033" not in chunk for chunk in out)


def test_printer_on_a_terminal_rewrites_the_level_line_in_place():
    from taodist.utils.progress import ProgressPrinter

    clock, out = Clock(), []
    printer = ProgressPrinter(write=out.append, tty=True, clock=clock)
    printer("tao_level", {"iteration": 1, "depth": 1, "n_nodes": 2})
    printer("tao_level", {"iteration": 1, "depth": 0, "n_nodes": 1})
    clock.now += 3.0
    printer("tao_iteration", {"iteration": 1, "max_iter": 2, "objective": 10.0, "seconds": 3.0})
    clock.now += 1.0
    printer("tao_level", {"iteration": 2, "depth": 1, "n_nodes": 2})
    printer.finish()
    assert out[0] == "\r[   0.0s] TAO iteration 1: level 1/2 done (depth 1, 2 nodes)\033[K"
    assert out[1] == "\r[   0.0s] TAO iteration 1: level 2/2 done (depth 0, 1 node)\033[K"
    assert out[2] == "\r[   3.0s] TAO iteration 1/2: objective 10, 3.0s, ETA <= 3.0s\033[K\n"
    assert out[3] == ("\r[   4.0s] TAO iteration 2/2: level 1/2 done (depth 1, 2 nodes), objective 10 after "
                      "iteration 1, ETA <= 2.0s\033[K")
    assert out[4:] == ["\n"]  # finish() ends the line left open, once
    printer.finish()
    assert out[4:] == ["\n"]


def test_printer_on_a_real_fit_forest_and_laptao():
    from taodist import LapTAOClassifier
    from taodist.utils.progress import ProgressPrinter

    X, y = make_oblique_classification(300, 4, random_state=0)
    out = []
    with ProgressPrinter(write=out.append, tty=False) as printer, reporting(printer):
        TAOClassifier(max_depth=2, max_iter=3, tol=0.0, random_state=0).fit(X, y)
        TAOForestClassifier(n_estimators=3, max_depth=2, max_iter=2, random_state=0).fit(X, y)
        y_partial = y.copy()
        y_partial[50:] = -1
        LapTAOClassifier(max_depth=2, n_outer=2, random_state=0).fit(X, y_partial)
    lines = "".join(out).splitlines()
    first_fit = lines[:next(i for i, line in enumerate(lines) if "forest" in line)]
    tao = [line[10:] for line in first_fit if "TAO iteration" in line]
    assert tao and [re.sub(r": objective .*, ETA <= \d+\.\ds$|: objective .*, done$", "", t) for t in tao] == [
        f"TAO iteration {k}/3" for k in range(1, len(tao) + 1)]
    assert all(re.match(r"\[ *\d+\.\ds\] ", line) for line in lines)
    assert any(re.search(r"forest: 3/3 trees, done$", line) for line in lines)
    assert any(re.search(r"LapTAO outer iteration 2/2: .*done$", line) for line in lines)
    # LapTAO's tree steps are TAO runs: each starts afresh (no change against the previous step)
    assert sum("TAO iteration 1/" in line and "%" not in line for line in lines) >= 3
