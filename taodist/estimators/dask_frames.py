"""Dask DataFrames to the row-chunked Dask array TAO fits on, encoded where their partitions live.

:func:`dask_frame_rows` learns a :class:`~taodist.estimators.tabular.TabularEncoder`
from a Dask DataFrame in passes over its partitions (the numeric columns'
means and missing values, the partitions' lengths), never gathering the rows:
a categorical column's categories must be known up front (``categorize()``).
One with more than ``MAX_ONEHOT`` categories is target encoded as scikit-learn's
:class:`~sklearn.preprocessing.TargetEncoder` would, cross-fitted: each
partition sums its rows' target statistics per fold and category, Dask adds
the sums up, and from the totals the driver computes the encodings of all
rows (for new rows) and of each fold's complement (for the training rows;
:func:`fit_dask_target_encoding`). A row's fold follows from its position
(:func:`row_folds`), so nothing per row lives on the driver and the model
does not depend on the partitioning.
"""

import dataclasses
import numbers

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils.validation import validate_data

from .tabular import TabularEncoder, distinct_categories


def is_dask_dataframe(X):
    """Whether ``X`` is a Dask DataFrame (a lazy table of pandas partitions)."""
    return hasattr(X, "map_partitions") and hasattr(X, "columns") and hasattr(X, "_meta")


def dask_frame_rows(estimator, X, y, task):
    """A Dask DataFrame's rows encoded into the row-chunked Dask array TAO fits on, the encoder on ``estimator``.

    One pass over the partitions learns what the encoding needs (each numeric
    column's mean and whether it has missing values, each categorical
    column's missing values, the partitions' lengths); the encoded rows are
    then made partition by partition where the partitions live. Categorical
    columns need their categories up front (``X.categorize()``). One with
    more than ``MAX_ONEHOT`` categories is target encoded without gathering
    the rows (:func:`fit_dask_target_encoding`): a second pass sums the
    target's statistics per cross-fitting fold and category in each
    partition (a row's fold follows from its position, known once the first
    pass has counted the partitions' rows). Other Dask collections pass
    through (``estimator.encoder_`` is None).

    Parameters
    ----------
    estimator : BaseEstimator
        Gets ``encoder_`` (and ``feature_names_in_``, ``n_features_in_`` for a DataFrame).
    X : Dask DataFrame or other Dask collection
    y : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        The training target, on the driver; only target encoding reads it.
    task : {"classification", "regression"}

    Returns
    -------
    Dask array of shape (n_samples, n_columns_out)
        One row chunk per partition (``X`` itself when it is not a DataFrame).
    """
    import dask

    if not is_dask_dataframe(X):
        estimator.encoder_ = None
        return X
    validate_data(estimator, X._meta, skip_check_array=True)  # feature_names_in_ and n_features_in_
    encoder = TabularEncoder(estimator.categorical_features, task, random_state=estimator.random_state)
    encoder.n_features_in_ = X.shape[1]
    encoder.input_names_ = [str(c) for c in X.columns]
    encoder.categorical_columns_ = encoder._categorical_columns(X._meta, True)
    names = list(X.columns)
    categorical = [names[j] for j in encoder.categorical_columns_]
    for c in categorical:
        if not (hasattr(X[c].dtype, "categories") and X[c].cat.known):
            raise ValueError(f"Column {c!r} of the Dask DataFrame is categorical but its categories are not known "
                             f"up front; call X = X.categorize(columns={categorical!r}) before fitting.")
    numeric = [names[j] for j in encoder._numeric_columns()]
    other = [c for c in numeric if X[c].dtype.kind not in "iufb"]
    if other:
        raise ValueError(f"Columns {other[:5]} of the Dask DataFrame are neither numbers nor categories; convert "
                         "them (astype(float), or astype('category') then categorize()).")
    missing, means, lengths = dask.compute(X.isna().any(), X[numeric].astype(np.float64).mean(),
                                           X.map_partitions(len))
    lengths, y = np.asarray(lengths, dtype=np.int64), np.asarray(y)
    if len(y) != lengths.sum():
        raise ValueError(f"Found input variables with inconsistent numbers of samples: [{lengths.sum()}, {len(y)}] "
                         "(the Dask DataFrame's rows and y).")
    encoder.missing_columns_ = np.array([j for j in encoder._numeric_columns() if missing[names[j]]], dtype=np.intp)
    encoder.fill_columns_ = encoder._numeric_columns()
    encoder.fill_values_ = np.nan_to_num(np.asarray(means, dtype=np.float64), nan=0.0)
    # TargetEncoder takes one target: with several outputs every categorical column is one-hot encoded (as from pandas)
    one_output = y.ndim == 1 or y.shape[1] == 1
    encoder.categories_, encoder.categorical_missing_, encoder.target_columns_ = {}, {}, []
    for j in encoder.categorical_columns_:
        categories = X[names[j]].dtype.categories
        if len(categories) > encoder.max_onehot and one_output:
            encoder.target_columns_.append(j)
        else:
            encoder.categories_[j] = distinct_categories(np.asarray(categories, dtype=object))
            encoder.categorical_missing_[j] = bool(missing[names[j]])
    cross_fit = fit_dask_target_encoding(encoder, X, y, lengths)
    estimator.encoder_ = encoder
    return encoded_partitions(encoder, X, lengths, cross_fit)


