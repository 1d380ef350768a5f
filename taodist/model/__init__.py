"""The fitted model: a tree of flat arrays, what it computes, and the checks that make it safe to run.

``tree``         :class:`~taodist.model.tree.Tree`, the flat-array tree (structure, margins, prediction, counts)
``leaves``       leaf models (constant, linear/softmax) behind the ``LEAF_MODELS`` registry
``route``        compiled per-row routing of dense and CSR rows
``predict_csr``  compiled best-class prediction of CSR rows through softmax leaves
``prune``        removal of dead branches and pure subtrees
``checks``       structural checks of a tree's arrays (files, router)
``export``       a tree as text
"""
