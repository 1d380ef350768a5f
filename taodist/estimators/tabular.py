"""Tables as users have them to the numeric columns TAO fits: missing values and categorical columns.

TAO's decision nodes are hyperplanes over numeric columns. :class:`TabularEncoder`
is the estimators' boundary to the data people have (pandas DataFrames with
string and category columns, NaN anywhere), learned on the training rows and
stored with the model:

* A numeric column with missing training values becomes two columns: the
  value, missing entries filled with the column's training mean, and an
  indicator of missingness. A decision node's hyperplane weighs both, so each
  node learns in its own TAO step -- the same surrogate fit and accept test on
  its care points, hence TAO's monotone decrease -- where its rows with a
  missing value go: the indicator's weight ``v`` makes a missing value count as
  ``fill + v / w`` at that node, a fill value per node; the l1 penalty keeps
  ``v`` at zero where missingness does not help. An axis-aligned node splits
  a column's observed values and learns a default direction for its missing
  ones, the side that costs its care points less (as XGBoost does; see
  :func:`taodist.tao.node_solvers.solve_axis_missing`), or splits on the
  indicator itself. A column without missing training values gets no
  indicator; a missing value there at prediction counts as the training mean.
* A categorical column (pandas ``category``, ``object`` or ``string`` dtype, or
  named in ``categorical_features``) with at most ``max_onehot`` categories
  becomes one indicator column per category: a hyperplane's weights over them
  are a learned value per category at each node, and an unseen category is
  all zeros (the node's baseline). A column with more categories is target
  encoded by scikit-learn's :class:`~sklearn.preprocessing.TargetEncoder`,
  cross-fitted so that a training row's encoding never saw its own target
  (one column; one per class for more than two classes); an unseen category
  gets the target's mean. A missing category is a category of its own.
* Everything else passes through untouched: numeric input without missing
  values is the same matrix, so it gives the same model to the bit.

Dask DataFrames are encoded where their partitions live by
:mod:`taodist.estimators.dask_frames`.
"""

import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.preprocessing import TargetEncoder
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import _check_y, check_consistent_length, validate_data

from ..utils.rows import ACCEPT_SPARSE, FIT_DTYPES, as_csr, check_sparse_structure

#: categorical columns with at most this many categories are one-hot encoded, more are target encoded
MAX_ONEHOT = 16
#: the most input columns a model file may declare (what int32 sparse indices reach)
MAX_COLUMNS = 2**31 - 1
#: above this many columns a loaded encoder's checks skip building the list of numeric columns
MAX_DENSE_FILL = 10**7


#: the parameter constraint of ``categorical_features``, as scikit-learn's HistGradientBoosting has it
CATEGORICAL_FEATURES_CONSTRAINT = [StrOptions({"from_dtype"}), "array-like", None]


def fit_table(estimator, X, y, task, **kw):
    """Validate training input as ``validate_data`` does, NaN and (for DataFrames) non-numeric columns allowed,
    and encode it: ``(rows, y)`` with the :class:`TabularEncoder` stored on ``estimator.encoder_``.

    ``kw`` are ``validate_data``'s target options (``multi_output``, ``y_numeric``).
    """
    if is_dataframe(X):
        validate_data(estimator, X, skip_check_array=True)  # feature_names_in_ and n_features_in_
        if X.shape[0] < 1 or X.shape[1] < 1:
            raise ValueError(f"Found a DataFrame of shape {X.shape} while at least 1 row and 1 column are required.")
        y = _check_y(y, multi_output=kw.get("multi_output", False), y_numeric=kw.get("y_numeric", False),
                     estimator=estimator)
        check_consistent_length(X, y)
    else:
        X, y = validate_data(estimator, X, y, dtype=FIT_DTYPES, accept_sparse=ACCEPT_SPARSE,
                             ensure_all_finite="allow-nan", **kw)
    estimator.encoder_ = TabularEncoder(estimator.categorical_features, task, random_state=estimator.random_state)
    return estimator.encoder_.fit_transform(X, y), y


