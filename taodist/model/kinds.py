"""The kinds of tree node, as stored in :attr:`Tree.kind <taodist.model.tree.Tree>`.

Their own module because the tree, its compiled routing and the checks of its
arrays all read them, and none of those should import another for three integers.
"""

#: a leaf (no children; its output is ``value`` and, for linear leaves, ``leaf_coef``)
LEAF = 0
#: a decision node that sends ``x`` right iff ``w . x + b >= 0``
OBLIQUE = 1
#: a decision node that sends ``x`` right iff ``x[feature] >= threshold``
AXIS = 2
