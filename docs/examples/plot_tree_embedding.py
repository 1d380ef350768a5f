"""
# A t-SNE embedding learned together with a tree that maps new points

`TAOEmbedding` learns a 2-D t-SNE embedding of handwritten digits jointly with a sparse oblique tree
with linear leaves: the tree's own output is the embedding, so it maps held-out digits, and each
of its leaves is one region of the map. Compared here with plain t-SNE of the same points (which
has no mapping) and with the tree fitted after the fact to it (the direct fit), then read as the
thesis reads a tree embedding (its Figures 4.2-4.3): the tree beside the map, each leaf's region and
classes. Needs `pip install 'taodist[embedding]'` (openTSNE).
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.manifold import trustworthiness

from taodist import TAOEmbedding
from taodist.plot import plot_embedding_tree

X, y = load_digits(return_X_y=True)
rng = np.random.RandomState(0)
order = rng.permutation(len(y))
train, held_out = order[:600], order[600:900]

# the labels only count each leaf's classes: the embedding and the tree do not use them
emb = TAOEmbedding(method="tsne", max_depth=4, perplexity=30, random_state=0).fit(X[train], y[train])
direct = TAOEmbedding(method="tsne", max_depth=4, perplexity=30, n_outer=0, random_state=0).fit(X[train])
print(f"t-SNE objective (KL) of the tree's map: direct fit {direct.history_[0]['objective']:.3f}, "
      f"joint {emb.history_[emb.best_iteration_]['objective']:.3f}; plain t-SNE of the points "
      f"{emb.history_[0]['z_objective']:.3f}")
for name, model in (("direct fit", direct), ("joint tree", emb)):
    held = model.transform(X[held_out])
    print(f"{name}: held-out trustworthiness {trustworthiness(X[held_out], held, n_neighbors=10):.3f}, "
          f"{model.tree_.n_leaves()} leaves")

# %%
# Left: plain t-SNE of the training digits. Middle: the joint tree's map of the training digits and
# (crosses) of 300 held-out digits it never saw. Right: the same map coloured by the leaf each
# digit reaches; a leaf is a linear map of the digits that reach it, which can spread them over
# several parts of the map.
fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
free = emb.free_embedding_
axes[0].scatter(free[:, 0], free[:, 1], c=y[train], cmap="tab10", s=6)
axes[0].set_title("t-SNE (no mapping)")
Z, held = emb.embedding_, emb.transform(X[held_out])
axes[1].scatter(Z[:, 0], Z[:, 1], c=y[train], cmap="tab10", s=6)
axes[1].scatter(held[:, 0], held[:, 1], c=y[held_out], cmap="tab10", s=14, marker="x")
axes[1].set_title("the tree's map (x: held-out digits)")
leaves = emb.tree_.apply(X[train])
axes[2].scatter(Z[:, 0], Z[:, 1], c=np.unique(leaves, return_inverse=True)[1], cmap="tab20", s=6)
axes[2].set_title(f"coloured by leaf ({emb.tree_.n_leaves()} leaves)")
for ax in axes:
    ax.set_xticks([])
    ax.set_yticks([])
fig.tight_layout()
plt.show()

# %%
# The tree beside its map, as in the thesis' Figures 4.2-4.3. Under each decision node, the pixels
# ("x<row*8+column>") with the largest positive weights (+, towards "yes") and negative weights (-);
# each leaf in its own colour with the number of training digits reaching it and the histogram of
# their classes (0 to 9) under it; on the right the training digits coloured by their leaf, each
# leaf's region outlined by the convex hull of its digits and marked with its number.
plot_embedding_tree(emb, X[train], image_shape=(8, 8), fig=plt.figure())
plt.show()

# %%
# The same, as text: each leaf's region (the box and centroid of its digits' coordinates) and its
# classes. `taodist inspect` prints this for a saved model.
for leaf in emb.explain()["leaves"]:
    (x0, y0), (x1, y1) = leaf["box"]
    top = sorted(zip(leaf["class_counts"], emb.classes_), reverse=True)[:3]
    print(f"leaf #{leaf['leaf']}: {leaf['n_train']} digits in [{x0:.0f}, {x1:.0f}] x [{y0:.0f}, {y1:.0f}], "
          f"mostly " + ", ".join(f"{c}s ({n})" for n, c in top if n))
