"""Error messages as the command line and model files show them: one line each."""


def one_line(exc, with_type=False):
    """``exc`` as one line of text (messages from numpy and zipfile may span several).

    Parameters
    ----------
    exc : BaseException
    with_type : bool, default=False
        Start with the exception's type (``"BadZipFile: ..."``), for
        messages that wrap a library's error.

    Returns
    -------
    str
    """
    if with_type:
        return " ".join(f"{type(exc).__name__}: {exc}".split())
    return " ".join(str(exc).split()) or type(exc).__name__
