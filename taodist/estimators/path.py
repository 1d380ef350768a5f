"""Sparsity paths: a sequence of decreasing C, each fit warm-started."""

from dataclasses import dataclass

from sklearn.base import clone

from .tree import TAOClassifier


@dataclass
class PathStep:
    """One point of a sparsity path."""

    C: float
    estimator: object
    train_score: float
    val_score: float | None
    n_leaves: int
    n_nonzero_weights: int
    n_parameters: int


def tao_path(X, y, *, Cs, estimator=None, X_val=None, y_val=None, sample_weight=None):
    """Fit TAO trees along a path of decreasing ``C``, each warm-started.

    The tree for one ``C`` initialises the fit for the next (smaller) ``C``,
    tracing trees from dense to very sparse (NeurIPS 2018, section 4).

    Parameters
    ----------
    X, y : array-like
        Training data.
    Cs : sequence of float
        Penalty values; they are visited in decreasing order.
    estimator : TAOClassifier or TAORegressor, optional
        Template for every step (its ``C`` and ``init`` are overridden for
        steps after the first). Default ``TAOClassifier(early_stopping=False)``.
    X_val, y_val : array-like, optional
        Validation data, scored at every step (accuracy or R^2). Choose C on
        it, never on the test set.
    sample_weight : array-like, optional

    Returns
    -------
    list of PathStep
        In the order fitted (largest C first).
    """
    if estimator is None:
        estimator = TAOClassifier(early_stopping=False)  # every step fits all rows, as the papers' paths
    Cs = sorted((float(c) for c in Cs), reverse=True)
    if not Cs or Cs[-1] <= 0:
        raise ValueError(f"Cs must be a non-empty sequence of positive numbers; got {Cs!r}.")
    if (X_val is None) != (y_val is None):
        raise ValueError("Pass both X_val and y_val, or neither.")
    steps, previous = [], None
    for C in Cs:
        params = {"C": C}
        if previous is not None:
            params["init"] = previous
        est = clone(estimator).set_params(**params).fit(X, y, sample_weight=sample_weight)
        tree = est.tree_
        steps.append(
            PathStep(
                C=C,
                estimator=est,
                train_score=float(est.score(X, y)),
                val_score=None if X_val is None else float(est.score(X_val, y_val)),
                n_leaves=tree.n_leaves(),
                n_nonzero_weights=tree.n_nonzero_weights(),
                n_parameters=tree.n_parameters(),
            )
        )
        previous = est
    return steps



