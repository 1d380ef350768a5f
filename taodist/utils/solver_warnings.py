"""Silence the inner solvers' convergence warnings, and only theirs.

TAO runs scikit-learn's SAGA, liblinear, Lasso and k-means for a fixed,
small number of iterations on purpose (each node and leaf is warm-started at
every TAO iteration), so their ``ConvergenceWarning`` says nothing to the
user. Two rules:

* The filter names scikit-learn's modules: TAO's own convergence warning
  (raised by taodist) and every other warning still reach the user.
* ``warnings.catch_warnings`` is not thread-safe: a solver thread leaving its
  block restores the filters it saw on entry, which can drop another
  thread's filter or leave its own behind after the fit. So every public
  ``fit`` sets the filter once, in the calling thread, before any worker
  thread starts (:func:`silence_inner_solvers`): every thread's snapshot
  then holds it, and the outer block restores the user's filters at the end.
  The solver calls keep their own block (:func:`sklearn_convergence_ignored`)
  for callers outside an estimator, e.g. tasks on Dask workers.
"""

import contextlib
import functools
import warnings

from sklearn.exceptions import ConvergenceWarning


@contextlib.contextmanager
def sklearn_convergence_ignored():
    """Ignore scikit-learn's ``ConvergenceWarning`` (and nothing else) inside the block."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=ConvergenceWarning, module=r"sklearn\.")
        yield


def silence_inner_solvers(fit):
    """Decorate an estimator's ``fit``: scikit-learn's convergence warnings are ignored while it runs."""

    @functools.wraps(fit)
    def wrapper(*args, **kwargs):
        with sklearn_convergence_ignored():
            return fit(*args, **kwargs)

    return wrapper
