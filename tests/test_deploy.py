"""The deployment files (compose, Dockerfile, Kubernetes, Helm values) are consistent and safe by default.

No Docker or Kubernetes here: the files are parsed and checked for the properties a
broken edit would lose (worker memory headroom, threads = CPUs, loopback-only ports,
the shared /store volume everywhere, non-root image).
"""

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from dask.utils import parse_bytes

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
COMPOSE_TLS = ROOT / "deploy" / "docker-compose.tls.yml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
K8S = ROOT / "deploy" / "kubernetes"
HELM_VALUES = ROOT / "deploy" / "helm-values.yaml"
HELM_POST_RENDER = ROOT / "deploy" / "helm" / "post-render"
STORE = "/store"


# --- units ---------------------------------------------------------------------------

def docker_bytes(value):
    """Docker/compose byte values: b, k, m, g (optionally + 'b'), powers of 1024."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([bkmg]?)b?\s*", str(value).lower())
    assert m, f"not a Docker byte value: {value!r}"
    return float(m.group(1)) * 1024 ** "bkmg".index(m.group(2) or "b")


def k8s_bytes(value):
    """Kubernetes memory quantities (Ki/Mi/Gi/Ti binary, k/M/G/T decimal, plain bytes)."""
    m = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi|Ti|k|M|G|T)?", str(value))
    assert m, f"not a Kubernetes quantity: {value!r}"
    scale = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
             "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[m.group(2)]
    return float(m.group(1)) * scale


def k8s_cpus(value):
    s = str(value)
    return float(s[:-1]) / 1000 if s.endswith("m") else float(s)


def option(args, name):
    """Value of the last ``--name VALUE`` / ``--name=VALUE`` in an argument list (click: last wins)."""
    args = [str(a) for a in args]
    found = None
    for i, a in enumerate(args):
        if a == name:
            found = args[i + 1]
        elif a.startswith(name + "="):
            found = a.split("=", 1)[1]
    return found


def as_args(command):
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


# --- docker compose ------------------------------------------------------------------

@pytest.fixture(scope="module")
def compose():
    doc = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(doc, dict) and "services" in doc
    return doc


def _is_worker(service):
    args = as_args(service.get("command", []))
    return args[:2] == ["dask", "worker"]


def _workers(compose):
    return {name: s for name, s in compose["services"].items() if _is_worker(s)}


def test_compose_has_scheduler_and_exactly_two_workers(compose):
    services = compose["services"]
    assert as_args(services["scheduler"]["command"])[:2] == ["dask", "scheduler"]
    workers = _workers(compose)
    assert workers, "no `dask worker` service"
    replicas = sum(s.get("deploy", {}).get("replicas", 1) for s in workers.values())
    assert replicas == 2
    for name, s in workers.items():
        assert option(as_args(s["command"]), "--nthreads") is not None, name
        # workers reach the scheduler by its service name, and wait until it is healthy
        assert as_args(s["command"])[2] == "tcp://scheduler:8786", name
        assert s["depends_on"]["scheduler"]["condition"] == "service_healthy", name


def test_compose_scheduler_healthcheck_and_loopback_ports(compose):
    sched = compose["services"]["scheduler"]
    test = sched["healthcheck"]["test"]
    assert test[0] in ("CMD", "CMD-SHELL") and "8787" in " ".join(test)
    published = set()
    for service in compose["services"].values():
        for port in service.get("ports", []):
            spec = port if isinstance(port, str) else f"{port.get('host_ip', '')}:{port['published']}:{port['target']}"
            assert spec.startswith("127.0.0.1:"), f"port {spec!r} is not bound to loopback"
            published.add(int(spec.split(":")[-1].split("/")[0]))
    assert {8786, 8787} <= published


def test_compose_worker_limits_match_dask_flags(compose):
    for name, s in _workers(compose).items():
        limits = s["deploy"]["resources"]["limits"]
        container_bytes = docker_bytes(limits["memory"])
        cpus = float(limits["cpus"])
        args = as_args(s["command"])
        dask_limit = option(args, "--memory-limit")
        assert dask_limit not in (None, "auto", "0"), f"{name}: set --memory-limit explicitly"
        assert parse_bytes(dask_limit) < container_bytes, f"{name}: --memory-limit must be below the container limit"
        assert parse_bytes(dask_limit) >= 0.5 * container_bytes, f"{name}: --memory-limit wastes most of the container"
        assert int(option(args, "--nthreads")) == cpus, f"{name}: --nthreads must match the CPU limit"
    assert compose["services"]["scheduler"]["deploy"]["resources"]["limits"]["memory"]


def test_compose_shared_volume_on_every_service(compose):
    mounts = {}
    for name, s in compose["services"].items():
        for v in s.get("volumes", []):
            source, target = (v.split(":")[:2] if isinstance(v, str) else (v["source"], v["target"]))
            if target == STORE:
                mounts[name] = source
    assert set(mounts) == set(compose["services"]), "every service must mount the shared volume at /store"
    (source,) = set(mounts.values())
    assert source in compose["volumes"], "the store must be a named volume declared at the top level"


def test_compose_builds_from_deploy_dockerfile(compose):
    for name, s in compose["services"].items():
        build = s["build"]
        assert (ROOT / build["context"]).resolve() == ROOT, name
        assert (ROOT / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE, name
    assert len({s["image"] for s in compose["services"].values()}) == 1


def test_compose_tls_override():
    doc = yaml.safe_load(COMPOSE_TLS.read_text())
    base = yaml.safe_load(COMPOSE.read_text())
    assert set(doc["services"]) <= set(base["services"])
    sched = as_args(doc["services"]["scheduler"]["command"])
    for flag in ("--tls-ca-file", "--tls-cert", "--tls-key"):
        assert option(sched, flag).startswith("/run/secrets/")
    for name, s in doc["services"].items():
        if not _is_worker(s):
            continue
        args = as_args(s["command"])
        assert args[2].startswith("tls://"), name
        for flag in ("--tls-ca-file", "--tls-cert", "--tls-key"):
            assert option(args, flag).startswith("/run/secrets/"), (name, flag)
        # the TLS command keeps the same sizing as the base file
        base_args = as_args(base["services"][name]["command"])
        for flag in ("--nthreads", "--memory-limit"):
            assert option(args, flag) == option(base_args, flag), (name, flag)
    for name, s in doc["services"].items():
        for secret in s["secrets"]:
            assert secret in doc["secrets"], secret
    assert all(spec["file"].startswith("./certs/") for spec in doc["secrets"].values())


# --- image ---------------------------------------------------------------------------

def _instructions(text):
    """Dockerfile instructions as (KEYWORD, argument) with continuations joined, comments dropped."""
    lines, current = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        keyword, _, arg = current.partition(" ")
        lines.append((keyword.upper(), arg.strip()))
        current = ""
    return lines


def test_dockerfile_installs_taodist_and_runs_as_non_root():
    ins = _instructions(DOCKERFILE.read_text())
    froms = [arg for kw, arg in ins if kw == "FROM"]
    args = dict(a.split("=", 1) for kw, a in ins if kw == "ARG" and "=" in a)
    resolved = [re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), f) for f in froms]
    assert all(f.split()[0] == "python:3.11-slim" for f in resolved), resolved
    runs = " ".join(arg for kw, arg in ins if kw == "RUN")
    assert re.search(r"pip install [^&;]*\"\.\[plot\]\"", runs), "the image must pip install the package (.[plot])"
    assert "bokeh>=3.1" in runs
    copied = " ".join(arg for kw, arg in ins if kw == "COPY")
    for needed in ("pyproject.toml", "README.md", "LICENSE", "taodist"):
        assert needed in copied, needed
    final = ins[max(i for i, (kw, _) in enumerate(ins) if kw == "FROM"):]
    users = [arg for kw, arg in final if kw == "USER"]
    assert users, "the final stage must switch to an unprivileged USER"
    user = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), users[-1]).split(":")[0]
    assert user not in ("root", "0") and user.isdigit() and int(user) > 0, f"USER {user!r}"
    assert [arg for kw, arg in final if kw == "WORKDIR"][-1] == STORE
    # no build tools in the final stage
    final_runs = " ".join(arg for kw, arg in final if kw == "RUN")
    assert not re.search(r"\b(build-essential|gcc|g\+\+|git)\b", final_runs)
    assert not any(kw == "ENTRYPOINT" for kw, _ in final), "Helm passes the command as args: no ENTRYPOINT"


def _numba_cache_dir():
    ins = _instructions(DOCKERFILE.read_text())
    final = ins[max(i for i, (kw, _) in enumerate(ins) if kw == "FROM"):]
    envs = " ".join(arg for kw, arg in final if kw == "ENV")
    found = re.findall(r"NUMBA_CACHE_DIR=(\S+)", envs)
    assert len(found) == 1, "the final stage sets NUMBA_CACHE_DIR once"
    return final, found[0]


def test_dockerfile_compiles_the_kernels_into_a_cache_the_user_owns():
    final, cache = _numba_cache_dir()
    assert not cache.startswith("/tmp"), "a cache under /tmp is lost, not shipped"
    steps = [(kw, arg) for kw, arg in final]
    compile_at = next(i for i, (kw, arg) in enumerate(steps) if kw == "RUN" and "taodist compile" in arg)
    env_at = next(i for i, (kw, arg) in enumerate(steps) if kw == "ENV" and "NUMBA_CACHE_DIR" in arg)
    user_at = max(i for i, (kw, _) in enumerate(steps) if kw == "USER")
    copy_at = max(i for i, (kw, arg) in enumerate(steps) if kw == "COPY" and "/opt/venv" in arg)
    # compiled after the package is in place (numba checks the sources' stamps), into the folder the image
    # uses, and handed to the unprivileged user, who must be able to add kernels for another CPU
    assert copy_at < compile_at and env_at < compile_at < user_at
    run = steps[compile_at][1]
    assert re.search(r'chown -R "?\$\{UID\}:\$\{GID\}"? ' + re.escape(cache), run), run


def test_compose_shares_the_images_numba_cache(compose):
    _, cache = _numba_cache_dir()
    for name, s in compose["services"].items():
        mounts = [v.split(":")[:2] for v in s.get("volumes", []) if isinstance(v, str)]
        sources = [src for src, target in mounts if target == cache]
        assert len(sources) == 1 and sources[0] in compose["volumes"], f"{name}: a named volume at {cache}"


def test_dockerignore_excludes_local_state_and_secrets():
    patterns = {line.strip() for line in DOCKERIGNORE.read_text().splitlines()
                if line.strip() and not line.startswith("#")}
    for needed in (".git", ".venv", "venv", "bench/results", "**/__pycache__", "**/*.egg-info",
                   ".pytest_cache", ".hypothesis", "certs"):
        assert needed in patterns, needed


# --- Kubernetes ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def manifests():
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def _container(deployment):
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def _mounts_store(deployment, claim):
    spec = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = [m for m in _container(deployment)["volumeMounts"] if m["mountPath"] == STORE]
    return any(volumes[m["name"]].get("persistentVolumeClaim", {}).get("claimName") == claim for m in mounts)


def test_k8s_manifests_parse_and_are_namespace_less(manifests):
    assert set(manifests) >= {("Deployment", "taodist-scheduler"), ("Service", "taodist-scheduler"),
                              ("Deployment", "taodist-worker"), ("PersistentVolumeClaim", "taodist-store")}
    assert all("namespace" not in d["metadata"] for d in manifests.values())
    for d in manifests.values():
        if d["kind"] == "Deployment":
            labels = d["spec"]["template"]["metadata"]["labels"]
            assert d["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_k8s_scheduler_and_service(manifests):
    sched = manifests[("Deployment", "taodist-scheduler")]
    assert sched["spec"]["replicas"] == 1
    assert _container(sched)["args"][:2] == ["dask", "scheduler"]
    assert _container(sched)["resources"]["limits"]["memory"]
    svc = manifests[("Service", "taodist-scheduler")]
    assert svc["spec"].get("type", "ClusterIP") == "ClusterIP"
    assert {p["port"] for p in svc["spec"]["ports"]} == {8786, 8787}
    assert svc["spec"]["selector"].items() <= sched["spec"]["template"]["metadata"]["labels"].items()


def test_k8s_worker_resources_match_dask_flags(manifests):
    worker = manifests[("Deployment", "taodist-worker")]
    assert worker["spec"]["replicas"] == 2
    c = _container(worker)
    args = c["args"]
    assert args[:3] == ["dask", "worker", "tcp://taodist-scheduler:8786"]
    limits, requests = c["resources"]["limits"], c["resources"]["requests"]
    assert requests["memory"] and requests["cpu"]
    limit_bytes = k8s_bytes(limits["memory"])
    dask_limit = parse_bytes(option(args, "--memory-limit"))
    assert 0.5 * limit_bytes <= dask_limit < limit_bytes
    assert k8s_bytes(requests["memory"]) >= dask_limit
    assert int(option(args, "--nthreads")) == k8s_cpus(limits["cpu"])
    pod = worker["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0


def test_k8s_store_is_shared(manifests):
    pvc = manifests[("PersistentVolumeClaim", "taodist-store")]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert _mounts_store(manifests[("Deployment", "taodist-worker")], "taodist-store")
    assert _mounts_store(manifests[("Deployment", "taodist-scheduler")], "taodist-store")


# --- Helm values (dask/dask chart) ----------------------------------------------------

def test_helm_values_match_the_manifests(manifests):
    values = yaml.safe_load(HELM_VALUES.read_text())
    w = values["worker"]
    assert values["jupyter"]["enabled"] is False
    assert w["replicas"] == 2
    c = _container(manifests[("Deployment", "taodist-worker")])
    assert w["resources"] == c["resources"], "same worker resources as deploy/kubernetes/worker.yaml"
    # the chart passes --nthreads threads_per_worker and --memory-limit limits.memory; extraArgs come last
    chart_args = ["--nthreads", str(w["threads_per_worker"]), "--memory-limit", w["resources"]["limits"]["memory"]]
    args = chart_args + w["extraArgs"]
    assert parse_bytes(option(args, "--memory-limit")) < k8s_bytes(w["resources"]["limits"]["memory"])
    assert option(args, "--memory-limit") == option(c["args"], "--memory-limit")
    assert int(option(args, "--nthreads")) == k8s_cpus(w["resources"]["limits"]["cpu"])
    mounts = {m["name"]: m["mountPath"] for m in w["mounts"]["volumeMounts"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in w["mounts"]["volumes"]}
    assert any(path == STORE and claims.get(name) == "taodist-store" for name, path in mounts.items())
    for role in ("scheduler", "worker"):
        assert values[role]["image"]["repository"] and values[role]["image"]["tag"]
        assert values[role]["securityContext"]["runAsNonRoot"] is True
    assert values["scheduler"]["serviceType"] == "ClusterIP"


def _env(container):
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def test_helm_post_renderer_gives_the_chart_s_scheduler_the_plain_manifest_s_journal(manifests):
    # the chart mounts no scheduler volume, so the journal comes with a post-renderer's patch: it must name
    # the chart's scheduler Deployment and container, and set what deploy/kubernetes/scheduler.yaml sets
    values = yaml.safe_load(HELM_VALUES.read_text())
    patch = yaml.safe_load((HELM_POST_RENDER.parent / "scheduler-journal.yaml").read_text())
    name = f"{values['fullnameOverride']}-scheduler"  # dask/helm-chart names both "<fullname>-scheduler"
    assert patch["kind"] == "Deployment" and patch["metadata"]["name"] == name
    (container,) = patch["spec"]["template"]["spec"]["containers"]
    assert container["name"] == name
    plain = manifests[("Deployment", "taodist-scheduler")]
    assert _env(container)["TAODIST_JOURNAL"] == _env(_container(plain))["TAODIST_JOURNAL"]
    assert _env(container)["TAODIST_JOURNAL"].startswith(STORE + "/")
    assert _mounts_store(patch, "taodist-store")
    assert patch["spec"]["strategy"]["type"] == plain["spec"]["strategy"]["type"] == "Recreate"
    assert values["scheduler"]["securityContext"]["fsGroup"] == plain["spec"]["template"]["spec"]["securityContext"][
        "fsGroup"]  # the image's user can write the journal on the store
    kustomization = yaml.safe_load((HELM_POST_RENDER.parent / "kustomization.yaml").read_text())
    assert [p["path"] for p in kustomization["patches"]] == ["scheduler-journal.yaml"]
    assert HELM_POST_RENDER.stat().st_mode & 0o111, "Helm runs the post-renderer as a program"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="the post-renderer runs kubectl's kustomize")
def test_helm_post_renderer_adds_the_journal_to_what_the_chart_renders():
    # the chart's scheduler Deployment as dask/helm-chart's template renders it with deploy/helm-values.yaml
    values = yaml.safe_load(HELM_VALUES.read_text())
    name = f"{values['fullnameOverride']}-scheduler"
    labels = {"app": "dask", "release": "taodist", "component": "scheduler"}
    chart = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
             "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "strategy": {"type": "RollingUpdate"},
                      "template": {"metadata": {"labels": labels}, "spec": {
                          "containers": [{"name": name, "image": "taodist:latest",
                                          "args": ["dask-scheduler", "--port=8786", "--dashboard-address=:8787"],
                                          "env": [{"name": "TAODIST_RESULTS_ROOT", "value": "/store/models"}]}],
                          "securityContext": values["scheduler"]["securityContext"]}}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": {"ports": [{"port": 8786}]}}
    done = subprocess.run([str(HELM_POST_RENDER)], input=yaml.safe_dump_all([chart, service]), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rendered = {d["kind"]: d for d in yaml.safe_load_all(done.stdout)}
    assert rendered["Service"] == service  # the rest of the chart passes through
    deployment = rendered["Deployment"]
    assert _env(_container(deployment)) == {"TAODIST_JOURNAL": "/store/.taodist-journal",
                                            "TAODIST_RESULTS_ROOT": "/store/models"}  # the values' env kept
    assert _mounts_store(deployment, "taodist-store")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert _container(deployment)["args"] == chart["spec"]["template"]["spec"]["containers"][0]["args"]


def test_same_worker_sizing_everywhere(compose, manifests):
    (cw,) = _workers(compose).values()
    compose_args = as_args(cw["command"])
    k8s_args = _container(manifests[("Deployment", "taodist-worker")])["args"]
    for flag in ("--nthreads", "--memory-limit"):
        assert option(compose_args, flag) == option(k8s_args, flag), flag
