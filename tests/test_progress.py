"""Progress events of long fits, and stopping a fit from its reporter (what `taodist cancel` relies on)."""

import numpy as np
import pytest

from taodist import TAOClassifier, TAOForestClassifier
from taodist._progress import report, reporting
from taodist.testing import make_oblique_classification


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
