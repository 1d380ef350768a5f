"""A bench script's report: printed, and written to its ``--out`` file (folders made as needed)."""

from pathlib import Path


def write_report(text, out):
    """Print ``text`` and write it to ``out``."""
    print(text)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text)
