"""
# Missing values and a categorical column, without imputation

A DataFrame with missing values and a string column goes into the tree as it is. Each decision
node learns where its rows with a missing value go (a missingness indicator beside the mean-filled
value), and the categorical column is one-hot encoded inside the model. Here more and more values
of the breast-cancer table are removed at random, in training and test rows alike.
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split

from taodist import TAOClassifier

data = load_breast_cancer(as_frame=True)
X, y = data.data.iloc[:, :10], data.target
X = X.assign(size=pd.cut(X["mean area"], [0, 400, 800, np.inf], labels=["small", "medium", "large"]).astype(str))
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)

fractions, accuracy = [0.0, 0.1, 0.2, 0.3, 0.4], []
for fraction in fractions:
    rng = np.random.RandomState(0)
    holes = [frame.mask(rng.rand(*frame.shape) < fraction) for frame in (X_train, X_test)]
    clf = TAOClassifier(random_state=0).fit(holes[0], y_train)
    accuracy.append(clf.score(holes[1], y_test))
    print(f"{fraction:.0%} missing: test accuracy {accuracy[-1]:.3f}, "
          f"{clf.encoder_.n_columns_out} encoded columns")
print(clf.encoder_.feature_names_out_[-6:])

# %%
# Test accuracy as values go missing.
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot([100 * f for f in fractions], accuracy, "o-")
ax.set_xlabel("values missing at random (%)")
ax.set_ylabel("test accuracy")
fig.tight_layout()
plt.show()