def encoded_partitions(encoder, X, lengths=None, cross_fit=None):
    """A Dask DataFrame's partitions encoded by ``encoder``, lazily, as a row-chunked Dask array (a chunk per
    partition; ``lengths``: the partitions' rows, counted here when not given).

    ``cross_fit``: the training rows of a Dask fit, whose target-encoded
    columns take their folds' out-of-fold encodings
    (:meth:`TabularEncoder.transform_training_partition`); None: new rows,
    encoded by :meth:`TabularEncoder.transform`.
    """
    import dask
    import dask.array as da

    if lengths is None:
        lengths = X.map_partitions(len).compute()
    lengths = np.asarray(lengths, dtype=np.int64)
    if cross_fit is None:
        encoded = [dask.delayed(encoder.transform)(part) for part in X.to_delayed()]
    else:
        shared = dask.delayed(cross_fit)  # one copy of the fold encodings in the graph, not one per partition
        offsets = np.cumsum(lengths) - lengths
        encoded = [dask.delayed(encoder.transform_training_partition)(part, int(offset), shared)
                   for part, offset in zip(X.to_delayed(), offsets)]
    k = encoder.n_columns_out
    parts = [da.from_delayed(e, shape=(int(n), k), dtype=np.float64) for e, n in zip(encoded, lengths)]
    return da.concatenate(parts, axis=0)


# ------------------------------------------------------- target encoding of a Dask DataFrame
#: cross-fitting folds of target encoding (TargetEncoder's default ``cv``)
N_FOLDS = 5
#: splitmix64's increment between draws (2**64 over the golden ratio)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@dataclasses.dataclass(frozen=True)
class CrossFit:
    """How a Dask fit cross-fits its target encoding: the rows' folds, the columns, and each fold's encodings.

    A training row takes, in each target-encoded column, the encoding of its
    category fitted on the rows of the other folds (as TargetEncoder's
    ``fit_transform``); its fold is :func:`row_folds` of its position.

    Attributes
    ----------
    seed : int
        The folds' seed (:func:`fold_seed`).
    columns : list of int
        The target-encoded input columns.
    categories : list of pandas Index
        Each column's categories as its dtype declares them. Statistics and
        encodings index a column's rows by category code, a missing value
        taking the slot after the categories.
    per : int
        Encoded columns per input column (the number of classes for more than two, else 1).
    encodings : list of ndarray of shape (N_FOLDS, n_categories + 1, per), or None
        Per column, each fold's encodings, fitted on the other folds' rows
        (None while the statistics are being summed).
    """

    seed: int
    columns: list
    categories: list
    per: int
    encodings: list = None

    def encode(self, X, offset):
        """The target-encoded columns of training rows ``X`` (pandas), whose first row is training row ``offset``."""
        folds = row_folds(offset, len(X), self.seed)
        return np.hstack([encodings[folds, category_codes(X.iloc[:, j], categories)]
                          for j, categories, encodings in zip(self.columns, self.categories, self.encodings)])


