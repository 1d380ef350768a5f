"""The level-wide l1-logistic node solver on a GPU, with PyTorch.

The same problem and method as :mod:`taodist.solvers.l1_logistic` (read its
docstring first): for every decision node ``j`` of a level,

    min_{w, b}  sum_n c_n log(1 + exp(-s_n (w . x_n + b)))  +  alpha_j ||w||_1

by FISTA warm-started at the node's current parameters, with the exact
centring change of variables and the diagonal (Jacobi) metric, a per-node step
constant from power iterations, ``shrink`` then backtracking, monotone steps
with adaptive restart and per-node stopping. The returned objective of a node
is never above its warm start's.

What differs is the order of the work. The CPU kernel runs each node's
iterations while its rows are in cache, node after node; here every node of
the level takes its iteration at once, as a handful of array operations over
all the level's rows (a margin is a row's dot product with its node's weights,
gathered by node; a gradient is a segment sum of ``r_n x_n`` over each node's
rows), so a GPU streams the level once per pass whatever the number of nodes.
A node that has stopped, or is waiting on others' backtracking, is frozen by
masks. Everything is float64 on the device (an H100 has fast float64), so
results agree with the CPU solver to rounding, not to the bit: parity is
tested on the objective.

PyTorch is optional (``pip install taodist[gpu]``): nothing imports this
module unless the ``"fista-gpu"`` node solver is asked for. Sparse care points
are solved by the CPU kernel (:func:`taodist.solvers.l1_logistic.solve_l1_logistic_level`).
"""

import os
import warnings

import numpy as np

from .fista import LIPSCHITZ_SAFETY, N_POWER
from .l1_logistic import checked_level

# torch says once per process that its CSR tensors are "beta"; the products used here are cuSPARSE's
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)

#: backtracking doublings allowed in one iteration (the CPU kernel has no cap;
#: 60 doublings multiply L by 1e18, far past any curvature)
_MAX_BACKTRACKS = 60


def torch_device(device=None):
    """The PyTorch device the GPU solver runs on, or an actionable error.

    ``device=None`` means ``$TAODIST_GPU_DEVICE`` if set (a PyTorch device
    name such as ``"cuda:1"``; the tests set ``"cpu"``), else the current CUDA
    device. Raises :class:`ImportError` without PyTorch and
    :class:`RuntimeError` when CUDA is meant but PyTorch sees no GPU.
    """
    try:
        import torch
    except ImportError as exc:
        raise ImportError("solver='fista-gpu' needs PyTorch with CUDA: pip install 'taodist[gpu]' "
                          "(or use solver='fista', the CPU level solver)") from exc
    device = device or os.environ.get("TAODIST_GPU_DEVICE") or None
    if device is None or str(device).startswith("cuda"):
        if not torch.cuda.is_available():
            raise RuntimeError("solver='fista-gpu' needs a CUDA GPU, and PyTorch sees none "
                               f"(torch {torch.__version__}); use solver='fista' on this machine")
        device = device or "cuda"
    return torch.device(device)


class _Level:
    """A level's rows on the device and the segment operations over its nodes."""

    def __init__(self, torch, X, bounds, target, weight, device):
        self.torch = torch
        f64 = torch.float64
        self.X = torch.as_tensor(X, device=device).to(f64)
        self.N, self.D = X.shape
        sizes = np.diff(bounds)
        self.J = sizes.size
        self.lengths = torch.as_tensor(sizes, device=device)
        self.seg = torch.repeat_interleave(torch.arange(self.J, device=device), self.lengths)
        self.t = torch.as_tensor(target, device=device)
        self.c = torch.as_tensor(weight, device=device).to(f64)
        self.crow = torch.as_tensor(bounds, device=device)
        self.col = torch.arange(self.N, device=device)

    def rows(self, v):
        """A per-node array broadcast to the node's rows."""
        return v[self.seg]

    def segment_sum(self, v, scale=None):
        """Per-node sums of a per-row array (rows on axis 0), each row times ``scale``; 0 for an empty node.

        A product with the level's (nodes x rows) CSR indicator carrying the
        row weights: one pass over ``v`` (cuSPARSE SpMM on a GPU), deterministic.
        ``torch.segment_reduce`` gives the same results, a little slower.
        """
        torch = self.torch
        values = torch.ones(self.N, dtype=v.dtype, device=v.device) if scale is None else scale
        S = torch.sparse_csr_tensor(self.crow, self.col, values, size=(self.J, self.N), check_invariants=False)
        return (S @ v) if v.ndim == 2 else (S @ v[:, None])[:, 0]

    def margins(self, W, b):
        """``x_n . W[node(n)] + b[node(n)]`` for every row."""
        return (self.X * W[self.seg]).sum(dim=1) + b[self.seg]

    def xt_dot(self, r):
        """Per node ``sum_n r_n x_n`` (shape ``(J, D)``) and ``sum_n r_n``."""
        return self.segment_sum(self.X, scale=r), self.segment_sum(r)

    def loss(self, z, residual=False):
        """Per-node ``sum c_n log(1 + exp(-s_n z_n))``; with ``residual`` also ``c_n (sigmoid(z_n) - t_n)``."""
        torch = self.torch
        m = torch.where(self.t, -z, z)
        f = self.segment_sum(self.c * (torch.clamp(m, min=0.0) + torch.log1p(torch.exp(-z.abs()))))
        if not residual:
            return f
        return f, self.c * (torch.sigmoid(z) - self.t.to(z.dtype))


