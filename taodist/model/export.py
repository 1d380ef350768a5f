"""Human-readable rules of a fitted tree."""

import numpy as np

from .kinds import AXIS, OBLIQUE


def export_text(model, *, feature_names=None, class_names=None, max_terms=8, decimals=3):
    """Text rules of a fitted tree, one line per node, indented by depth.

    Oblique nodes print their sparse hyperplane (the ``max_terms`` largest
    weights, then how many more), axis nodes ``x[f] >= t``; leaves print the
    predicted class (or value) and, for linear leaves, their sparsity.

    A :class:`~taodist.TAOEmbedding` also prints what its tree says about
    the embedding (:meth:`~taodist.TAOEmbedding.explain`, thesis Figures
    4.2-4.3): after each decision node, its ``max_terms`` largest positive
    (``+``, towards "yes") and negative (``-``, towards "no") weights by
    name; after each leaf, its number from left to right, how many training
    points reach it, the region of the embedding they cover (the box
    ``[min, max]`` of each coordinate, and the centroid), and the count of
    each class among them when ``fit`` was given labels.

    Parameters
    ----------
    model : fitted TAOClassifier, TAORegressor, TAOForestClassifier, TAOForestRegressor, LapTAOClassifier, \
LapTAORegressor, TAOEmbedding or Tree
        A forest prints each of its trees after a ``tree k of n`` line.
    feature_names : list of str, optional
        Defaults to the names of the estimator's encoded columns when it was
        fitted on a DataFrame or with missing values or categorical columns
        (``encoder_.feature_names_out_``: ``age``, ``age is missing``,
        ``colour=red``, ...), or, for a TAOEmbedding fitted on a DataFrame,
        to its columns' names (``feature_names_in_``); else ``x0, x1, ...``.
    class_names : list of str, optional
        Defaults to the estimator's ``classes_``.
    max_terms : int, default=8
    decimals : int, default=3

    Returns
    -------
    text : str
        One line per node, children indented under their parent.
    """
    if hasattr(model, "estimators_"):  # a forest: its trees, which all see the forest's encoded columns
        names = feature_names if feature_names is not None else _encoded_names(model)
        classes = class_names if class_names is not None else (
            [str(c) for c in model.classes_] if hasattr(model, "classes_") else None)
        n = len(model.estimators_)
        return "".join(f"tree {k} of {n}\n" + export_text(est.tree_, feature_names=names, class_names=classes,
                                                              max_terms=max_terms, decimals=decimals)
                       for k, est in enumerate(model.estimators_))
    tree = getattr(model, "tree_", model)
    if class_names is None and hasattr(model, "classes_"):
        class_names = [str(c) for c in model.classes_]
    explains = callable(getattr(model, "explain", None))  # a TAOEmbedding (no import: it lives in a layer above)
    if feature_names is None:
        feature_names = _encoded_names(model)
        if feature_names is None and explains and getattr(model, "feature_names_in_", None) is not None:
            feature_names = [str(c) for c in model.feature_names_in_]
    names = feature_names if feature_names is not None else _DefaultNames(tree.n_features)
    if len(names) != tree.n_features:
        raise ValueError(f"feature_names has {len(names)} names but the tree has {tree.n_features} features.")
    notes = _embedding_notes(model.explain(n_top=max_terms, feature_names=feature_names), decimals) if explains else {}
    lines = []
    stack = [(0, 0, "")]
    while stack:
        node, depth, edge = stack.pop()
        pad = "|   " * depth + ("|--- " if depth else "")
        lines.append(pad + edge + _describe(tree, node, names, class_names, max_terms, decimals) + notes.get(node, ""))
        if tree.children_left[node] >= 0:
            stack.append((tree.children_left[node], depth + 1, "no:  "))
            stack.append((tree.children_right[node], depth + 1, "yes: "))
    return "\n".join(lines) + "\n"


def _embedding_notes(info, decimals):
    """``{node: text}`` appended to a tree embedding's lines: top features of its decision nodes, leaf regions."""
    f = f"{{:.{decimals}g}}".format
    notes = {}
    for node in info["decision_nodes"]:
        plus = ", ".join(t["feature"] for t in node["top_positive"]) or "none"
        minus = ", ".join(t["feature"] for t in node["top_negative"]) or "none"
        notes[node["node"]] = f"  [top +: {plus} | top -: {minus}]"
    classes = info["classes"]
    for leaf in info["leaves"]:
        parts = [f"leaf #{leaf['leaf']}"]
        if leaf["n_train"] is not None:
            parts.append(f"n={leaf['n_train']}")
        if leaf["box"] is not None:
            lo, hi = leaf["box"]
            parts.append("region " + " x ".join(f"[{f(a)}, {f(b)}]" for a, b in zip(lo, hi))
                         + " centroid (" + ", ".join(f(c) for c in leaf["centroid"]) + ")")
        if leaf["class_counts"] is not None:
            hist = " ".join(f"{c}:{k}" for c, k in zip(classes, leaf["class_counts"]) if k)
            parts.append(f"classes {hist or 'none'}")
        notes[leaf["node"]] = "  [" + ", ".join(parts) + "]"
    return notes


def _encoded_names(model):
    """The names of a model's encoded columns when they say more than ``x0, x1, ...`` (else None)."""
    encoder = getattr(model, "encoder_", None)
    if encoder is not None and (encoder.input_names_ is not None or not encoder.is_identity):
        return encoder.feature_names_out_
    return None


def _describe(tree, i, names, class_names, max_terms, decimals):
    f = f"{{:.{decimals}g}}"
    if tree.kind[i] == AXIS:
        return f"{names[tree.feature[i]]} >= {f.format(tree.threshold[i])}{missing_route(tree, i)}"
    if tree.kind[i] == OBLIQUE:
        row = tree.weights[i]
        order = np.argsort(-np.abs(row.data))
        terms = [f"{f.format(row.data[j])}*{names[row.indices[j]]}" for j in order[:max_terms]]
        more = f" + ... ({row.nnz - max_terms} more)" if row.nnz > max_terms else ""
        lhs = " + ".join(terms) if terms else "0"
        return f"{lhs}{more} + {f.format(tree.bias[i])} >= 0"
    return tree.leaf_model.describe(tree, i, f.format, lambda k: class_names[k] if class_names is not None else str(k))


def missing_route(tree, i):
    """``" (missing: yes)"`` / ``" (missing: no)"`` for an axis node with a default direction for missing values."""
    if tree.missing_column is None or tree.missing_column[i] < 0:
        return ""
    return f" (missing: {'yes' if tree.missing_right[i] else 'no'})"


class _DefaultNames:
    """``x0, x1, ...`` made on demand: a model of 10^8 sparse features names only the few its nodes use."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, j):
        return f"x{j}"
