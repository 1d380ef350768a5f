"""
# A sparse oblique tree's decision nodes, drawn

Every decision node of an oblique TAO tree is a hyperplane: a sparse weight vector over the input
features. On 8x8 images of handwritten digits, each node's weights are an 8x8 image (red pushes a
digit right, blue left, white is an exact zero), so the tree can be read node by node.
"""

import matplotlib.pyplot as plt
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from taodist import TAOClassifier
from taodist.plot import plot_tree

X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)

clf = TAOClassifier(max_depth=4, random_state=0).fit(X_train, y_train)
tree = clf.tree_
print(f"test accuracy {clf.score(X_test, y_test):.3f}")
print(f"{tree.n_leaves()} leaves, {tree.n_decision_nodes()} decision nodes, "
      f"{tree.n_nonzero_weights()} non-zero weights out of {tree.n_decision_nodes() * X.shape[1]}")

# %%
# The tree: weight images at the decision nodes ("no" to the left, "yes" to the right), the
# predicted digit at the leaves.
fig, ax = plt.subplots(figsize=(13, 5))
plot_tree(clf, image_shape=(8, 8), ax=ax)
plt.show()
