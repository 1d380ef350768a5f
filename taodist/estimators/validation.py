"""Validation data during a TAO fit: scoring each iterate, early stopping, keeping the best tree.

TAO's training objective never increases from one iteration to the next, but
the error on data it does not see can. With a validation set -- ``eval_set``
given to ``fit``, or ``early_stopping`` carving one out of the training rows
as scikit-learn's HistGradientBoosting does -- :class:`ValidationMonitor`
scores the initial tree and every iterate on it (as a callback of
:func:`~taodist.tao.optimizer.tao_optimize`), stops the iterations once
``n_iter_no_change`` of them in a row have not improved the best score, and
hands back a copy of the best iterate, which the fit then prunes and keeps.

Validation rows may be NumPy, scipy.sparse or a Dask array with any row
chunks (they need not match the training data's): a Dask array is scored
block by block where its blocks live, each iteration.
"""

import numpy as np
from sklearn.model_selection import train_test_split

from ..utils.progress import report
from ..utils.rows import as_rows, divide_columns
from ..utils.validation import is_dask_collection


class ValidationMonitor:
    """Scores every TAO iterate of ``tree`` on validation rows; the callback that stops TAO early.

    Parameters
    ----------
    tree : Tree
        The tree TAO changes in place, in the internal (scaled-feature) units.
    X : ndarray, sparse matrix or Dask array
        Validation rows, encoded as the training rows are, in input units.
    y : ndarray
        Class codes (classification) or standardised targets of shape (n, K) (regression).
    task : {"classification", "regression"}
    scale : ndarray
        The fit's feature scale (rows are divided by it, as the training rows are).
    n_iter_no_change : int or None
        Stop after this many iterations without a better score; None: never stop, only keep the best.
    """

    def __init__(self, tree, X, y, task, scale, n_iter_no_change):
        self.tree, self.task, self.n_iter_no_change = tree, task, n_iter_no_change
        self.y = np.asarray(y)
        self.X = X if is_dask_collection(X) else divide_columns(as_rows(X), scale)
        self.scale = scale
        self.scores = [self._score()]
        self.best_iteration = self.last_improvement = 0
        self.best_tree = tree.copy()

    def _score(self):
        """Validation error of the current tree: the 0/1 error rate, or the mean squared error (standardised)."""
        tree = self.tree
        if is_dask_collection(self.X):
            scale, n_out = self.scale, tree.n_outputs

            def block(b):
                return tree.predict(divide_columns(as_rows(b), scale)).reshape(-1, n_out)

            out = self.X.map_blocks(block, chunks=(self.X.chunks[0], (n_out,)), dtype=np.float64,
                                    meta=np.empty((0, 0))).compute()
        else:
            out = tree.predict(self.X)
        if self.task == "classification":
            return float(np.mean(np.argmax(out, axis=1) != self.y))
        return float(np.mean((out - self.y.reshape(len(self.y), -1)) ** 2))

    def __call__(self, iteration, objective):
        """After TAO iteration ``iteration``: score it, keep it if best; True to stop the iterations."""
        score = self._score()
        best = self.scores[self.best_iteration]
        self.scores.append(score)
        if score < best:
            self.last_improvement = iteration
        if score <= best:  # a tie goes to the later iterate: the same validation error at a lower objective
            self.best_iteration, self.best_tree = iteration, self.tree.copy()
        report("tao_validation", iteration=iteration, score=score, best_iteration=self.best_iteration)
        return (self.n_iter_no_change is not None
                and iteration - self.last_improvement >= self.n_iter_no_change)


def unpack_eval_set(eval_set):
    """``(X_val, y_val)`` from ``eval_set``: a pair, or a list holding one pair (as XGBoost and LightGBM take it)."""
    if isinstance(eval_set, list) and len(eval_set) == 1:
        eval_set = eval_set[0]
    if not (isinstance(eval_set, tuple) and len(eval_set) == 2):
        raise ValueError("eval_set must be one (X_val, y_val) pair, or a list holding one; got "
                         f"{type(eval_set).__name__}{f' of {len(eval_set)}' if hasattr(eval_set, '__len__') else ''}.")
    return eval_set


def uses_early_stopping(early_stopping, n_samples, has_validation_rows=True):
    """``early_stopping`` resolved: ``"auto"`` is on above 10,000 training rows, as in HistGradientBoosting,
    where there are validation rows to be had (``has_validation_rows``: rows in memory to hold out, or an
    ``eval_set``)."""
    if isinstance(early_stopping, str):
        return bool(has_validation_rows) and n_samples > 10_000
    return bool(early_stopping)


def split_validation(X, y, sample_weight, fraction, task, random_state):
    """``(X, y, sample_weight, X_val, y_val)``: the training rows without a validation part, and that part.

    Stratified by class for classification (when every class has two rows),
    seeded by ``random_state``: the same fit draws the same split.
    """
    n = X.shape[0]
    stratify = y if task == "classification" and np.min(np.bincount(y)) >= 2 else None
    fit_rows, val_rows = train_test_split(np.arange(n), test_size=fraction, stratify=stratify,
                                          random_state=random_state)
    fit_rows, val_rows = np.sort(fit_rows), np.sort(val_rows)
    weights = None if sample_weight is None else np.asarray(sample_weight)[fit_rows]
    return X[fit_rows], y[fit_rows], weights, X[val_rows], y[val_rows]
