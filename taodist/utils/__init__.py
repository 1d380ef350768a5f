"""Helpers every layer uses; nothing here imports the rest of taodist.

``rows``             dense and scipy.sparse CSR rows through one set of calls
``validation``       checks of Dask input, without computing it
``parallel``         thread counts (joblib's ``n_jobs``), and numba's parallel kernels called safely from threads
``progress``         the progress events a fit reports, and their printer
``solver_warnings``  scikit-learn's convergence warnings silenced for TAO's inner solvers
``messages``         errors as one line of text, as the command line and model files show them
"""
