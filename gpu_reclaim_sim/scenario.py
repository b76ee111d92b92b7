"""The scenario file: what cluster the simulator builds (documented in docs/sim.md).

YAML, validated with a JSON schema so a typo gets an error naming the field instead of
a cluster that silently differs from the one asked for.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import jsonschema
import yaml

from .scenario_schema import SCHEMA

# the scenario's own networks lie inside it when the run has no network namespace
LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
EXPORTER_RELEASE = "4.5.3-4.8.2"  # dcgm-exporter's latest release (its tags: <DCGM version>-<exporter version>)

_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "ki": 2**10, "kib": 2**10, "mi": 2**20, "mib": 2**20, "gi": 2**30, "gib": 2**30, "ti": 2**40, "tib": 2**40,
}
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "": 1}


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the file and the field."""


def parse_size(value: int | float | str, what: str = "size") -> int:
    """Bytes from `5GB`, `1.5GiB`, `512Mi`, `250MB` or a plain number of bytes."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ScenarioError(f"{what}: cannot read {value!r} as a size (e.g. 5GB, 512MiB)")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


def parse_bandwidth(value: int | float | str, what: str = "bandwidth") -> float:
    """Bytes per second from `100MB/s`, `1Gi/s` or a plain number."""
    text = str(value).strip()
    if text.endswith("/s"):
        text = text[:-2]
    rate = parse_size(text if not isinstance(value, (int, float)) else value, what)
    if rate <= 0:
        raise ScenarioError(f"{what}: must be positive, got {value!r}")
    return float(rate)


def parse_duration(value: int | float | str, what: str = "duration") -> float:
    """Seconds from `30s`, `10m`, `1.5h`, `250ms` or a plain number of seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h|)\s*", str(value))
    if not m:
        raise ScenarioError(f"{what}: cannot read {value!r} as a duration (e.g. 30s, 10m)")
    return float(m.group(1)) * _DURATION_UNITS[m.group(2)]


@dataclass
class ImageUser:
    """The user an image runs as (its Dockerfile's USER) and its /etc/passwd entry."""
    uid: int
    gid: int = 0
    name: str = ""

    def home(self, env: dict[str, str]) -> str:
        return env.get("HOME") or ("/root" if self.uid == 0 else f"/home/{self.name or self.uid}")


@dataclass
class Image:
    name: str  # as written in pod specs; the kubelet normalises it
    size: int
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    working_dir: str | None = None
    user: ImageUser | None = None  # the image's USER; None: root
    stub: bool = False  # never runs a process (e.g. the pause image of placeholders)
    # the image's programs: at a path (the key), a program of this machine (bound there) and
    # arguments put before the container's own: e.g. /usr/local/bin/kube-scheduler, the control plane's
    programs: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Autoscaling:
    min: int
    max: int
    scale_up_delay: float
    scale_down_delay: float


MIG_SLICES = 7  # compute slices of a MIG-capable GPU (A100, H100): 1g.10gb x 7, 3g.40gb x 2


@dataclass(frozen=True)
class GpuSharing:
    """How the device plugin hands out a node group's GPUs: whole, as MIG instances of one
    profile (its "mixed" strategy: resource `nvidia.com/mig-<profile>`), or as time-slicing
    replicas (`sharing.timeSlicing`: `replicas` per GPU under `nvidia.com/gpu`, or under
    `nvidia.com/gpu.shared` with `renameByDefault`)."""

    mig_profile: str = ""  # e.g. "1g.10gb"
    mig_per_gpu: int = 0
    replicas: int = 1
    rename_by_default: bool = False

    @property
    def time_sliced(self) -> bool:
        return self.replicas > 1

    @property
    def resource(self) -> str:
        """The extended resource the node advertises its devices under."""
        if self.mig_profile:
            return f"nvidia.com/mig-{self.mig_profile}"
        return "nvidia.com/gpu.shared" if self.time_sliced and self.rename_by_default else "nvidia.com/gpu"

    def devices(self, gpus: int) -> int:
        """How many of `resource` a node with `gpus` physical GPUs advertises."""
        return gpus * (self.mig_per_gpu if self.mig_profile else self.replicas)


