"""Where a pod's processes are. Each container of a pod runs in a cgroup v2 of its own,
`<cgroup2 mount>/gpu-reclaim-sim/pod<pod uid>/<container id>` (the layout a real
kubelet gives pods: `kubepods/…/pod<uid>/<container id>`). Every process a container
starts stays in that cgroup, also one that starts its own session, so the cgroup tells
which pod a process (or one of its sockets) belongs to, and kills a pod's processes all
at once (`cgroup.kill`).

For nftables (NetworkPolicy, a kube-proxy data plane): in the output hook,
`socket cgroupv2 level {NFT_LEVEL} "{nft_path(uid)}"` matches the sockets of every
process of a pod. nft looks the path up under /sys/fs/cgroup, so on a hybrid cgroup
layout (cgroup2 at /sys/fs/cgroup/unified) the path starts with `unified/`;
`nft_path` gives it in the form nft needs. Checked on Linux 6.18 with nft 1.0.6, in a
private network namespace: the rule drops exactly the connections of that cgroup's
processes (to 127.0.0.1 too). nft's other match, `meta cgroup <classid>`, also works
there but needs a v1 net_cls hierarchy mounted and a classid per pod; both can be used
together on this kernel. Pods get only the v2 cgroup.

The programs the simulator's launcher starts (sim.launch: a run, a hub) get one too, under
`<cgroup2 mount>/gpu-reclaim-launched/` (`launched_dir`), so that what one leaves behind ends
with it (`end`).

Needs root and a writable cgroup2 mount; `available()` says whether this machine has
them (without, pods still die with their PID namespace, see sim.kubelet.sandbox).
"""

from __future__ import annotations

import functools
import os
import signal
import time
import uuid
from pathlib import Path

BASE = "gpu-reclaim-sim"
LAUNCHED = "gpu-reclaim-launched"  # launched_dir
NFT_ROOT = Path("/sys/fs/cgroup")  # where nft resolves `socket cgroupv2` paths
NFT_LEVEL = 2  # the depth of a pod's cgroup below the cgroup2 root: BASE is 1


@functools.lru_cache(maxsize=1)
def mount_point() -> Path | None:
    """The cgroup2 mount (/sys/fs/cgroup on a unified host, /sys/fs/cgroup/unified on a
    hybrid one), or None."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(" - ")
        if len(fields) == 2 and fields[1].split()[0] == "cgroup2":
            return Path(fields[0].split()[4])
    return None


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether pods get cgroups here: root with a writable cgroup2 mount."""
    root = mount_point()
    if root is None or os.geteuid() != 0:
        return False
    try:
        (root / BASE).mkdir(exist_ok=True)
    except OSError:
        return False
    return os.access(root / BASE, os.W_OK)


def pod_dir(pod_uid: str) -> Path:
    root = mount_point()
    if root is None:
        raise RuntimeError("no cgroup2 mount on this machine")
    return root / BASE / f"pod{pod_uid}"


def container_dir(pod_uid: str, container_id: str) -> Path:
    return pod_dir(pod_uid) / container_id


def create(pod_uid: str, container_id: str) -> Path:
    """A new, empty cgroup for one run of a container."""
    path = container_dir(pod_uid, container_id)
    path.mkdir(parents=True, exist_ok=True)
    return path


def nft_path(pod_uid: str) -> str:
    """The pod's cgroup as nftables' `socket cgroupv2 level NFT_LEVEL "…"` needs it."""
    return str(pod_dir(pod_uid).relative_to(NFT_ROOT))


def pids(pod_uid: str) -> list[int]:
    """Every process of the pod, in any of its containers."""
    found: list[int] = []
    for procs in pod_dir(pod_uid).glob("**/cgroup.procs"):
        try:
            found += [int(p) for p in procs.read_text().split()]
        except OSError:  # a container's cgroup removed meanwhile
            continue
    return found


def pod_of_pid(pid: int) -> str | None:
    """The uid of the pod whose process `pid` is, or None for a process of no pod."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("0::"):
            parts = line[3:].strip("/").split("/")
            # the path is relative to our cgroup namespace's root, which is the host's
            if BASE in parts:
                rest = parts[parts.index(BASE) + 1:]
                if rest and rest[0].startswith("pod"):
                    return rest[0][3:]
    return None


def kill(path: Path) -> None:
    """SIGKILL every process in a container's cgroup (cgroup.kill, Linux 5.14+)."""
    try:
        (path / "cgroup.kill").write_text("1")
        return
    except FileNotFoundError:
        if not path.exists():
            return
    except OSError:
        pass
    for pid in _procs(path):  # an older kernel: one by one
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def remove(pod_uid: str, timeout: float = 5.0) -> None:
    """Kill what is left in the pod's cgroups and remove them (a cgroup goes only once
    its last process has been reaped)."""
    top = pod_dir(pod_uid)
    if not top.exists():
        return
    deadline = time.monotonic() + timeout
    for path in sorted(top.iterdir(), reverse=True) + [top]:
        if path.is_dir():
            end(path, deadline)


def launched_dir(name: str) -> Path:
    """A new cgroup's path for a program the simulator's launcher starts (sim.launch): what
    it leaves behind, also in sessions of their own, is found there and ended with it."""
    root = mount_point()
    if root is None:
        raise RuntimeError("no cgroup2 mount on this machine")
    return root / LAUNCHED / f"{name}-{uuid.uuid4().hex[:12]}"


def end(path: Path, deadline: float) -> None:
    """Kill every process in the cgroup at `path` and remove it, by `deadline` (monotonic)."""
    while True:
        kill(path)
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _procs(path: Path) -> list[int]:
    try:
        return [int(p) for p in (path / "cgroup.procs").read_text().split()]
    except OSError:
        return []
