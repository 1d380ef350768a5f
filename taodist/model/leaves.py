"""Leaf models, behind a registry.

A leaf model is everything TAO and the rest of taodist need to know about
one kind of leaf: how to fit it on its reduced set, what it outputs, how to
count and describe its parameters, when two leaves predict the same (for
pruning), and what a CART leaf becomes. :data:`LEAF_MODELS` maps the
``leaf_type`` name to an instance; adding a leaf type means one new
:class:`LeafModel` subclass registered there.

The module structure is the following:

* this module: :class:`LeafModel`, :class:`ConstantLeaf`,
  :class:`LinearLeaf`, the registry :data:`LEAF_MODELS`, and the losses of
  leaf outputs (:func:`pointwise_loss`; :func:`softmax` for predictions);
* :mod:`taodist.model.leaf_fit`: fitting one leaf (exact constants, Lasso,
  softmax by SAGA or FISTA; the warm starts :data:`LEAF_WARM_STARTS`);
* :mod:`taodist.model.linear_outputs`: a linear leaf's ``(K, D)``
  coefficients and the compiled products that give its outputs.

Softmax leaves may be limited to ``k`` classes (thesis section 2.3, "softmax
trees"): a leaf keeps the ``k`` most populous classes of its reduced set and
fits its softmax on their points only; every other class gets logit ``-inf``,
so probability exactly 0, and a zero coefficient row, so predicting at that
leaf scores ``k`` classes, not ``K``. The tree records ``k`` as
``tree.leaf_classes``; :meth:`LeafModel.limited_to` gives the leaf model that
fits with it.

Parameters of a leaf live in the tree's flat arrays: ``value[i]`` (the
constant, or the intercept) and, for models with ``has_coef``, rows
``i*K .. i*K+K-1`` of the CSR matrix ``tree.leaf_coef``.
"""

from abc import ABC, abstractmethod

import numpy as np
import scipy.sparse as sp

from .leaf_fit import LEAF_WARM_STARTS, fit_constant, fit_linear
from .linear_outputs import add_linear_outputs, leaf_coef_rows, linear_output, rows_times_coef

# LEAF_WARM_STARTS and leaf_coef_rows are re-exported: the optimiser and the estimators take the
# leaf registry's names from here
__all__ = ["LEAF_MODELS", "LEAF_WARM_STARTS", "ConstantLeaf", "LeafModel", "LinearLeaf", "leaf_coef_rows",
           "pointwise_loss", "softmax"]


def pointwise_loss(task, outputs, y):
    """Loss of raw leaf ``outputs`` (n, K) against targets ``y``, per point.

    Classification: 0/1 loss of the arg-max class. Regression: squared error
    summed over outputs.
    """
    if task == "classification":
        return (np.argmax(outputs, axis=1) != y).astype(np.float64)
    diff = outputs - y
    return np.einsum("ij,ij->i", diff, diff)


def softmax(Z):
    """Row-wise softmax of logits ``Z`` (n, K); ``Z`` is overwritten when it is a temporary.

    A logit of ``-inf`` (a class outside a limited leaf) gives probability
    exactly 0; each row needs one finite logit.
    """
    Z = Z - Z.max(axis=1, keepdims=True)
    np.exp(Z, out=Z)
    Z /= Z.sum(axis=1, keepdims=True)
    return Z


def _l1(coef):
    return float(abs(coef).sum()) if sp.issparse(coef) else float(np.abs(coef).sum())


