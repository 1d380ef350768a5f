"""The tree embedding estimator: a sparse oblique tree learned jointly with a t-SNE or EE embedding.

Zharmagambetov (thesis 2022, chapter 4, Figure 4.1). The parametric
embedding ``min_F E(F(X)) + lambda phi(F)`` is split with auxiliary
coordinates ``Z = F(X)`` and solved by an augmented Lagrangian, alternating

* Z step: ``min_Z E(Z) + (mu / 2) ||Z - F(X) - Lambda / mu||^2``, the
  embedding's own optimiser warm-started from the last Z
  (:mod:`._tsne`, :mod:`._elastic`);
* F step: TAO regression of a tree with linear leaves to ``Z - Lambda / mu``,
  warm-started from the previous tree;
* multipliers: ``Lambda <- Lambda - mu (Z - F(X))``;

for ``mu = mu0 * mu_factor**k``. It starts from the free embedding ``Z0``
(``E`` alone) and the *direct fit*, a tree fitted to ``Z0``: the path's
first point, and the baseline it improves on. The structure is LapTAO's
(:mod:`taodist.laptao`), with an embedding step in place of the label step.

The augmented Lagrangian's F step is ``min_F lambda phi(F) + (mu / 2)
||Z - Lambda / mu - F(X)||^2``: divided by ``mu / 2``, a fit in the targets'
units with the penalty ``2 lambda / mu``, which falls as ``mu`` grows. The
thesis' experiments instead keep the tree's penalty the same at every step.
With a fixed penalty the Z step pulls ``Z`` ever closer to ``F(X)`` as ``mu``
grows, so each late tree step refits the tree's own output under the same
l1 penalty and shrinks it again: ``E(F(X))`` can rise late on the path, and
with sparse leaves the path may not improve on the direct fit at all. Taking
the penalty ``lambda / mu`` literally, with ``lambda`` a constant, is no cure
either: with ``lambda`` set for the last steps, the first steps' penalty is
``mu_last / mu0`` times larger (``1.4**19``, about 600, over 20 steps), which
prunes the early trees to one leaf. So the penalty of step ``k`` is the fixed one times ``(mu0 / mu_k)**penalty_decay``
(``mu_k`` the step's ``mu``): 0 keeps it fixed (the thesis' experiments), 1
is the augmented Lagrangian's ``lambda / mu`` with ``lambda`` chosen so that
the first step's penalty is the direct fit's, and the default: with it the
late trees keep following the embedding (``docs/embeddings-ablation.md``).
The estimator keeps the tree of lowest ``E(F(X))`` on the path, the direct
fit included, as early stopping keeps the best iterate, and can stop the
path once that objective has not improved for ``n_iter_no_change`` steps.
"""

import numbers
import time

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import check_is_fitted, check_random_state, validate_data

from ..estimators.execution import ResidentRows, cluster_fit, max_abs_scale
from ..model.prune import prune
from ..tao.initial_trees import cart_tree, random_tree
from ..utils.progress import report
from ..utils.rows import ACCEPT_SPARSE, as_rows, dense_sample, divide_columns
from ..utils.solver_warnings import silence_inner_solvers
from ._affinities import joint_affinities, neighbours_for, spectral_start
from ._elastic import ElasticEmbeddingObjective
from ._explain import explain, node_statistics
from ._tsne import TSNEObjective

#: method name -> the embedding objective (built from the joint affinities P; see ``_objective``)
OBJECTIVES = {"tsne": TSNEObjective, "ee": ElasticEmbeddingObjective}
#: TAO's tolerance in every tree step (TAORegressor's): a warm-started step that no longer improves stops early
TAO_TOL = 5e-3


