"""A deterministic many-class bag-of-words problem, written chunk-wise to a sparse Zarr store.

Documents come from a three-part mixture, the way topic models describe text:
background words drawn from a Zipfian distribution over the whole vocabulary,
words of the document's *group* topic (classes come in groups that share
words: sport, politics, ...) and words of its *class* topic. Class
frequencies are Zipfian too, so a few classes are common and many are rare,
which is what a softmax tree's k-of-K leaves are for. Rows are term
frequencies normalised to unit l2 norm (float32 CSR).

The store is a Zarr group with the CSR arrays ``data``, ``indices`` and
``indptr`` of the training and test rows and their labels, appended block by
block so the whole matrix is never in memory while it is written, under a
temporary name renamed at the end.
"""

import os
from dataclasses import asdict, dataclass

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class BowSpec:
    n_classes: int = 500
    n_groups: int = 25
    n_words: int = 50_000
    n_train: int = 200_000
    n_test: int = 20_000
    class_topic_words: int = 40
    group_topic_words: int = 200
    mean_length: int = 80
    group_pool_words: int = 300
    background_share: float = 0.75
    group_share: float = 0.17  # the class topic gets the rest
    zipf_words: float = 1.05
    zipf_classes: float = 0.6
    seed: int = 0


def _zipf(n, s):
    p = 1.0 / np.arange(1, n + 1) ** s
    return p / p.sum()


class BowGenerator:
    """Draws documents of :class:`BowSpec`; block ``b`` always gives the same rows."""

    def __init__(self, spec):
        self.spec = spec
        rng = np.random.default_rng(spec.seed)
        V = spec.n_words
        # background: Zipf over a random permutation of the vocabulary
        self.word_of_rank = rng.permutation(V)
        self.background_cdf = np.cumsum(_zipf(V, spec.zipf_words))
        # topics avoid the 500 most frequent words, as stop-word-free topics do
        content = self.word_of_rank[500:]
        self.group_words = np.stack([rng.choice(content, spec.group_topic_words, replace=False)
                                     for _ in range(spec.n_groups)])
        self.class_group = rng.integers(0, spec.n_groups, spec.n_classes)
        # a class's own words come from a pool shared by its group, so sibling classes overlap
        pools = [rng.choice(content, spec.group_pool_words, replace=False) for _ in range(spec.n_groups)]
        self.class_words = np.stack([rng.choice(pools[g], spec.class_topic_words, replace=False)
                                     for g in self.class_group])
        self.group_cdf = np.cumsum(_zipf(spec.group_topic_words, 1.0))
        self.class_cdf = np.cumsum(_zipf(spec.class_topic_words, 0.8))
        self.class_cdf_prior = np.cumsum(_zipf(spec.n_classes, spec.zipf_classes)[rng.permutation(spec.n_classes)])

    def block(self, block_id, n_rows):
        """``(X, y)`` of ``n_rows`` documents: float32 CSR with unit-norm rows, int32 labels."""
        s = self.spec
        rng = np.random.default_rng([s.seed, 1, block_id])
        y = np.minimum(np.searchsorted(self.class_cdf_prior, rng.random(n_rows)), s.n_classes - 1)
        lengths = 10 + rng.poisson(s.mean_length - 10, n_rows)
        doc = np.repeat(np.arange(n_rows), lengths)
        source = np.searchsorted([s.background_share, s.background_share + s.group_share], rng.random(doc.size),
                                 side="right")
        u = rng.random(doc.size)
        words = np.empty(doc.size, dtype=np.int64)
        bg, grp, cls = source == 0, source == 1, source == 2
        words[bg] = self.word_of_rank[np.minimum(np.searchsorted(self.background_cdf, u[bg]), s.n_words - 1)]
        words[grp] = self.group_words[self.class_group[y[doc[grp]]],
                                      np.minimum(np.searchsorted(self.group_cdf, u[grp]), s.group_topic_words - 1)]
        words[cls] = self.class_words[y[doc[cls]],
                                      np.minimum(np.searchsorted(self.class_cdf, u[cls]), s.class_topic_words - 1)]
        X = sp.csr_matrix((np.ones(doc.size, dtype=np.float32), (doc, words)), shape=(n_rows, s.n_words))
        X.sum_duplicates()
        norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
        X = sp.diags((1.0 / norms).astype(np.float32)) @ X
        return X.astype(np.float32).tocsr(), y.astype(np.int32)


def write_bow_store(path, spec=BowSpec(), rows_per_block=20_000):
    """Write the train and test splits of ``spec`` to the Zarr group ``path``; skipped when it already holds them.

    Returns True when the store was (re)written.
    """
    from _store import fresh_store

    meta = asdict(spec)
    g = fresh_store(path, "bow", meta)
    if g is None:
        return False
    tmp = path.with_name(path.name + ".tmp")
    gen = BowGenerator(spec)
    block_id = 0
    for split, n in (("train", spec.n_train), ("test", spec.n_test)):
        sg = g.create_group(split)
        arrays = {name: sg.create_array(name, shape=(0,), chunks=(1 << 20,), dtype=dtype)
                  for name, dtype in (("data", "float32"), ("indices", "int32"), ("y", "int32"))}
        indptr = [np.zeros(1, dtype=np.int64)]
        for lo in range(0, n, rows_per_block):
            X, y = gen.block(block_id, min(n, lo + rows_per_block) - lo)
            block_id += 1
            arrays["data"].append(X.data)
            arrays["indices"].append(X.indices.astype(np.int32))
            arrays["y"].append(y)
            indptr.append(X.indptr[1:].astype(np.int64) + indptr[-1][-1])
        sg.create_array("indptr", data=np.concatenate(indptr), chunks=(1 << 20,))
        sg.attrs["shape"] = [n, spec.n_words]
    g.attrs["bow"] = meta
    os.replace(tmp, path)
    return True


def read_bow_split(path, split):
    """``(X, y)`` of one split of a store written by :func:`write_bow_store`: float32 CSR and int32 labels."""
    import zarr

    sg = zarr.open_group(str(path), mode="r")[split]
    X = sp.csr_matrix((sg["data"][:], sg["indices"][:], sg["indptr"][:]), shape=tuple(sg.attrs["shape"]))
    return X, sg["y"][:]
