"""The kNN graph of a row-chunked Dask (or Zarr-backed) array, built on the workers.

X is never gathered: each row chunk (a *block*) is read on a worker and
indexes itself with NN-descent (:class:`taodist.laptao._block_knn.BlockIndex`,
one task per block, next to the block). Then every block's rows query every
other block's index on that index's worker (the rows travel, the index -- a
copy of the rows plus its graph and trees -- stays), and each row keeps the
k best of its own block's list and the other blocks' answers. Optional rounds
of neighbour-of-neighbour refinement follow: a row's candidates are its
neighbours' lists, measured on the worker that holds the candidate's rows.
The result stays on the workers: two Dask arrays of shape (n, k), chunked as
X's rows, of global row numbers and distances.

Why all blocks query all indexes rather than a shared random-projection
partition that moves near rows into one block: every block then needs no data
but its own rows and the query rows, the blocks are X's own chunks (a Zarr
store is read once, in place), and the result depends on the chunks and the
seed only, not on the number of workers. Its cost is B^2 queries of n/B rows
for B blocks: keep B near the number of worker threads (a few hundred
thousand rows a block), not thousands of small chunks. Measured recall and
times: ``bench/bench_knn_graph.py`` and the LapTAO docs page.

Every task is a function of its inputs and of the block's seed, so the graph
is the same for the same ``random_state`` and chunks whichever workers ran it.
"""

import uuid

import numpy as np

from ..utils.rows import has_sparse_chunks
from ..utils.validation import check_dask_X, is_dask_collection
from ._block_knn import (
    BlockIndex,
    candidate_distances,
    gather_candidates,
    merge_k_best,
    neighbour_lists,
    refined_lists,
    split_by_owner,
)


def knn_graph(X, n_neighbors=10, *, n_refine=1, random_state=None, client=None):
    """Each row's ``n_neighbors`` nearest other rows of a row-chunked Dask array, computed on the workers.

    Parameters
    ----------
    X : dask.array.Array of shape (n_samples, n_features)
        Dense rows, chunked along rows only (one chunk across the features),
        e.g. ``dask.array.from_zarr(store)``. Each row chunk is one block:
        an NN-descent index of its own, queried by every other block.
    n_neighbors : int, default=10
        ``k``: neighbours per row, not counting the row itself.
    n_refine : int, default=1
        Rounds of neighbour-of-neighbour refinement after the block queries
        (0 for none): each lifts recall by a point or two for about the
        cost of the queries.
    random_state : int, optional
        Seeds every block's index (one seed per block, drawn from this);
        the graph is then the same on any number of workers.
    client : distributed.Client, optional
        Default: the active client, else an embedded LocalCluster (whose
        workers, and the result with them, end when this returns: pass a
        client to keep the graph).

    Returns
    -------
    indices : dask.array.Array of shape (n_samples, n_neighbors), int64
        Global row numbers of each row's neighbours, nearest first; its
        blocks are already computed and held on the workers.
    distances : dask.array.Array of shape (n_samples, n_neighbors), float64
        Euclidean distances to them.

    Examples
    --------
    >>> import dask.array as da, numpy as np
    >>> from distributed import Client, LocalCluster
    >>> X = da.from_array(np.random.default_rng(0).normal(size=(2000, 5)), chunks=(700, 5))
    >>> with LocalCluster(n_workers=1, processes=False) as cluster, Client(cluster) as client:
    ...     idx, dist = knn_graph(X, 10, random_state=0, client=client)
    ...     idx.shape
    (2000, 10)
    """
    _check_input(X, n_neighbors, n_refine)
    from ..dask import resolve_client

    with resolve_client(client) as c, c.as_current():  # distributed.wait asks for the current client
        return _GraphBuild(c, X, int(n_neighbors), random_state).run(int(n_refine))


def _check_input(X, n_neighbors, n_refine):
    if not is_dask_collection(X) or not hasattr(X, "chunks"):
        raise TypeError(f"X must be a dask array, got {type(X).__name__}; wrap a NumPy array with "
                        "dask.array.from_array(X, chunks=(rows_per_block, X.shape[1])), a Zarr store with "
                        "dask.array.from_zarr.")
    check_dask_X(X)  # 2D, chunked by rows only, known chunk sizes, real numbers
    if has_sparse_chunks(X):
        raise TypeError("X has sparse chunks; the distributed kNN graph takes dense rows (X.map_blocks(lambda b: "
                        "b.toarray())), or build the graph in process.")
    if 0 in X.chunks[0]:
        raise ValueError(f"X has empty row chunks ({X.chunks[0]}); rechunk the rows, e.g. "
                         f"X.rechunk({{0: {max(X.chunks[0])}}}).")
    if isinstance(n_neighbors, bool) or not isinstance(n_neighbors, (int, np.integer)) or n_neighbors < 1:
        raise ValueError(f"n_neighbors must be a positive integer, got {n_neighbors!r}.")
    if n_neighbors >= X.shape[0]:
        raise ValueError(f"n_neighbors={n_neighbors} must be less than the number of rows of X ({X.shape[0]}): "
                         "a row has only n_samples - 1 other rows.")
    if isinstance(n_refine, bool) or not isinstance(n_refine, (int, np.integer)) or n_refine < 0:
        raise ValueError(f"n_refine must be a non-negative integer, got {n_refine!r}.")


