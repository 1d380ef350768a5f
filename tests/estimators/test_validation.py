"""Validation rows during a fit: scores per iterate, early stopping that keeps the best iterate, callbacks."""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.model_selection import train_test_split

from taodist import TAOClassifier, TAOForestClassifier, TAORegressor
from taodist.estimators.validation import uses_early_stopping
from taodist.utils.progress import reporting


@pytest.fixture(scope="module")
def noisy():
    """Breast cancer with a fifth of the training labels flipped: later iterates fit the noise."""
    X, y = load_breast_cancer(return_X_y=True)
    X_tr, X_val, y_tr, y_val = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    flip = np.random.RandomState(0).rand(len(y_tr)) < 0.2
    return X_tr, np.where(flip, 1 - y_tr, y_tr), X_val, y_val


def test_an_eval_set_is_scored_after_every_iteration_without_changing_the_model(noisy):
    X, y, X_val, y_val = noisy
    plain = TAOClassifier(max_depth=4, random_state=0).fit(X, y)
    watched = TAOClassifier(max_depth=4, random_state=0).fit(X, y, eval_set=(X_val, y_val))
    np.testing.assert_array_equal(watched.tree_.weights.toarray(), plain.tree_.weights.toarray())
    assert len(watched.validation_score_) == watched.n_iter_ + 1 == watched.best_iteration_ + 1
    # the last score is the fitted tree's error before pruning (pruning never changes predictions)
    assert watched.validation_score_[-1] == pytest.approx(1 - watched.score(X_val, y_val))


def test_early_stopping_keeps_the_best_iterate_and_stops_after_n_iter_no_change(noisy):
    X, y, X_val, y_val = noisy
    est = TAOClassifier(max_depth=5, max_iter=30, tol=0, early_stopping=True, n_iter_no_change=2,
                        random_state=0).fit(X, y, eval_set=(X_val, y_val))
    scores = est.validation_score_
    best = est.best_iteration_
    assert scores[best] == scores.min()
    assert est.score(X_val, y_val) == pytest.approx(1 - scores[best])
    last_improvement = max(i for i in range(len(scores)) if scores[i] < min(scores[:i], default=np.inf))
    assert est.n_iter_ == len(scores) - 1 <= last_improvement + 2
    # the training objective up to the kept iterate never increased
    assert np.all(np.diff(est.history_[:best + 1]) <= 1e-12)


def test_early_stopping_without_an_eval_set_holds_out_training_rows():
    X, y = load_breast_cancer(return_X_y=True)
    est = TAOClassifier(max_depth=3, early_stopping=True, validation_fraction=0.25, random_state=0).fit(X, y)
    assert len(est.validation_score_) >= 2
    again = TAOClassifier(max_depth=3, early_stopping=True, validation_fraction=0.25, random_state=0).fit(X, y)
    np.testing.assert_array_equal(est.tree_.weights.toarray(), again.tree_.weights.toarray())
    assert not hasattr(TAOClassifier(max_depth=3, early_stopping="auto").fit(X, y), "validation_score_")  # < 10k rows


def test_auto_early_stopping_holds_out_rows_above_10000_rows_in_memory_and_not_in_a_forest_s_trees():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10_500, 4))
    y = (X[:, 0] + 0.3 * rng.normal(size=10_500) > 0).astype(int)
    auto = TAOClassifier(max_depth=2, max_iter=3, random_state=0).fit(X, y)
    held = TAOClassifier(max_depth=2, max_iter=3, early_stopping=True, random_state=0).fit(X, y)
    full = TAOClassifier(max_depth=2, max_iter=3, early_stopping=False, random_state=0).fit(X, y)
    assert auto.early_stopping == "auto" and len(auto.validation_score_) >= 2
    np.testing.assert_array_equal(auto.tree_.weights.toarray(), held.tree_.weights.toarray())
    assert not hasattr(full, "validation_score_")
    reg = TAORegressor(max_depth=2, max_iter=2, random_state=0).fit(X, X[:, 1] + 0.1 * y)
    assert hasattr(reg, "validation_score_")
    # the forest's trees fit every bootstrap row
    forest = TAOForestClassifier(n_estimators=1, max_depth=2, max_iter=2, random_state=0).fit(X, y)
    assert not hasattr(forest.estimators_[0], "validation_score_")
    # without rows in memory to hold out (Dask input, no eval_set), "auto" is off; an eval_set turns it on
    assert uses_early_stopping("auto", 10_500) and not uses_early_stopping("auto", 10_000)
    assert not uses_early_stopping("auto", 10_500, has_validation_rows=False)
    assert uses_early_stopping(True, 100, has_validation_rows=False)


