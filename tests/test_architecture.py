"""The layout's rules: the core never imports the Dask layer, no import cycles, registries are the plug-in points."""

import ast
import pathlib

import numpy as np
import pytest

import taodist
from taodist import TAOClassifier
from taodist.model.leaves import LEAF_MODELS, ConstantLeaf
from taodist.tao.node_solvers import NODE_SOLVERS, NodeSolver, solve_oblique_saga
from taodist.testing import assert_tree_equal, make_oblique_classification

PACKAGE = pathlib.Path(taodist.__file__).parent
#: the only places that may import distributed or taodist.dask at module level
DASK_LAYER = ("dask/", "service/", "cli.py")


def _module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(path):
    """Absolute names of the modules a file imports at module level (not inside functions)."""
    tree = ast.parse(path.read_text())
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    names = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            names.append(module)
            # "from . import x" imports the submodule x
            names += [f"{module}.{a.name}" for a in node.names]
    return names


def _core_files():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if not rel.startswith(DASK_LAYER):
            yield rel, path


def test_the_core_imports_neither_distributed_nor_the_dask_layer_at_module_level():
    offenders = {}
    for rel, path in _core_files():
        bad = [m for m in _top_level_imports(path)
               if m == "distributed" or m.startswith("distributed.") or m.startswith("taodist.dask")]
        if bad:
            offenders[rel] = bad
    assert not offenders, offenders


def test_no_import_cycles_between_modules():
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {m: {i for i in _top_level_imports(p) if i in modules and i != m and not m.startswith(i + ".")}
             for m, p in modules.items()}
    # a package's __init__ importing its own submodules is how packages work, not a cycle
    graph = {m: {i for i in deps if not i.startswith(m + ".")} for m, deps in graph.items()}
    state, cycles = {}, []

    def visit(m, stack):
        state[m] = "open"
        for d in graph[m]:
            if state.get(d) == "open":
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack + [d])
        state[m] = "done"

    for m in graph:
        if m not in state:
            visit(m, [m])
    assert not cycles, cycles


class _ToyLeaf(ConstantLeaf):
    """A toy leaf model: only to show that registering one is all a new leaf type needs."""

    name = "toy"


def test_a_registered_leaf_model_is_usable_by_the_estimators(monkeypatch):
    monkeypatch.setitem(LEAF_MODELS, "toy", _ToyLeaf())
    X, y = make_oblique_classification(n_samples=300, n_features=4, random_state=1)
    toy = TAOClassifier(max_depth=2, leaf_type="toy", random_state=0, max_iter=3).fit(X, y)
    ref = TAOClassifier(max_depth=2, leaf_type="constant", random_state=0, max_iter=3).fit(X, y)
    assert toy.tree_.leaf_type == "toy"
    np.testing.assert_array_equal(toy.tree_.value, ref.tree_.value)
    np.testing.assert_array_equal(toy.predict(X), ref.predict(X))


def test_a_registered_level_solver_gets_whole_levels_and_gives_the_per_node_result(monkeypatch):
    calls = []

    def level(problems):
        calls.append(len(problems))
        return [solve_oblique_saga(p.X, p.target, p.weight, alpha=p.alpha, w0=p.w0, b0=p.b0) for p in problems]

    monkeypatch.setitem(NODE_SOLVERS, "batched", NodeSolver(solve_oblique_saga, float32=True, level=level))
    X, y = make_oblique_classification(n_samples=400, n_features=5, random_state=2)
    y = y + 2 * (X[:, 0] > 0.2)
    kw = dict(max_depth=3, random_state=0, max_iter=3, n_jobs=1, prune=False)
    batched = TAOClassifier(solver="batched", **kw).fit(X, y)
    ref = TAOClassifier(solver="saga", **kw).fit(X, y)
    assert_tree_equal(batched.tree_, ref.tree_)
    assert max(calls) > 1  # nodes of one depth arrived together


def test_an_unregistered_solver_or_leaf_type_is_refused_by_name():
    X, y = make_oblique_classification(n_samples=50, n_features=3)
    with pytest.raises(ValueError, match="solver"):
        TAOClassifier(solver="nope").fit(X, y)
    with pytest.raises(ValueError, match="leaf_type"):
        TAOClassifier(leaf_type="nope").fit(X, y)