def _metric(level, precondition):
    """Centres ``mu (J, D)``, metric ``dw (J, D)``, ``db (J,)``, as :func:`~taodist.solvers.row_kernels.rows_metric`."""
    torch = level.torch
    J, D, X, c = level.J, level.D, level.X, level.c
    if not precondition:
        return X.new_zeros(J, D), X.new_ones(J, D), X.new_ones(J)
    csum = level.segment_sum(c)
    mu = level.segment_sum(X, scale=c) / torch.clamp(csum, min=1e-300)[:, None]
    centred = X - level.rows(mu)
    dw = level.segment_sum(centred * centred, scale=c)
    weighted = csum > 0
    top = torch.maximum(csum, dw.max(dim=1).values)
    dw = torch.where(dw < 1e-12 * top[:, None], 0.0, dw)  # constant on the node: fixed at 0
    mu = torch.where(weighted[:, None], mu, 0.0)
    dw = torch.where(weighted[:, None], dw, 1.0)
    return mu, dw, torch.where(weighted, csum, 1.0)


def _lipschitz(level, mu, dw, db):
    """Power-iteration estimate of each node's ``0.25 lambda_max`` in the scaled variables."""
    torch = level.torch
    sw = torch.where(dw > 0, 1.0 / torch.sqrt(torch.where(dw > 0, dw, 1.0)), 0.0)
    sb = 1.0 / torch.sqrt(db)
    v = torch.ones_like(mu)
    vb = torch.ones_like(db)
    lam = torch.zeros_like(db)
    for _ in range(N_POWER):
        norm = torch.sqrt((v * v).sum(dim=1) + vb * vb)
        norm = torch.where(norm > 0, norm, 1.0)
        v, vb = v / norm[:, None], vb / norm
        p = sw * v
        u = level.margins(p, sb * vb - (mu * p).sum(dim=1)) * level.c
        g, gb = level.xt_dot(u)
        g = sw * (g - mu * gb[:, None])
        lam = vb * sb * gb + (v * g).sum(dim=1)
        v, vb = g, sb * gb
    return 0.25 * lam