class LeafModel(ABC):
    """One kind of leaf. Subclass it, implement :meth:`fit`, and register an instance in :data:`LEAF_MODELS`.

    Class attributes
    ----------------
    name : str
        The ``leaf_type`` value that selects it.
    has_coef : bool
        Leaves store ``(K, D)`` coefficients in ``tree.leaf_coef``.
    exact : bool
        :meth:`fit` returns the leaf's exact optimum; otherwise TAO accepts a
        fit only if :meth:`objective` does not increase.
    """

    name = None
    has_coef = False
    exact = True

    @abstractmethod
    def fit(self, X, y, sample_weight, *, task, n_outputs, alpha, value=None, coef=None):
        """Fit one leaf on its reduced set: returns ``(value, coef or None)``.

        ``value``/``coef`` are the leaf's current parameters (a warm start for
        iterative fits; None for a fresh leaf).
        """

    def limited_to(self, leaf_classes):
        """This leaf model fitting at most ``leaf_classes`` classes per leaf (None: no limit).

        Only softmax (linear classification) leaves can be limited; the base
        model refuses any limit.
        """
        if leaf_classes is None:
            return self
        raise ValueError(f"leaf_classes={leaf_classes} limits the classes of softmax leaves; leaf_type={self.name!r} "
                         "leaves have no such limit. Use leaf_type='linear' or leaf_classes=None.")

    def with_max_iter(self, max_iter):
        """This leaf model with its solver limited to ``max_iter`` iterations per fit (None: its default).

        Exact leaf models (a constant leaf's weighted majority or mean) have
        no iterations: they ignore it.
        """
        return self

    def with_warm_start(self, warm_start):
        """This leaf model with its iterative solver warm-started as ``warm_start`` says (see :data:`LEAF_WARM_STARTS`).

        Leaf models without an iterative solver ignore it.
        """
        return self

    def limit_leaves(self, tree):
        """Make every leaf of ``tree`` respect ``tree.leaf_classes`` (an initial or warm-start tree); in place.

        Nothing to do for leaf models without a class limit.
        """

    def fit_level(self, problems, *, task, n_outputs, alpha):
        """Fit many leaves at once; ``problems`` are ``(X, y, sample_weight, value, coef)``.

        The default fits them one by one; a batched solver overrides this.
        """
        return [self.fit(X, y, sw, task=task, n_outputs=n_outputs, alpha=alpha, value=value, coef=coef)
                for X, y, sw, value, coef in problems]

    def raw_output(self, X, value, coef, output_range=None):
        """Raw output ``(n, K)`` of one leaf's parameters at rows ``X``, clipped to ``output_range`` (2, K) if given."""
        if coef is None:
            return np.broadcast_to(value, (X.shape[0], value.shape[0]))
        out = linear_output(X, value, coef)
        return out if output_range is None else np.clip(out, output_range[0], output_range[1], out=out)

    def objective(self, X, y, sample_weight, value, coef, *, task, alpha, output_range=None):
        """The leaf's true objective: weighted loss + ``alpha`` times its l1 norm."""
        out = self.raw_output(X, value, coef, output_range)
        return sample_weight @ pointwise_loss(task, out, y) + (0.0 if coef is None else alpha * _l1(coef))

    def output_range(self, y, sample_weight, *, task):
        """The range ``(2, K)`` a leaf fitted on targets ``y`` clips its outputs to; None: no clipping.

        Only linear regression leaves extrapolate; the others need none.
        """
        return None

    def outputs(self, tree, X, leaves, rows):
        """Raw outputs ``(n, K)`` of leaf ``leaves[j]`` at row ``rows[j]`` of ``X``."""
        return tree.value[leaves].astype(np.float64, copy=True)

    def prediction(self, task, raw):
        """What ``predict`` returns from raw outputs (probabilities or values)."""
        return raw

    def best_classes(self, tree, X, leaves, rows, n):
        """The ``n`` most probable classes ``(len(leaves), n)`` of leaf ``leaves[j]`` at row ``rows[j]`` of ``X``.

        Most probable first; equal scores go to the lower class, as
        ``np.argsort(-proba, kind="stable")`` orders them. A constant leaf
        reads its stored distribution and never X.
        """
        unique, inverse = np.unique(leaves, return_inverse=True)
        return np.argsort(-tree.value[unique], axis=1, kind="stable")[:, :n][inverse]

    def penalty(self, tree):
        """l1 norm of the leaf parameters the objective penalises."""
        return 0.0

    def n_parameters(self, tree, leaves):
        """Parameters of each of ``leaves`` as counted in the thesis (Appendix A)."""
        binary = tree.task == "classification" and tree.n_outputs == 2
        return np.full(len(leaves), 1 if binary else tree.n_outputs, dtype=np.int64)

    def n_classes_scored(self, tree, leaves):
        """Classes that a prediction at each of ``leaves`` gives a non-zero probability.

        For a softmax leaf these are the classes whose scores it computes; a
        constant leaf computes nothing and stores its non-zero probabilities.
        A top-n prediction sorts only these. Regression: the outputs.
        """
        if tree.task != "classification":
            return np.full(len(leaves), tree.n_outputs, dtype=np.int64)
        return np.count_nonzero(tree.value[leaves] > 0, axis=1).astype(np.int64)

    def same_prediction(self, tree, a, b):
        """Whether leaves ``a`` and ``b`` predict the same for every input (pure-subtree pruning)."""
        if tree.task == "classification":
            return np.argmax(tree.value[a]) == np.argmax(tree.value[b])
        return np.array_equal(tree.value[a], tree.value[b])

    def merge(self, tree, into, a, b, reach_a, reach_b):
        """Make node ``into`` the leaf that replaces leaves ``a`` and ``b`` (same prediction)."""
        w = reach_a + reach_b
        tree.value[into] = (reach_a * tree.value[a] + reach_b * tree.value[b]) / w if w > 0 else tree.value[a]

    def from_cart(self, task, cart_values):
        """Leaf values from CART's per-node values (class distributions or means)."""
        return cart_values

    def label(self, tree, node, class_names):
        """A short label for plots; None: the class or value of ``tree.value[node]``."""
        return None

    def describe(self, tree, node, fmt, class_name):
        """One line of text export: the leaf's prediction."""
        if tree.task == "classification":
            k = int(np.argmax(tree.value[node]))
            return f"leaf {node}: class {class_name(k)} (p={fmt(tree.value[node, k])})"
        return f"leaf {node}: value [{', '.join(fmt(v) for v in tree.value[node])}]"


