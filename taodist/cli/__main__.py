"""``python -m taodist.cli``: the ``taodist`` command."""

from . import main

main()
