import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_moons
from sklearn.utils.estimator_checks import parametrize_with_checks

from taodist import LapTAOClassifier, LapTAORegressor, TAOClassifier
from taodist.estimators.execution import ResidentRows
from taodist.laptao import affinity_graph, graph_laplacian, solve_label_step
from taodist.laptao._estimators import _GraphOrder, exact_leaves, leaf_membership
from taodist.laptao._graph import bandwidth_order, entropic_bandwidths
from taodist.laptao._label_step import LabelStepRows, LaplacianCG, block_pcg, ridge, system_diagonal, system_matrix
from taodist.solvers.block_cg import RowPartition


def _graph(n=60, seed=0):
    X = np.random.default_rng(seed).normal(size=(n, 3))
    return X, graph_laplacian(affinity_graph(X, n_neighbors=6))


def _problem(n=60, K=2, seed=0):
    X, L = _graph(n, seed)
    rng = np.random.default_rng(seed + 1)
    labelled = rng.uniform(size=n) < 0.3
    Y = np.where(labelled[:, None], rng.normal(size=(n, K)), 0.0)
    return labelled, Y, L, rng.normal(size=(n, K)), rng.normal(size=(n, K))


@pytest.mark.parametrize("mu", [0.0, 0.5])
def test_label_step_equals_a_dense_direct_solve(mu):
    labelled, Y, L, T, Lam = _problem()
    Z, info = solve_label_step(labelled, Y, L, 0.3, mu, T, Lam)
    A = np.diag(labelled.astype(float) + mu) + 0.3 * L.toarray()
    rhs = np.where(labelled[:, None], Y, 0) + mu * T + Lam / 2
    if mu == 0:
        A += 1e-8 * L.diagonal().mean() * np.eye(len(Y))
    np.testing.assert_allclose(Z, np.linalg.solve(A, rhs), rtol=1e-8, atol=1e-10)
    assert info.method == "direct"


def test_cg_converges_to_the_direct_solution_and_warm_start_helps():
    labelled, Y, L, T, Lam = _problem(n=300, K=3)
    direct, _ = solve_label_step(labelled, Y, L, 0.1, 0.2, T, Lam)
    cg, info = solve_label_step(labelled, Y, L, 0.1, 0.2, T, Lam, direct_max=0, tol=1e-10)
    assert info.method == "cg" and info.residual < 1e-10
    np.testing.assert_allclose(cg, direct, rtol=1e-7, atol=1e-9)
    _, warm = solve_label_step(labelled, Y, L, 0.1, 0.2, T, Lam, Z0=direct + 1e-6, direct_max=0, tol=1e-10)
    assert warm.iterations < info.iterations