def predict_table(estimator, X, dtype):
    """Validate prediction input against what ``fit`` saw (column count, names, dtypes) and encode it as fit did.

    A model without an encoder (loaded from a file written before encoders) takes numeric, complete input only.
    """
    encoder = getattr(estimator, "encoder_", None)
    if encoder is not None and is_dataframe(X):
        validate_data(estimator, X, reset=False, skip_check_array=True)
        return encoder.transform(X)
    X = validate_data(estimator, X, dtype=dtype, reset=False, accept_sparse=ACCEPT_SPARSE,
                      ensure_all_finite=True if encoder is None else "allow-nan")
    return X if encoder is None else encoder.transform(X)


def per_input_column(encoder, importances):
    """Importances of the encoded columns summed per input column (``encoder`` None: the columns are the input's)."""
    return importances if encoder is None else encoder.input_importances(importances)


def is_dataframe(X):
    """Whether ``X`` is a pandas DataFrame (duck-typed: pandas is imported only when one is given)."""
    return hasattr(X, "dtypes") and hasattr(X, "columns") and hasattr(X, "iloc") and not hasattr(X, "__dask_graph__")


def _is_categorical_dtype(dtype):
    import pandas as pd

    return isinstance(dtype, pd.CategoricalDtype) or dtype.kind == "O" or pd.api.types.is_string_dtype(dtype)