def solve_l1_logistic_level_torch(X, bounds, target, weight, alpha, W0, b0, *, max_iter=100, tol=1e-4,
                                  lipschitz=None, shrink=0.8, precondition=True, device=None):
    """:func:`taodist.solvers.l1_logistic.solve_l1_logistic_level` on a PyTorch device (a GPU by default).

    Same parameters (but ``n_threads`` and ``row_parallel``, which have no
    meaning here), returns and guarantees; ``X`` must be dense (sparse care
    points go to the CPU solver). ``device`` names a PyTorch device
    (default: the current CUDA device).
    """
    device = torch_device(device)  # the import error, worded for users, when PyTorch is missing
    import torch
    X = np.ascontiguousarray(X)
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    N, D = X.shape
    bounds, target, weight, alpha = checked_level(N, bounds, target, weight, alpha)
    J = bounds.size - 1
    f64 = dict(dtype=torch.float64, device=device)
    alpha = torch.as_tensor(alpha, **f64)
    level = _Level(torch, X, bounds, target, weight, device)
    sizes = torch.as_tensor(np.diff(bounds), device=device)
    slack = 1e-13

    with torch.no_grad():
        mu, dw, db = _metric(level, precondition)
        xw = torch.as_tensor(np.asarray(W0, dtype=np.float64).reshape(J, D), **f64).clone()
        xb = torch.as_tensor(np.asarray(b0, dtype=np.float64).reshape(J), **f64) + (mu * xw).sum(dim=1)
        yw, yb = xw.clone(), xb.clone()
        zx = level.margins(xw, xb - (mu * xw).sum(dim=1))
        zy = zx.clone()
        Fx = level.loss(zx) + alpha * xw.abs().sum(dim=1)
        F0 = Fx.clone()

        L_given = torch.zeros(J, **f64) if lipschitz is None else torch.as_tensor(
            np.asarray(lipschitz, dtype=np.float64).reshape(J), **f64)
        L = L_given
        if bool((L <= 0).any()):
            estimate = LIPSCHITZ_SAFETY * _lipschitz(level, mu, dw, db)
            estimate = torch.where(estimate > 0, estimate, 1e-12 * (1.0 + Fx.abs()))
            L = torch.where(L > 0, L, estimate)
        L_min = 1e-10 * L
        tk = torch.ones(J, **f64)
        n_iter = torch.zeros(J, dtype=torch.int64, device=device)
        n_restarts = torch.zeros_like(n_iter)
        n_backtracks = torch.zeros_like(n_iter)
        converged = sizes == 0
        at_x = torch.ones(J, dtype=torch.bool, device=device)
        fixed = dw == 0  # constant columns stay at 0

        for _ in range(int(max_iter)):
            active = ~converged & (n_iter < max_iter)
            if not bool(active.any()):
                break
            n_iter += active
            fy, r = level.loss(zy, residual=True)
            gw, gb = level.xt_dot(r)
            gw = gw - mu * gb[:, None]
            L = torch.where(active, torch.maximum(L * shrink, L_min), L)

            # backtracking, node by node (frozen once its sufficient-decrease test holds)
            nw, nb = yw.clone(), yb.clone()
            zn, fn = zy.clone(), fy.clone()
            trying = active.clone()
            for _ in range(_MAX_BACKTRACKS + 1):
                step = 1.0 / (L[:, None] * torch.where(fixed, 1.0, dw))
                v = yw - gw * step
                thr = alpha[:, None] * step
                cand_w = torch.where(fixed, 0.0, torch.sign(v) * torch.clamp(v.abs() - thr, min=0.0))
                cand_b = yb - gb / (L * db)
                cand_z = level.margins(cand_w, cand_b - (mu * cand_w).sum(dim=1))
                cand_f = level.loss(cand_z)
                dd = cand_w - yw
                lin = (cand_b - yb) * gb + (dd * gw).sum(dim=1)
                sq = db * (cand_b - yb) ** 2 + (dw * dd * dd).sum(dim=1)
                ok = cand_f <= fy + lin + 0.5 * L * sq + slack * fy.abs()
                take = trying & ok
                nw = torch.where(take[:, None], cand_w, nw)
                nb = torch.where(take, cand_b, nb)
                zn = torch.where(level.rows(take), cand_z, zn)
                fn = torch.where(take, cand_f, fn)
                failed = trying & ~ok
                trying = failed
                if not bool(failed.any()):
                    break
                L = torch.where(failed, 2.0 * L, L)
                n_backtracks += failed
            Fn = fn + alpha * nw.abs().sum(dim=1)

            # a rejected step: from x itself, no progress is possible; otherwise restart the momentum from x
            rejected = active & ~(Fn <= Fx)
            stuck = rejected & at_x
            converged |= stuck
            restart = rejected & ~at_x
            n_restarts += restart
            tk = torch.where(restart, 1.0, tk)
            yw = torch.where(restart[:, None], xw, yw)
            yb = torch.where(restart, xb, yb)
            zy = torch.where(level.rows(restart), zx, zy)
            at_x = at_x | restart

            accept = active & (Fn <= Fx)
            step = (nb - xb) ** 2 + ((nw - xw) ** 2).sum(dim=1)
            norm = nb * nb + (nw * nw).sum(dim=1)
            mom = db * (yb - nb) * (nb - xb) + (dw * (yw - nw) * (nw - xw)).sum(dim=1)
            decrease = Fx - Fn
            done = torch.sqrt(step) <= tol * torch.sqrt(norm)
            done |= decrease <= tol * Fn.abs()
            momentum_off = ~done & (mom > 0)
            n_restarts += accept & momentum_off
            tk1 = 0.5 * (1.0 + torch.sqrt(1.0 + 4.0 * tk * tk))
            beta = torch.where(done | momentum_off, 0.0, (tk - 1.0) / tk1)
            tk = torch.where(accept, torch.where(momentum_off, 1.0, torch.where(done, tk, tk1)), tk)
            Fx = torch.where(accept, Fn, Fx)
            yw = torch.where(accept[:, None], nw + beta[:, None] * (nw - xw), yw)
            yb = torch.where(accept, nb + beta * (nb - xb), yb)
            rows = level.rows(accept)
            zy = torch.where(rows, zn + level.rows(beta) * (zn - zx), zy)
            zx = torch.where(rows, zn, zx)
            xw = torch.where(accept[:, None], nw, xw)
            xb = torch.where(accept, nb, xb)
            converged |= accept & done
            at_x = torch.where(accept, beta == 0, at_x)

        b = xb - (mu * xw).sum(dim=1)
        empty = sizes == 0  # returned as given, as by the CPU solver
        L = torch.where(empty, L_given, L)
        Fx = torch.where(empty, 0.0, Fx)
        F0 = torch.where(empty, 0.0, F0)

    def host(t):
        return t.cpu().numpy()

    info = {"n_iter": host(n_iter), "objective0": host(F0), "objective": host(Fx), "lipschitz": host(L),
            "n_restarts": host(n_restarts), "n_backtracks": host(n_backtracks), "converged": host(converged)}
    return host(xw), host(b), info
