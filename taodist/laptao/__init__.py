"""LapTAO: semi-supervised trees with a graph Laplacian prior (NeurIPS 2022)."""

from ._distributed_affinities import WorkersGraph, workers_graph
from ._distributed_graph import knn_graph
from ._estimators import LapTAOClassifier, LapTAORegressor
from ._graph import affinity_graph, graph_laplacian
from ._label_step import solve_label_step

__all__ = ["LapTAOClassifier", "LapTAORegressor", "WorkersGraph", "affinity_graph", "graph_laplacian", "knn_graph",
           "solve_label_step", "workers_graph"]