def block_seeds(random_state, n_blocks):
    """One int seed per block from ``random_state`` (fresh entropy when None)."""
    return [int(s) for s in np.random.SeedSequence(random_state).generate_state(n_blocks)]


def _self_neighbours(index):
    return index.self_neighbours()


def _query(index, rows):
    return index.query(rows)


def _merge(lo, hi, k, *candidates):
    return merge_k_best(np.arange(lo, hi), k, *candidates)


def _gather_candidates(lo, hi, graph, *parts):
    return gather_candidates(np.arange(lo, hi), graph[0], *parts)


def _refined(lo, hi, k, graph, width, *measured):
    return refined_lists(np.arange(lo, hi), k, graph, width, *zip(measured[::2], measured[1::2]))


def _neighbour_lists(graph, owner_graph, owner_offset):
    return neighbour_lists(graph[0], owner_graph[0], owner_offset)


class _GraphBuild:
    """One graph build's futures: blocks, indexes, per-block results, each task placed by its data."""

    def __init__(self, client, X, k, random_state):
        from distributed import wait

        self.client, self.k = client, k
        self.sizes = [int(s) for s in X.chunks[0]]
        self.offsets = [int(o) for o in np.r_[0, np.cumsum(self.sizes)[:-1]]]
        # a build's keys of its own: two builds of the same X are two sets of futures to release
        self.token = uuid.uuid4().hex[:8]
        # the blocks are computed (read from Zarr, say) on the workers and stay there
        self.blocks = client.compute(list(X.to_delayed().ravel()))
        wait(self.blocks)
        holders = client.who_has(self.blocks)
        self.where = [sorted(holders[f.key])[:1] for f in self.blocks]
        seeds = block_seeds(random_state, len(self.blocks))
        self.indexes = [self._submit(BlockIndex, "knn-index", j, j, self.blocks[j], self.offsets[j], k, seeds[j])
                        for j in range(len(self.blocks))]

    def _submit(self, fn, name, i, worker_block, *args):
        # keys of this build's own (token) that name the step for the dashboard. Placed on the
        # worker that holds the block or index it reads most of, so the query rows travel, not
        # the indexes; loosely: the scheduler may still move a task (and its index, whose size it
        # knows) to an idle worker, or away from a worker that is gone.
        return self.client.submit(fn, *args, key=f"{name}-{self.token}-{i}", workers=self.where[worker_block],
                                  allow_other_workers=True, pure=False)

    def run(self, n_refine):
        B = len(self.blocks)
        graph = []
        for i in range(B):
            parts = [self._submit(_self_neighbours, "knn-self", i, i, self.indexes[i])]
            parts += [self._submit(_query, "knn-query", f"{i}-{j}", j, self.indexes[j], self.blocks[i])
                      for j in range(B) if j != i]
            graph.append(self._submit(_merge, "knn-merge", i, i, self.offsets[i], self.offsets[i] + self.sizes[i],
                                      self.k, *parts))
        del self.indexes  # released once the queries are done: the indexes hold copies of the rows
        for r in range(n_refine):
            graph = self._refine(graph, r)
        return self._as_arrays(graph)

    def _refine(self, graph, round_):
        """One round: a row's neighbours' lists, new candidates among them, measured where their rows are."""
        B, new, width = len(self.blocks), [], self.k * self.k
        name = f"knn-refine{round_}"
        for i in range(B):
            lo, hi = self.offsets[i], self.offsets[i] + self.sizes[i]
            lists = [self._submit(_neighbour_lists, f"{name}-lists", f"{i}-{j}", j, graph[i], graph[j],
                                  self.offsets[j]) for j in range(B)]
            candidates = self._submit(_gather_candidates, f"{name}-candidates", i, i, lo, hi, graph[i], *lists)
            split = self._submit(split_by_owner, f"{name}-split", i, i, candidates, self.offsets)
            measured = []
            for j in range(B):
                pairs = self._submit(_item, f"{name}-pairs", f"{i}-{j}", i, split, j)
                measured += [pairs, self._submit(candidate_distances, f"{name}-distances", f"{i}-{j}", j,
                                                 self.blocks[i], pairs, width, self.blocks[j], self.offsets[j])]
            new.append(self._submit(_refined, f"{name}-merge", i, i, lo, hi, self.k, graph[i], width, *measured))
        return new

    def _as_arrays(self, graph):
        import dask.array as da
        from dask.highlevelgraph import HighLevelGraph
        from distributed import wait

        wait(graph)
        failed = [f for f in graph if f.status == "error"]
        if failed:
            raise failed[0].exception()
        out = []
        for part, dtype in ((0, np.int64), (1, np.float64)):
            futures = [self._submit(_item, f"knn-{'indices' if part == 0 else 'distances'}", i, i, g, part)
                       for i, g in enumerate(graph)]
            name = f"knn-{'indices' if part == 0 else 'distances'}-{self.token}"
            layer = HighLevelGraph.from_collections(name, {(name, i, 0): f for i, f in enumerate(futures)},
                                                    dependencies=())
            out.append(da.Array(layer, name, chunks=(tuple(self.sizes), (self.k,)), meta=np.empty((0, self.k), dtype)))
        return tuple(out)


def _item(pair, i):
    return pair[i]
