"""Tree snapshots sent to a worker as the rows that changed since one it already holds.

The actor executor sends each chunk host the tree snapshot (a
:class:`~taodist.tao.routing.Routing`) its ops route rows with. A TAO level changes
the weights of one depth's nodes only, while a whole snapshot carries every
node's oblique weights, most of a deep tree's bytes: sent whole every level,
it would make each round carry the whole tree for one depth's changes. A
snapshot that names the one before it and the nodes changed since
(:meth:`Routing.of <taodist.tao.routing.Routing.of>`) travels as a
:class:`RoutingPatch`: those nodes' rows of the two large matrices (oblique
weights, linear-leaf coefficients) and every small per-node array whole. The
worker rebuilds the same arrays bit for bit, and checks that it did (row
pointers and checksums).
"""

import numpy as np
import scipy.sparse as sp

#: the tree's matrices sent as changed rows; every other attribute is sent whole (per-node arrays: small)
_ROW_PATCHED = ("weights", "leaf_coef")


class RoutingPatch:
    """What turns the snapshot a worker holds (token ``base``) into a newer one.

    Build with :meth:`between`; the worker calls :meth:`apply` on its copy of
    the base snapshot.
    """

    __slots__ = ("base", "tree_fields", "fields", "row_patches")

    def __init__(self, base, tree_fields, fields, row_patches):
        self.base, self.tree_fields, self.fields, self.row_patches = base, tree_fields, fields, row_patches

    @classmethod
    def between(cls, base_token, base, new, nodes):
        """The patch from ``base`` (held by the worker as ``base_token``) to ``new``.

        ``nodes``: every node whose rows of the large matrices may differ
        between the two trees (the union of the changes since ``base``).
        """
        tree, row_patches, tree_fields = new.tree, {}, {}
        for name, value in vars(tree).items():
            old = getattr(base.tree, name, None)
            if name in _ROW_PATCHED and _same_layout(old, value) and base.tree.n_nodes == tree.n_nodes:
                rows = _matrix_rows(nodes, value.shape[0], tree.n_nodes)
                # the full row pointers and a checksum let the worker check the rebuilt matrix
                row_patches[name] = (rows, value[rows], value.indptr, _checksum(value))
            else:
                tree_fields[name] = value
        fields = {}
        for name, value in new.__getstate__().items():  # (without its link to earlier snapshots)
            if name == "tree":
                continue
            # a cache the driver carried over unchanged (leaf digests): the worker keeps its own
            fields[name] = _SAME if value is vars(base).get(name) else value
        return cls(base_token, tree_fields, fields, row_patches)

    def apply(self, base):
        """The new snapshot, from the worker's copy of the base one."""
        tree = object.__new__(type(base.tree))
        tree.__dict__.update(self.tree_fields)
        for name, (rows, block, indptr, checksum) in self.row_patches.items():
            matrix = _replace_rows(getattr(base.tree, name), rows, block)
            if not (np.array_equal(matrix.indptr, indptr) and _checksum(matrix) == checksum):
                raise RuntimeError(f"A tree snapshot patch did not rebuild the tree's {name} (a node changed that the "
                                   "driver did not name): this is a bug in taodist; please report it.")
            tree.__dict__[name] = matrix
        routing = object.__new__(type(base))
        routing.__dict__["tree"] = tree
        for name, value in self.fields.items():
            if value is not _SAME:
                routing.__dict__[name] = value
            elif name in vars(base):
                routing.__dict__[name] = vars(base)[name]
        return routing


class _Same:
    """Stands for an attribute the worker's base snapshot already has."""

    def __reduce__(self):
        return "_SAME"


_SAME = _Same()


def _same_layout(old, new):
    return (sp.issparse(old) and sp.issparse(new) and old.format == new.format == "csr" and old.shape == new.shape
            and old.dtype == new.dtype and old.indices.dtype == new.indices.dtype
            and old.indptr.dtype == new.indptr.dtype)


def _checksum(matrix):
    """Sums of the bit patterns of a CSR matrix's data and of its column indices.

    Integer sums (wrapping): exact and independent of the order or the
    alignment the summation takes, unlike a floating-point sum.
    """
    bits = matrix.data.view(f"u{matrix.data.dtype.itemsize}")
    return int(bits.sum(dtype=np.uint64)), int(matrix.indices.sum(dtype=np.int64))


def _matrix_rows(nodes, n_rows, n_nodes):
    """A matrix's rows that hold ``nodes``: one per node, or ``K`` per node (linear leaves' ``(K, D)`` blocks)."""
    per_node = n_rows // n_nodes
    return (np.asarray(nodes, dtype=np.intp)[:, None] * per_node + np.arange(per_node)).ravel()


def _replace_rows(base, rows, block):
    """CSR ``base`` with its sorted ``rows`` replaced by the rows of CSR ``block``, in one gather."""
    lengths = np.diff(base.indptr)
    start = base.indptr[:-1].astype(np.int64)
    lengths[rows] = np.diff(block.indptr)
    start[rows] = block.indptr[:-1] + base.nnz  # (the block's entries follow the base's in the stacked arrays)
    indptr = np.zeros(base.shape[0] + 1, dtype=base.indptr.dtype)
    np.cumsum(lengths, out=indptr[1:])
    take = np.repeat(start - indptr[:-1], lengths) + np.arange(indptr[-1])
    data = np.concatenate([base.data, block.data.astype(base.data.dtype, copy=False)])[take]
    indices = np.concatenate([base.indices, block.indices.astype(base.indices.dtype, copy=False)])[take]
    return type(base)((data, indices, indptr), shape=base.shape)
