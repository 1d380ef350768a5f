"""Tree embeddings: a sparse oblique tree learned jointly with a t-SNE or elastic embedding (thesis ch. 4).

The estimator is :class:`TAOEmbedding`. The pieces, one module each:
``_affinities`` (the joint affinities P on the kNN graph, shared with LapTAO,
and the spectral start), ``_elastic`` (the elastic embedding's objective,
gradient and spectral-direction steps), ``_tsne`` (t-SNE's, through openTSNE,
imported only when a t-SNE is fitted), ``_estimator`` (the augmented
Lagrangian that alternates them with TAO tree steps) and ``_explain`` (what the
fitted tree says about the embedding: top features, leaf regions, class counts).
"""

from ._affinities import joint_affinities
from ._elastic import ElasticEmbeddingObjective
from ._estimator import TAOEmbedding
from ._tsne import TSNEObjective

__all__ = ["TAOEmbedding", "ElasticEmbeddingObjective", "TSNEObjective", "joint_affinities"]
