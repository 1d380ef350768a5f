"""The documentation site builds with no warning: every page in the navigation, every link between pages,
the API reference generated from the docstrings, and the gallery, whose examples run in the build."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_docs_build_strictly_and_the_examples_run(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    pytest.importorskip("mkdocs_gallery")
    env = {**os.environ, "MPLBACKEND": "Agg"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert "TAOClassifier" in api and "categorical_features" in api and "eval_set" in api
    examples = sorted(p.stem for p in (ROOT / "docs" / "examples").glob("plot_*.py"))
    assert len(examples) >= 5
    for name in examples:  # each example's page shows its printed output and its figure
        page = (tmp_path / "site" / "generated" / "gallery" / name / "index.html").read_text()
        assert f"mkd_glr_{name}_001.png" in page, name
        assert (tmp_path / "site" / "generated" / "gallery" / "images" / f"mkd_glr_{name}_001.png").stat().st_size


def test_every_docs_page_is_in_the_navigation():
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]

    def pages(entries):
        for entry in entries:
            for value in entry.values():
                yield from pages(value) if isinstance(value, list) else [value]

    listed = set(pages(nav))
    # the gallery's pages are made from docs/examples by the build, into docs/generated
    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")
               if p.relative_to(ROOT / "docs").parts[0] not in ("examples", "generated")}
    assert on_disk | {"generated/gallery"} == listed
