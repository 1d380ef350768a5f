"""Initial trees for TAO: random complete trees, CART trees, warm starts."""

import numpy as np
import scipy.sparse as sp
from sklearn.cluster import KMeans
from sklearn.linear_model import LogisticRegression
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from ..model.kinds import AXIS, LEAF, OBLIQUE
from ..model.leaves import LEAF_MODELS
from ..model.tree import Tree, complete_tree
from ..utils.solver_warnings import sklearn_convergence_ignored
from .node_solvers import LIBLINEAR_LOCK, solve_axis_exact

#: bytes of sampled rows the random initialisation may hold (float64)
_INIT_SAMPLE_BYTES = 32 * 2**20
#: weights (decision nodes x features) above which a random initial tree is "wide": its hyperplanes
#: then span only the features its row sample uses (at most this many weights in all), never a
#: dense matrix of every feature
_INIT_WEIGHT_ENTRIES = 2**22


def random_tree(take_rows, n_samples, n_features, depth, n_outputs, node_type, *, task, leaf_type, rng):
    """Complete tree of ``depth`` with random decision nodes (thesis section 2.1).

    Oblique nodes get a unit-norm Gaussian weight vector, axis nodes a random
    feature. Each hyperplane (threshold) passes through the midpoint of two
    random sample points *that reach the node*: nodes are set top-down on a
    row sample routed through the nodes already set, so every initial split
    cuts the node's own region. (Anchoring on points drawn from the whole
    data set leaves deep nodes with empty children: on a deep tree most
    leaves received no point, and the dead branches were pruned away.)
    Leaves start at zero; the first TAO leaf step fits them.
    ``take_rows(indices)`` returns those training rows (scaled; dense, or
    CSR), so only the sampled rows are ever read.

    A wide tree (more than ``_INIT_WEIGHT_ENTRIES`` decision-node weights,
    e.g. 10^6 sparse features) draws its nodes on the features its sample
    uses (not all zero there; a random subset of them if still too many):
    a hyperplane over features no sampled row has would not cut the sample
    anyway, and the dense weights of every feature would not fit in memory.
    """
    tree = complete_tree(depth, n_features, n_outputs, node_type, task=task, leaf_type=leaf_type)
    internal = np.flatnonzero(~tree.is_leaf)
    n_sample = min(n_samples, max(64, 8 * 2**depth), max(64, _INIT_SAMPLE_BYTES // (8 * max(n_features, 1))))
    sample = take_rows(np.sort(rng.choice(n_samples, size=n_sample, replace=False)))
    columns = None  # the sample's columns the nodes are drawn on (None: all)
    if internal.size * n_features > _INIT_WEIGHT_ENTRIES:
        used = np.unique(sample.indices) if sp.issparse(sample) else np.flatnonzero(np.any(sample != 0, axis=0))
        budget = max(1, _INIT_WEIGHT_ENTRIES // max(internal.size, 1))
        columns = np.sort(rng.choice(used, size=budget, replace=False)) if used.size > budget else used
        if columns.size == 0:  # an all-zero sample: any one feature
            columns = np.zeros(1, dtype=np.intp)
        sample = sample[:, columns]
    sample = sample.toarray() if sp.issparse(sample) else sample
    width = n_features if columns is None else columns.size
    members = {0: np.arange(n_sample)}
    W = rng.standard_normal((internal.size, width)) if node_type == "oblique" else None
    if W is not None:
        W /= np.linalg.norm(W, axis=1, keepdims=True)
    features = rng.randint(0, width, size=internal.size)
    bias = np.empty(internal.size)
    for k, node in enumerate(internal):  # breadth-first: parents before children
        rows = members.pop(node, np.empty(0, dtype=np.intp))
        pool = rows if rows.size >= 2 else np.arange(n_sample)
        first, second = rng.choice(pool.size, size=2, replace=pool.size < 2)
        # midpoint of two rows: through the node's points, but (unlike a single
        # anchor row) with no point exactly on the hyperplane unless they coincide
        anchor = (sample[pool[first]] + sample[pool[second]]) / 2
        if node_type == "oblique":
            bias[k] = -W[k] @ anchor
            margin = sample[rows] @ W[k] + bias[k]
        else:
            # a feature on which the two rows differ, so the threshold cuts the node
            differ = np.flatnonzero(sample[pool[first]] != sample[pool[second]])
            if differ.size:
                features[k] = differ[rng.randint(differ.size)]
            bias[k] = anchor[features[k]]
            margin = sample[rows, features[k]] - bias[k]
        members[tree.children_left[node]] = rows[margin < 0]
        members[tree.children_right[node]] = rows[margin >= 0]
    if columns is not None:  # back to every feature's index
        features = columns[features]
        if W is not None:
            W = sp.csr_matrix((W.ravel(), np.tile(columns, internal.size),
                               np.arange(0, W.size + 1, width)), shape=(internal.size, n_features))
    if node_type == "oblique":
        tree.set_decision(internal, W, bias)
    else:
        tree.feature[internal] = features
        tree.threshold[internal] = bias
    return tree


def cart_tree(X, y, sample_weight, depth, n_outputs, node_type, *, task, leaf_type, random_state):
    """Tree grown by scikit-learn's CART, converted to our arrays.

    CART sends ``x[f] <= t`` left; we send ``x[f] >= t'`` right, so
    ``t' = nextafter(t, +inf)`` reproduces its routing exactly. For oblique
    trees each split becomes a one-hot weight vector.
    """
    Est = DecisionTreeClassifier if task == "classification" else DecisionTreeRegressor
    cart = Est(max_depth=depth, random_state=random_state).fit(X, y, sample_weight=sample_weight)
    t = cart.tree_
    n_nodes = t.node_count
    leaf = t.children_left < 0
    kind = np.where(leaf, LEAF, OBLIQUE if node_type == "oblique" else AXIS).astype(np.int8)
    threshold = np.where(leaf, 0.0, np.nextafter(t.threshold, np.inf))
    D = X.shape[1]
    tree = Tree(
        children_left=t.children_left.astype(np.int32),
        children_right=t.children_right.astype(np.int32),
        kind=kind,
        weights=sp.csr_matrix((n_nodes, D)),
        bias=np.zeros(n_nodes),
        feature=np.where(kind == AXIS, t.feature, -1).astype(np.int32),
        threshold=np.where(kind == AXIS, threshold, 0.0),
        value=LEAF_MODELS[leaf_type].from_cart(task, _cart_values(cart, task, n_outputs)),
        leaf_coef=sp.csr_matrix((n_nodes * n_outputs, D)) if LEAF_MODELS[leaf_type].has_coef else None,
        task=task,
        leaf_type=leaf_type,
    )
    if node_type == "oblique":
        internal = np.flatnonzero(~leaf)
        W = np.zeros((internal.size, X.shape[1]))
        W[np.arange(internal.size), t.feature[internal]] = 1.0
        tree.set_decision(internal, W, -threshold[internal])
    return tree


#: rows (a seeded uniform sample above this) that the clustering initial tree clusters and fits its nodes on
_CLUSTER_SAMPLE_ROWS = 20000


def cluster_tree(X, y, sample_weight, depth, n_classes, node_type, *, leaf_type, alpha, rng, leaf_classes=None):
    """Greedy hierarchical-clustering initial tree of a softmax tree (thesis section 2.3.2).

    1. Cluster into ``L = 2**depth`` clusters by k-means: the class
       prototypes (each class's weighted mean row, weighted by the class's
       weight; the thesis' faster variant) when there are at least ``L``
       classes, else the training rows themselves (a seeded sample of at most
       :data:`_CLUSTER_SAMPLE_ROWS`), as in the thesis' first description.
    2. Pair the clusters greedily, level by level: the two closest (Euclidean
       distance between weighted means) become siblings, then the two closest
       of the rest, and so on; the pairs are clustered the same way one level
       up, until one root remains. Cluster ``j`` is the leaf it lands on, so
       similar classes sit near each other in the tree.
    3. The thesis starts TAO from this assignment of points to leaves. Our
       TAO routes points, so each decision node gets the hyperplane that best
       sends its points to the side holding their cluster: an l1 logistic
       regression (liblinear, penalty ``alpha`` per unit of weighted loss,
       like the oblique node surrogate) of "right subtree" against "left
       subtree" on the sampled rows assigned below the node, or the exact
       weighted 0/1 axis split for axis nodes. A side with no rows gets
       ``w = 0`` and a bias that sends everything to the other side.
    4. Leaves start from the class distribution of the rows assigned to them
       (the overall one where none are); the first TAO leaf step refits them.

    ``X`` (NumPy or scipy CSR, in internal scaled units) is read in full
    once, for the prototypes (a sparse class-indicator product); the node
    fits see the sample only.
    """
    n = X.shape[0]
    L = 2**depth
    Y = sp.csr_matrix((sample_weight, (np.arange(n), y)), shape=(n, n_classes))  # weighted class indicator
    class_weight = np.asarray(Y.sum(axis=0)).ravel()
    sample = np.arange(n) if n <= _CLUSTER_SAMPLE_ROWS else np.sort(rng.choice(n, _CLUSTER_SAMPLE_ROWS, replace=False))
    Xs, ys, ws = X[sample], y[sample], sample_weight[sample]
    seed = int(rng.randint(2**31 - 1))
    present = np.flatnonzero(class_weight > 0)
    with sklearn_convergence_ignored():  # fewer distinct points than clusters: some stay empty
        if present.size >= L:
            # class means; sparse rows keep them sparse (a text set of many classes: a class per row of
            # a wide sparse matrix), which KMeans takes as they are, far cheaper than their dense form
            prototypes = sp.diags(1.0 / class_weight[present]) @ (Y.T @ X)[present]
            prototypes = prototypes.tocsr() if sp.issparse(X) else np.asarray(prototypes)
            km = KMeans(L, n_init=4, random_state=seed).fit(prototypes, sample_weight=class_weight[present])
            labels, centers = km.labels_, km.cluster_centers_
            if leaf_classes is not None and np.bincount(labels, minlength=L).max() > leaf_classes:
                labels, centers = _capacity_clusters(prototypes, class_weight[present], centers, leaf_classes)
            cluster_of_class = np.zeros(n_classes, dtype=np.intp)  # a class of weight 0 has no cluster: any will do
            cluster_of_class[present] = labels
            unit = cluster_of_class[ys]
        else:
            km = KMeans(min(L, sample.size), n_init=1, max_iter=100, random_state=seed).fit(Xs, sample_weight=ws)
            unit, centers = km.labels_, km.cluster_centers_
    means = np.zeros((L, X.shape[1]))
    means[:centers.shape[0]] = centers
    weights = np.bincount(unit, weights=ws, minlength=L)
    leaf_of_unit = _greedy_hierarchy(means, weights, depth)

    tree = complete_tree(depth, X.shape[1], n_classes, node_type, task="classification", leaf_type=leaf_type)
    leaf = leaf_of_unit[unit]
    internal = np.flatnonzero(~tree.is_leaf)
    W, bias = np.zeros((internal.size, X.shape[1])), np.zeros(internal.size)
    for j, node in enumerate(internal):
        below = _leaves_below(tree, node)
        rows = np.flatnonzero(np.isin(leaf, below))
        target = np.isin(leaf[rows], _leaves_below(tree, tree.children_right[node]))
        split = _separate(Xs[rows], target, ws[rows], node_type, alpha)
        if node_type == "oblique":
            W[j], bias[j] = split
        else:
            tree.feature[node], tree.threshold[node] = split
    if node_type == "oblique":
        tree.set_decision(internal, W, bias)
    counts = np.zeros((tree.n_nodes, n_classes))
    np.add.at(counts, (leaf, ys), ws)
    empty = counts.sum(axis=1) == 0
    counts[empty] = class_weight
    tree.value = LEAF_MODELS[leaf_type].from_cart("classification", counts / counts.sum(axis=1, keepdims=True))
    return tree


#: rounds of capacity-bounded assignment and centre update in :func:`_capacity_clusters`
_CAPACITY_ROUNDS = 10


def _capacity_clusters(points, weight, centers, capacity, rounds=_CAPACITY_ROUNDS):
    """Cluster labels of ``points`` with at most ``capacity`` points per cluster where possible.

    Starts from ``centers`` (k-means') and alternates, at most ``rounds``
    times or until the labels stop changing: an assignment, heaviest point
    first, of each point to the nearest centre that still has room (once
    every cluster is full, to the nearest centre: such points are lost to
    the leaf limit whatever their cluster), then every non-empty cluster's
    centre moves to the weighted mean of its points. Heavy classes thus
    keep their nearest cluster and the rarest surplus classes move, the
    fewest rows lost to the limit a greedy choice gives.

    Returns ``(labels, centers)``; ``points`` may be a scipy sparse matrix.
    """
    n, L = points.shape[0], centers.shape[0]
    order = np.argsort(-weight, kind="stable")
    sq_points = np.asarray(points.multiply(points).sum(axis=1)).ravel() if sp.issparse(points) \
        else np.einsum("ij,ij->i", points, points)
    labels = None
    for _ in range(rounds):
        d = sq_points[:, None] - 2 * np.asarray(points @ centers.T) + np.einsum("ij,ij->i", centers, centers)[None, :]
        preference = np.argsort(d, axis=1, kind="stable")
        room = np.full(L, capacity)
        new = np.empty(n, dtype=np.intp)
        for i in order:
            open_ = preference[i][room[preference[i]] > 0]
            new[i] = open_[0] if open_.size else preference[i, 0]
            room[new[i]] -= 1
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        member = sp.csr_matrix((weight, (labels, np.arange(n))), shape=(L, n))
        total = np.asarray(member.sum(axis=1)).ravel()
        filled = total > 0
        moved = np.asarray(member @ points)[filled] if not sp.issparse(points) else (member @ points).toarray()[filled]
        centers = centers.copy()
        centers[filled] = moved / total[filled, None]
    return labels, centers


def _greedy_hierarchy(means, weights, depth):
    """Leaf node id (of a breadth-first complete tree of ``depth``) of each of ``2**depth`` clusters.

    Level by level, the closest remaining pair of (super)clusters become
    siblings; a merged supercluster is not merged again on the same level
    (thesis section 2.3.2), so the hierarchy is a complete binary tree.
    """
    members = [[j] for j in range(means.shape[0])]  # clusters under each current supercluster, left to right
    for _ in range(depth):
        sq = np.einsum("ij,ij->i", means, means)
        d = sq[:, None] + sq[None, :] - 2 * means @ means.T  # squared distances without an (M, M, D) temporary
        a, b = np.triu_indices(means.shape[0], 1)
        used = np.zeros(means.shape[0], dtype=bool)
        pairs = []
        for k in np.argsort(d[a, b], kind="stable"):  # closest first; ties in index order
            if not (used[a[k]] or used[b[k]]):
                used[a[k]] = used[b[k]] = True
                pairs.append((a[k], b[k]))
                if 2 * len(pairs) == means.shape[0]:  # all paired: the remaining pairs are all taken
                    break
        w = np.array([weights[i] + weights[j] for i, j in pairs])
        means = np.array([(weights[i] * means[i] + weights[j] * means[j]) / w[m] if w[m] > 0
                          else (means[i] + means[j]) / 2 for m, (i, j) in enumerate(pairs)])
        members = [members[i] + members[j] for i, j in pairs]
        weights = w
    first_leaf = 2**depth - 1  # breadth-first numbering: the leaves come last, left to right
    leaf_of_unit = np.empty(2**depth, dtype=np.intp)
    leaf_of_unit[members[0]] = first_leaf + np.arange(2**depth)
    return leaf_of_unit


def _leaves_below(tree, node):
    """Leaf ids under ``node`` of a complete breadth-first tree."""
    lo = hi = node
    while tree.children_left[lo] >= 0:
        lo, hi = tree.children_left[lo], tree.children_right[hi]
    return np.arange(lo, hi + 1)


#: fewer rows under a node than this: its initial split is the exact axis split, not a logistic fit
_MIN_LOGISTIC_ROWS = 4


def _separate(X, target, weight, node_type, alpha):
    """A split sending the rows with ``target`` right: ``(w, b)`` (oblique) or ``(feature, threshold)`` (axis).

    Oblique: an l1 logistic regression (liblinear, ``C = 1/alpha``), which
    accepts CSR rows as they are; under :data:`_MIN_LOGISTIC_ROWS` rows, the
    exact axis split written as an oblique node. Rows all on one side: the
    split sends everything there (features are max-abs scaled: |x| <= 1 on
    training rows).
    """
    side = int(target.any()) - int((~target).any())  # 1: all right, -1: all left, 0: both
    if target.size == 0 or side != 0:
        side = side or -1
        if node_type == "oblique":
            return np.zeros(X.shape[1]), float(side)
        return 0, -2.0 * side
    if node_type == "axis" or target.size < _MIN_LOGISTIC_ROWS:
        # a handful of rows: the best single-feature threshold separates them as well as a
        # logistic fit would (and scikit-learn warns that 2 classes in 3 rows look like regression)
        feature, threshold = solve_axis_exact(X, target, weight)
        if node_type == "axis":
            return feature, threshold
        w = np.zeros(X.shape[1])
        if not np.isfinite(threshold):  # rows that no feature separates: all to one side
            return w, float(np.sign(threshold) * -1.0)
        w[feature] = 1.0
        return w, -float(threshold)
    model = LogisticRegression(C=1.0 / alpha, l1_ratio=1.0, solver="liblinear", intercept_scaling=10.0,
                               random_state=0, tol=1e-3, max_iter=100)
    with LIBLINEAR_LOCK, sklearn_convergence_ignored():
        model.fit(X, target.astype(np.int8), sample_weight=weight)
    return model.coef_[0].copy(), float(model.intercept_[0])


def _cart_values(cart, task, n_outputs):
    """CART's node outputs in our layout: class distributions over all ``n_outputs`` classes, or means.

    ``y`` holds class codes; CART has a column only for the codes it saw (a
    forest tree's sample can lack a rare class), so its columns are put
    under their codes and the others are 0.
    """
    t = cart.tree_
    if task == "regression":
        return t.value[:, :, 0].astype(np.float64)
    shares = t.value[:, 0, :] / t.value[:, 0, :].sum(axis=1, keepdims=True)
    value = np.zeros((t.node_count, n_outputs))
    value[:, cart.classes_.astype(np.intp)] = shares
    return value


def check_warm_start(init, n_features, n_outputs, task, leaf_type):
    """Validate a tree given as ``init`` and return a private copy."""
    if not isinstance(init, Tree):
        raise TypeError(f"init must be 'random', 'cart', a Tree or a fitted taodist estimator; got {type(init).__name__}.")
    for name, have, want in (
        ("n_features", init.n_features, n_features),
        ("n_outputs", init.n_outputs, n_outputs),
        ("task", init.task, task),
        ("leaf_type", init.leaf_type, leaf_type),
    ):
        if have != want:
            raise ValueError(f"The warm-start tree has {name}={have!r} but this fit needs {name}={want!r}.")
    return init.copy()