@dataclass
class NodeGroup:
    name: str
    count: int
    cpu: str
    memory: str
    pods: int
    gpus: int
    gpu_model: str
    gpu_memory_mib: int
    labels: dict[str, str]
    taints: list[dict[str, str]]
    images: list[str]  # already pulled when a node of this group starts
    bandwidth: float  # bytes per second
    autoscaler: Autoscaling | None
    sharing: GpuSharing = field(default_factory=GpuSharing)


@dataclass
class Placeholder:
    name: str
    namespace: str
    count: int
    priority_class_name: str
    requests: dict[str, str]
    node_selector: dict[str, str]
    tolerations: list[dict[str, Any]]


@dataclass
class Scenario:
    name: str
    namespaces: list[str]
    mode: str
    images: dict[str, Image]
    image_defaults: Image
    default_image_size: int
    strict_images: bool
    pod_network: str
    node_groups: list[NodeGroup]
    placeholders: list[Placeholder]
    priority_classes: list[dict[str, Any]]
    api_port: int = 0
    control_host: str = "127.0.0.1"
    control_port: int = 0
    gpu_collection_interval: float = 30.0
    gpu_idle_engine_active: float = 0.002
    gpu_driver_version: str = "550.90.07"
    # dcgm-exporter's KUBERNETES_VIRTUAL_GPUS: a time-sliced GPU's series once per pod
    # sharing it (label vgpu), instead of once, labelled with one of them
    gpu_virtual_gpus: bool = False
    # the dcgm-exporter release whose series the simulated exporter writes (dcgm_exporter.Release)
    gpu_exporter_version: str = EXPORTER_RELEASE
    gpu_host_pid: bool = True  # the exporter runs with hostPID: per-process values (virtual GPUs)
    gpu_pod_uid: bool = False  # its --kubernetes-enable-pod-uid
    gpu_mig_gpu_util: bool = False  # MIG instances also carry GPU_UTIL = 0 (dcgm-exporter issue 216)
    service_network: str = "auto"
    network_policy_deny: str = "reject"  # what a connection a NetworkPolicy refuses gets (sim.network.nftables)
    source: str = "<scenario>"

    @property
    def home_namespace(self) -> str:
        """The kubeconfig's namespace: the scenario's own (jhub in the demo), the last it names,
        else "default" as on a new cluster."""
        own = [n for n in self.namespaces if n not in ("default", "kube-system")]
        return own[-1] if own else "default"


