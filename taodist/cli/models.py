"""Saved models from the command line: ``predict`` with one, ``inspect`` one (size, cost, rules, a drawing)."""

import json

import click
import numpy as np

from ..estimators.execution import clip_columns
from ..io import load, load_metadata, to_zarr
from ..io.atomic import atomic_write, check_replaceable, contains
from ..io.data import file_suffix, read_features
from ..model.export import export_text
from ..plot import plot_embedding_tree, plot_tree
from ..utils.messages import one_line
from ._common import cli_errors


@click.command()
@click.argument("model_path", type=click.Path(exists=True, dir_okay=False))
@click.argument("data", type=click.Path(exists=True))
@click.option("-o", "--output", required=True, type=click.Path(),
              help="Predictions: a .npy file (an existing file is replaced), or a .zarr store (chunked).")
@click.option("--overwrite", is_flag=True,
              help="Replace an existing .zarr OUTPUT if taodist wrote it (other folders are never replaced).")
@click.option("--proba", is_flag=True,
              help="Write class probabilities (one column per class, in the order of the model's classes) "
                   "instead of predicted classes (classifiers only).")
def predict(model_path, data, output, overwrite, proba):
    """Predict with MODEL_PATH on DATA (.npz with X or X_test, .npy, or a Zarr store).

    A TAOEmbedding model writes each row's coordinates in the embedding
    (its ``transform``: one column per component).
    """
    suffix = file_suffix(output)
    if suffix not in (".npy", ".zarr"):
        raise click.ClickException(f"Unsupported output {output}: its name must end in .npy (one file) or .zarr "
                                   "(a chunked store).")
    with cli_errors():
        for source in (model_path, data):
            if contains(output, source):
                raise click.ClickException(f"Refusing to write to {output}: it would replace the input {source}; "
                                           "choose a new output path.")
        if suffix == ".zarr":
            check_replaceable(output, overwrite)  # before any work: a refused write costs nothing
        model = _load_model(model_path)
        if proba and not hasattr(model, "predict_proba"):
            raise click.ClickException(f"--proba needs a classifier; {model_path} holds a {type(model).__name__}.")
        X = read_features(data)
        embeds = not hasattr(model, "predict")  # a TAOEmbedding: its output is the rows' coordinates
        if embeds:
            pred = _embed(model, X, data)
        else:
            pred = model.predict_proba(X) if proba else model.predict(X)
        if suffix == ".zarr":
            written = to_zarr(pred, output, dtype=np.float64, overwrite=overwrite)
        else:
            pred = np.asarray(pred.compute() if hasattr(pred, "compute") else pred)
            if pred.dtype.kind not in "biuf":
                raise click.ClickException(f"This model predicts {pred.dtype} labels (e.g. {str(pred.flat[0])!r}); "
                                           ".npy and .zarr outputs hold numbers only: fit with numeric class labels.")
            written = atomic_write(output, lambda fh: np.save(fh, pred))  # a file object: np.save adds no suffix
    if embeds:
        click.echo(f"wrote {written} ({X.shape[0]} rows x {model.n_components} coordinates)")
    else:
        click.echo(f"wrote {written} ({X.shape[0]} predictions)")


def _embed(model, X, data):
    """A TAOEmbedding's coordinates of ``X``; a lazy Zarr ``X`` stays lazy, one row chunk at a time."""
    if X.shape[1] != model.n_features_in_:
        raise click.ClickException(f"{data} has {X.shape[1]} features; the model was fitted on "
                                   f"{model.n_features_in_}.")
    if not hasattr(X, "map_blocks"):
        return model.transform(X)
    X = X.rechunk({1: -1})  # whole rows per chunk: the tree reads every feature of a row
    return X.map_blocks(model.transform, dtype=np.float64, chunks=(X.chunks[0], (model.n_components,)),
                        meta=np.empty((0, 0), dtype=np.float64))


@click.command()
@click.argument("model_path", type=click.Path(exists=True, dir_okay=False))
@click.option("--rules", is_flag=True, help="Print the tree's rules (single trees).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Draw the tree to this PNG: each node's weights (as an image when features are pixels); "
                   "a TAOEmbedding beside its embedding coloured by leaf (of the --data rows if given).")
@click.option("--tree", "tree_index", type=click.IntRange(0), default=0, show_default=True,
              help="Which tree of a forest --plot draws.")
@click.option("--image-shape", default=None, metavar="HxW",
              help="Draw weights as HxW images (default: square images when the feature count is a square).")
