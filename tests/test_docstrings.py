"""Every public estimator, method and function documents its parameters and what it returns (numpydoc)."""

import inspect

import pytest

import taodist

#: the numpydoc checks held: no docstring (GL08), no summary (SS01), a parameter undocumented (PR01) or
#: documented but absent (PR02), a parameter or return value without description (PR06 is its type; RT03),
#: no Returns section (RT01)
CHECKS = {"GL08", "SS01", "PR01", "PR02", "RT01", "RT03"}
ESTIMATORS = ["TAOClassifier", "TAORegressor", "TAOForestClassifier", "TAOForestRegressor", "LapTAOClassifier",
              "LapTAORegressor", "TAOEmbedding"]
FUNCTIONS = ["taodist.tao_path", "taodist.export_text", "taodist.save", "taodist.load", "taodist.plot.plot_tree",
             "taodist.laptao.knn_graph", "taodist.laptao.workers_graph", "taodist.dask.SchedulerLostError"]


def _public_objects():
    names = []
    for name in ESTIMATORS:
        cls = getattr(taodist, name)
        names.append(f"taodist.{name}")
        for member, value in inspect.getmembers(cls):
            defined_here = getattr(value, "__module__", "") or ""
            if member.startswith("_") or not callable(value) or not defined_here.startswith("taodist"):
                continue  # scikit-learn's own methods (get_params, score, ...) are documented there
            names.append(f"taodist.{name}.{member}")
    return names + FUNCTIONS


@pytest.mark.parametrize("name", _public_objects())
def test_public_docstrings_document_parameters_and_returns(name):
    validate = pytest.importorskip("numpydoc.validate").validate
    errors = [f"{code}: {message}" for code, message in validate(name)["errors"] if code in CHECKS]
    assert not errors, "\n".join(errors)
