"""taodist: Tree Alternating Optimisation (TAO) trees, forests and LapTAO on Dask.

Public API: the scikit-learn estimators, the sparsity path, model I/O and
rule export. Everything else lives in private modules.
"""

from ._estimators import TAOClassifier, TAORegressor
from ._export import export_text
from ._forest import TAOForestClassifier, TAOForestRegressor
from .laptao import LapTAOClassifier, LapTAORegressor
from ._path import tao_path
from ._tree import Tree
from ._version import __version__
from .io import load, save

__all__ = ["TAOClassifier", "TAORegressor", "TAOForestClassifier", "TAOForestRegressor",
           "LapTAOClassifier", "LapTAORegressor", "Tree", "tao_path", "export_text", "load", "save", "__version__"]