@click.option("--plot-depth", type=click.IntRange(0), default=None, help="Draw only this many levels.")
@click.option("--data", "data", type=click.Path(exists=True), default=None,
              help="Also average the inference cost over the rows of this data (.npz with X or X_test, .npy, "
                   "or a Zarr store) instead of over leaves only; a TAOEmbedding's --plot draws these rows.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the model's facts as one JSON object (for scripts) instead of text.")
def inspect(model_path, rules, plot_path, tree_index, image_shape, plot_depth, data, as_json):
    """Size, sparsity, inference cost and metadata of a saved model; its rules with --rules, a drawing with --plot.

    Inference cost (thesis Appendix A): FLOPs per prediction are the non-zero
    parameters on the root-to-leaf path; classes scored are the classes the
    reached leaf gives a non-zero probability (a softmax leaf limited to k
    classes scores k). Both are averaged over the leaves, each leaf counting
    once, and with --data over the rows of that data (leaves weighed by use).

    A TAOEmbedding also shows what its tree says about the embedding (thesis
    Figures 4.2-4.3): each decision node's largest positive and negative
    weights by feature, each leaf's training points, region (box and
    centroid of their coordinates) and class counts (when fitted with labels).
    """
    if plot_path and contains(plot_path, model_path):  # checked before anything is printed
        raise click.ClickException(f"--plot {plot_path} would replace the model itself; give a new .png path.")
    model = _load_model(model_path)  # checked: the metadata and the drawing below read a valid file
    trees = [e.tree_ for e in model.estimators_] if hasattr(model, "estimators_") else [model.tree_]
    if plot_path and tree_index >= len(trees):  # refused before anything is printed
        raise click.ClickException(f"--tree {tree_index}: {model_path} holds {len(trees)} tree(s) (0 to "
                                   f"{len(trees) - 1}).")
    if as_json:
        if rules or plot_path or data:
            raise click.ClickException("--json prints the model's facts only; use it without --rules, --plot "
                                       "and --data.")
        facts = _facts(model, trees, load_metadata(model_path))
        if callable(getattr(model, "explain", None)):  # a TAOEmbedding
            facts["embedding"] = model.explain()
        click.echo(json.dumps(facts, sort_keys=True))
        return
    click.echo(f"{type(model).__name__}: {len(trees)} tree(s)")
    click.echo(f"leaves {sum(t.n_leaves() for t in trees)}, decision nodes {sum(t.n_decision_nodes() for t in trees)}, "
               f"non-zero weights {sum(t.n_nonzero_weights() for t in trees)}, "
               f"parameters {sum(t.n_parameters() for t in trees)}, max depth {max(t.max_depth for t in trees)}")
    encoder = getattr(model, "encoder_", None)
    if encoder is not None and not encoder.is_identity:
        click.echo(encoder.summary())
    directed = _default_directions(trees)
    if directed:
        click.echo(f"axis nodes with a learned direction for missing values: {directed}")
    for line in _inference_cost_lines(trees, data, encoder, getattr(model, "clip_bounds_", None)):
        click.echo(line)
    meta = load_metadata(model_path)
    if meta:
        click.echo("metadata: " + json.dumps(meta, sort_keys=True))
    if callable(getattr(model, "explain", None)) and not rules:  # --rules prints the same beside each node
        for line in _embedding_lines(model.explain()):
            click.echo(line)
    if rules:
        if len(trees) != 1:
            raise click.ClickException("--rules prints a single tree; this model is a forest.")
        click.echo(export_text(model), nl=False)
    if plot_path:
        shape = None
        if image_shape:
            try:
                shape = tuple(int(v) for v in image_shape.lower().split("x"))
            except ValueError:
                raise click.BadParameter(f"expected HxW such as 28x28, got {image_shape!r}", param_hint="--image-shape")
        try:
            if callable(getattr(model, "explain", None)):  # a TAOEmbedding: the tree beside the embedding
                rows = None
                if data is not None:
                    with cli_errors():
                        rows = read_features(data)
                        rows = rows.compute() if hasattr(rows, "compute") else rows
                plot_embedding_tree(model, rows, plot_path, image_shape=shape, max_depth=plot_depth)
            else:
                plot_tree(model, plot_path, tree_index=tree_index, image_shape=shape, max_depth=plot_depth)
        except (ValueError, ImportError, OSError) as exc:
            raise click.ClickException(one_line(exc))
        click.echo(f"wrote {plot_path}")


