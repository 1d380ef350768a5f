"""The TAO optimiser: a tree of fixed structure improved node by node, the objective never increasing.

Driver and tasks (the driver runs the tasks through an executor):

``optimizer``      :func:`~taodist.tao.optimizer.tao_optimize`: the driver of leaf and decision steps
``node_tasks``     a group of decision nodes solved (``NodeJob``), their candidates evaluated on a chunk
``leaf_tasks``     a group of leaves refitted (``LeafJob``, ``LeafFit``)
``executor``       the executor contract the driver runs chunk operations through, and the in-process executor

Row chunks (each module imports only those above it in this list):

``routing``        the tree snapshot chunk tasks route with (``Routing``), rows walked to a depth
``margins``        margin kernels: a chunk's own (float32, exact in sign) and a candidate's (float64)
``leaf_losses``    each row's loss at a leaf, and a chunk's cache of them
``part_rows``      the X rows handed to node and leaf fits, copied once or named by reference
``chunks``         a chunk's state, construction and update; passes over all its rows; leaf rows
``care_points``    the decision step on a chunk: node statistics, care-point samples, candidate evaluation

Solvers, initial trees and helpers:

``node_solvers``   decision-node solvers behind the ``NODE_SOLVERS`` registry
``initial_trees``  the initial trees (random, CART, clustering) and warm-start checks
``bagging``        each forest tree's sample, and fitting trees on it in local processes
``row_buffers``    reusable buffers for care-point rows
"""