class TAOEmbedding(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Nonlinear embedding (t-SNE or elastic embedding) with a sparse oblique tree as its out-of-sample mapping.

    The tree ``F`` and the embedding ``Z`` are learned together: an
    augmented Lagrangian alternates embedding steps, pulled towards the
    tree's output, and TAO regression steps fitting a tree with linear
    leaves to the embedding, until the two agree. It keeps the tree of
    lowest embedding objective ``E(F(X))`` along the path, the tree fitted
    to the free embedding (the direct fit) included, and maps new points
    with it (``transform``). In the thesis' setting (``leaf_C=None,
    init="random", n_iter_no_change=None, penalty_decay=0``) the joint
    tree's ``E(F(X))`` is lower than the direct fit's. The defaults, chosen
    on validation splits (``docs/embeddings-ablation.md``), have sparse
    linear leaves and a penalty that falls as ``mu`` grows
    (``penalty_decay=1``); with a fixed penalty, sparse leaves make the path
    no better than the direct fit.

    Parameters
    ----------
    method : {"tsne", "ee"}, default="tsne"
        The embedding objective: t-SNE's KL divergence (through openTSNE:
        ``pip install 'taodist[embedding]'``) or the elastic embedding.
    n_components : int, default=2
        Dimension of the embedding (t-SNE: at most 3).
    max_depth : int, default=4
        Depth of the initial tree (pruning can make it smaller; CART's can
        have fewer leaves).
    C : float, default=10.0
        Inverse l1 penalty of the tree (decision nodes and leaves), in units
        of the squared error of the embedding scaled to unit standard
        deviation (features are max-abs scaled). Smaller C: sparser trees
        that keep less of the embedding.
        The direct fit's and the first outer step's penalty; later steps
        scale it down with ``penalty_decay``.
    leaf_C : float or None, default=0.1
        Inverse l1 penalty of the linear leaves' coefficients, apart from
        the decision nodes' ``C``; None uses ``C`` (the thesis' setting). A
        linear leaf has up to ``n_features * n_components`` weights: with
        ``leaf_C=C`` they overfit the training points on many features (raw
        pixels), and the tree maps held-out points badly. The default was
        chosen on validation splits (``docs/embeddings-ablation.md``).
        Ignored for constant leaves.
    leaf_type : {"linear", "constant"}, default="linear"
        The leaves' model: a sparse linear map of the features (the thesis'),
        or one point of the embedding per leaf (every point reaching a leaf
        lands on the same spot).
    perplexity : float, default=30.0
        Effective number of neighbours of the entropic affinities.
    n_neighbors : int or None, default=None
        Neighbours per point of the kNN graph; None: ``3 * perplexity`` (at
        most ``n_samples - 1``). Must exceed ``perplexity``.
    repulsion : float, default=100.0
        The elastic embedding's ``alpha`` (weight of the repulsive term,
        with both weight sets normalised to sum 1). Ignored by t-SNE.
    mu0 : float, default=1e-5
        First penalty parameter of the augmented Lagrangian.
    mu_factor : float, default=1.4
        ``mu`` is multiplied by this after every outer step.
    penalty_decay : float, default=1.0
        The tree step of outer step ``k`` (``mu_k = mu0 * mu_factor**(k-1)``)
        has the penalties ``1 / C`` and ``1 / leaf_C`` times
        ``(mu0 / mu_k)**penalty_decay``. 0: the same penalty at every step
        (the thesis' experiments); 1: the augmented Lagrangian's
        ``lambda / mu``, with ``lambda`` such that the first step's penalty
        is the direct fit's. As ``mu`` grows the targets approach the tree's
        own output, and a fixed penalty shrinks the tree at every step; a
        falling one lets the tree follow the embedding. The default was
        chosen on validation splits (``docs/embeddings-ablation.md``).
    n_outer : int, default=20
        Outer (augmented-Lagrangian) steps; 0 gives the direct fit.
    z_iter : int, default=5
        Iterations of the embedding's optimiser per Z step (warm-started).
        A few keep each Z step near the tree's output, where the next tree
        step can follow it; run longer, the early steps (weak pull) move Z
        back towards the free embedding, which the tree cannot represent.
        Chosen on validation splits (``docs/embeddings-ablation.md``).
    free_iter : int, default=750
        Iterations of the free embedding (t-SNE: the first third with early
        exaggeration, as openTSNE does; EE: at most this many).
    n_iter_no_change : int or None, default=None
        Stop the outer steps once the embedding objective of the tree's
        output, ``E(F(X))``, has not improved on the best so far (the direct
        fit included) for this many steps in a row; the best tree is kept
        either way. None: run all ``n_outer`` steps (the thesis' setting,
        and the default: with ``penalty_decay=1`` the first few steps are
        often worse than the direct fit and the later ones better, so a
        small patience stops the path before it helps).
    tao_iter : int, default=15
        Most TAO iterations per tree step (the thesis' 15); a warm-started
        step stops earlier once its objective decreases by less than 0.5%.
    init : {"cart", "random"}, default="cart"
        The initial tree of the direct fit: scikit-learn's CART of
        ``max_depth`` fitted
        to the free embedding (its axis-aligned splits as the first oblique
        weights, one non-zero each), or a complete tree of random oblique
        hyperplanes (the thesis' setting).
    n_jobs : int or None, default=None
        Threads of the tree steps' node fits and of openTSNE (-1: all cores).
    random_state : int, RandomState instance or None, default=None
        Seeds the initial tree, TAO's sampling, the kNN search above 5,000
        rows and the spectral start above 1,000 rows.

    Attributes
    ----------
    embedding_ : ndarray of shape (n_samples, n_components)
        The tree's embedding of the training points, ``transform(X)``.
    coordinates_ : ndarray of shape (n_samples, n_components)
        The auxiliary coordinates ``Z`` at ``best_iteration_`` (the free
        embedding for the direct fit): the embedding steps' result, which
        the constraint ``Z = F(X)`` pulls towards ``embedding_``.
    free_embedding_ : ndarray of shape (n_samples, n_components)
        The unconstrained embedding ``Z0`` the path started from.
    affinities_ : scipy.sparse.csr_matrix of shape (n_samples, n_samples)
        The joint affinities ``P`` (symmetric, sum 1).
    tree_ : Tree
        Regression tree with linear leaves and ``n_components`` outputs: the
        tree of lowest embedding objective ``E(F(X))`` along the path (the
        direct fit included), pruned.
    best_iteration_ : int
        The outer step that gave ``tree_`` (0: the direct fit).
    history_ : list of dict
        Entry 0 is the direct fit, then one per outer step: ``mu``,
        ``penalty_factor`` (the tree step's penalties over ``1 / C`` and
        ``1 / leaf_C``: ``(mu0 / mu)**penalty_decay``, 1 for the direct fit),
        ``objective`` (the embedding objective of the tree's output,
        ``E(F(X))``, exact), ``z_objective`` (``E(Z)``), ``constraint``
        (``||Z - F(X)|| / ||Z||``), ``tree_l1`` (the tree's l1 norm, scaled
        units), ``n_parameters`` (the tree's non-zero parameters), seconds.
        The exact objectives cost O(N^2) per step (both summed over all
        pairs in row blocks; coincident points, as a constant leaf makes
        them, included).
    embedding_seconds_ : float
        Seconds spent on the affinities and the free embedding.
    node_counts_ : ndarray of shape (n_nodes,)
        Training points reaching each node of ``tree_`` (indexed by node
        id, as ``tree_.apply`` returns them; a decision node counts its
        subtree's points).
    node_bounds_ : ndarray of shape (n_nodes, 2, n_components)
        The region of the embedding each node covers: ``node_bounds_[i, 0]``
        the smallest and ``node_bounds_[i, 1]`` the largest coordinates
        (in ``embedding_``) of its training points; NaN for a node none
        reaches.
    node_centroids_ : ndarray of shape (n_nodes, n_components)
        The mean of those coordinates.
    classes_ : ndarray of shape (n_classes,)
        The labels of ``y``; only when ``fit`` was given ``y``.
    node_class_counts_ : ndarray of shape (n_nodes, n_classes)
        Training points of each class (in the order of ``classes_``)
        reaching each node; only when ``fit`` was given ``y``. Each row
        sums to the node's ``node_counts_``.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when fitted on a DataFrame with string column names.

    See Also
    --------
    LapTAOClassifier : The same augmented-Lagrangian structure for semi-supervised trees.
    sklearn.manifold.TSNE : t-SNE without an out-of-sample mapping.

    References
    ----------
    A. Zharmagambetov. Learning Decision Trees with Manifold Regularization.
    PhD thesis, University of California, Merced, 2022, chapter 4.

    M. A. Carreira-Perpinan. The elastic embedding algorithm for
    dimensionality reduction. ICML 2010.

    P. G. Policar, M. Strazar and B. Zupan. openTSNE: a modular Python
    library for t-SNE dimensionality reduction and embedding. JMLR 2024.

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from taodist import TAOEmbedding
    >>> X = load_digits().data[:200]
    >>> emb = TAOEmbedding(method="ee", max_depth=2, perplexity=10, n_outer=3, random_state=0)
    >>> emb.fit_transform(X).shape
    (200, 2)
    """

    _parameter_constraints = {
        "method": [StrOptions(set(OBJECTIVES))],
        "n_components": [Interval(numbers.Integral, 1, None, closed="left")],
        "max_depth": [Interval(numbers.Integral, 1, 20, closed="both")],
        "C": [Interval(numbers.Real, 0, None, closed="neither")],
        "leaf_C": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "leaf_type": [StrOptions({"linear", "constant"})],
        "perplexity": [Interval(numbers.Real, 1, None, closed="neither")],
        "n_neighbors": [Interval(numbers.Integral, 2, None, closed="left"), None],
        "repulsion": [Interval(numbers.Real, 0, None, closed="left")],
        "mu0": [Interval(numbers.Real, 0, None, closed="neither")],
        "mu_factor": [Interval(numbers.Real, 1, None, closed="left")],
        "penalty_decay": [Interval(numbers.Real, 0, None, closed="left")],
        "n_outer": [Interval(numbers.Integral, 0, None, closed="left")],
        "z_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "free_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_iter_no_change": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "tao_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "init": [StrOptions({"cart", "random"})],
        "n_jobs": [numbers.Integral, None],
        "random_state": ["random_state"],
    }

    def __init__(self, method="tsne", n_components=2, *, max_depth=4, C=10.0, leaf_C=0.1, leaf_type="linear",
                 perplexity=30.0, n_neighbors=None, repulsion=100.0, mu0=1e-5, mu_factor=1.4, penalty_decay=1.0,
                 n_outer=20, n_iter_no_change=None, z_iter=5, free_iter=750, tao_iter=15, init="cart", n_jobs=None,
                 random_state=None):
        self.method = method
        self.n_components = n_components
        self.max_depth = max_depth
        self.C = C
        self.leaf_C = leaf_C
        self.leaf_type = leaf_type
        self.perplexity = perplexity
        self.n_neighbors = n_neighbors
        self.repulsion = repulsion
        self.mu0 = mu0
        self.mu_factor = mu_factor
        self.penalty_decay = penalty_decay
        self.n_outer = n_outer
        self.n_iter_no_change = n_iter_no_change
        self.z_iter = z_iter
        self.free_iter = free_iter
        self.tao_iter = tao_iter
        self.init = init
        self.n_jobs = n_jobs
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    @silence_inner_solvers
    @cluster_fit
    def fit(self, X, y=None, *, client=None):
        """Learn the embedding of ``X`` and the tree that maps it.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training rows; sparse input stays sparse (kNN graph, tree steps).
        y : array-like of shape (n_samples,), optional
            Class labels, used only to count each node's training points
            per class (``classes_``, ``node_class_counts_``: the class
            histograms of :meth:`explain`, ``export_text`` and the plots).
            The embedding and the tree do not depend on them: with or
            without ``y`` the fit is the same.
        client : distributed.Client, optional
            Run the tree steps on this cluster (row chunks scattered to the
            workers once, TAO node fits as tasks: the same trees as in
            process). The affinities and the embedding steps run here.

        Returns
        -------
        self : TAOEmbedding
            The fitted estimator.
        """
        X = as_rows(validate_data(self, X, dtype=np.float64, accept_sparse=ACCEPT_SPARSE))
        labels = None if y is None else _class_labels(y, X.shape[0])  # checked before the long fit
        limit = OBJECTIVES[self.method].max_components
        if limit is not None and self.n_components > limit:
            raise ValueError(f"method={self.method!r} supports n_components <= {limit} (openTSNE's Barnes-Hut "
                             f"gradient); got n_components={self.n_components}. Use method='ee' for more.")
        k = neighbours_for(self.perplexity, self.n_neighbors, X.shape[0])
        rng = check_random_state(self.random_state)
        start = time.perf_counter()
        self.affinities_ = joint_affinities(X, self.perplexity, k, rng)
        objective = self._objective(self.affinities_)
        Z = objective.free(spectral_start(self.affinities_, self.n_components, rng), self.free_iter)
        self.free_embedding_ = Z.copy()
        self.embedding_seconds_ = time.perf_counter() - start
        scale = max_abs_scale(X)
        Xs = divide_columns(X, scale)
        tree, self.coordinates_ = self._augmented_lagrangian(Xs, Z, objective, rng, client)
        tree = prune(tree, Xs)
        tree.scale_features(1.0 / scale)
        self.tree_ = tree
        self.embedding_ = tree.predict(X)
        self._store_node_statistics(X, labels)
        return self

    def _store_node_statistics(self, X, labels):
        """The fitted ``node_*`` attributes (and ``classes_`` with labels), from the training rows' coordinates."""
        codes, n_classes = None, 0
        for stale in ("classes_", "node_class_counts_"):  # a refit without y must not keep the last fit's
            self.__dict__.pop(stale, None)
        if labels is not None:
            self.classes_, codes = np.unique(labels, return_inverse=True)
            n_classes = len(self.classes_)
        counts, bounds, centroids, class_counts = node_statistics(self.tree_, X, self.embedding_, codes, n_classes)
        self.node_counts_, self.node_bounds_, self.node_centroids_ = counts, bounds, centroids
        if class_counts is not None:
            self.node_class_counts_ = class_counts

    def _objective(self, P):
        """The method's objective on ``P``, with the parameters it takes."""
        if self.method == "tsne":
            return TSNEObjective(P, n_jobs=self.n_jobs or 1)
        return ElasticEmbeddingObjective(P, repulsion=self.repulsion)

    def _augmented_lagrangian(self, Xs, Z, objective, rng, client):
        """The direct fit, then the outer steps; returns the best tree (in embedding units) and its Z.

        The tree fits the targets divided by one scale, the free
        embedding's standard deviation, fixed for the whole path: ``C`` is
        then unit-free, and one scale for all components keeps the
        embedding's geometry.
        """
        n = Xs.shape[0]
        unit = float(Z.std()) or 1.0
        alpha = 1.0 / self.C
        leaf_alpha = None if self.leaf_C is None else 1.0 / self.leaf_C
        if self.init == "cart":
            tree = cart_tree(Xs, Z / unit, None, self.max_depth, self.n_components, "oblique", task="regression",
                             leaf_type=self.leaf_type, random_state=rng.randint(2**31 - 1))
        else:
            tree = random_tree(lambda i: dense_sample(Xs, i), n, Xs.shape[1], self.max_depth, self.n_components,
                               "oblique", task="regression", leaf_type=self.leaf_type, rng=rng)
        rows = ResidentRows(Xs, client=client, n_jobs=self.n_jobs)
        ones = np.ones(n)

        def tree_step(targets, factor):
            rows.tao_optimize(tree, targets / unit, ones, alpha=alpha * factor,
                              leaf_alpha=None if leaf_alpha is None else leaf_alpha * factor, max_iter=self.tao_iter,
                              tol=TAO_TOL, node_solver="fista", seed=int(rng.randint(2**31 - 1)))
            return tree.predict(Xs) * unit

        t0 = time.perf_counter()
        T = tree_step(Z, 1.0)
        self.history_ = [self._record(0, 0.0, 1.0, objective, Z, T, tree, 0.0, time.perf_counter() - t0)]
        best = (tree.copy(), Z.copy())
        self.best_iteration_ = 0
        Lam = np.zeros_like(Z)
        for k in range(1, self.n_outer + 1):
            mu = self.mu0 * self.mu_factor**(k - 1)
            t0 = time.perf_counter()
            Z = objective.minimise(Z, T + Lam / mu, mu, self.z_iter)
            t1 = time.perf_counter()
            factor = penalty_factor(self.mu0, mu, self.penalty_decay)
            T = tree_step(Z - Lam / mu, factor)
            t2 = time.perf_counter()
            Lam = Lam - mu * (Z - T)
            record = self._record(k, mu, factor, objective, Z, T, tree, t1 - t0, t2 - t1)
            self.history_.append(record)
            if record["objective"] < self.history_[self.best_iteration_]["objective"]:
                best, self.best_iteration_ = (tree.copy(), Z.copy()), k
            report("embedding_outer", iteration=k, n_outer=self.n_outer, mu=mu, objective=record["objective"],
                   constraint=record["constraint"])
            if self.n_iter_no_change is not None and k - self.best_iteration_ >= self.n_iter_no_change:
                break  # E(F(X)) has not improved for n_iter_no_change steps: the best tree is kept
        tree, Z = best
        _to_units(tree, unit)
        return tree, Z

    @staticmethod
    def _record(k, mu, factor, objective, Z, T, tree, z_seconds, tree_seconds):
        return {
            "iteration": k,
            "mu": mu,
            "penalty_factor": factor,
            "objective": objective.value(T),
            "z_objective": objective.value(Z),
            "constraint": float(np.linalg.norm(Z - T) / max(np.linalg.norm(Z), 1e-300)),
            "tree_l1": float(np.abs(tree.weights.data).sum()
                             + (0.0 if tree.leaf_coef is None else np.abs(tree.leaf_coef.data).sum())),
            "n_parameters": tree.n_parameters(),
            "z_seconds": z_seconds,
            "tree_seconds": tree_seconds,
        }

    def transform(self, X):
        """The tree's embedding of ``X``: out of sample, any rows with the training columns.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Rows with the training data's columns.

        Returns
        -------
        Z : ndarray of shape (n_samples, n_components)
            Each row's coordinates: the linear model of the leaf it reaches.
        """
        check_is_fitted(self, "tree_")
        X = validate_data(self, X, dtype=np.float64, reset=False, accept_sparse=ACCEPT_SPARSE)
        return self.tree_.predict(as_rows(X))

    def fit_transform(self, X, y=None, *, client=None):
        """Fit, then return the tree's embedding of the training rows (``embedding_``, equal to ``transform(X)``).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,), optional
            Class labels, for the nodes' class counts only (as in :meth:`fit`).
        client : distributed.Client, optional
            As for :meth:`fit`.

        Returns
        -------
        Z : ndarray of shape (n_samples, n_components)
            ``embedding_``.
        """
        return self.fit(X, y, client=client).embedding_

    def explain(self, n_top=7, feature_names=None):
        """What the tree says about the embedding, as plain Python (thesis Figures 4.2-4.3).

        Parameters
        ----------
        n_top : int, default=7
            How many features of each sign to list per decision node (the
            thesis shows the top 7 words).
        feature_names : list of str, optional
            Defaults to ``feature_names_in_`` when fitted on a DataFrame,
            else ``x0, x1, ...``.

        Returns
        -------
        explanation : dict
            ``n_components``; ``classes`` (the labels given to ``fit``, or
            None); ``decision_nodes``, one dict per decision node:
            ``node`` (id), ``depth``, ``n_nonzero`` (weights),
            ``top_positive`` and ``top_negative`` (lists of ``{"feature",
            "index", "weight"}``, largest ``|weight|`` first: positive
            weights send a point right, "yes", negative ones left);
            ``leaves``, one dict per leaf from left to right: ``leaf``
            (1, 2, ...), ``node``, ``depth``, ``n_nonzero`` (coefficients of
            its linear map), ``intercept``. Every node also has
            ``n_train`` (training points reaching it), ``box`` (``[min,
            max]`` of their coordinates: the region of the embedding the
            node covers), ``centroid`` and ``class_counts`` (aligned with
            ``classes``); these are None for a model saved before they
            were recorded, ``class_counts`` when ``fit`` had no labels, and
            ``box`` and ``centroid`` for a node no training point reaches.
        """
        check_is_fitted(self, "tree_")
        if isinstance(n_top, bool) or not isinstance(n_top, numbers.Integral) or n_top < 0:
            raise ValueError(f"n_top must be an integer >= 0; got {n_top!r}.")
        return explain(self, int(n_top), feature_names)

    @property
    def _n_features_out(self):
        """The output columns, for ``get_feature_names_out`` (``taoembedding0``, ...)."""
        return self.tree_.n_outputs

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


def penalty_factor(mu0, mu, decay):
    """The tree step's penalty at ``mu`` over the direct fit's: ``(mu0 / mu)**decay`` (1 at ``mu = mu0``)."""
    return float((mu0 / mu)**decay)


def _class_labels(y, n_samples):
    """``y`` as one class label per row, or a ValueError saying what is wrong with it in one line."""
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y.ravel()
    if y.ndim != 1:
        raise ValueError(f"y must hold one class label per row (1-D); got an array of shape {y.shape}. "
                         "TAOEmbedding uses y only to count each leaf's classes.")
    if y.shape[0] != n_samples:
        raise ValueError(f"y has {y.shape[0]} labels but X has {n_samples} rows; they must match.")
    try:
        kind = type_of_target(y)
    except ValueError as exc:  # e.g. NaN labels
        raise ValueError(f"y cannot be read as class labels: {' '.join(str(exc).split())}") from None
    if kind not in ("binary", "multiclass"):
        # scikit-learn's wording ("Unknown label type"), which its estimator checks look for
        raise ValueError(f"Unknown label type: y holds {kind} values; TAOEmbedding uses y only to count each leaf's "
                         "classes, so it must be class labels (or left out).")
    return y


def _to_units(tree, unit):
    """A tree fitted to targets divided by ``unit`` made to predict the targets themselves (in place)."""
    tree.value *= unit
    if tree.leaf_coef is not None:
        tree.leaf_coef = (tree.leaf_coef * unit).tocsr()
    if tree.leaf_range is not None:
        tree.leaf_range *= unit
