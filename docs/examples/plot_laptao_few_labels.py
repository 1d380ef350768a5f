"""
# LapTAO: a tree from a few labels and many unlabelled points

With 3% of the digits labelled, a tree fitted on the labelled rows alone sees 40 images. LapTAO
(`LapTAOClassifier`) also uses the unlabelled rows (marked `y = -1`): it propagates the labels over
a kNN graph of all rows and fits the tree to them, alternating the two steps. Compared here with
the same tree on the labelled rows only, over several random labellings.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from taodist import LapTAOClassifier, TAOClassifier

X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)

fractions, supervised, semi = [0.03, 0.1], [], []
for fraction in fractions:
    s_acc, l_acc = [], []
    for seed in range(2):
        labelled = np.random.RandomState(seed).rand(len(y_train)) < fraction
        tree = TAOClassifier(max_depth=4, random_state=seed).fit(X_train[labelled], y_train[labelled])
        s_acc.append(tree.score(X_test, y_test))
        y_partial = np.where(labelled, y_train, -1)
        lap = LapTAOClassifier(max_depth=4, n_outer=8, random_state=seed).fit(X_train, y_partial)
        l_acc.append(lap.score(X_test, y_test))
    supervised.append(np.mean(s_acc))
    semi.append(np.mean(l_acc))
    print(f"{fraction:.0%} labelled: labelled rows only {supervised[-1]:.3f}, LapTAO {semi[-1]:.3f}")

# %%
# Test accuracy against the fraction of labelled training rows.
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot([100 * f for f in fractions], supervised, "o-", label="TAO tree, labelled rows only")
ax.plot([100 * f for f in fractions], semi, "s-", label="LapTAO, all rows")
ax.set_xlabel("labelled training rows (%)")
ax.set_ylabel("test accuracy")
ax.legend()
fig.tight_layout()
plt.show()