def _embedding_lines(info):
    """``taodist inspect``'s lines on a tree embedding: decision nodes' top features, leaves' regions and classes."""
    def number(v):
        return f"{v:.3g}"

    lines = [f"embedding in {info['n_components']} components; decision nodes (largest weights: + sends right, "
             "- left):"]
    for node in info["decision_nodes"]:
        plus = ", ".join(f"{t['feature']} ({number(t['weight'])})" for t in node["top_positive"]) or "none"
        minus = ", ".join(f"{t['feature']} ({number(t['weight'])})" for t in node["top_negative"]) or "none"
        seen = "" if node["n_train"] is None else f", {node['n_train']} training points"
        lines.append(f"  node {node['node']} (depth {node['depth']}, {node['n_nonzero']} non-zero weights{seen}): "
                     f"+ {plus}; - {minus}")
    lines.append("leaves, left to right:")
    for leaf in info["leaves"]:
        parts = [f"  leaf #{leaf['leaf']} (node {leaf['node']})"]
        if leaf["n_train"] is None:
            parts.append("no training statistics in this file")
        else:
            parts.append(f"{leaf['n_train']} training points")
        if leaf["box"] is not None:
            lo, hi = leaf["box"]
            parts.append("region " + " x ".join(f"[{number(a)}, {number(b)}]" for a, b in zip(lo, hi))
                         + ", centroid (" + ", ".join(number(c) for c in leaf["centroid"]) + ")")
        if leaf["class_counts"] is not None:
            hist = " ".join(f"{c}:{k}" for c, k in zip(info["classes"], leaf["class_counts"]) if k)
            parts.append(f"classes {hist or 'none'}")
        lines.append(", ".join(parts))
    return lines


def _default_directions(trees):
    """How many axis nodes learned where rows with a missing value go."""
    return sum(int((t.missing_column >= 0).sum()) for t in trees if t.missing_column is not None)


def _facts(model, trees, metadata):
    """What ``inspect --json`` prints: the model's kind, size and inputs, as JSON types."""
    facts = {
        "estimator": type(model).__name__,
        "n_trees": len(trees),
        "leaves": sum(t.n_leaves() for t in trees),
        "decision_nodes": sum(t.n_decision_nodes() for t in trees),
        "nonzero_weights": sum(t.n_nonzero_weights() for t in trees),
        "parameters": sum(t.n_parameters() for t in trees),
        "max_depth": max(t.max_depth for t in trees),
        "missing_value_directions": _default_directions(trees),
        "n_features_in": int(model.n_features_in_),
        "metadata": metadata,
    }
    if hasattr(model, "classes_"):
        facts["classes"] = [c.item() if hasattr(c, "item") else c for c in model.classes_]
    if hasattr(model, "feature_names_in_"):
        facts["feature_names_in"] = [str(c) for c in model.feature_names_in_]
    encoder = getattr(model, "encoder_", None)
    if encoder is not None and not encoder.is_identity:
        facts["encoded_features"] = encoder.feature_names_out_
    return facts


def _inference_cost_lines(trees, data, encoder=None, clip_bounds=None):
    """``taodist inspect``'s lines on inference cost, summed over a forest's trees (``data``'s rows encoded and
    clipped as the model's predictions take them)."""
    K = trees[0].n_outputs
    limits = {t.leaf_classes for t in trees}
    lines = []
    if limits != {None}:
        lines.append(f"softmax leaves limited to {', '.join(str(k) for k in sorted(limits, key=str))} of {K} classes")
    costs = [t.leaf_path_costs() for t in trees]
    flops = sum(float(f.mean()) for f, _ in costs)
    scored = sum(float(c.mean()) for _, c in costs)
    what = "classes scored" if trees[0].task == "classification" else "outputs"
    lines.append(f"per prediction, mean over leaves: {flops:.1f} FLOPs, {scored:.2f} {what} (of {K})")
    if data is not None:
        with cli_errors():
            X = read_features(data)
            X = np.asarray(X.compute() if hasattr(X, "compute") else X, dtype=np.float64)
            expected = trees[0].n_features if encoder is None else encoder.n_features_in_
            if X.shape[1] != expected:
                raise click.ClickException(f"{data} has {X.shape[1]} features; the model was fitted on "
                                           f"{expected}.")
            if encoder is not None:
                X = encoder.transform(X)
            X = clip_columns(X, clip_bounds)
            flops = sum(t.inference_flops(X) for t in trees)
            scored = sum(t.mean_classes_scored(X) for t in trees)
        lines.append(f"per prediction, mean over the {X.shape[0]} rows of {data}: {flops:.1f} FLOPs, "
                     f"{scored:.2f} {what} (of {K})")
    return lines


def _load_model(path):
    try:
        return load(path)
    except ValueError as exc:
        raise click.ClickException(str(exc))
