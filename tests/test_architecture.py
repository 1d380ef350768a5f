"""The layout's rules, read from every import in the package (module level and inside functions).

The layers, bottom to top, and what each may import (its own layer and the
ones below it, never one above):

==============  =========================================================
utils           ``taodist._version``, ``taodist.utils``
solvers         ``taodist.solvers``: arrays in, arrays out
model           ``taodist.model``: the flat-array tree and its kernels
tao             ``taodist.tao``: the optimiser and its executor contract
dask            ``taodist.dask``: TAO's chunk operations and forest trees on a cluster
estimators      ``taodist.estimators``
laptao          ``taodist.laptao``
embedding       ``taodist.embedding``: tree embeddings (LapTAO's affinities, an embedding step for its label step)
io              ``taodist.io``: model files and stores
front           ``taodist.plot``, ``taodist.datasets``, ``taodist`` (the package's face)
service         ``taodist.service``
cli             ``taodist.cli``
testing         ``taodist.testing``
==============  =========================================================

A function-local import of a taodist module is allowed only into the Dask
layer, from the layers above it: those modules import ``distributed``, which
``import taodist`` must not load. Everything else has one home at the right
layer and is imported at module level.
"""

import ast
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import taodist
from taodist import TAOClassifier
from taodist.model.leaves import LEAF_MODELS, ConstantLeaf
from taodist.tao.node_solvers import NODE_SOLVERS, NodeSolver, solve_oblique_saga
from taodist.testing import assert_tree_equal, make_oblique_classification

PACKAGE = pathlib.Path(taodist.__file__).parent

LAYERS = [
    ("utils", ("taodist._version", "taodist.utils")),
    ("solvers", ("taodist.solvers",)),
    ("model", ("taodist.model",)),
    ("tao", ("taodist.tao",)),
    ("dask", ("taodist.dask",)),
    ("estimators", ("taodist.estimators",)),
    ("laptao", ("taodist.laptao",)),
    ("embedding", ("taodist.embedding",)),
    ("io", ("taodist.io",)),
    ("front", ("taodist.plot", "taodist.datasets", "taodist")),
    ("service", ("taodist.service",)),
    ("cli", ("taodist.cli",)),
    ("testing", ("taodist.testing",)),
]
DASK_LAYER = LAYERS.index(next(layer for layer in LAYERS if layer[0] == "dask"))


def _module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module):
    """Index in :data:`LAYERS` of the most specific prefix that holds ``module``."""
    best = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (i, len(prefix))
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS")
    return best[0]


def imports_of(module):
    """``[(imported module, line, at module level?)]`` of every import statement in ``module``.

    ``from package import name`` counts as an import of the submodule
    ``package.name`` where there is one, else of ``package`` itself.
    """
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            for a in node.names:
                sub = f"{target}.{a.name}"
                found.append((sub if sub in MODULES else target, node.lineno, id(node) in top))
    return found


def _edges():
    """``(importer, imported, line, at module level?)`` for every import of one taodist module by another."""
    for module in MODULES:
        for target, line, top in imports_of(module):
            if target in MODULES and target != module and not module.startswith(target + "."):
                # a package's __init__ importing its own submodules is how packages work
                if not target.startswith(module + ".") or MODULES[module].name != "__init__.py":
                    yield module, target, line, top


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_no_module_imports_from_a_layer_above_its_own():
    upward = [f"{m}:{line} imports {t} ({LAYERS[layer_of(m)][0]} -> {LAYERS[layer_of(t)][0]})"
              for m, t, line, _ in _edges() if layer_of(t) > layer_of(m)]
    assert not upward, "\n".join(upward)


def test_function_local_imports_of_taodist_only_reach_the_dask_layer_from_above():
    hidden = [f"{m}:{line} imports {t} inside a function" for m, t, line, top in _edges()
              if not top and not (layer_of(t) == DASK_LAYER and layer_of(m) > DASK_LAYER)]
    assert not hidden, "\n".join(hidden)


def test_no_import_cycles_between_modules_counting_function_local_imports():
    graph = {m: set() for m in MODULES}
    for m, t, _, _ in _edges():
        graph[m].add(t)
    state, cycles = {}, []

    def visit(m, stack):
        state[m] = "open"
        for d in sorted(graph[m]):
            if state.get(d) == "open":
                cycles.append(" -> ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                visit(d, stack + [d])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "\n".join(cycles)


def test_no_module_imports_another_module_s_private_names():
    """A name another module needs gets a public name in its one home (``from .x import _y`` is a hidden seam)."""
    private = []
    for module, path in MODULES.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("taodist")):
                base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
                private += [f"{module}:{node.lineno} imports {a.name} from {target}" for a in node.names
                            if a.name.startswith("_") and f"{target}.{a.name}" not in MODULES
                            and a.name != "__version__"]
    assert not private, "\n".join(private)


def test_below_the_dask_layer_nothing_imports_distributed():
    offenders = [f"{m}:{line} imports {t}" for m in MODULES if layer_of(m) < DASK_LAYER
                 for t, line, _ in imports_of(m) if t == "distributed" or t.startswith("distributed.")]
    assert not offenders, "\n".join(offenders)


def test_between_the_dask_layer_and_the_service_distributed_is_imported_only_inside_functions():
    service = next(i for i, (name, _) in enumerate(LAYERS) if name == "service")
    offenders = [f"{m}:{line} imports {t}" for m in MODULES if DASK_LAYER < layer_of(m) < service
                 for t, line, top in imports_of(m) if top and (t == "distributed" or t.startswith("distributed."))]
    assert not offenders, "\n".join(offenders)


def test_importing_taodist_loads_neither_distributed_nor_dask():
    code = ("import sys, taodist, taodist.io, taodist.laptao, taodist.embedding, taodist.testing; "
            "print(sorted(m for m in ('distributed', 'dask', 'torch', 'matplotlib', 'openTSNE') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_layer_rules_would_catch_a_hidden_import_circle(tmp_path, monkeypatch):
    # the checks above read function-local imports: a model module that imports the io layer
    # inside a function (the kind of circle this layout removed) is both upward and hidden
    fake = tmp_path / "taodist" / "model" / "bad.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("def f():\n    from ..io import load\n    return load\n")
    monkeypatch.setitem(MODULES, "taodist.model.bad", fake)
    edges = [(m, t, top) for m, t, _, top in _edges() if m == "taodist.model.bad"]
    assert edges == [("taodist.model.bad", "taodist.io", False)]
    assert layer_of("taodist.io") > layer_of("taodist.model.bad")


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
