"""A container, as far as one machine without images allows: run as
`python -I -S sandbox.py` by the kubelet (as root), with the spec in $GPU_RECLAIM_SANDBOX.

1. It joins the container's cgroup (sim.kubelet.cgroups), enters a new PID namespace and forks:
   the child is PID 1 of the container, so when it ends, or the kubelet kills the
   container, every process it started ends with it, also one that left its session.
   The parent stays outside, passes signals on and exits with the child's status
   (128 + signal when killed, as a runtime reports it); it dies with the simulator, and
   the container with it.
2. The child gets its own mount, UTS (hostname) and IPC namespaces and a root file
   system of its own: an overlay whose lower layer is the host's `/` and whose upper
   layer is the container's writable layer (a fresh directory per run), so that its
   writes never reach the host or another container. Of the host it sees only what an
   image holds (`/usr`, `/etc`, `/var`, `/opt`, …): `/home`, `/root`, `/tmp`, `/run`,
   `/mnt` and the like start empty, and other top-level entries are hidden — except the
   paths in `keep` (the Python environment the container's command runs from), bound
   read-only. `/proc` is the container's own, `/dev` a small tmpfs with the usual
   devices, a private `/dev/shm` and its own pseudo-terminals, `/sys` read-only.
3. It moves into that root (pivot_root), binds the volumes (and the pod's /etc/hostname, and
   the directory of its hosts file with /etc/hosts a link into it) at their paths, lets go of the host's root, takes the container's
   user, groups and capabilities, and executes the command.

A failure before the command runs is written to the file descriptor `status_fd` (closed
on exec: nothing arrives when the command started) and the child exits 128.

Self-contained on purpose: it imports only a few modules of the standard library and no
site packages (`-S`), so that the interpreter starts in a few milliseconds.
"""

from __future__ import annotations

import ctypes
import errno
import marshal
import os
import signal
import stat

SPEC_ENV = "GPU_RECLAIM_SANDBOX"

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWPID = 0x20000, 0x4000000, 0x8000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}.get(os.uname().machine)

# what an image's root holds: kept from the host (writes go to the container's layer)
IMAGE_DIRS = {"bin", "boot", "etc", "lib", "lib32", "lib64", "libx32", "opt", "sbin", "usr", "var"}
# present in an image but empty; mode of each
EMPTY_DIRS = {"home": 0o755, "media": 0o755, "mnt": 0o755, "root": 0o700, "run": 0o755, "srv": 0o755,
              "tmp": 0o1777}
SPECIAL_DIRS = {"dev", "proc", "sys"}  # mounted afresh
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
OLD_ROOT = "/.sandbox-old-root"

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _mount(source: str | None, target: str, fstype: str | None = None, flags: int = 0,
           data: str | None = None) -> None:
    _check(_libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(),
                       ctypes.c_ulong(flags), data and data.encode()), f"mount {target}")


def _bind(source: str, target: str, readonly: bool = False, recursive: bool = False) -> None:
    _mount(source, target, None, MS_BIND | (MS_REC if recursive else 0))
    if readonly:
        _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)


def _prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl {option}")


def _unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def encode(spec: dict) -> str:
    """The spec for $GPU_RECLAIM_SANDBOX (marshal: the same interpreter reads it, and
    unlike json it costs no import)."""
    return marshal.dumps(spec).hex()


def decode(text: str) -> dict:
    return marshal.loads(bytes.fromhex(text))


# --- the parent: outside the container's PID namespace ----------------------------------