def test_label_step_in_bandwidth_order_equals_the_direct_solve_in_data_order():
    labelled, Y, L, T, Lam = _problem(n=400, K=3)
    order, inverse = bandwidth_order(L)
    np.testing.assert_array_equal(np.sort(order), np.arange(400))
    np.testing.assert_array_equal(order[inverse], np.arange(400))
    G = _GraphOrder(L, labelled, Y, reorder=True)
    coo, coo_g = L.tocoo(), G.L.tocoo()
    assert np.abs(coo_g.row - coo_g.col).max() < np.abs(coo.row - coo.col).max() / 3  # bandwidth reduced
    direct, _ = solve_label_step(labelled, Y, L, 0.1, 0.2, T, Lam)
    Zg, info = solve_label_step(G.labelled, G.Y, G.L, 0.1, 0.2, G.to_graph(T), G.to_graph(Lam), direct_max=0,
                                tol=1e-10)
    assert info.method == "cg"
    np.testing.assert_allclose(G.from_graph(Zg), direct, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("n_threads", [1, 3])
def test_one_cg_solver_reused_across_steps_equals_the_direct_solve_each_time(n_threads):
    # the solver writes each step's diagonal (J + mu I) into its stored matrix; an isolated point
    # (an all-zero Laplacian row, no stored diagonal) must get one too; 3 threads: row blocks with halos
    labelled, Y, L, T, Lam = _problem(n=300, K=3)
    L = sp.block_diag([L, sp.csr_matrix((1, 1))]).tocsr()
    labelled, Y, T, Lam = (np.r_[labelled, True], np.vstack([Y, [[1.0, 2.0, 3.0]]]), np.vstack([T, T[:1]]),
                           np.vstack([Lam, Lam[:1]]))
    cg = LaplacianCG(L, 0.1, n_threads)
    assert len(cg.blocks) == n_threads
    if n_threads > 1:
        assert all(h.size for h in cg.partition.halos)  # every block reads rows of another
    Z = None
    for mu in (0.2, 0.3, 0.45):
        direct, _ = solve_label_step(labelled, Y, L, 0.1, mu, T, Lam)
        Z, info = solve_label_step(labelled, Y, L, 0.1, mu, T, Lam, Z0=Z, direct_max=0, tol=1e-10, cg=cg)
        assert info.method == "cg" and info.residual < 1e-10
        np.testing.assert_allclose(Z, direct, rtol=1e-7, atol=1e-9)


def test_unlabelled_component_gets_a_finite_zero_solution():
    _, L1 = _graph(30, 0)
    _, L2 = _graph(30, 1)
    L = sp.block_diag([L1, L2]).tocsr()  # two components; the second has no label
    labelled = np.r_[np.ones(5, bool), np.zeros(55, bool)]
    Y = np.where(labelled[:, None], 1.0, 0.0)
    Z, _ = solve_label_step(labelled, Y, L, 0.1, 0.0)
    assert np.isfinite(Z).all()
    np.testing.assert_allclose(Z[30:], 0.0, atol=1e-6)
    assert Z[:30].min() > 0.5  # the labelled component is pulled to its label


def test_block_pcg_solves_each_column():
    labelled, Y, L, T, Lam = _problem(n=200, K=4)
    A = system_matrix(labelled, L, 0.2, 0.1).tocsr()
    B = np.random.default_rng(3).normal(size=(200, 4))
    X, info = block_pcg(A, B, tol=1e-12)
    np.testing.assert_allclose(A @ X, B, atol=1e-9)


def test_entropic_bandwidths_reach_the_perplexity():
    d2 = np.random.default_rng(0).uniform(0.1, 4.0, size=(50, 12))
    beta = entropic_bandwidths(d2, perplexity=5.0)
    p = np.exp(-beta[:, None] * (d2 - d2.min(axis=1, keepdims=True)))
    p /= p.sum(axis=1, keepdims=True)
    entropy = -(p * np.log(p)).sum(axis=1)
    np.testing.assert_allclose(np.exp(entropy), 5.0, rtol=1e-6)


def test_post_processing_equals_a_dense_least_squares_reference():
    X, L = _graph(80, 2)
    W = sp.diags(L.diagonal()) - L  # recover W from L = D - W
    tree = TAOClassifier(max_depth=2, random_state=0).fit(X, (X[:, 0] > 0).astype(int)).tree_
    B, _ = leaf_membership(tree, X)
    labelled = np.random.default_rng(0).uniform(size=80) < 0.4
    Y = np.where(labelled[:, None], np.random.default_rng(1).normal(size=(80, 2)), 0.0)
    gamma = 0.7
    c = exact_leaves(B, labelled, Y, L, gamma)
    # stacked least squares: sqrt(J) (B c - y) and sqrt(gamma w_nm / 2) (B_n - B_m) c for every pair
    Bd = B.toarray()
    rows, rhs = [Bd[labelled]], [Y[labelled]]
    Wc = W.tocoo()
    for n, m, w in zip(Wc.row, Wc.col, Wc.data):
        rows.append(np.sqrt(gamma * w / 2) * (Bd[n] - Bd[m])[None, :])
        rhs.append(np.zeros((1, 2)))
    ref = np.linalg.lstsq(np.vstack(rows), np.vstack(rhs), rcond=None)[0]
    np.testing.assert_allclose(c, ref, rtol=1e-8, atol=1e-10)


def test_label_step_row_blocks_do_the_outer_steps_of_the_whole_arrays():
    # the per-row state of a cluster fit lives in LabelStepRows blocks: their row-wise steps must give the
    # whole arrays' right-hand side and diagonal bit for bit, and the record's and exact leaves' sums
    labelled, Y, L, T, Lam = _problem(n=90, K=3, seed=4)
    gamma, mu = 0.3, 0.2
    M = gamma * sp.csr_matrix(L)
    part = RowPartition(M, 3)
    blocks = [LabelStepRows(*args, labelled[part.rows(i)], Y[part.rows(i)][labelled[part.rows(i)]])
              for i, args in enumerate(part.blocks(M))]
    assert all(h.size for h in part.halos)
    Z = np.random.default_rng(5).normal(size=Y.shape)
    for i, b in enumerate(blocks):
        r = part.rows(i)
        b.Z, b.T, b.Lam = Z[r].copy(), T[r].copy(), Lam[r].copy()
        b.load_step(mu, ridge(L))
    rhs = np.where(labelled[:, None], Y, 0.0) + mu * T + Lam / 2
    np.testing.assert_array_equal(np.concatenate([b.B for b in blocks]), rhs)
    np.testing.assert_array_equal(np.concatenate([b.d for b in blocks]), system_diagonal(labelled, L, mu))
    for b in blocks:
        b.load_step(0.0, ridge(L))
    np.testing.assert_array_equal(np.concatenate([b.d for b in blocks]), system_diagonal(labelled, L, 0.0))
    np.testing.assert_array_equal(np.concatenate([b.targets(mu) for b in blocks]), Z - Lam / (2 * mu))
    loss, lap, zt = (sum(v) for v in zip(*[b.step_stats(T[h]) for b, h in zip(blocks, part.halos)]))
    assert loss == pytest.approx(np.sum((T - Y)[labelled] ** 2), rel=1e-12)
    assert lap == pytest.approx(gamma * np.einsum("ij,ij->", T, L @ T), rel=1e-10)
    assert zt == pytest.approx(np.sum((Z - T) ** 2), rel=1e-12)
    for b in blocks:
        b.update_multipliers(mu)
    np.testing.assert_array_equal(np.concatenate([b.Lam for b in blocks]), Lam - mu * (Z - T))
    # the exact leaves' system from the blocks' shares: leaves 3, 5, 8, 9 (not every id reached by a block)
    leaves = np.random.default_rng(6).choice([3, 5, 8, 9], size=90)
    reached = [b.set_leaves(leaves[part.rows(i)]) for i, b in enumerate(blocks)]
    ids = np.unique(np.concatenate(reached))
    shares = [b.leaf_system(leaves[h], ids) for b, h in zip(blocks, part.halos)]
    A, rhs = sum(s[0] for s in shares), sum(s[1] for s in shares)
    B = sp.csr_matrix((np.ones(90), (np.arange(90), np.searchsorted(ids, leaves))), shape=(90, ids.size))
    np.testing.assert_allclose(np.linalg.lstsq(A, rhs, rcond=None)[0], exact_leaves(B, labelled, Y, L, gamma),
                               rtol=1e-9, atol=1e-12)


def test_all_labelled_and_no_graph_term_is_supervised_tao():
    X, y = make_moons(300, noise=0.1, random_state=0)
    m = LapTAOClassifier(max_depth=3, gamma=0.0, n_outer=3, random_state=0).fit(X, y)
    # gamma = 0, J = I: the post-processed leaves are the class frequencies of their reduced sets
    leaves = m.tree_.apply(X)
    for leaf in np.unique(leaves):
        np.testing.assert_allclose(m.tree_.value[leaf], np.bincount(y[leaves == leaf], minlength=2) / np.sum(leaves == leaf))
    assert m.score(X, y) > 0.95


def test_two_moons_with_six_labels_beats_a_tree_on_the_labels_alone():
    X, y = make_moons(600, noise=0.08, random_state=0)
    Xt, yt = make_moons(2000, noise=0.08, random_state=1)
    rng = np.random.default_rng(0)
    lab = np.r_[rng.choice(np.flatnonzero(y == 0), 3, replace=False), rng.choice(np.flatnonzero(y == 1), 3, replace=False)]
    ys = np.full(len(y), -1)
    ys[lab] = y[lab]
    semi = LapTAOClassifier(max_depth=4, random_state=0).fit(X, ys)
    supervised = TAOClassifier(max_depth=4, random_state=0).fit(X[lab], y[lab])
    assert semi.score(Xt, yt) > 0.97
    assert semi.score(Xt, yt) > supervised.score(Xt, yt) + 0.1
    h = semi.history_[-1]
    assert {"labelled_loss", "laplacian", "z_minus_t", "cg_iterations", "label_seconds"} <= set(h)


def test_care_point_cap_bounds_the_tree_steps_and_is_exact_when_it_exceeds_n():
    X, y = make_moons(400, noise=0.08, random_state=0)
    Xt, yt = make_moons(2000, noise=0.08, random_state=1)
    ys = np.where(np.random.default_rng(0).random(len(y)) < 0.05, y, -1)
    kw = dict(max_depth=3, n_outer=4, tao_iter=1, random_state=0)
    full = LapTAOClassifier(**kw).fit(X, ys)
    roomy = LapTAOClassifier(max_care_points=len(X), **kw).fit(X, ys)
    np.testing.assert_array_equal(full.tree_.weights.toarray(), roomy.tree_.weights.toarray())
    np.testing.assert_array_equal(full.tree_.value, roomy.tree_.value)
    capped = LapTAOClassifier(max_care_points=60, **kw).fit(X, ys)
    assert not np.array_equal(full.tree_.weights.toarray(), capped.tree_.weights.toarray())  # the cap is used
    assert capped.score(Xt, yt) >= full.score(Xt, yt) - 0.02 and full.score(Xt, yt) > 0.85


def test_the_callers_data_is_never_scaled_in_place():
    X, y = make_moons(200, noise=0.08, random_state=0)
    X = X * 3 + 1  # a feature scale different from 1
    ys = np.where(np.random.default_rng(0).random(len(y)) < 0.1, y, -1)
    kw = dict(max_depth=3, n_outer=2, tao_iter=1, random_state=0)
    X64, X32 = X.copy(), X.astype(np.float32)
    a = LapTAOClassifier(**kw).fit(X64, ys)  # used as is: must stay untouched
    b = LapTAOClassifier(**kw).fit(X32, ys)  # validation copies it: that copy is scaled in place
    np.testing.assert_array_equal(X64, X)
    np.testing.assert_array_equal(X32, X.astype(np.float32))
    c = LapTAOClassifier(**kw).fit(X32.astype(np.float64), ys)
    np.testing.assert_array_equal(b.tree_.weights.toarray(), c.tree_.weights.toarray())
    np.testing.assert_array_equal(b.predict(X), c.predict(X))
    assert a.score(X, y) > 0.8


def test_a_dataframe_is_never_scaled_in_place():
    pd = pytest.importorskip("pandas")
    X, y = make_moons(200, noise=0.08, random_state=0)
    X = X * 3 + 1
    ys = np.where(np.random.default_rng(0).random(len(y)) < 0.1, y, -1)
    frame = pd.DataFrame(X.copy())
    LapTAOClassifier(max_depth=3, n_outer=2, tao_iter=1, random_state=0).fit(frame, ys)
    np.testing.assert_array_equal(frame.to_numpy(), X)  # validation returns a view of the frame's block


def test_regressor_uses_nan_for_unlabelled():
    X, moon = make_moons(300, noise=0.05, random_state=0)
    y = np.where(moon == 1, 5.0, -5.0)  # smooth along the graph
    ys = np.full(300, np.nan)
    idx = np.r_[np.flatnonzero(y > 0)[:4], np.flatnonzero(y < 0)[:4]]
    ys[idx] = y[idx]
    m = LapTAORegressor(max_depth=4, random_state=0).fit(X, ys)
    assert np.mean(np.sign(m.predict(X)) == np.sign(y)) > 0.9


@pytest.mark.parametrize("y,message", [
    (np.full(20, -1), "No labelled point"),
    (np.r_[np.zeros(3), np.full(17, -1)], "only one class"),
    (np.zeros(19), "inconsistent numbers of samples"),
])
def test_classifier_bad_labels_are_refused(y, message):
    X = np.random.default_rng(0).normal(size=(20, 2))
    with pytest.raises(ValueError, match=message):
        LapTAOClassifier().fit(X, y)


def test_regressor_all_nan_is_refused():
    with pytest.raises(ValueError, match="No labelled point"):
        LapTAORegressor().fit(np.random.rand(10, 2), np.full(10, np.nan))


@pytest.mark.dask  # starts its own cluster
def test_distributed_cg_over_worker_row_blocks_equals_the_direct_solution():
    from distributed import Client, LocalCluster

    from taodist.dask import DistributedLaplacianCG

    labelled, Y, L, T, Lam = _problem(n=400, K=3, seed=3)
    direct, _ = solve_label_step(labelled, Y, L, 0.1, 0.2, T, Lam)
    local, local_info = solve_label_step(labelled, Y, L, 0.1, 0.2, T, Lam, direct_max=0, tol=1e-10)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        cg = DistributedLaplacianCG(client, L, 0.1, n_blocks=3)  # 3 blocks on 2 workers: halos across both
        assert sum(h.size for h in cg.partition.halos) > 0
        Z, info = solve_label_step(labelled, Y, L, 0.1, 0.2, T, Lam, direct_max=0, tol=1e-10, cg=cg)
        assert info.method == "distributed-cg" and info.residual < 1e-10
        np.testing.assert_allclose(Z, direct, rtol=1e-7, atol=1e-9)
        assert abs(info.iterations - local_info.iterations) <= 2  # the same iteration up to rounding
        # the same 3 blocks on threads here, relaying the halos: the same solve bit for bit (the actors keep
        # the vectors and fetch their halos from each other; the K-vectors are summed in the same order)
        threads, threads_info = solve_label_step(labelled, Y, L, 0.1, 0.2, T, Lam, direct_max=0, tol=1e-10,
                                                 cg=LaplacianCG(L, 0.1, 3))
        np.testing.assert_array_equal(Z, threads)
        assert (info.iterations, info.residual) == (threads_info.iterations, threads_info.residual)
        # a second step reuses the blocks on the workers: new mu, warm start
        Z2, warm = solve_label_step(labelled, Y, L, 0.1, 0.3, T, Lam, Z0=Z, direct_max=0, tol=1e-10, cg=cg)
        ref, _ = solve_label_step(labelled, Y, L, 0.1, 0.3, T, Lam)
        np.testing.assert_allclose(Z2, ref, rtol=1e-7, atol=1e-9)
        assert warm.iterations < info.iterations


@pytest.mark.dask  # starts its own cluster
@pytest.mark.parametrize("call", [3, 20])
def test_a_worker_killed_during_the_distributed_cg_restarts_the_solve_with_the_same_result(call, caplog):
    # the lost worker's actors start again on the worker left, from the same rows, and the solve runs
    # again from its start: every block's state is set by its first call, so the result is exact
    import os
    import signal

    from distributed import Client, LocalCluster

    from taodist.dask import DistributedLaplacianCG

    labelled, Y, L, T, Lam = _problem(n=400, K=3, seed=3)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        cg = DistributedLaplacianCG(client, L, 0.1, n_blocks=3)
        reference, info = solve_label_step(labelled, Y, L, 0.1, 0.2, T, Lam, direct_max=0, tol=1e-10, cg=cg)
        assert info.iterations > 8
        calls, call_blocks = [], cg._call

        def killing_call(name, args):
            calls.append(name)
            if len(calls) == call:  # mid-solve: the first worker's process dies before this call
                pids = client.run(os.getpid)
                os.kill(pids[sorted(pids)[0]], signal.SIGKILL)
            return call_blocks(name, args)

        cg._call = killing_call
        Z, _ = solve_label_step(labelled, Y, L, 0.1, 0.2, T, Lam, direct_max=0, tol=1e-10, cg=cg)
    np.testing.assert_array_equal(Z, reference)
    assert "restarting the label step's CG" in caplog.text


@pytest.mark.parametrize("estimator", [LapTAOClassifier, LapTAORegressor])
def test_graph_labels_init_fits_the_first_tree_to_the_first_label_steps_labels(monkeypatch, estimator):
    X, y = make_moons(300, noise=0.1, random_state=0)
    rng = np.random.default_rng(0)
    lab = np.r_[rng.choice(np.flatnonzero(y == 0), 4, replace=False), rng.choice(np.flatnonzero(y == 1), 4, replace=False)]
    labelled = np.isin(np.arange(len(y)), lab)
    W = affinity_graph(X / np.abs(X).max(axis=0), n_neighbors=10, random_state=0)  # LapTAO's graph of its scaled rows
    Y = np.zeros((len(y), 2))
    Y[lab, y[lab]] = 1.0
    if estimator is LapTAORegressor:  # one target column: the class as a number
        Y = Y[:, 1:]
    Z0, _ = solve_label_step(labelled, Y, graph_laplacian(W), 0.1, 0.0)
    fits = []
    original = ResidentRows.tao_optimize

    def recording(self, tree, targets, *args, **kwargs):
        fits.append((tree.task, np.array(targets), kwargs["max_iter"]))
        return original(self, tree, targets, *args, **kwargs)

    monkeypatch.setattr(ResidentRows, "tao_optimize", recording)
    ys = np.where(labelled, y, -1) if estimator is LapTAOClassifier else np.where(labelled, y, np.nan)
    m = estimator(max_depth=2, n_outer=2, tao_iter=1, init="graph_labels", random_state=0).fit(X, ys, affinity=W)
    task, targets, max_iter = fits[0]
    assert max_iter == 15 and len(fits) == 1 + 1 + 2  # the initial tree, the first tree step, the outer steps
    if estimator is LapTAOClassifier:
        assert task == "classification"
        np.testing.assert_array_equal(targets, np.where(labelled, y, Z0.argmax(axis=1)))
    else:
        assert task == "regression"
        np.testing.assert_allclose(targets, Z0, rtol=1e-8, atol=1e-10)
    assert m.tree_.task == "regression" and fits[1][0] == "regression"  # the tree steps regress Z


def test_without_exact_leaves_the_tree_keeps_the_last_tree_steps_leaves(monkeypatch):
    X, y = make_moons(300, noise=0.1, random_state=0)
    ys = np.where(np.random.default_rng(0).uniform(size=len(y)) < 0.05, y, -1)
    targets = []
    original = ResidentRows.tao_optimize

    def recording(self, tree, t, *args, **kwargs):
        targets.append(np.array(t))
        return original(self, tree, t, *args, **kwargs)

    monkeypatch.setattr(ResidentRows, "tao_optimize", recording)
    kw = dict(max_depth=3, n_outer=3, tao_iter=1, random_state=0)
    kept = LapTAOClassifier(**kw, exact_leaves=False).fit(X, ys)
    last = targets[-1]
    exact = LapTAOClassifier(**kw).fit(X, ys)
    # the same decision nodes; each reached leaf holds the mean of the last tree step's targets over its rows
    assert (kept.tree_.weights != exact.tree_.weights).nnz == 0
    leaves = kept.tree_.apply(X)
    np.testing.assert_array_equal(leaves, exact.tree_.apply(X))
    for leaf in np.unique(leaves):
        np.testing.assert_allclose(kept.tree_.value[leaf], last[leaves == leaf].mean(axis=0), rtol=1e-10, atol=1e-12)
    B, ids = leaf_membership(exact.tree_, X)
    assert not np.allclose(kept.tree_.value[ids], exact.tree_.value[ids])


@pytest.mark.dask  # starts its own cluster
@pytest.mark.parametrize("init", ["random", "graph_labels"])
def test_laptao_with_a_client_runs_cg_on_the_workers_and_matches_in_process(init):
    from distributed import Client, LocalCluster

    X, y = make_moons(400, noise=0.1, random_state=0)
    labelled = np.r_[np.flatnonzero(y == 0)[:5], np.flatnonzero(y == 1)[:5]]
    y_semi = np.full_like(y, -1)
    y_semi[labelled] = y[labelled]
    params = dict(max_depth=2, n_outer=4, direct_max=100, random_state=0, init=init)  # 400 points > 100: CG
    local = LapTAOClassifier(**params).fit(X, y_semi)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        dist = LapTAOClassifier(**params).fit(X, y_semi, client=client)
    assert all(h["label_method"] == "distributed-cg" for h in dist.history_), dist.history_[0]
    assert [h["label_method"] for h in local.history_] == ["cg"] * 4
    # CG stops at the same tolerance in both, so the labels agree to ~1e-6 and the trees with them
    np.testing.assert_allclose(dist._raw_predict(X), local._raw_predict(X), rtol=1e-4, atol=1e-5)


# scikit-learn's common checks on small LapTAO models (every label given: fully supervised data
# is a valid semi-supervised problem). Checks that cannot hold for LapTAO are listed with why.
LAPTAO_EXPECTED_FAILED = {
    # integer weights vs repeated rows: fit() takes no sample_weight (the graph would need weighted nodes)
    "check_sample_weight_equivalence_on_dense_data": "LapTAO has no sample_weight",
    "check_sample_weight_equivalence_on_sparse_data": "LapTAO has no sample_weight",
    # the check's labels include -1, which marks unlabelled points (as in scikit-learn's LabelSpreading)
    "check_classifiers_classes": "y == -1 marks unlabelled points",
}


@parametrize_with_checks(
    [LapTAOClassifier(max_depth=2, n_outer=2, tao_iter=1, random_state=0),
     LapTAORegressor(max_depth=2, n_outer=2, tao_iter=1, random_state=0)],
    expected_failed_checks=lambda est: LAPTAO_EXPECTED_FAILED,
)
def test_laptao_sklearn_compatible(estimator, check):
    check(estimator)
