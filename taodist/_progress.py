"""Progress reports from long fits, and the hook that stops them.

A fit calls :func:`report` at natural checkpoints: each TAO level and
iteration, each finished forest tree, each LapTAO outer iteration. Nothing
happens unless a caller installed a reporter with :func:`reporting` — the
``taodist`` command prints progress with one, and a job running inside the
cluster logs to the scheduler and checks for cancellation with one. A
reporter that raises stops the fit at that checkpoint; the exception
propagates out of ``fit`` and no fitted state is kept.

Reporters live in a :mod:`contextvars` variable, so concurrent fits in
different threads (jobs sharing a worker) each see their own.
"""

import contextlib
import contextvars

_reporter = contextvars.ContextVar("taodist_progress_reporter", default=None)


@contextlib.contextmanager
def reporting(reporter):
    """Within the block, send progress events to ``reporter(event, info)``.

    ``event`` is one of ``"tao_level"`` (iteration, depth, n_nodes),
    ``"tao_iteration"`` (iteration, max_iter, objective, seconds),
    ``"forest_tree"`` (done, total) and ``"laptao_outer"`` (iteration,
    n_outer, mu, constraint). ``reporter=None`` turns reporting off.
    """
    token = _reporter.set(reporter)
    try:
        yield
    finally:
        _reporter.reset(token)


def report(event, **info):
    """Send one event to the active reporter, if any (it may raise to stop the fit)."""
    reporter = _reporter.get()
    if reporter is not None:
        reporter(event, info)