class TabularEncoder:
    """The encoding of an estimator's input columns into TAO's numeric columns (see the module).

    The output holds the numeric input columns in their order (missing
    entries filled), then one missingness indicator per numeric column that
    had missing training values, then each categorical column's indicators or
    target encoding, in input order. Nothing is stored per input column beyond
    dense input's fill values, so wide sparse input costs nothing per feature.

    Parameters
    ----------
    categorical_features : "from_dtype", array-like of int, str or bool, or None
        Which input columns are categorical: ``"from_dtype"`` takes a
        DataFrame's ``category``, ``object`` and ``string`` columns (NumPy
        input has none); indices, column names or a boolean mask name them.
    task : {"classification", "regression"}
    max_onehot : int
        Categorical columns with more categories are target encoded.
    random_state : int, RandomState or None
        The target encoder's cross-fitting folds.

    Attributes
    ----------
    n_features_in_ : int
    input_names_ : list of str or None
        A DataFrame's column names (None: ``x0, x1, ...``).
    categorical_columns_ : list of int
    missing_columns_ : ndarray of int
        Numeric columns with missing training values (each gets an indicator).
    fill_columns_, fill_values_ : ndarray
        What a missing value of a numeric column counts as: the column's
        training mean (dense input: every numeric column; sparse input: the
        columns in ``missing_columns_``, others count a missing value as 0,
        their implicit value).
    categories_ : dict
        One-hot encoded column -> its categories.
    target_columns_ : list of int
        Target-encoded columns.
    target_categories_ : list of list
        Per target-encoded column, its training categories as text (None: missing).
    target_encodings_ : list of ndarray of shape (n_categories, per)
        Per target-encoded column, each category's encoding fitted on all
        training rows (what new rows take); ``per``: the number of classes
        above two, else 1.
    target_mean_ : ndarray of shape (per,)
        The training target's mean: an unseen category's encoding.
    """

    def __init__(self, categorical_features="from_dtype", task="classification", max_onehot=MAX_ONEHOT,
                 random_state=None):
        self.categorical_features = categorical_features
        self.task = task
        self.max_onehot = max_onehot
        self.random_state = random_state

    # ----------------------------------------------------------------- fit
    def fit_transform(self, X, y):
        """Learn the encoding on the training rows and return their numeric columns.

        Parameters
        ----------
        X : DataFrame, ndarray or sparse matrix of shape (n_samples, n_features)
            NumPy and sparse input must already be numeric (NaN allowed).
        y : ndarray of shape (n_samples,) or (n_samples, n_outputs)
            Class codes or labels (classification) or values; used by the target encoder only.

        Returns
        -------
        Xt : ndarray or CSR matrix of shape (n_samples, n_columns_out)
            ``X`` itself when nothing needs encoding.
        """
        frame = is_dataframe(X)
        self.n_features_in_ = X.shape[1]
        self.input_names_ = [str(c) for c in X.columns] if frame else None
        self.categorical_columns_ = self._categorical_columns(X, frame)
        if sp.issparse(X) and self.categorical_columns_:
            raise ValueError("categorical_features needs dense input (a DataFrame or a NumPy array): scipy.sparse "
                             "columns hold numbers only. One-hot encode them into the sparse matrix instead.")
        values = self._numeric_values(X, frame)
        if sp.issparse(values):
            columns = _entry_columns(values)
            stored_nan = np.isnan(values.data)
            self.missing_columns_ = np.unique(columns[stored_nan])
            nan_counts = np.bincount(columns[stored_nan], minlength=values.shape[1])[self.missing_columns_]
            sums = np.bincount(columns[~stored_nan], weights=values.data[~stored_nan],
                               minlength=values.shape[1])[self.missing_columns_]
            self.fill_columns_ = self.missing_columns_
            self.fill_values_ = _means(sums, values.shape[0] - nan_counts)
        else:
            numeric = self._numeric_columns()
            missing = np.isnan(values)
            has_missing = missing.any(axis=0)
            self.missing_columns_ = numeric[has_missing]
            self.fill_columns_ = numeric
            if not has_missing.any():  # the common case: plain means, no masked copy of the rows
                self.fill_values_ = values.mean(axis=0, dtype=np.float64) if len(values) else np.zeros(len(numeric))
            else:
                self.fill_values_ = _means(np.where(missing, 0.0, values).sum(axis=0, dtype=np.float64),
                                           values.shape[0] - missing.sum(axis=0))
        self.categories_, self.categorical_missing_, self.target_columns_ = {}, {}, []
        for j in self.categorical_columns_:
            column = _column(X, j, frame)
            cats = distinct_categories(column)
            if len(cats) <= self.max_onehot:
                self.categories_[j] = cats
                self.categorical_missing_[j] = bool(_isna(column).any())
            else:
                self.target_columns_.append(j)
        target = self._fit_target_encoder(X, y, frame)
        return self._encode(X, values, frame, training=True, target=target)

    def _categorical_columns(self, X, frame):
        n_features = X.shape[1]
        given = self.categorical_features
        if given is None or (isinstance(given, str) and given == "from_dtype"):
            return [j for j, dt in enumerate(X.dtypes) if _is_categorical_dtype(dt)] if frame else []
        given = np.asarray(given)
        if given.dtype == bool:
            if given.shape != (n_features,):
                raise ValueError(f"categorical_features as a boolean mask needs one entry per column ({n_features}); "
                                 f"got shape {given.shape}.")
            return np.flatnonzero(given).tolist()
        chosen = set()
        names = self.input_names_
        for item in given.ravel().tolist():
            if isinstance(item, str):
                if names is None or item not in names:
                    known = "the input has no column names (it is not a DataFrame)" if names is None else \
                        f"columns are {names[:10]}{' ...' if len(names) > 10 else ''}"
                    raise ValueError(f"categorical_features names column {item!r}, which is not in X: {known}.")
                chosen.add(names.index(item))
            elif isinstance(item, numbers.Integral) and -n_features <= item < n_features:
                chosen.add(item % n_features)
            else:
                raise ValueError(f"categorical_features has {item!r}: expected column indices in 0..{n_features - 1}, "
                                 "column names, a boolean mask or 'from_dtype'.")
        return sorted(chosen)

    def _numeric_columns(self):
        keep = np.ones(self.n_features_in_, dtype=bool)
        keep[self.categorical_columns_] = False
        return np.flatnonzero(keep)

    def _fit_target_encoder(self, X, y, frame):
        """Fit the target encoding of ``target_columns_``; the training rows' cross-fitted encodings (None when
        no column is target encoded)."""
        self.target_categories_, self.target_encodings_, self.target_mean_ = [], [], np.zeros(0)
        if not self.target_columns_:
            return None
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] > 1:
            # TargetEncoder takes one target: with several outputs the columns are one-hot encoded instead
            for j in self.target_columns_:
                column = _column(X, j, frame)
                self.categories_[j] = distinct_categories(column)
                self.categorical_missing_[j] = bool(_isna(column).any())
            self.target_columns_ = []
            return None
        y = y.ravel()
        target_type = "continuous" if self.task == "regression" else ("binary" if np.unique(y).size <= 2 else
                                                                       "multiclass")
        encoder = TargetEncoder(target_type=target_type, **self._folds(target_type))
        training = encoder.fit_transform(_object_columns(X, self.target_columns_, frame), y)
        per = len(encoder.classes_) if target_type == "multiclass" else 1
        self.target_categories_ = [[None if _is_nan(c) else c for c in cats] for cats in encoder.categories_]
        self.target_encodings_ = [np.column_stack(encoder.encodings_[i * per:(i + 1) * per])
                                  for i in range(len(self.target_columns_))]
        self.target_mean_ = np.atleast_1d(np.asarray(encoder.target_mean_, dtype=np.float64))
        return training

    def _folds(self, target_type):
        """TargetEncoder's shuffled cross-fitting folds: a splitter where scikit-learn takes one (1.9 on), else
        ``shuffle`` and ``random_state`` (deprecated there)."""
        if _takes_splitter():
            splitter = KFold if target_type == "continuous" else StratifiedKFold
            return {"cv": splitter(5, shuffle=True, random_state=self.random_state)}
        return {"shuffle": True, "random_state": self.random_state}

    def _target_encode(self, X, frame):
        """The target-encoded columns of new rows (what TargetEncoder.transform gives): unseen -> the target mean."""
        columns = _object_columns(X, self.target_columns_, frame)
        out = []
        for i, cats in enumerate(self.target_categories_):
            index = {c: k for k, c in enumerate(cats)}
            codes = np.array([index.get(None if _is_nan(v) else v, -1) for v in columns[:, i]], dtype=np.intp)
            block = self.target_encodings_[i][np.maximum(codes, 0)]
            block[codes < 0] = self.target_mean_
            out.append(block)
        return np.hstack(out)

    # ----------------------------------------------------------- transform
    @property
    def is_identity(self):
        """Whether the encoding is the input itself (numeric columns, no missing training values)."""
        return not (self.categorical_columns_ or len(self.missing_columns_))

    def transform(self, X):
        """The numeric columns of new rows: ``X`` itself when it is numeric, complete and nothing is encoded."""
        return self._encode(X, self._numeric_values(X, is_dataframe(X)), is_dataframe(X))

    def transform_training_partition(self, X, offset, cross_fit):
        """A Dask fit's training partition encoded: as :meth:`transform`, except that the target-encoded
        columns take the out-of-fold encodings of each row's fold
        (:class:`~taodist.estimators.dask_frames.CrossFit`).

        Parameters
        ----------
        X : DataFrame
            A partition of the training rows (pandas).
        offset : int
            The position of its first row among all training rows (what its rows' folds follow).
        cross_fit : taodist.estimators.dask_frames.CrossFit
        """
        return self._encode(X, self._numeric_values(X, True), True, target=cross_fit.encode(X, offset))

    def _encode(self, X, values, frame, training=False, target=None):
        """The encoded rows; ``target``: the target-encoded columns' values (None: looked up, as for new rows)."""
        if training and self.is_identity:  # no missing training value (else there would be an indicator)
            return values
        sparse = sp.issparse(values)
        if sparse:
            values = as_csr(values)
            nan = np.isnan(values.data)
        else:
            nan = np.isnan(values)
        if self.is_identity and not nan.any():
            return values
        filled = _fill_sparse(values, nan, self.fill_columns_, self.fill_values_) if sparse else \
            _fill_dense(values, nan, self.fill_values_)
        if self.is_identity:
            return filled
        parts = [filled]
        if len(self.missing_columns_):
            parts.append(_sparse_indicators(values, nan, self.missing_columns_) if sparse else
                         nan[:, np.searchsorted(self._numeric_columns(), self.missing_columns_)].astype(np.float64))
        if self.target_columns_:
            if target is None:
                target = self._target_encode(X, frame)
            per = target.shape[1] // len(self.target_columns_)
        for j in self.categorical_columns_:
            if j in self.categories_:
                column = _column(X, j, frame)
                parts.append(_one_hot(column, self.categories_[j]))
                if self.categorical_missing_[j]:
                    parts.append(_isna(column).astype(np.float64)[:, None])
            else:
                i = self.target_columns_.index(j)
                parts.append(target[:, i * per:(i + 1) * per])
        if sparse:
            return sp.hstack(parts, format="csr", dtype=np.float64)
        return np.ascontiguousarray(np.hstack(parts), dtype=np.float64)

    def _numeric_values(self, X, frame):
        """The numeric input columns as float (NaN for missing), checked to be numbers."""
        if not frame:
            if sp.issparse(X) or not self.categorical_columns_:
                return X
            return np.asarray(X[:, self._numeric_columns()], dtype=np.float64)
        columns = []
        for j in self._numeric_columns():
            col = X.iloc[:, j]
            if _is_categorical_dtype(col.dtype):
                raise ValueError(f"Column {X.columns[j]!r} holds {col.dtype} values, but it held numbers when the "
                                 "model was fitted; pass the columns with the dtypes they had in fit.")
            try:
                columns.append(col.to_numpy(dtype=np.float64, na_value=np.nan))
            except (TypeError, ValueError) as err:
                raise ValueError(f"Column {X.columns[j]!r} ({col.dtype}) cannot be read as numbers: {err}") from None
        if not columns:
            return np.empty((X.shape[0], 0))
        values = np.column_stack(columns)
        if np.isinf(values).any():
            raise ValueError("Input X contains infinity; replace it (or mark the value missing with NaN).")
        return values

    # ------------------------------------------------------------- names
    @property
    def feature_names_out_(self):
        """Names of the output columns (the features of the fitted trees), built when asked for."""
        names = self.input_names_ or [f"x{j}" for j in range(self.n_features_in_)]
        out = [names[j] for j in self._numeric_columns()]
        out += [f"{names[j]} is missing" for j in self.missing_columns_]
        for j in self.categorical_columns_:
            if j in self.categories_:
                out += [f"{names[j]}={c}" for c in self.categories_[j]]
                if self.categorical_missing_[j]:
                    out.append(f"{names[j]} is missing")
            elif len(self.target_mean_) > 1:
                out += [f"{names[j]} (target encoded, class {k})" for k in range(len(self.target_mean_))]
            else:
                out.append(f"{names[j]} (target encoded)")
        return out

    @property
    def n_columns_out(self):
        """Number of output columns, without building their names."""
        return int(self.n_features_in_ - len(self.categorical_columns_) + len(self.missing_columns_)
                   + sum(len(c) + self.categorical_missing_[j] for j, c in self.categories_.items())
                   + len(self.target_mean_) * len(self.target_columns_))

    def output_sources(self):
        """The input column each output column comes from: ``sources[k]`` for output column ``k``."""
        sources = [self._numeric_columns(), np.asarray(self.missing_columns_, dtype=np.intp)]
        for j in self.categorical_columns_:
            width = (len(self.categories_[j]) + self.categorical_missing_[j] if j in self.categories_
                     else len(self.target_mean_))
            sources.append(np.full(width, j, dtype=np.intp))
        return np.concatenate(sources)

    def missing_indicators(self):
        """Per output column, the output column of its missingness indicator (-1: none); None when none has one.

        What axis-aligned nodes need to learn where rows with a missing value
        go (:func:`taodist.tao.node_solvers.solve_axis_missing`).
        """
        if not len(self.missing_columns_):
            return None
        numeric = self._numeric_columns()
        out = np.full(self.n_columns_out, -1, dtype=np.intp)
        out[np.searchsorted(numeric, self.missing_columns_)] = len(numeric) + np.arange(len(self.missing_columns_))
        return out

    def input_importances(self, importances):
        """Importances of the output columns summed per input column (what ``feature_importances_`` reports)."""
        return np.bincount(self.output_sources(), weights=importances, minlength=self.n_features_in_)

    def summary(self):
        """One line on what the encoding does (``taodist inspect`` prints it)."""
        parts = [f"input {self.n_features_in_} columns -> {self.n_columns_out} features"]
        if len(self.missing_columns_):
            parts.append(f"{len(self.missing_columns_)} with missing values (value + indicator)")
        if self.categories_:
            parts.append(f"{len(self.categories_)} categorical one-hot")
        if self.target_columns_:
            parts.append(f"{len(self.target_columns_)} categorical target encoded")
        return "encoding: " + "; ".join(parts)

    # ------------------------------------------------------------ storage
    def to_state(self):
        """``(meta, arrays)``: the fitted encoding as a JSON-ready dict and named arrays (for model files)."""
        meta = {
            "n_features_in": int(self.n_features_in_),
            "input_names": self.input_names_,
            "categorical_columns": [int(j) for j in self.categorical_columns_],
            "onehot": [[int(j), [_json_value(c) for c in cats], self.categorical_missing_[j]]
                       for j, cats in self.categories_.items()],
            "target_columns": [int(j) for j in self.target_columns_],
            "target_categories": [[_json_value(c) for c in cats] for cats in self.target_categories_],
        }
        arrays = {"missing_columns": np.asarray(self.missing_columns_, dtype=np.int64),
                  "fill_columns": np.asarray(self.fill_columns_, dtype=np.int64),
                  "fill_values": self.fill_values_, "target_mean": self.target_mean_}
        arrays.update({f"target_encoding{i}": e for i, e in enumerate(self.target_encodings_)})
        return meta, arrays

    @classmethod
    def from_state(cls, meta, arrays, where):
        """The encoder :meth:`to_state` described, every entry checked (a model file is data from outside).

        Raises
        ------
        ValueError
            Naming ``where`` and the entry that is malformed or inconsistent.
        """
        def fail(what):
            raise ValueError(f"{where}: the model's column encoding is malformed ({what}); the file was edited "
                             "or damaged.")

        keys = {"n_features_in", "input_names", "categorical_columns", "onehot", "target_columns", "target_categories"}
        if not isinstance(meta, dict) or set(meta) != keys:
            fail(f"expected the entries {sorted(keys)}")
        enc = cls()
        d = meta["n_features_in"]
        if not (isinstance(d, int) and not isinstance(d, bool) and 1 <= d <= MAX_COLUMNS):
            fail("n_features_in must be a positive integer")
        enc.n_features_in_ = d
        names = meta["input_names"]
        if names is not None and not (isinstance(names, list) and len(names) == d
                                      and all(isinstance(n, str) for n in names)):
            fail("input_names must be null or one string per column")
        enc.input_names_ = names
        categorical = meta["categorical_columns"]
        if not (isinstance(categorical, list) and all(_is_index(j, d) for j in categorical)
                and categorical == sorted(set(categorical))):
            fail("categorical_columns must be increasing column indices")
        enc.categorical_columns_ = categorical
        enc.categories_, enc.categorical_missing_ = {}, {}
        onehot = meta["onehot"] if isinstance(meta["onehot"], list) else fail("onehot must be a list")
        for item in onehot:
            if not (isinstance(item, list) and len(item) == 3 and _is_index(item[0], d) and item[0] in categorical
                    and isinstance(item[1], list) and isinstance(item[2], bool) and item[0] not in enc.categories_):
                fail("each onehot entry is [categorical column, categories, has missing]")
            enc.categories_[item[0]], enc.categorical_missing_[item[0]] = item[1], item[2]
        targets = meta["target_columns"]
        if not (isinstance(targets, list) and all(_is_index(j, d) for j in targets) and len(set(targets)) ==
                len(targets) and sorted(set(targets) | set(enc.categories_)) == categorical
                and not set(targets) & set(enc.categories_)):
            fail("every categorical column is either one-hot or target encoded, once")
        enc.target_columns_ = targets
        cats = meta["target_categories"]
        if not (isinstance(cats, list) and len(cats) == len(targets) and all(isinstance(c, list) for c in cats)):
            fail("target_categories needs a list of categories per target-encoded column")
        enc.target_categories_ = cats
        numeric = enc._numeric_columns() if d <= MAX_DENSE_FILL else None
        enc.missing_columns_ = _index_array(arrays.get("missing_columns"), d, "missing_columns", fail)
        if numeric is not None and not np.isin(enc.missing_columns_, numeric).all():
            fail("missing_columns must be numeric columns")
        enc.fill_columns_ = _index_array(arrays.get("fill_columns"), d, "fill_columns", fail)
        enc.fill_values_ = _float_array(arrays.get("fill_values"), (len(enc.fill_columns_),), "fill_values", fail)
        if numeric is not None and not (np.array_equal(enc.fill_columns_, numeric)
                                        or np.array_equal(enc.fill_columns_, enc.missing_columns_)):
            fail("fill_columns must be every numeric column (dense input) or the missing columns (sparse input)")
        if not np.isin(enc.missing_columns_, enc.fill_columns_).all():
            fail("every column in missing_columns needs a fill value")
        enc.target_mean_ = _float_array(arrays.get("target_mean"), None, "target_mean", fail)
        per = len(enc.target_mean_)
        if targets and per < 1:
            fail("target_mean is empty")
        enc.target_encodings_ = [_float_array(arrays.get(f"target_encoding{i}"), (len(c), per), f"target_encoding{i}",
                                              fail) for i, c in enumerate(cats)]
        known = {"missing_columns", "fill_columns", "fill_values", "target_mean"} | \
            {f"target_encoding{i}" for i in range(len(cats))}
        if set(arrays) - known:
            fail(f"unexpected arrays {sorted(set(arrays) - known)}")
        return enc