def fit_dask_target_encoding(encoder, X, y, lengths):
    """Fit ``encoder``'s target encoding of its ``target_columns_`` on a Dask DataFrame without gathering its rows.

    Each partition sums its rows' target statistics per fold and category
    (:func:`partition_statistics`; ``y`` sliced by the partitions'
    ``lengths``), Dask adds the sums up pairwise, and from the
    totals the driver computes scikit-learn's TargetEncoder encodings
    (:func:`smoothed_encodings`): on all rows, stored on the encoder for new
    rows (a category without rows is left out, as TargetEncoder has only the
    categories it saw), and on each fold's complement, for the training rows.

    Returns
    -------
    CrossFit or None
        The training rows' cross-fitting (None when no column is target encoded).
    """
    import dask

    encoder.target_categories_, encoder.target_encodings_, encoder.target_mean_ = [], [], np.zeros(0)
    if not encoder.target_columns_:
        return None
    t, per, shift = target_values(y, encoder.task)
    names = list(X.columns)
    plan = CrossFit(fold_seed(encoder.random_state), list(encoder.target_columns_),
                    [X[names[j]].dtype.categories for j in encoder.target_columns_], per)
    shared = dask.delayed(plan)  # one copy of the categories in the graph, not one per partition
    offsets = np.cumsum(lengths) - lengths
    parts = [dask.delayed(partition_statistics)(part, t[offset:offset + n], int(offset), shared)
             for part, offset, n in zip(X.to_delayed(), offsets, lengths)]
    (statistics,) = dask.compute(_tree_sum(parts))
    folds = []
    for categories, (counts, sums, squares) in zip(plan.categories, statistics):
        full, mean = smoothed_encodings(counts.sum(axis=0), sums.sum(axis=0), squares.sum(axis=0))
        seen = counts.sum(axis=0) > 0
        # as text, None for missing: what _target_encode looks new rows up by (as from pandas)
        names = [str(c) for c in categories] + [None]
        encoder.target_categories_.append([c for c, s in zip(names, seen) if s])
        encoder.target_encodings_.append(full[seen] + shift)
        folds.append(fold_encodings(counts, sums, squares, full) + shift)
    encoder.target_mean_ = mean + shift  # every column counts all rows: one target mean
    return dataclasses.replace(plan, encodings=folds)


def fold_seed(random_state):
    """The folds' seed: ``random_state`` itself when it is an int, else an int drawn from it."""
    if isinstance(random_state, numbers.Integral):
        return int(random_state)
    return int(check_random_state(random_state).randint(2**32))


def row_folds(offset, n, seed):
    """The cross-fitting folds (0 to ``N_FOLDS - 1``) of training rows ``offset`` to ``offset + n - 1``.

    Row ``i``'s fold is ``splitmix64(seed, i) mod N_FOLDS``: the ``i``-th
    draw of a splitmix64 stream started at the mixed seed. It depends on the
    row's position and the seed only, so a partition computes its rows' folds
    from its offset, no fold array exists on the driver, and the folds (hence
    the model) do not depend on how the rows are partitioned. The folds are
    random, not stratified and not of exactly equal size, unlike the
    (Stratified)KFold of a pandas fit: the same rows give the same full-data
    encodings as from pandas, other training encodings.
    """
    rows = np.arange(offset, offset + n, dtype=np.uint64)
    start = _mix64(np.array([seed], dtype=np.uint64))
    return (_mix64(start + rows * _GOLDEN) % np.uint64(N_FOLDS)).astype(np.intp)


def _mix64(z):
    """splitmix64's finaliser of a uint64 array (the products wrap modulo 2**64, as the generator's do)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def target_values(y, task):
    """The training target as the target statistics read it: ``(t, per, shift)``.

    Regression: ``t`` is the values less their mean ``shift`` (a large mean
    would otherwise cost the sums of squares their precision; the encodings
    add it back), ``per`` 1. Classification: ``t`` is the class codes in
    sorted label order (TargetEncoder's LabelEncoder and LabelBinarizer
    order), ``per`` the number of classes above two, else 1.
    """
    y = np.asarray(y).ravel()
    if task == "regression":
        y = y.astype(np.float64)
        shift = float(y.mean()) if len(y) else 0.0
        return y - shift, 1, shift
    classes, codes = np.unique(y, return_inverse=True)
    return codes.ravel(), len(classes) if len(classes) > 2 else 1, 0.0


def one_vs_rest(t, per):
    """The target columns whose statistics are summed: a regression target as it is; for classes, one indicator
    per class (more than two classes) or of the second class (two), as TargetEncoder encodes them."""
    if t.dtype.kind == "f":
        return t[:, None]
    classes = np.arange(per) if per > 1 else np.array([1])
    return (t[:, None] == classes).astype(np.float64)


def category_codes(column, categories):
    """A column's codes among ``categories`` (a missing value: ``len(categories)``, the slot after them)."""
    import pandas as pd

    codes = np.asarray(pd.Categorical(column, categories=categories).codes, dtype=np.intp)
    return np.where(codes < 0, len(categories), codes)