class ConstantLeaf(LeafModel):
    """Weighted class distribution (majority vote) or weighted mean: exact."""

    name = "constant"

    def fit(self, X, y, sample_weight, *, task, n_outputs, alpha, value=None, coef=None):
        return fit_constant(X, y, sample_weight, task=task, n_outputs=n_outputs, alpha=alpha)


class LinearLeaf(LeafModel):
    """l1 linear leaf: a multinomial l1 softmax (warm-started SAGA or FISTA, compiled), or a Lasso.

    ``max_classes`` limits a softmax leaf to its most populous classes (see
    the module docstring); the registry holds the unlimited model and
    :meth:`limited_to` makes limited ones.
    """

    name = "linear"
    has_coef = True
    exact = False

    def __init__(self, max_classes=None, max_iter=None, warm_start="coef"):
        self.max_classes = max_classes
        self.max_iter = max_iter
        self.warm_start = warm_start

    def limited_to(self, leaf_classes):
        return self if leaf_classes == self.max_classes else LinearLeaf(leaf_classes, self.max_iter, self.warm_start)

    def with_max_iter(self, max_iter):
        """SAGA epochs (dense rows) or FISTA iterations (sparse rows) of a softmax leaf fit, coordinate-descent
        epochs of a Lasso leaf's; None: the defaults of :func:`fit_linear`."""
        return self if max_iter == self.max_iter else LinearLeaf(self.max_classes, max_iter, self.warm_start)

    def with_warm_start(self, warm_start):
        return self if warm_start == self.warm_start else LinearLeaf(self.max_classes, self.max_iter, warm_start)

    def fit(self, X, y, sample_weight, *, task, n_outputs, alpha, value=None, coef=None):
        return fit_linear(X, y, sample_weight, task=task, n_outputs=n_outputs, alpha=alpha, value=value, coef=coef,
                          max_classes=self.max_classes, max_iter=self.max_iter, warm_start=self.warm_start)

    def limit_leaves(self, tree):
        """Keep each leaf's ``k`` largest intercepts (ties: lower class) and give the other classes ``-inf``.

        TAO keeps a leaf's old parameters when its new fit would raise the
        0/1 objective, so the initial leaves must already be limited for
        every leaf to score at most ``k`` classes. Initial leaves (random,
        CART, clustering) have no weights, so their predicted class stays the
        same; a warm-start tree's limited leaves lose their weights for the
        dropped classes.
        """
        k = tree.leaf_classes
        if k is None or tree.task != "classification":
            return
        leaves = np.flatnonzero(tree.is_leaf)
        over = leaves[np.isfinite(tree.value[leaves]).sum(axis=1) > k]
        if over.size == 0:
            return
        for leaf in over:
            drop = np.argsort(-tree.value[leaf], kind="stable")[k:]  # stable: equal logits keep class order
            tree.value[leaf, drop] = -np.inf
        coefs = [sp.diags(np.isfinite(tree.value[leaf]).astype(np.float64)) @ leaf_coef_rows(tree, leaf)
                 for leaf in over]
        tree.set_leaf_coef(over, coefs)

    def outputs(self, tree, X, leaves, rows):
        out = tree.value[leaves].astype(np.float64, copy=True)
        add_linear_outputs(X, leaves, rows, tree.leaf_coef, tree.n_outputs, out)
        if tree.task == "regression" and tree.leaf_range is not None:
            np.clip(out, tree.leaf_range[leaves, 0], tree.leaf_range[leaves, 1], out=out)
        return out

    def output_range(self, y, sample_weight, *, task):
        """Lowest and highest target ``(2, K)`` among the leaf's points of positive weight (regression).

        A Lasso leaf fitted on a few hundred points can be far off outside
        their spread, and one such row can dominate a tree's validation error.
        Clipping to the leaf's own targets never raises a fitted point's
        squared error (each target lies in the range), so it only removes such
        excursions; the leaf step's accept test and the objective see the
        clipped outputs.
        """
        if task != "regression":
            return None
        Y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)[np.asarray(sample_weight) > 0]
        return np.stack([Y.min(axis=0), Y.max(axis=0)])

    def prediction(self, task, raw):
        return softmax(raw) if task == "classification" else raw

    def best_classes(self, tree, X, leaves, rows, n):
        """Scores only the classes each leaf keeps (finite intercept): O(k) per row for a k-class leaf.

        Classes outside a limited leaf have probability 0 and fill the
        remaining places in class order when the leaf scores fewer than ``n``.
        """
        K = tree.n_outputs
        out = np.empty((len(leaves), n), dtype=np.intp)
        order = np.argsort(leaves, kind="stable")
        for group in np.split(order, np.flatnonzero(np.diff(leaves[order])) + 1):
            if group.size == 0:
                continue
            leaf = leaves[group[0]]
            scored = np.flatnonzero(np.isfinite(tree.value[leaf]))
            scores = np.repeat(tree.value[leaf, scored][None, :], group.size, axis=0)
            coef = tree.leaf_coef[leaf * K + scored]  # CSR rows of the scored classes only
            if coef.nnz:
                scores += rows_times_coef(X[rows[group]], coef)
            m = min(n, scored.size)
            # argmax and a stable sort both give equal scores to the lower class
            best = (np.argmax(scores, axis=1)[:, None] if m == 1
                    else np.argsort(-scores, axis=1, kind="stable")[:, :m])
            out[group, :m] = scored[best]
            if m < n:
                out[group, m:] = np.setdiff1d(np.arange(K), scored)[:n - m]
        return out

    def penalty(self, tree):
        return float(np.abs(tree.leaf_coef.data).sum())

    def n_parameters(self, tree, leaves):
        K = tree.n_outputs
        binary = tree.task == "classification" and K == 2
        coef_nnz = np.diff(tree.leaf_coef.indptr).reshape(tree.n_nodes, K).sum(axis=1)
        # a class outside a limited leaf (logit -inf) stores nothing: only finite intercepts count
        intercepts = np.isfinite(tree.value[leaves]).sum(axis=1)
        # a binary leaf stores one vector [-w/2, w/2]: count it once
        return coef_nnz[leaves] // (2 if binary else 1) + (1 if binary else intercepts)

    def n_classes_scored(self, tree, leaves):
        if tree.task != "classification":
            return super().n_classes_scored(tree, leaves)
        return np.isfinite(tree.value[leaves]).sum(axis=1).astype(np.int64)

    def same_prediction(self, tree, a, b):
        K = tree.n_outputs
        same_range = tree.leaf_range is None or np.array_equal(tree.leaf_range[a], tree.leaf_range[b])
        return same_range and np.array_equal(tree.value[a], tree.value[b]) and (
            tree.leaf_coef[a * K:(a + 1) * K] != tree.leaf_coef[b * K:(b + 1) * K]).nnz == 0

    def merge(self, tree, into, a, b, reach_a, reach_b):
        with np.errstate(invalid="ignore"):  # 0 * -inf when a leaf has no reach: restored below
            super().merge(tree, into, a, b, reach_a, reach_b)
        # the leaves predict the same: classes outside them (logit -inf) stay outside
        outside = np.isneginf(tree.value[a])
        tree.value[into, outside] = -np.inf
        tree.set_leaf_coef([into], [leaf_coef_rows(tree, a)])
        if tree.leaf_range is not None:
            tree.leaf_range[into] = tree.leaf_range[a]

    def from_cart(self, task, cart_values):
        # a linear classification leaf holds logits: log-probabilities give the same softmax
        return np.log(np.maximum(cart_values, 1e-12)) if task == "classification" else cart_values

    def label(self, tree, node, class_names):
        if tree.task == "classification" and tree.leaf_classes is not None:
            return f"linear\n(softmax, {int(np.isfinite(tree.value[node]).sum())} classes)"
        return "linear\n(softmax)" if tree.task == "classification" else "linear"

    def describe(self, tree, node, fmt, class_name):
        nnz = tree.leaf_coef[node * tree.n_outputs:(node + 1) * tree.n_outputs].nnz
        if tree.task == "classification":
            if tree.leaf_classes is not None:
                kept = np.flatnonzero(np.isfinite(tree.value[node]))
                names = ", ".join(class_name(int(k)) for k in kept)
                return f"leaf {node}: linear softmax over {kept.size} classes [{names}], {nnz} non-zero weights"
            return f"leaf {node}: linear softmax, {nnz} non-zero weights"
        vals = ", ".join(fmt(v) for v in tree.value[node])
        return f"leaf {node}: linear, intercept [{vals}], {nnz} non-zero weights"


#: leaf_type name -> leaf model
LEAF_MODELS = {model.name: model for model in (ConstantLeaf(), LinearLeaf())}