def test_regression_eval_set_scores_standardised_squared_error():
    X, y = load_diabetes(return_X_y=True)
    X_tr, X_val, y_tr, y_val = train_test_split(X, y, random_state=0)
    est = TAORegressor(max_depth=3, random_state=0).fit(X_tr, y_tr, eval_set=[(X_val, y_val)])
    expected = np.mean(((est.predict(X_val) - y_val) / y_tr.std()) ** 2)
    assert est.validation_score_[-1] == pytest.approx(expected, rel=1e-9)


def test_eval_set_mistakes_are_refused_clearly(noisy):
    X, y, X_val, y_val = noisy
    with pytest.raises(ValueError, match=r"y has labels \[7\] that the training y does not"):
        TAOClassifier(max_depth=2).fit(X, y, eval_set=(X_val, np.full(len(y_val), 7)))
    with pytest.raises(ValueError, match="eval_set: X has 5 features, but TAOClassifier is expecting 30"):
        TAOClassifier(max_depth=2).fit(X, y, eval_set=(X_val[:, :5], y_val))
    with pytest.raises(ValueError, match=r"one \(X_val, y_val\) pair"):
        TAOClassifier(max_depth=2).fit(X, y, eval_set=[(X_val, y_val), (X_val, y_val)])


def test_callbacks_see_every_iteration_and_can_stop_tao():
    X, y = load_breast_cancer(return_X_y=True)
    seen = []

    def stop_after_two(event, info):
        seen.append((event, info.get("iteration")))
        return event == "tao_iteration" and info["iteration"] == 2

    est = TAOClassifier(max_depth=3, max_iter=10, tol=0, callbacks=[stop_after_two], random_state=0).fit(X, y)
    assert est.n_iter_ == 2 and [i for e, i in seen if e == "tao_iteration"] == [1, 2]
    assert any(e == "tao_level" for e, _ in seen)


def test_callbacks_run_beside_an_outer_reporter_and_a_raising_callback_abandons_the_fit():
    X, y = load_breast_cancer(return_X_y=True)
    outer, inner = [], []
    with reporting(lambda e, i: outer.append(e)):
        TAOClassifier(max_depth=2, callbacks=[lambda e, i: inner.append(e)], random_state=0).fit(X, y)
    assert outer == inner and "tao_iteration" in outer

    def boom(event, info):
        raise KeyboardInterrupt

    est = TAOClassifier(max_depth=2, callbacks=[boom])
    with pytest.raises(KeyboardInterrupt):
        est.fit(X, y)
    assert not hasattr(est, "tree_")


def test_verbose_prints_progress_and_forests_report_their_trees(capsys):
    X, y = load_breast_cancer(return_X_y=True)
    TAOClassifier(max_depth=2, verbose=1, random_state=0).fit(X, y)
    assert "TAO iteration 1/15: objective" in capsys.readouterr().out
    trees = []
    TAOForestClassifier(n_estimators=3, n_jobs=1, callbacks=[lambda e, i: trees.append(i["done"]) if
                                                            e == "forest_tree" else None]).fit(X, y)
    assert trees == [1, 2, 3]


def test_forest_early_stopping_keeps_the_first_trees_up_to_the_lowest_validation_error(noisy, tmp_path):
    from taodist import TAOForestRegressor, load, save

    X, y, X_val, y_val = noisy
    full = TAOForestClassifier(n_estimators=8, max_depth=3, random_state=0).fit(X, y, eval_set=(X_val, y_val))
    assert full.n_estimators_ == 8 and len(full.validation_score_) == 8
    # the score of k trees is the error of their mean vote
    proba = np.mean([e.tree_.predict(X_val) for e in full.estimators_[:3]], axis=0)
    assert full.validation_score_[2] == pytest.approx(np.mean(np.argmax(proba, axis=1) != y_val))
    kept = TAOForestClassifier(n_estimators=8, max_depth=3, early_stopping=True, random_state=0).fit(
        X, y, eval_set=(X_val, y_val))
    k = int(np.argmin(full.validation_score_)) + 1
    assert kept.n_estimators_ == k == len(kept.estimators_)
    assert kept.score(X_val, y_val) == pytest.approx(1 - full.validation_score_[k - 1])
    save(kept, tmp_path / "f.npz")
    back = load(tmp_path / "f.npz")
    assert back.n_estimators_ == k and np.array_equal(back.predict(X_val), kept.predict(X_val))
    Xr, yr = load_diabetes(return_X_y=True)
    reg = TAOForestRegressor(n_estimators=4, max_depth=2, early_stopping=True, random_state=0).fit(Xr, yr)
    assert 1 <= reg.n_estimators_ <= 4 and len(reg.validation_score_) == 4
