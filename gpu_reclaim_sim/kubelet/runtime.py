"""The simulated kubelet's container runtime (what containerd and runc are to a real
one): it starts one run of a container as a sandboxed local process (sim.kubelet.sandbox) in a
cgroup of its own (sim.kubelet.cgroups), as the user and with the capabilities a runtime would
give it, and stops it.

Sandboxing needs root (namespaces, mounts, cgroups). Without root a container is a plain
process of the simulator's user in its own session, on the host's file system.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pwd
import shutil
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import cgroups, sandbox
from ..scenario import Image

log = logging.getLogger("gpu_reclaim_sim.kubelet.runtime")

SANDBOX = Path(sandbox.__file__)
CAPABILITIES = ("CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE "
                "NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO "
                "SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME "
                "SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG "
                "WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF CHECKPOINT_RESTORE").split()  # by number
# containerd's default set for a container that is not privileged
DEFAULT_CAPABILITIES = ("CHOWN DAC_OVERRIDE FSETID FOWNER MKNOD NET_RAW SETGID SETUID SETFCAP SETPCAP "
                        "NET_BIND_SERVICE SYS_CHROOT KILL AUDIT_WRITE").split()


def sandbox_available() -> bool:
    """Containers are isolated only where the simulator runs as root."""
    return os.geteuid() == 0


class StartError(Exception):
    """A container that could not be started (StartError, exit code 128); the message is
    the runtime's."""


@dataclass
class Identity:
    """Who a container's processes are: user, group, supplementary groups, and the
    image's own user (for its /etc/passwd entry and home)."""

    uid: int
    gid: int
    groups: list[int]
    home: str
    image_user: dict[str, Any] | None = None


def identity(pod: Any, container: Any, image: Image) -> Identity:
    """As the CRI runtime derives it: `runAsUser`/`runAsGroup` of the container, else of
    the pod, else the image's user; the primary group of a user the image knows; plus
    `supplementalGroups` and `fsGroup`."""
    pod_sc = pod["spec"].get("securityContext") or {}
    sc = container.get("securityContext") or {}
    user = image.user
    uid = sc.get("runAsUser", pod_sc.get("runAsUser", user.uid if user else 0))
    gid = sc.get("runAsGroup", pod_sc.get("runAsGroup"))
    known = None if user and user.uid == uid else _passwd(uid)
    if gid is None:
        gid = user.gid if user and user.uid == uid else (known.pw_gid if known else 0)
    home = user.home(image.env) if user and user.uid == uid else (known.pw_dir if known else "/")
    extra = list(pod_sc.get("supplementalGroups") or [])
    if pod_sc.get("fsGroup") is not None:
        extra.append(pod_sc["fsGroup"])
    image_user = ({"name": user.name or f"user{user.uid}", "uid": user.uid, "gid": user.gid,
                   "home": user.home(image.env)} if user and user.uid != 0 else None)
    return Identity(uid=uid, gid=gid, groups=sorted({gid, *extra}), home=home, image_user=image_user)


def capabilities(container: Any) -> list[int] | None:
    """The bounding set (capability numbers) of a container; None: all (privileged)."""
    sc = container.get("securityContext") or {}
    if sc.get("privileged"):
        return None
    caps = sc.get("capabilities") or {}
    names = set(DEFAULT_CAPABILITIES)

    def norm(name: str) -> str:
        return name.upper().removeprefix("CAP_")

    drop = {norm(n) for n in caps.get("drop") or []}
    names = set() if "ALL" in drop else names - drop
    add = {norm(n) for n in caps.get("add") or []}
    names |= set(CAPABILITIES) if "ALL" in add else add
    return sorted(CAPABILITIES.index(n) for n in names if n in CAPABILITIES)


@dataclass
class Sandbox:
    """Everything about one run of a container that the sandbox needs."""

    argv: list[str]
    workdir: str
    hostname: str
    identity: Identity
    mounts: list[dict[str, Any]]  # source (host path), target, readonly
    directory: Path  # the run's own directory: its writable layer lives here
    caps: list[int] | None = None
    no_new_privs: bool = False
    readonly_root: bool = False
    keep: list[str] = field(default_factory=list)  # host paths the command needs (its Python)

    def __post_init__(self) -> None:  # a path inside another one comes with it
        paths = sorted({os.path.normpath(p) for p in self.keep})
        self.keep = [p for p in paths if not any(p.startswith(q.rstrip("/") + "/") for q in paths)]


