"""
# A TAO forest against scikit-learn's forests and boosting

Bagged TAO trees on their defaults against RandomForest, ExtraTrees and HistGradientBoosting, on
two small real data sets (the full comparison over 26 sets is on the benchmarks pages). Errors are
on held-out test splits; the models' sizes are compared too: a TAO forest of shallow oblique trees
has a small fraction of the parameters of a random forest.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_breast_cancer, load_wine
from sklearn.ensemble import ExtraTreesClassifier, HistGradientBoostingClassifier, RandomForestClassifier
from sklearn.model_selection import train_test_split

from taodist import TAOForestClassifier

models = {
    "TAO forest": lambda seed: TAOForestClassifier(random_state=seed),
    "RandomForest": lambda seed: RandomForestClassifier(random_state=seed),
    "ExtraTrees": lambda seed: ExtraTreesClassifier(random_state=seed),
    "HistGradientBoosting": lambda seed: HistGradientBoostingClassifier(random_state=seed),
}
errors = {}
for name, loader in (("breast cancer", load_breast_cancer), ("wine", load_wine)):
    X, y = loader(return_X_y=True)
    for model, make in models.items():
        err = []
        for seed in range(2):
            X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y)
            err.append(1 - make(seed).fit(X_tr, y_tr).score(X_te, y_te))
        errors[name, model] = 100 * np.mean(err)
        print(f"{name:14s} {model:22s} test error {errors[name, model]:.2f}%")

# %%
# Test error per data set and model (mean of two splits).
fig, ax = plt.subplots(figsize=(6.5, 3.5))
width = 0.2
for k, model in enumerate(models):
    values = [errors[name, model] for name in ("breast cancer", "wine")]
    ax.bar(np.arange(2) + (k - 1.5) * width, values, width, label=model)
ax.set_xticks(np.arange(2), ["breast cancer", "wine"])
ax.set_ylabel("test error (%)")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
