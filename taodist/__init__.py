"""taodist: Tree Alternating Optimisation (TAO) trees, forests and LapTAO on Dask.

Public API: the names below (the scikit-learn estimators, the sparsity path,
model I/O and rule export) and the public subpackages :mod:`taodist.dask`,
:mod:`taodist.io`, :mod:`taodist.laptao`, :mod:`taodist.embedding`, :mod:`taodist.plot`,
:mod:`taodist.datasets`, :mod:`taodist.service` and :mod:`taodist.testing`.

The other subpackages are the layers the estimators are built from, bottom
to top; each imports only from the layers below it (``tests/test_architecture.py``
checks it), and none is public API:

``utils``       helpers every layer uses (dense and CSR rows, threads, progress, warnings)
``solvers``     numerical solvers: arrays in, arrays out (FISTA, SAGA, block CG)
``model``       the fitted tree as flat arrays, its leaf models, routing and prediction kernels, checks
``tao``         the TAO optimiser: the driver, row-chunk operations, node and leaf tasks, the executor contract
``dask``        the optimiser's chunk operations and forest trees run on a Dask cluster
``estimators``  the scikit-learn estimators, and where a fit runs
"""

from ._version import __version__
from .embedding import TAOEmbedding
from .estimators.forest import TAOForestClassifier, TAOForestRegressor
from .estimators.path import tao_path
from .estimators.tree import TAOClassifier, TAORegressor
from .io import load, save
from .laptao import LapTAOClassifier, LapTAORegressor
from .model.export import export_text
from .model.tree import Tree

__all__ = ["TAOClassifier", "TAORegressor", "TAOForestClassifier", "TAOForestRegressor",
           "LapTAOClassifier", "LapTAORegressor", "TAOEmbedding", "Tree", "tao_path", "export_text", "load", "save",
           "__version__"]