# ------------------------------------------------------------------ helpers
def _takes_splitter():
    import sklearn

    major, minor = (int(p) for p in sklearn.__version__.split(".")[:2])
    return (major, minor) >= (1, 9)


def _is_index(j, d):
    return isinstance(j, int) and not isinstance(j, bool) and 0 <= j < d


def _float_array(a, shape, name, fail, finite=True):
    ndim = 1 if shape is None else len(shape)
    if a is None or not isinstance(a, np.ndarray) or a.dtype.kind != "f" or a.ndim != ndim:
        fail(f"{name} must be a float array" + ("" if shape is None else f" of shape {shape}"))
    if shape is not None and a.shape != shape:
        fail(f"{name} has shape {a.shape}, expected {shape}")
    if finite and not np.isfinite(a).all():
        fail(f"{name} holds NaN or infinity")
    return np.asarray(a, dtype=np.float64)


def _json_value(v):
    """A category as JSON holds it: numbers, strings and booleans as they are, anything else as its text."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not np.isfinite(v):
        return str(v)
    return v if isinstance(v, (str, int, float, bool)) or v is None else str(v)

def _column(X, j, frame):
    return X.iloc[:, j].to_numpy(dtype=object) if frame else np.asarray(X[:, j], dtype=object)


def _isna(column):
    import pandas as pd

    return np.asarray(pd.isna(column), dtype=bool)


def distinct_categories(column):
    """The sorted distinct non-missing values of an object column (as strings when they do not sort as they are)."""
    present = column[~_isna(column)]
    values = list(dict.fromkeys(present.tolist()))
    try:
        return sorted(values)
    except TypeError:  # mixed types (numbers and strings): a stable order by text
        return sorted(values, key=str)


def _one_hot(column, categories):
    """One indicator column per category; a missing or unseen value is all zeros."""
    import pandas as pd

    known = pd.Index(categories)
    codes = np.where(_isna(column), -1, known.get_indexer(pd.Index(column, dtype=object)))
    out = np.zeros((len(column), len(categories)))
    seen = codes >= 0
    out[np.flatnonzero(seen), codes[seen]] = 1.0
    return out


def _object_columns(X, columns, frame):
    """The target-encoded columns as an object array, missing values as NaN (a category of their own)."""
    out = np.empty((X.shape[0], len(columns)), dtype=object)
    for i, j in enumerate(columns):
        column = _column(X, j, frame)
        out[:, i] = [np.nan if missing else str(v) for v, missing in zip(column, _isna(column))]
    return out


def _is_nan(v):
    return v is None or (isinstance(v, float) and v != v)


def _means(sums, counts):
    """Column means of the observed entries; 0 for a column never observed."""
    return np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)


def _fill_dense(values, nan, fill_values):
    out = np.array(values, dtype=np.float64)
    rows, cols = np.nonzero(nan)
    out[rows, cols] = fill_values[cols]
    return out


def _fill_sparse(values, nan, fill_columns, fill_values):
    """A copy of CSR ``values`` with each NaN entry replaced by its column's fill value (0 for a column without one)."""
    out = values.astype(np.float64, copy=True)
    cols = out.indices[nan]
    at = np.minimum(np.searchsorted(fill_columns, cols), max(len(fill_columns) - 1, 0))
    known = (fill_columns[at] == cols) if len(fill_columns) else np.zeros(len(cols), dtype=bool)
    out.data[nan] = np.where(known, fill_values[at] if len(fill_columns) else 0.0, 0.0)
    return out


