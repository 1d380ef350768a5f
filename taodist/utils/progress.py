"""Progress reports from long fits, and the hook that stops them.

A fit calls :func:`report` at natural checkpoints: each TAO level and
iteration, each finished forest tree, each LapTAO or tree-embedding outer iteration. Nothing
happens unless a caller installed a reporter with :func:`reporting` — the
``taodist`` command prints progress with one, and a job running inside the
cluster logs to the scheduler and checks for cancellation with one. A
reporter that raises stops the fit at that checkpoint; the exception
propagates out of ``fit`` and no fitted state is kept.

Reporters live in a :mod:`contextvars` variable, so concurrent fits in
different threads (jobs sharing a worker) each see their own.

:class:`ProgressPrinter` is the reporter that prints progress for a person
(``taodist demo`` and ``taodist fit``): elapsed time, TAO iteration and
level, objective, ETA; one line per iteration when the output is not a
terminal.
"""

import contextlib
import contextvars
import sys
import time

_reporter = contextvars.ContextVar("taodist_progress_reporter", default=None)


@contextlib.contextmanager
def reporting(reporter, *, also_outer=False):
    """Within the block, send progress events to ``reporter(event, info)``.

    ``event`` is one of ``"tao_level"`` (iteration, depth, n_nodes),
    ``"tao_iteration"`` (iteration, max_iter, objective, seconds),
    ``"tao_validation"`` (iteration, score, best_iteration: with a validation
    set), ``"forest_tree"`` (done, total), ``"laptao_outer"`` (iteration,
    n_outer, mu, constraint) and ``"embedding_outer"`` (iteration, n_outer,
    mu, objective, constraint). ``reporter=None`` turns reporting off.

    ``also_outer``: the reporter installed around this block keeps receiving
    the events too (an estimator's ``callbacks`` inside ``taodist fit``'s
    progress printer), after ``reporter``.
    """
    outer = _reporter.get() if also_outer else None
    if outer is not None and reporter is not None:
        inner = reporter

        def reporter(event, info):
            stop = inner(event, info)
            return bool(outer(event, info)) or bool(stop)

    token = _reporter.set(reporter)
    try:
        yield
    finally:
        _reporter.reset(token)


def report(event, **info):
    """Send one event to the active reporter, if any; True when it asks the fit to stop at this checkpoint.

    A reporter stops TAO's iterations early (keeping the model) by returning
    True from a ``"tao_iteration"`` event, and abandons the whole fit by raising.
    """
    reporter = _reporter.get()
    return reporter is not None and bool(reporter(event, info))