def partition_statistics(part, t, offset, plan):
    """A partition's target statistics: per target-encoded column of ``plan`` (:class:`CrossFit`), the rows'
    count, sum of the target and sum of its squares per fold and category.

    Parameters
    ----------
    part : DataFrame
        Training rows ``offset`` to ``offset + len(part) - 1`` (pandas).
    t : ndarray of shape (len(part),)
        Their target (:func:`target_values`).

    Returns
    -------
    list of (counts, sums, squares)
        Arrays of shape (N_FOLDS, n_categories + 1) and (N_FOLDS, n_categories + 1, per).
    """
    folds = row_folds(offset, len(part), plan.seed)
    values = one_vs_rest(t, plan.per)
    out = []
    for j, categories in zip(plan.columns, plan.categories):
        slots = len(categories) + 1
        at = folds * slots + category_codes(part.iloc[:, j], categories)
        counts = np.bincount(at, minlength=N_FOLDS * slots).reshape(N_FOLDS, slots)
        sums = _bincount_columns(at, values, N_FOLDS * slots).reshape(N_FOLDS, slots, plan.per)
        squares = _bincount_columns(at, values**2, N_FOLDS * slots).reshape(N_FOLDS, slots, plan.per)
        out.append((counts, sums, squares))
    return out


def _bincount_columns(at, weights, size):
    return np.stack([np.bincount(at, weights=weights[:, k], minlength=size) for k in range(weights.shape[1])],
                    axis=1)


def _tree_sum(parts):
    """The sum of the partitions' delayed statistics, added pairwise (the driver receives one set of arrays)."""
    import dask

    while len(parts) > 1:
        unpaired = parts[-1:] if len(parts) % 2 else []
        parts = [dask.delayed(_add_statistics)(a, b) for a, b in zip(parts[::2], parts[1::2])] + unpaired
    return parts[0]


def _add_statistics(a, b):
    return [tuple(u + v for u, v in zip(x, z)) for x, z in zip(a, b)]


def smoothed_encodings(counts, sums, squares):
    """TargetEncoder's ``smooth="auto"`` encodings from the sufficient statistics of the target's rows.

    scikit-learn's ``_fit_encoding_fast_auto_smooth`` (Micci-Barreca's
    equations 5 and 6): with ``n`` rows, the target's mean ``mu`` and variance
    ``v`` (``np.var``), and a category's ``n_c`` rows, mean ``m_c`` and sum of
    squared deviations from it ``d_c``, the category's encoding is ``l * m_c +
    (1 - l) * mu`` with ``l = v n_c / (v n_c + d_c / n_c)``, or ``mu`` where
    ``l`` is NaN (a category without rows; no variance at all). The sums of
    squared deviations are ``squares - sums * m_c``.

    Parameters
    ----------
    counts : ndarray of shape (n_categories,)
    sums, squares : ndarray of shape (n_categories, per)
        Per category, the sum of each target column (:func:`one_vs_rest`) and of its squares.

    Returns
    -------
    encodings : ndarray of shape (n_categories, per)
    mean : ndarray of shape (per,)
        The target's mean (NaN without rows).
    """
    n = counts.sum()
    c = counts.astype(np.float64)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = sums.sum(axis=0) / n
        variance = np.maximum(squares.sum(axis=0) / n - mean**2, 0.0)  # rounding must not make it negative
        category_mean = sums / c
        deviations = np.maximum(squares - sums * category_mean, 0.0)
        shrink = variance * c / (variance * c + deviations / c)
        return np.where(np.isnan(shrink), mean, shrink * category_mean + (1 - shrink) * mean), mean


def fold_encodings(counts, sums, squares, full):
    """Per fold, the encodings fitted on the other folds' rows: shape (N_FOLDS, n_categories, per).

    ``counts``, ``sums``, ``squares``: per fold (axis 0), as :func:`smoothed_encodings` takes them; ``full``: the
    encodings of all rows, which a fold takes when the other folds have no rows (a handful of training rows).
    """
    totals = counts.sum(axis=0), sums.sum(axis=0), squares.sum(axis=0)
    out = []
    for f in range(N_FOLDS):
        others = totals[0] - counts[f]
        out.append(smoothed_encodings(others, totals[1] - sums[f], totals[2] - squares[f])[0] if others.sum()
                   else full)
    return np.stack(out)
