"""The fitted model: a tree of flat arrays, what it computes, and the checks that make it safe to run.

``kinds``           the node kinds (leaf, oblique, axis)
``tree``            :class:`~taodist.model.tree.Tree`, the flat-array tree (structure, margins, prediction, counts)
``leaves``          leaf models (constant, linear/softmax) behind the ``LEAF_MODELS`` registry
``leaf_fit``        fitting one leaf: constant, Lasso, softmax by SAGA or FISTA
``linear_outputs``  a linear leaf's coefficients and their compiled outputs
``route``           compiled per-row routing of dense and CSR rows
``predict_csr``     compiled best-class prediction of CSR rows through softmax leaves
``prune``           removal of dead branches and pure subtrees
``checks``          structural checks of a tree's arrays (files, router)
``export``          a tree as text
"""