def _sparse_indicators(values, nan, missing_columns):
    """CSR indicators (one column per entry of ``missing_columns``) of the NaN entries of CSR ``values``."""
    rows = np.repeat(np.arange(values.shape[0]), np.diff(values.indptr))[nan]
    cols = values.indices[nan]
    at = np.searchsorted(missing_columns, cols)
    keep = (at < len(missing_columns)) & (missing_columns[np.minimum(at, len(missing_columns) - 1)] == cols)
    return sp.csr_matrix((np.ones(int(keep.sum())), (rows[keep], at[keep])),
                         shape=(values.shape[0], len(missing_columns)))


def _index_array(a, d, name, fail):
    if not isinstance(a, np.ndarray) or a.dtype.kind not in "iu" or a.ndim != 1:
        fail(f"{name} must be a 1-D integer array")
    if len(a) and (a[0] < 0 or a[-1] >= d or np.any(np.diff(a) <= 0)):
        fail(f"{name} must be increasing column indices in 0..{d - 1}")
    return a.astype(np.intp)


def _entry_columns(values):
    """The column of each stored entry of a CSR or CSC matrix, without converting it (its indices are checked
    first: scipy's conversions trust them)."""
    check_sparse_structure(values)
    if values.format == "csr":
        return values.indices
    if values.format == "csc":
        return np.repeat(np.arange(values.shape[1]), np.diff(values.indptr))
    return values.tocoo().col