def main() -> None:
    spec = decode(os.environ.pop(SPEC_ENV))
    status_fd = spec["status_fd"]
    os.set_inheritable(status_fd, False)  # closed by the exec of the command
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # should the simulator die, its containers die too
        if os.getppid() != spec["kubelet_pid"]:
            _fail(status_fd, "the kubelet is gone")
        if spec.get("cgroup"):
            with open(os.path.join(spec["cgroup"], "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        _unshare(CLONE_NEWPID)
        child = os.fork()
    except OSError as e:
        _fail(status_fd, e.strerror or str(e))
    if child == 0:
        _container(spec, status_fd)
    os.close(status_fd)

    def forward(sig: int, _frame: object) -> None:
        try:
            os.kill(child, sig)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    os._exit(128 - code if code < 0 else code)


def _fail(status_fd: int, message: str) -> None:
    os.write(status_fd, message.encode()[:4000])
    os._exit(128)


# --- the child: PID 1 of the container --------------------------------------------------

def _container(spec: dict, status_fd: int) -> None:
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the kubelet's SIGKILL to the parent reaches here
        _unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC)
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        name = spec["hostname"].encode()
        _check(_libc.sethostname(name, len(name)), "sethostname")
        _root_fs(spec)
        _identity(spec)
        try:
            os.chdir(spec["workdir"])
        except OSError as e:
            raise OSError(e.errno, f'chdir to cwd ("{spec["workdir"]}") set in config.json failed: '
                                   f'{os.strerror(e.errno or 0).lower()}') from None
        argv = spec["argv"]
        try:
            os.execvp(argv[0], argv)
        except OSError as e:  # in runc's words
            reason = ("executable file not found in $PATH" if e.errno == errno.ENOENT
                      else os.strerror(e.errno or 0).lower())
            raise RuntimeError(f'exec: "{argv[0]}": {reason}') from None
    except BaseException as e:  # noqa: BLE001 - whatever it is, the kubelet must hear of it
        _fail(status_fd, e.strerror if isinstance(e, OSError) and e.strerror else str(e) or repr(e))


def _root_fs(spec: dict) -> None:
    fs = spec["rootfs"]
    root, keep = fs["root"], spec.get("keep", [])
    hidden_with_keep = {k.strip("/").split("/", 1)[0] for k in keep} - IMAGE_DIRS
    try:
        _overlay(fs["upper"], fs["work"], root, hidden_with_keep)
    except OSError:  # a file system that cannot hold an overlay's upper layer: memory
        _mount("tmpfs", fs["scratch"], "tmpfs", MS_NOSUID, "mode=0700")
        _overlay(os.path.join(fs["scratch"], "upper"), os.path.join(fs["scratch"], "work"), root,
                 hidden_with_keep)
    old = root + OLD_ROOT
    os.mkdir(old, 0o700)
    os.chdir(root)
    if _PIVOT_ROOT is None:
        raise OSError(errno.ENOSYS, f"pivot_root: no system call number known for {os.uname().machine}")
    _check(_libc.syscall(_PIVOT_ROOT, b".", ("." + OLD_ROOT).encode()), "pivot_root")
    os.chdir("/")
    os.umask(0o022)
    _special_dirs()
    for path in keep:
        if path.strip("/").split("/", 1)[0] not in IMAGE_DIRS and os.path.exists(OLD_ROOT + path):
            os.makedirs(path, 0o755, exist_ok=True)
            _bind(OLD_ROOT + path, path, readonly=True, recursive=True)
    user = spec.get("user")
    if user:
        _image_user(user)
    os.makedirs(_inside(spec["workdir"]), 0o755, exist_ok=True)
    for m in sorted(spec.get("mounts", []), key=lambda m: m["target"].rstrip("/").count("/")):
        source, target = OLD_ROOT + m["source"], _inside(m["target"])
        if os.path.isdir(source):
            os.makedirs(target, 0o755, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
            if not os.path.exists(target):
                open(target, "a").close()
        _bind(source, target, readonly=m.get("readonly", False), recursive=True)
        for path, name in m.get("links", {}).items():  # e.g. /etc/hosts -> <mount>/hosts
            link = os.path.join(_inside(os.path.dirname(path)), os.path.basename(path))
            if os.path.lexists(link):
                os.unlink(link)
            os.symlink(os.path.join(m["target"], name), link)
    _check(_libc.umount2(OLD_ROOT.encode(), MNT_DETACH), "umount old root")
    os.rmdir(OLD_ROOT)
    if spec.get("readonly_root"):
        _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY)


def _inside(path: str) -> str:
    """`path` in the container, its links resolved: never through the host's root, which
    is still reachable while the volumes are bound (a link in a volume must not lead a
    mount point onto the host)."""
    real = os.path.realpath(path)
    if real == OLD_ROOT or real.startswith(OLD_ROOT + "/"):
        raise OSError(errno.EPERM, f"mount point {path!r} leads out of the container")
    return real


def _overlay(upper: str, work: str, root: str, hidden_with_keep: set[str]) -> None:
    """The container's root: the host's `/` below, `upper` (prepared here so that the
    image's empty and hidden directories are so) above."""
    os.makedirs(upper, 0o755, exist_ok=True)
    os.makedirs(work, 0o700, exist_ok=True)
    names = set(os.listdir("/"))
    for name in sorted(names | set(EMPTY_DIRS)):
        if name in IMAGE_DIRS or name in SPECIAL_DIRS:
            continue
        path = os.path.join(upper, name)
        if name in EMPTY_DIRS or name in hidden_with_keep:
            os.mkdir(path)
            # the environment below it must be reachable by every user; an image's empty
            # directory keeps its own mode beside that (a clone under /tmp: /tmp stays 1777)
            mode = EMPTY_DIRS.get(name, 0)
            os.chmod(path, mode | 0o755 if name in hidden_with_keep else mode)
            os.setxattr(path, "trusted.overlay.opaque", b"y")  # empty, whatever the host has
        else:
            os.mknod(path, stat.S_IFCHR, os.makedev(0, 0))  # a whiteout: not there at all
    if os.path.isdir("/var/tmp"):
        os.makedirs(os.path.join(upper, "var", "tmp"))
        os.chmod(os.path.join(upper, "var", "tmp"), 0o1777)
        os.setxattr(os.path.join(upper, "var", "tmp"), "trusted.overlay.opaque", b"y")
    _mount("overlay", root, "overlay", 0, f"lowerdir=/,upperdir={upper},workdir={work}")


def _special_dirs() -> None:
    for name in SPECIAL_DIRS:
        os.makedirs("/" + name, 0o755, exist_ok=True)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _bind(OLD_ROOT + "/sys", "/sys", readonly=True)
    _mount("tmpfs", "/dev", "tmpfs", MS_NOSUID, "mode=755,size=65536k")
    for dev in DEVICES:
        if os.path.exists(OLD_ROOT + "/dev/" + dev):
            open("/dev/" + dev, "w").close()
            _bind(OLD_ROOT + "/dev/" + dev, "/dev/" + dev)
    os.mkdir("/dev/pts")
    _mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5")
    os.symlink("pts/ptmx", "/dev/ptmx")
    os.mkdir("/dev/shm")
    _mount("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=65536k")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, "/dev/" + name)