class ContainerProcess:
    """One run of a container: the sandbox's outer process, the container's cgroup, and
    what it runs with (its sandbox, environment, working directory: what an exec joins)."""

    def __init__(self, proc: asyncio.subprocess.Process, cgroup: Path | None, box: Sandbox | None = None,
                 env: dict[str, str] | None = None, cwd: str = "/") -> None:
        self.proc = proc
        self.cgroup = cgroup
        self.box = box
        self.env = env or {}
        self.cwd = cwd

    @property
    def returncode(self) -> int | None:
        return _exit_code(self.proc.returncode)

    async def wait(self) -> int:
        return _exit_code(await self.proc.wait())  # type: ignore[return-value]

    def terminate(self) -> None:
        """SIGTERM to the container's PID 1 (the sandbox passes it on); in a PID namespace
        it is ignored unless the command handles it, as in a real container."""
        try:
            self.proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """SIGKILL to every process of the container."""
        if self.cgroup is not None:
            cgroups.kill(self.cgroup)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # without a PID namespace: its session
        except (ProcessLookupError, PermissionError):
            pass


class StubProcess:
    """Stands in for a container in stub mode: runs until it is signalled."""

    def __init__(self) -> None:
        self.returncode: int | None = None
        self._done = asyncio.Event()

    async def wait(self) -> int:
        await self._done.wait()
        return self.returncode  # type: ignore[return-value]

    def terminate(self) -> None:
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        self._end(signal.SIGKILL)

    def _end(self, sig: int) -> None:
        if self.returncode is None:
            self.returncode = 128 + int(sig)
            self._done.set()


async def start(box: Sandbox, env: dict[str, str], log_path: Path, pod_uid: str,
                container_id: str) -> ContainerProcess:
    """Start the container; returns once its command runs (or raises StartError)."""
    env = {"HOME": box.identity.home, **env}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if not sandbox_available():
        log.warning("pod %s runs as %s on the host's file system, without its own PID namespace "
                    "(isolation needs root)", box.hostname, pwd.getpwuid(os.geteuid()).pw_name)
        cwd = next((m["source"] for m in box.mounts if m["target"] == box.workdir), None)
        # opening the container's local log file for appending reads nothing: cheap
        with open(log_path, "ab") as out:  # noqa: ASYNC230
            try:
                proc = await asyncio.create_subprocess_exec(
                    *box.argv, env=env, cwd=cwd or str(box.directory), stdin=asyncio.subprocess.DEVNULL,
                    stdout=out, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
            except OSError as e:
                raise StartError(f'exec: "{box.argv[0]}": {e.strerror}') from None
        return ContainerProcess(proc, None, box, env, cwd or str(box.directory))
    shutil.rmtree(box.directory, ignore_errors=True)  # a fresh writable layer for each run
    box.directory.mkdir(parents=True)
    cgroup = cgroups.create(pod_uid, container_id) if cgroups.available() else None
    read_fd, write_fd = os.pipe()
    spec = {
        "argv": box.argv, "workdir": box.workdir, "hostname": box.hostname,
        "uid": box.identity.uid, "gid": box.identity.gid, "groups": box.identity.groups,
        "user": box.identity.image_user, "mounts": box.mounts, "keep": box.keep,
        "caps": box.caps, "no_new_privs": box.no_new_privs, "readonly_root": box.readonly_root,
        "cgroup": str(cgroup) if cgroup else None, "status_fd": write_fd, "kubelet_pid": os.getpid(),
        "rootfs": {name: str(box.directory / name) for name in ("upper", "work", "root", "scratch")},
    }
    for name in ("root", "scratch"):
        (box.directory / name).mkdir()
    try:
        # opening the container's local log file for appending reads nothing: cheap
        with open(log_path, "ab") as out:  # noqa: ASYNC230
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-I", "-S", str(SANDBOX), env={**env, sandbox.SPEC_ENV: sandbox.encode(spec)},
                cwd="/", stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
                start_new_session=True, pass_fds=(write_fd,))
    finally:
        os.close(write_fd)
    container = ContainerProcess(proc, cgroup, box, env, box.workdir)
    try:
        failure = await _read_all(read_fd)
    except BaseException:  # the pod went while its container started: nothing of it stays
        container.kill()
        raise
    if failure:
        await container.wait()
        raise StartError(failure)
    return container


async def _read_all(fd: int) -> str:
    """Everything written to the pipe until its last writer closes it."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                os.fdopen(fd, "rb", 0))
    try:
        return (await reader.read()).decode(errors="replace")
    finally:
        transport.close()


def _exit_code(code: int | None) -> int | None:
    """A process killed by a signal exits 128 + the signal, as runtimes report it."""
    return 128 - code if code is not None and code < 0 else code


def _passwd(uid: int) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwuid(uid)
    except KeyError:
        return None
