"""How good LapTAO's first label step is as the unlabelled points grow: MNIST's 60k images against MNIST-1M.

LapTAO's first label step (mu = 0) is Laplace learning on the kNN graph: the
labelled rows are pulled to their one-hot targets, every other row takes the
graph's harmonic interpolation of them. The tree steps that follow fit those
labels, so a tree can be no better than them where the labelled-only tree
is already as good. Known from the analysis of Laplace learning (Nadler,
Srebro and Zhou, NIPS 2009; Calder et al., "Poisson learning", ICML 2020):
with few labels among very many points the harmonic interpolation flattens
towards a constant away from the labelled points, and its argmax degrades.

For each data set and number of labelled rows (a seeded random choice, as in
``bench_laptao_scale.py``), this script builds the graph LapTAO builds (10-NN on
a 50-d PCA projection, entropic affinities, symmetrised), solves the first
label step and reports, over the unlabelled rows: the error of the argmax of
Z against the true labels, and how flat Z is (the median of each row's
largest entry minus its second largest).

With ``--tree`` it also fits ``TAOClassifier(max_depth=6, max_care_points=20000)`` to
MNIST-1M's 784 pixels with every unlabelled row labelled by the argmax of Z
(the labelled rows keep theirs), and reports its test error on the 10,000
MNIST test images: a tree fitted to the graph's labels in two stages, not
LapTAO's joint fit.

    python bench/bench_laptao_labels.py --labels 600 1020 10200
    python bench/bench_laptao_labels.py --labels 1020 10200 --tree
"""

import argparse
import time

import numpy as np

from bench_laptao_scale import MNIST_COPIES, deformed_mnist


def graph(Xg, k, seed):
    """LapTAO's graph Laplacian: the kNN graph's entropic affinities, symmetrised."""
    from taodist.laptao._graph import affinity_graph, graph_laplacian

    return graph_laplacian(affinity_graph(Xg, k, random_state=seed))


def first_label_step(L, y, n_labelled, seed, gamma=0.1):
    from taodist.laptao._label_step import LaplacianCG, solve_label_step
    from taodist.laptao._graph import bandwidth_order

    n, K = len(y), int(y.max()) + 1
    lab = np.sort(np.random.default_rng(seed).choice(n, n_labelled, replace=False))
    labelled = np.zeros(n, dtype=bool)
    labelled[lab] = True
    order, _ = bandwidth_order(L)
    L = L[order][:, order].tocsr()
    Y = np.zeros((n, K))
    Y[lab, y[lab]] = 1.0
    Z, info = solve_label_step(labelled[order], Y[order], L, gamma, 0.0, None, None, direct_max=0, tol=1e-5,
                               cg=LaplacianCG(L, gamma, 2))
    Z = Z[np.argsort(order)]
    un = ~labelled
    top2 = np.sort(Z[un], axis=1)[:, -2:]
    pseudo = np.where(labelled, y, Z.argmax(axis=1))
    return (100 * float(np.mean(Z[un].argmax(axis=1) != y[un])), float(np.median(top2[:, 1] - top2[:, 0])), info,
            pseudo)


def main():
    from sklearn.decomposition import PCA

    from taodist.datasets import load_dataset

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labels", nargs="+", type=int, default=[600, 1020, 10200])
    ap.add_argument("--n-neighbors", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tree", action="store_true", help="fit a tree to MNIST-1M's graph labels (two stages)")
    args = ap.parse_args()

    base, base_y, Xte, yte = load_dataset("mnist")
    images = np.rint(base * 255).astype(np.uint8).reshape(-1, 28, 28)
    pca = PCA(50, svd_solver="randomized", random_state=args.seed).fit(images.reshape(len(images), -1) / 255.0)
    project = lambda rows: pca.transform(rows.reshape(len(rows), -1) / 255.0).astype(np.float32)  # noqa: E731
    sets = {"MNIST (60k)": (project(images), base_y)}
    big = np.vstack([project(deformed_mnist(images, c, args.seed)) for c in range(1 + MNIST_COPIES)])
    sets["MNIST-1M (1.02M)"] = (big, np.tile(base_y, 1 + MNIST_COPIES))

    trees = []
    print("| data | labelled rows | labelled % | argmax error on unlabelled rows % | median top-1 minus top-2 of Z | "
          "CG iterations | seconds |")
    print("|---|---|---|---|---|---|---|")
    for name, (Xg, y) in sets.items():
        start = time.perf_counter()
        L = graph(Xg, args.n_neighbors, args.seed)
        graph_s = time.perf_counter() - start
        for m in args.labels:
            start = time.perf_counter()
            err, margin, info, pseudo = first_label_step(L, y.astype(np.int64), m, args.seed)
            if args.tree and len(y) > len(images):
                trees.append((m, pseudo))
            print(f"| {name} | {m:,} | {100 * m / len(y):.3g} | {err:.2f} | {margin:.3g} | {info.iterations} | "
                  f"{graph_s:.0f} + {time.perf_counter() - start:.0f} |", flush=True)
    if trees:
        from taodist import TAOClassifier

        del sets, big, L
        X = np.vstack([deformed_mnist(images, c, args.seed).reshape(len(images), -1) for c in range(1 + MNIST_COPIES)])
        test = np.rint(np.asarray(Xte, dtype=np.float64) * 255)
        print("\n| labelled rows | tree on the graph's labels: test error % | fit s |\n|---|---|---|")
        for m, pseudo in trees:
            start = time.perf_counter()
            tree = TAOClassifier(max_depth=6, max_care_points=20000, random_state=0,
                                 early_stopping=False).fit(X, pseudo)
            print(f"| {m:,} | {100 * float(np.mean(tree.predict(test) != yte)):.2f} | "
                  f"{time.perf_counter() - start:.0f} |", flush=True)


if __name__ == "__main__":
    main()