def _image_user(user: dict) -> None:
    """The image's own user: its /etc/passwd and /etc/group entries and home directory
    (a docker-stacks image has jovyan, uid 1000, group users, home /home/jovyan)."""
    name, uid, gid, home = user["name"], user["uid"], user["gid"], user["home"]
    with open("/etc/passwd") as f:
        lines = [line for line in f.read().splitlines()
                 if line and line.split(":")[0] != name and line.split(":")[2:3] != [str(uid)]]
    with open("/etc/passwd", "w") as f:
        f.write("\n".join(lines + [f"{name}:x:{uid}:{gid}::{home}:/bin/bash"]) + "\n")
    with open("/etc/group") as f:
        groups = f.read().splitlines()
    if not any(line.split(":")[2:3] == [str(gid)] for line in groups):
        with open("/etc/group", "a") as f:
            f.write(f"{name}:x:{gid}:\n")
    if not os.path.exists(home):
        os.makedirs(home, 0o755)
        os.chmod(home, 0o2775)
        os.chown(home, uid, gid)


def _identity(spec: dict) -> None:
    """Capabilities (the bounding set is the runtime's default set unless privileged, so
    root keeps only those and a set-user-ID program gains no more), groups, user."""
    caps = spec.get("caps")
    if caps is not None:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
        for cap in range(last + 1):
            if cap not in caps:
                _prctl(PR_CAPBSET_DROP, cap)
    os.setgroups(spec["groups"])
    os.setgid(spec["gid"])
    os.setuid(spec["uid"])
    if spec.get("no_new_privs"):
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # a change of user clears it


if __name__ == "__main__":
    main()
