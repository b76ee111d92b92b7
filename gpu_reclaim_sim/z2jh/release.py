"""The Zero to JupyterHub release on the simulated cluster: what `make demo` installs and
the release tests check (tests/release).

The real chart (`../shared/z2jh/chart` beside the clone: third-party, never copied into
the repository) is rendered with Helm's own Go SDK (PyPI's helm-python-sdk, its schema
enforced as `helm install` does) from `helm-values/gpu-reclaim.yaml`, the variants a user
adds, and the values of the place it runs in (`sim_values`: an authenticator, the
simulated dcgm-exporter, shorter timings). The manifests are applied with kubectl in
Helm's install order, and `helm-values/rbac.yaml` beside them, as docs/install-z2jh.md
tells an admin to. The hub's pod then runs the hub with the chart's own
jupyterhub_config.py and z2jh.py (mounted from the chart's ConfigMap), its rendered
Secret and its ServiceAccount's token; the proxy's runs configurable-http-proxy.

What stands in for the images (`scenario`): each image the chart names runs its command
from this machine's environment, as the image's user: the hub image from a Python
environment with the package (this one, or another one, e.g. one with the chart's own hub
requirements: `hub_python=`), the single-user image from this one,
configurable-http-proxy from npm's global install, the pause image as a stub, and the
kube-scheduler image the real kube-scheduler (`user_scheduler`), so z2jh's user-scheduler is
the real one with the chart's configuration. The prePuller's Helm hook (a Job, run by
`helm install` before the release) is left out: no image here needs pulling ahead.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

import yaml

from ..launch import Child, start_sim
from ..paths import DEFAULT_SCENARIO, REPO, SHARED

CHART = SHARED / "z2jh" / "chart"
HELM_VALUES = REPO / "helm-values"
BASE = HELM_VALUES / "gpu-reclaim.yaml"
RBAC = HELM_VALUES / "rbac.yaml"  # Kubernetes objects: kubectl apply, not --values
NAMESPACE = "jhub"
RELEASE = "jhub"

# pkg/release/util/kind_sorter.go InstallOrder: Services before the pods that read their
# variables (z2jh's hub reads PROXY_API_SERVICE_PORT), accounts and roles before their pods
INSTALL_ORDER = [
    "PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy",
    "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass",
    "PersistentVolume", "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole",
    "ClusterRoleList", "ClusterRoleBinding", "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding",
    "RoleBindingList", "Service", "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
    "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress", "APIService",
]


def chart_missing(chart: Path = CHART) -> str | None:
    """Why the chart cannot be read here, or None."""
    if not (chart / "Chart.yaml").is_file():
        return (f"the z2jh chart is not at {chart} (../shared/z2jh/chart beside the clone; "
                "it is third-party and not in the repository)")
    return None


def missing(chart: Path = CHART) -> str | None:
    """Why the release cannot be rendered here, or None."""
    if reason := chart_missing(chart):
        return reason
    if not BASE.is_file():  # an installed package without the clone: its own hub only
        return f"{BASE} is not here (the release is installed from a clone of the repository)"
    try:
        import helm_python  # noqa: F401
    except ImportError:
        return "helm-python-sdk is not installed (pip install -e '.[demo]', which '.[test]' includes; or make setup)"
    return None


def unavailable(chart: Path = CHART) -> str | None:
    """Why the release cannot run on the simulator here, or None: `missing`, or the
    simulator's data plane (pods' own addresses, Services, NetworkPolicies) is off."""
    from ..kubelet import cgroups
    from ..network import nftables

    if reason := missing(chart):
        return reason
    if not cgroups.available() or nftables.unavailable():
        return ("the release needs the simulator's data plane: root, nftables and a cgroup2 mount "
                f"({nftables.unavailable() or 'no writable cgroup2 mount, or not root'})")
    return None


# --- rendering ------------------------------------------------------------------------------


def merge_values_files(*docs: dict) -> dict:
    """`helm -f a -f b`'s merge of values files (the helm CLI's mergeMaps, in
    pkg/cli/values/options.go; the SDK takes one values map, so the CLI's merge is done
    here): maps merged key by key, anything else replaced, a null kept as null. The
    chart's defaults are coalesced in by the SDK when it renders, which drops a null only
    where the defaults have the key."""
    out: dict = {}
    for doc in docs:
        out = _merge_maps(out, doc)
    return out


def _merge_maps(a: dict, b: dict) -> dict:
    out = dict(a)
    for key, value in b.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge_maps(out[key], value)
        else:
            out[key] = value
    return out


def values(*files: Path, extra: dict | None = None) -> dict:
    """The values `helm -f file... ` passes (before the chart's defaults)."""
    import helm_python as helm

    docs = [helm.values_from_yaml(Path(f).read_text()) for f in files]
    return merge_values_files(*docs, *([extra] if extra else []))


def render(*files: Path, extra: dict | None = None, chart: Path = CHART, name: str = RELEASE,
           namespace: str = NAMESPACE) -> list[dict]:
    """The manifests the chart renders for `files` (then `extra`), in template order;
    NOTES.txt and empty documents left out. Raises helm_python's HelmValuesError for values
    the chart's schema refuses."""
    import helm_python as helm

    with helm.Chart.load(str(chart)) as loaded:  # a handle in Helm's library until closed
        manifests = loaded.render(values(*files, extra=extra), name=name, namespace=namespace, is_install=True)
    return [doc for path, text in sorted(manifests.items()) if path.endswith((".yaml", ".yml"))
            for doc in yaml.safe_load_all(text) if isinstance(doc, dict)]


def hub_values(docs: list[dict]) -> dict:
    """The values the hub reads (the chart's hub Secret, `values.yaml`): the chart's
    defaults coalesced with the values files, as Helm does it."""
    secret = find(docs, "Secret", "hub")
    return yaml.safe_load(base64.b64decode(secret["data"]["values.yaml"]))


def rbac(namespace: str = NAMESPACE, path: Path = RBAC) -> list[dict]:
    """helm-values/rbac.yaml for the release's namespace (docs/install-z2jh.md's sed)."""
    return [d for d in yaml.safe_load_all(path.read_text().replace("NAMESPACE", namespace)) if d]


def install_order(docs: list[dict]) -> list[dict]:
    rank = {kind: i for i, kind in enumerate(INSTALL_ORDER)}
    return sorted(docs, key=lambda d: rank.get(d["kind"], len(rank)))  # stable: template order within a kind


def find(docs: list[dict], kind: str, name: str) -> dict:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


# --- where it runs: the simulated cluster and this machine's environment ---------------------


# what each container of the release runs as, by container name: the hub image from a
# Python environment with the package (the hub environment), the user image from this one
# (as the other tests' single-user servers), the proxy from npm's global
# configurable-http-proxy, stubs for what has no command here, a shell for the rest
JOVYAN = {"name": "jovyan", "uid": 1000, "gid": 100}  # the Jupyter images' USER (docker-stacks)
HUB_USER = {"name": "jovyan", "uid": 1000, "gid": 1000}  # the k8s-hub image's USER
STUBS = {"pause", "kube-scheduler"}


def _path(python: str | Path) -> str:
    return f"{Path(python).absolute().parent}:/usr/local/bin:/usr/bin:/bin"


def _images(docs: list[dict], hub_python: str | Path) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for doc in docs:
        spec = (doc.get("spec") or {}).get("template", {}).get("spec")
        if doc["kind"] not in ("Deployment", "StatefulSet", "DaemonSet") or not spec:
            continue
        for c in spec.get("initContainers", []) + spec["containers"]:
            image = c["image"]
            if c["name"] == "hub":
                out[image] = {"name": image, "size": "1GB", "user": HUB_USER, "workingDir": "/srv/jupyterhub",
                              "env": {"PATH": _path(hub_python), "HOME": "/home/jovyan"}}
            elif c["name"] == "image-pull-singleuser":  # the image puller pulls the user image
                out[image] = {"name": image, "size": "1GB", "user": JOVYAN, "workingDir": "/home/jovyan",
                              "env": {"PATH": _path(sys.executable), "HOME": "/home/jovyan", "SHELL": "/bin/bash",
                                      "NB_USER": "jovyan"}}
            elif c["name"] == "chp":
                out[image] = {"name": image, "size": "50MB", "entrypoint": ["configurable-http-proxy"]}
            elif c["name"] == "kube-scheduler":
                out[image] = {"name": image, "size": "50MB", "programs": {c["command"][0]: user_scheduler()}}
            elif c["name"] in STUBS:
                out[image] = {"name": image, "size": "1MB", "stub": True}
            else:
                out.setdefault(image, {"name": image, "size": "10MB"})
    return out


def user_scheduler() -> list[str]:
    """What z2jh's user-scheduler image runs on the real control plane: the real kube-scheduler
    (controlplane/'s, v1.37) on its pod's own address (two replicas share the machine), with
    the two DRA gates the chart's v1.35 role does not cover off (tests/controlplane/
    test_user_scheduler.py: with them on it waits for a watch the role refuses, for ever)."""
    from ..controlplane.components import binaries

    return [str((binaries() / "kube-scheduler").resolve()), "--bind-address=0.0.0.0",
            "--feature-gates=DRADeviceTaints=false,DRADeviceTaintRules=false"]


def scenario(docs: list[dict], *, hub_python: str | Path | None = None,
             base: Path = DEFAULT_SCENARIO, extra_images: list[dict] | None = None,
             overrides: dict | None = None) -> dict:
    """The simulated cluster for the release `docs`: `base` (the demo's cluster: GPU and
    CPU user nodes) with a node for the core pods, the chart's user-placeholder instead of
    the simulator's own, and each
    image of the release mapped to a command of this machine (`hub_python`: the
    environment of the hub image, e.g. one with the chart's own hub requirements; default:
    this one, which the user image runs from); then `extra_images` and `overrides`."""
    data = yaml.safe_load(Path(base).read_text())
    data.pop("placeholders", None)  # the chart's user-placeholder StatefulSet is the one
    data["nodeGroups"] = [{"name": "core", "count": 1, "cpu": "4", "memory": "16Gi",
                           "labels": {"hub.jupyter.org/node-purpose": "core"}}, *data["nodeGroups"]]
    images = [*data.get("images", []), *_images(docs, hub_python or sys.executable).values(),
              *(extra_images or [])]
    data["images"] = list({i["name"]: i for i in images}.values())
    return _merge_maps(data, overrides or {})


def start_cluster(workdir: Path, docs: list[dict], publish: int | None = None,
                  reach: int | None = None, **kw: Any) -> Child:
    """The simulated cluster for the release `docs` (`scenario`, with `kw`) in `workdir`,
    with the simulated dcgm-exporter as a Service; `publish` is the port of this machine's
    loopback where proxy-public is offered
    (`run --publish`: for a browser outside the run's network namespace), and `reach` one
    the pods reach (`run --reach`: `reached`)."""
    path = workdir / "scenario.yaml"
    workdir.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(scenario(docs, **kw)))
    extra = [*(["--publish", f"{publish}={NAMESPACE}/proxy-public:80"] if publish else []),
             *(["--reach", str(reach)] if reach else [])]
    sim = start_sim(workdir, path, timeout=120, extra_args=extra)
    try:
        apply(sim.info["kubeconfig"], dcgm_exporter(sim.info["metrics_in_cluster"]))
    except BaseException:
        sim.stop()
        raise
    return sim