def on_loopback(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> TypeGuard[ipaddress.IPv4Network]:
    """Whether `net` lies inside 127.0.0.0/8 (an IPv6 network never does)."""
    return isinstance(net, ipaddress.IPv4Network) and net.subnet_of(LOOPBACK)


def exporter_release(tag: str) -> tuple[int, ...]:
    """The exporter's own version of a release tag ("4.5.3-4.8.2" -> (4, 8, 2)); ValueError
    for anything but <DCGM version>-<exporter version>."""
    parts = tag.split("-")
    numbers = [p.split(".") for p in parts]
    if len(parts) != 2 or not all(len(n) == 3 and all(x.isdigit() for x in n) for n in numbers):
        raise ValueError(f"{tag!r} is not a dcgm-exporter release tag such as {EXPORTER_RELEASE}")
    return tuple(int(x) for x in numbers[1])


def _loopback_network(data: dict[str, Any], key: str, source: str, min_size: int) -> str:
    """A network inside 127.0.0.0/8 (tests reach every simulated address on loopback), or "auto"."""
    value = data.get(key, "auto")
    if value == "auto":
        return value
    try:
        net = ipaddress.ip_network(value)
    except ValueError as e:
        raise ScenarioError(f"{source}: {key}: {e}") from None
    if not on_loopback(net) or net.num_addresses < min_size:
        raise ScenarioError(f"{source}: {key}: {value} must be a network inside 127.0.0.0/8 "
                            f"of at least {min_size} addresses")
    return value


def _exporter_version(tag: str) -> str:
    try:
        exporter_release(tag)
    except ValueError as e:
        raise ScenarioError(f"gpu.exporterVersion: {e}") from None
    return tag


def load(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ScenarioError(f"{path}: cannot read the scenario file: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ScenarioError(f"{path}: not valid YAML: {e}") from None
    return from_dict(data, str(path))


def from_dict(data: Any, source: str = "<scenario>") -> Scenario:
    """A validated Scenario; a ScenarioError names the source and the field."""
    try:
        return _from_dict(data, source)
    except ScenarioError as e:
        if str(e).startswith(source):
            raise
        raise ScenarioError(f"{source}: {e}") from None


def _from_dict(data: Any, source: str) -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario is a mapping with at least `nodeGroups`")
    try:
        jsonschema.validate(data, SCHEMA)
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        raise ScenarioError(f"{source}: {where}: {e.message}") from None

    def img(d: dict[str, Any], where: str) -> Image:
        return Image(
            name=d["name"],
            size=parse_size(d["size"] if "size" in d else data.get("defaultImageSize", "1GB"), f"{where}.size"),
            entrypoint=list(d.get("entrypoint", defaults.entrypoint)),
            cmd=list(d.get("cmd", defaults.cmd)),
            env={**defaults.env, **d.get("env", {})},
            working_dir=d.get("workingDir", defaults.working_dir),
            user=_user(d["user"]) if "user" in d else defaults.user,
            stub=bool(d.get("stub", False)),
            programs={path: list(command) for path, command in d.get("programs", {}).items()},
        )

    dd = data.get("imageDefaults", {})
    defaults = Image(name="", size=0, entrypoint=list(dd.get("entrypoint", [])),
                     cmd=list(dd.get("cmd", [])), env=dict(dd.get("env", {})),
                     working_dir=dd.get("workingDir"), user=_user(dd["user"]) if "user" in dd else None)
    images = {d["name"]: img(d, f"images[{i}]") for i, d in enumerate(data.get("images", []))}
    default_bw = parse_bandwidth(data.get("bandwidth", "100MB/s"), "bandwidth")
    groups = []
    for i, g in enumerate(data["nodeGroups"]):
        where = f"nodeGroups[{i}]"
        auto = None
        if "autoscaler" in g:
            a = g["autoscaler"]
            auto = Autoscaling(
                min=a.get("min", 0), max=a.get("max", g.get("count", 1)),
                scale_up_delay=parse_duration(a.get("scaleUpDelay", "60s"), f"{where}.autoscaler.scaleUpDelay"),
                scale_down_delay=parse_duration(a.get("scaleDownDelay", "10m"), f"{where}.autoscaler.scaleDownDelay"),
            )
            if auto.max < auto.min:
                raise ScenarioError(f"{source}: {where}.autoscaler: max ({auto.max}) is below min ({auto.min})")
        for ref in g.get("images", []):
            if ref not in images and data.get("strictImages"):
                raise ScenarioError(f"{source}: {where}.images: {ref!r} is not listed under images")
        groups.append(NodeGroup(
            name=g["name"], count=g.get("count", 1), cpu=str(g.get("cpu", "8")),
            memory=str(g.get("memory", "32Gi")), pods=g.get("pods", 110), gpus=g.get("gpus", 0),
            gpu_model=g.get("gpuModel", "NVIDIA A100-SXM4-40GB"),
            gpu_memory_mib=parse_size(g.get("gpuMemory", "40GiB"), f"{where}.gpuMemory") // 2**20,
            labels=dict(g.get("labels", {})), taints=[dict(t) for t in g.get("taints", [])],
            images=list(g.get("images", [])),
            bandwidth=parse_bandwidth(g["bandwidth"], f"{where}.bandwidth") if "bandwidth" in g else default_bw,
            autoscaler=auto, sharing=_sharing(g, f"{source}: {where}"),
        ))
    names = [g.name for g in groups]
    if len(set(names)) != len(names):
        raise ScenarioError(f"{source}: nodeGroups: group names must be unique, got {names}")
    namespaces = list(dict.fromkeys(["default", "kube-system", *data.get("namespaces", [])]))
    placeholders = [
        Placeholder(
            name=p["name"], namespace=p.get("namespace", namespaces[-1]), count=p["count"],
            priority_class_name=p.get("priorityClassName", ""),
            requests={k: str(v) for k, v in p.get("requests", {}).items()},
            node_selector=dict(p.get("nodeSelector", {})), tolerations=list(p.get("tolerations", [])),
        )
        for p in data.get("placeholders", [])
    ]
    pod_network = _loopback_network(data, "podNetwork", source, 4)
    service_network = _loopback_network(data, "serviceNetwork", source, 512)
    pcs = [dict(pc) for pc in data.get("priorityClasses", [])]
    known_pcs = {pc["name"] for pc in pcs}
    for i, p in enumerate(placeholders):
        if p.priority_class_name and p.priority_class_name not in known_pcs:
            raise ScenarioError(
                f"{source}: placeholders[{i}].priorityClassName: {p.priority_class_name!r} is not in priorityClasses")
    api, ctl, gpu = (data.get(k, {}) for k in ("apiserver", "control", "gpu"))
    return Scenario(
        name=data.get("name", Path(source).stem),
        namespaces=namespaces,
        mode=data.get("mode", "process"),
        images=images,
        image_defaults=defaults,
        default_image_size=parse_size(data.get("defaultImageSize", "1GB"), "defaultImageSize"),
        strict_images=bool(data.get("strictImages", False)),
        pod_network=pod_network,
        service_network=service_network,
        network_policy_deny=data.get("networkPolicyDeny", "reject"),
        node_groups=groups,
        placeholders=placeholders,
        priority_classes=pcs,
        api_port=api.get("port", 0),
        control_host=ctl.get("host", "127.0.0.1"),
        control_port=ctl.get("port", 0),
        gpu_collection_interval=parse_duration(gpu.get("collectionInterval", 30), "gpu.collectionInterval"),
        gpu_idle_engine_active=gpu.get("idleEngineActive", 0.002),
        gpu_driver_version=gpu.get("driverVersion", "550.90.07"),
        gpu_virtual_gpus=bool(gpu.get("kubernetesVirtualGpus", False)),
        gpu_exporter_version=_exporter_version(gpu.get("exporterVersion", EXPORTER_RELEASE)),
        gpu_host_pid=bool(gpu.get("hostPid", True)),
        gpu_pod_uid=bool(gpu.get("podUid", False)),
        gpu_mig_gpu_util=bool(gpu.get("migGpuUtil", False)),
        source=source,
    )


def _user(d: dict[str, Any]) -> ImageUser:
    return ImageUser(uid=d["uid"], gid=d.get("gid", 0 if d["uid"] == 0 else d["uid"]), name=d.get("name", ""))


def _sharing(g: dict[str, Any], where: str) -> GpuSharing:
    """A node group's `mig` or `timeSlicing` (the schema checked their fields)."""
    if "mig" in g and "timeSlicing" in g:
        raise ScenarioError(f"{where}: mig and timeSlicing together are not simulated; choose one")
    if "mig" in g:
        profile = g["mig"]["profile"]
        slices = int(profile.split("g.", 1)[0])
        per_gpu = g["mig"].get("perGpu", MIG_SLICES // slices)
        if per_gpu * slices > MIG_SLICES:
            raise ScenarioError(f"{where}.mig: {per_gpu} x {profile} need {per_gpu * slices} of a GPU's "
                                f"{MIG_SLICES} compute slices")
        return GpuSharing(mig_profile=profile, mig_per_gpu=per_gpu)
    if "timeSlicing" in g:
        t = g["timeSlicing"]
        return GpuSharing(replicas=t["replicas"], rename_by_default=bool(t.get("renameByDefault", False)))
    return GpuSharing()
