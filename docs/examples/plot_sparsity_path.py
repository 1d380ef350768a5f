"""
# A sparsity path, each tree warm-started from the last

The l1 penalty `alpha = 1 / C` trades accuracy for sparse, readable nodes. `tao_path` fits trees
along decreasing `C`, each starting from the previous one (NeurIPS 2018, section 4), so the whole
path costs little more than one fit. Choose `C` on a validation split, never on the test set.
"""

import matplotlib.pyplot as plt
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split

from taodist import TAOClassifier, tao_path

X, y = load_breast_cancer(return_X_y=True)
X_fit, X_val, y_fit, y_val = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)

steps = tao_path(X_fit, y_fit, Cs=[100, 30, 10, 3, 1, 0.3, 0.1, 0.03],
                 estimator=TAOClassifier(max_depth=3, random_state=0), X_val=X_val, y_val=y_val)
for s in steps:
    print(f"C={s.C:<6g} non-zero weights {s.n_nonzero_weights:3d}  train {s.train_score:.3f}  "
          f"validation {s.val_score:.3f}")
best = max(steps, key=lambda s: s.val_score)
print(f"best C on the validation split: {best.C:g}")

# %%
# Error against the number of non-zero weights in the decision nodes.
fig, ax = plt.subplots(figsize=(6, 3.5))
nnz = [s.n_nonzero_weights for s in steps]
ax.plot(nnz, [1 - s.train_score for s in steps], "o-", label="training error")
ax.plot(nnz, [1 - s.val_score for s in steps], "s-", label="validation error")
ax.set_xlabel("non-zero weights in the decision nodes")
ax.set_ylabel("error")
ax.legend()
fig.tight_layout()
plt.show()