def reached(sim: Child, port: int) -> str:
    """`HOST:PORT` where the pods of the cluster `sim` reach `port` of this machine's loopback:
    `run --reach`'s address (start_cluster's `reach`)."""
    return sim.info["reached"][str(port)]


def sim_values(*, password: str, users: list[str], admins: list[str], options: dict[str, Any] | None = None) -> dict:
    """The values of the place the release runs in: what an admin's own values file says
    on a real cluster (an authenticator), the GPU source (the simulated dcgm-exporter,
    `dcgm_exporter`, instead of Prometheus, as helm-values/dcgm-direct.yaml), the service's
    `options` (e.g. shorter timings), the prePuller's Helm hook off (a Job that
    `helm install` runs before the release: no image here needs pulling ahead), and the cloud
    metadata server blocked by the user pods' NetworkPolicy alone (the chart's other way):
    its iptables init container would rewrite the host's firewall, as pods share the
    run's network namespace here (sim.network.podnet)."""
    return {
        "prePuller": {"hook": {"enabled": False}},
        "singleuser": {"cloudMetadata": {"blockWithIptables": False}},
        "hub": {"config": {
            "JupyterHub": {"authenticator_class": "dummy"},
            "DummyAuthenticator": {"password": password},
            "Authenticator": {"allowed_users": users, "admin_users": admins},
        }},
        "custom": {"gpuReclaim": {"options": {
            "prometheus-url": None, "prometheus-pod-label": None,  # null drops an option (gpu-reclaim.yaml)
            "dcgm-exporter-urls": [DCGM_URL],
            **(options or {}),
        }}},
    }