def _duration(seconds):
    """``7.2s``, ``1m05s``, ``2h03m``: short enough for a progress line."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class ProgressPrinter:
    """A reporter (for :func:`reporting`) that prints a fit's progress for a person.

    Every line starts with the time elapsed since the printer was made.
    TAO: a line per iteration (objective, its change, seconds per
    iteration, ETA); on a terminal the current level (depth, nodes) is also
    shown, rewritten in place, so something moves from the first seconds.
    Forests: trees done and an ETA; LapTAO: outer iterations and an ETA.

    When the output is not a terminal (a log, a pipe) nothing is rewritten:
    one line per iteration, plus a level line when no line was printed for
    ``quiet_seconds`` (a slow first iteration still shows progress).

    TAO's ETA (``ETA <= ...``) assumes every remaining iteration takes the
    mean time so far and that all ``max_iter`` iterations run: TAO stops
    earlier once the objective improves by less than ``tol``, so it is an
    upper bound. Forest and LapTAO ETAs (``ETA ~...``) extrapolate the mean
    time per tree / outer iteration since the printer was made.

    Parameters
    ----------
    write : callable, optional
        Receives text (no newline added). Default: ``sys.stdout``.
    tty : bool, optional
        Rewrite lines in place. Default: whether ``sys.stdout`` is a terminal.
    quiet_seconds : float, default=5.0
        When not on a terminal: the longest silence before a level line.
    clock : callable, default=time.perf_counter
    """

    def __init__(self, write=None, tty=None, quiet_seconds=5.0, clock=None):
        self._write = write or (lambda text: (sys.stdout.write(text), sys.stdout.flush()))
        self.tty = sys.stdout.isatty() if tty is None else tty
        self.quiet_seconds = quiet_seconds
        self._clock = clock or time.perf_counter
        self.start = self._clock()
        self._last_line = self.start
        self._open = False  # a line being rewritten in place, not yet ended
        self._levels = None  # levels per TAO iteration (max depth + 1), learnt from the first level event
        self._level_done = 0
        self._iter_seconds = []
        self._objective = None
        self._max_iter = None
        self._iter_start = self.start

    # ------------------------------------------------------------ output
    def _emit(self, text, transient=False):
        now = self._clock()
        line = f"[{_duration(now - self.start):>7}] {text}"
        if self.tty:
            self._write(f"\r{line}\033[K" + ("" if transient else "\n"))
            self._open = transient
        elif not transient or now - self._last_line >= self.quiet_seconds:
            self._write(line + "\n")
        else:
            return
        self._last_line = now

    def finish(self):
        """End a line left open on a terminal (call before printing anything else)."""
        if self._open:
            self._write("\n")
            self._open = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.finish()

    # ------------------------------------------------------------ events
    def __call__(self, event, info):
        handler = getattr(self, "_on_" + event, None)
        if handler is not None:
            handler(info)

    @staticmethod
    def _eta(remaining_units, seconds_per_unit, bound=False):
        """``ETA <= 1m05s`` (an upper bound: TAO may stop early), ``ETA ~1m05s``, or ``done``."""
        if remaining_units <= 0:
            return "done"
        return f"ETA {'<= ' if bound else '~'}{_duration(remaining_units * seconds_per_unit)}"

    def _on_tao_level(self, info):
        if self._levels is None or info["depth"] + 1 > self._levels:
            self._levels = info["depth"] + 1  # levels run bottom-up: the first one is the deepest
        self._level_done = self._levels - info["depth"]
        it = info["iteration"]
        text = (f"TAO iteration {it}{'/' + str(self._max_iter) if self._max_iter else ''}: "
                f"level {self._level_done}/{self._levels} done (depth {info['depth']}, {info['n_nodes']} "
                f"node{'s' if info['n_nodes'] != 1 else ''})")
        if self._objective is not None:
            text += f", objective {self._objective:.6g} after iteration {it - 1}"
        if self._iter_seconds and self._max_iter:
            mean = sum(self._iter_seconds) / len(self._iter_seconds)
            left = (self._max_iter - it + 1) * mean - (self._clock() - self._iter_start)
            text += f", ETA <= {_duration(left)}"
        self._emit(text, transient=True)

    def _on_tao_iteration(self, info):
        it, max_iter, objective = info["iteration"], info["max_iter"], info["objective"]
        if it == 1:  # a new TAO run (LapTAO runs one per tree step): no change or mean from the last one
            self._objective, self._iter_seconds = None, []
        self._max_iter = max_iter
        self._iter_seconds.append(info["seconds"])
        self._iter_start = self._clock()
        change = ""
        if self._objective:
            change = f" ({100 * (objective - self._objective) / abs(self._objective):+.2f}%)"
        self._objective = objective
        mean = sum(self._iter_seconds) / len(self._iter_seconds)
        self._emit(f"TAO iteration {it}/{max_iter}: objective {objective:.6g}{change}, {info['seconds']:.1f}s, "
                   f"{self._eta(max_iter - it, mean, bound=True)}")

    def _on_tao_validation(self, info):
        self._emit(f"TAO iteration {info['iteration']}: validation error {info['score']:.6g} (best: iteration "
                   f"{info['best_iteration']})")

    def _on_forest_tree(self, info):
        done, total = info["done"], info["total"]
        per_tree = (self._clock() - self.start) / max(done, 1)
        self._emit(f"forest: {done}/{total} trees, {self._eta(total - done, per_tree)}",
                   transient=self.tty or done < total)
        if done == total:
            self.finish()

    def _on_embedding_outer(self, info):
        it, n = info["iteration"], info["n_outer"]
        per_outer = (self._clock() - self.start) / max(it, 1)  # the free embedding's time spread over the steps
        self._emit(f"embedding outer step {it}/{n}: mu {info['mu']:.3g}, objective of the tree's map "
                   f"{info['objective']:.6g}, ||Z - F(X)|| / ||Z|| {info['constraint']:.4g}, "
                   f"{self._eta(n - it, per_outer)}")

    def _on_laptao_outer(self, info):
        it, n = info["iteration"], info["n_outer"]
        per_outer = (self._clock() - self.start) / max(it, 1)
        self._emit(f"LapTAO outer iteration {it}/{n}: mu {info['mu']:.3g}, ||z - t|| {info['constraint']:.4g}, "
                   f"{self._eta(n - it, per_outer)}")
