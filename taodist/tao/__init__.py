"""The TAO optimiser: a tree of fixed structure improved node by node, the objective never increasing.

``optimizer``      :func:`~taodist.tao.optimizer.tao_optimize`: the driver of leaf and decision steps
``chunks``         the row-chunk operations (routing, care points, evaluation, margin updates)
``executor``       the executor contract the driver runs chunk operations through, and the in-process executor
``node_solvers``   decision-node solvers behind the ``NODE_SOLVERS`` registry
``initial_trees``  the initial trees (random, CART, clustering) and warm-start checks
``bagging``        each forest tree's sample, and fitting trees on it in local processes
``row_buffers``    reusable buffers for care-point rows
"""