DCGM_NAMESPACE, DCGM_SERVICE, DCGM_PORT = "gpu-operator", "dcgm-exporter", 9400
DCGM_URL = f"http://{DCGM_SERVICE}.{DCGM_NAMESPACE}.svc:{DCGM_PORT}/metrics"  # helm-values/dcgm-direct.yaml's


def host_service(namespace: str, name: str, port_name: str, port: int, host: str, target: int) -> list[dict]:
    """`namespace/name:port` for pods, leading to `host:target`, a program outside the cluster's
    pods: a Service without a selector and its EndpointSlice (its Namespace first), so pods
    reach it by name, through kube-proxy."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
         "spec": {"ports": [{"name": port_name, "port": port, "targetPort": target}]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": f"{name}-host", "namespace": namespace, "labels": {"kubernetes.io/service-name": name}},
         "addressType": "IPv4", "ports": [{"name": port_name, "port": target, "protocol": "TCP"}],
         "endpoints": [{"addresses": [host], "conditions": {"ready": True}}]},
    ]


def dcgm_exporter(metrics_url: str) -> list[dict]:
    """The simulated dcgm-exporter (the simulator's metrics endpoint) as the NVIDIA GPU
    operator's Service `gpu-operator/dcgm-exporter:9400`."""
    url = urlsplit(metrics_url)
    return host_service(DCGM_NAMESPACE, DCGM_SERVICE, "metrics", DCGM_PORT, url.hostname or "", url.port or 0)


# --- installing it ----------------------------------------------------------------------------


def kubectl(kubeconfig: str, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
    """The setup's kubectl (in the virtualenv), else the one on PATH; raises on failure."""
    venv = Path(sys.executable).with_name("kubectl")
    proc = subprocess.run([str(venv) if venv.exists() else "kubectl", "--kubeconfig", kubeconfig, *args],
                          input=stdin, capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


@dataclass
class Release:
    kubeconfig: str
    namespace: str
    url: str  # proxy-public's load-balancer address

    def kubectl(self, *args: str, **kw: Any) -> str:
        return kubectl(self.kubeconfig, "-n", self.namespace, *args, **kw)

    def hub_log(self) -> str:
        """The hub container's log (the hub's, and the managed service's, output)."""
        try:
            return self.kubectl("logs", "deploy/hub", "-c", "hub")
        except RuntimeError as e:
            return str(e)


def apply(kubeconfig: str, objects: list[dict], *args: str) -> str:
    """`kubectl apply` of `objects`, in their order."""
    # JSON documents: PyYAML writes a string such as "67e3" (a checksum annotation)
    # unquoted, which kubectl reads as a number
    return kubectl(kubeconfig, *args, "apply", "-f", "-", stdin="\n---\n".join(map(json.dumps, objects)))


def _pods_and_events(kubeconfig: str, namespace: str) -> str:
    """What a release that did not come up shows of itself: its pods and its latest events."""
    try:
        pods = kubectl(kubeconfig, "-n", namespace, "get", "pods", "-o", "wide")
        events = kubectl(kubeconfig, "-n", namespace, "get", "events", "--sort-by=.lastTimestamp")
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        return f"(its pods could not be read: {e})"
    return f"its pods:\n{pods}its latest events:\n" + "\n".join(events.splitlines()[-30:])


def install(kubeconfig: str, docs: list[dict], *, namespace: str = NAMESPACE, with_rbac: list[dict] | None = None,
            timeout: float = 180, url: str | None = None) -> Release:
    """Apply the rendered release (and `with_rbac`, default helm-values/rbac.yaml) in
    Helm's install order, then wait until the hub answers through proxy-public: at its
    load-balancer address, or at `url` where it is offered (start_cluster's `publish`)."""
    apply(kubeconfig, install_order(docs + (rbac(namespace) if with_rbac is None else with_rbac)), "-n", namespace)
    deadline = time.monotonic() + timeout
    for workload in ("deploy/proxy", "deploy/hub"):
        try:
            kubectl(kubeconfig, "-n", namespace, "rollout", "status", workload,
                    f"--timeout={max(1, int(deadline - time.monotonic()))}s", timeout=timeout + 10)
        except RuntimeError as e:
            raise RuntimeError(f"{e}\n{_pods_and_events(kubeconfig, namespace)}") from None
    ingress: list = []
    while not ingress and time.monotonic() < deadline:
        svc = json.loads(kubectl(kubeconfig, "-n", namespace, "get", "svc", "proxy-public", "-o", "json"))
        ingress = svc.get("status", {}).get("loadBalancer", {}).get("ingress") or []
        if not ingress:
            time.sleep(0.2)
    if not ingress:
        raise RuntimeError("proxy-public got no load-balancer address")
    release = Release(kubeconfig, namespace, url or f"http://{ingress[0]['ip']}")
    _until(lambda: _answers(f"{release.url}/hub/health"), deadline,
           lambda: f"the hub does not answer at {release.url}/hub/health; its log:\n{release.hub_log()[-4000:]}")
    return release


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _until(check: Callable[[], bool], deadline: float, why: Callable[[], str]) -> None:
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(why())
        time.sleep(0.3)
