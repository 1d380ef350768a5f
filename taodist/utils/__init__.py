"""Helpers every layer uses; nothing here imports the rest of taodist.

``rows``             dense and scipy.sparse CSR rows through one set of calls
``progress``         the progress events a fit reports, and their printer
``solver_warnings``  scikit-learn's convergence warnings silenced for TAO's inner solvers
"""
