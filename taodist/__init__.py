"""taodist: Tree Alternating Optimisation (TAO) trees, forests and LapTAO on Dask.

Public API: the scikit-learn estimators, the sparsity path, model I/O and
rule export. Everything else lives in private modules.
"""

from ._version import __version__
from .estimators.forest import TAOForestClassifier, TAOForestRegressor
from .estimators.path import tao_path
from .estimators.tree import TAOClassifier, TAORegressor
from .io import load, save
from .laptao import LapTAOClassifier, LapTAORegressor
from .model.export import export_text
from .model.tree import Tree

__all__ = ["TAOClassifier", "TAORegressor", "TAOForestClassifier", "TAOForestRegressor",
           "LapTAOClassifier", "LapTAORegressor", "Tree", "tao_path", "export_text", "load", "save", "__version__"]
