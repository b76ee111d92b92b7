"""A command executed in a running container, as `runc exec` runs one: started as
`python -I -S nsenter.py` by the kubelet (as root), with the spec in $GPU_RECLAIM_EXEC.

It joins the container's cgroup and its IPC, UTS, PID and mount namespaces (those of the
container's PID 1, `target`), so the command sees the container's root file system,
hostname and processes; then it forks (a PID namespace takes effect in a child): the
child takes a terminal of its own when asked for one, changes to the container's working
directory, takes the container's capabilities, groups and user (sandbox's rules, the
same as its PID 1) and executes the command with the container's environment. The
parent passes signals on and exits with the child's status.

A failure before the command runs is written to `status_fd` (closed on exec) and the
parent exits 128. Self-contained like sandbox.py, whose functions it uses (imported from
`sandbox_dir`, as a top-level module: no site packages)."""

from __future__ import annotations

import errno
import fcntl
import marshal
import os
import signal
import sys
import termios
from typing import Any

SPEC_ENV = "GPU_RECLAIM_EXEC"
NAMESPACES = ("ipc", "uts", "pid", "mnt")  # mnt last: it moves this process's root and cwd


def encode(spec: dict) -> str:
    return marshal.dumps(spec).hex()


def main() -> None:
    spec = marshal.loads(bytes.fromhex(os.environ.pop(SPEC_ENV)))
    status_fd = spec["status_fd"]
    os.set_inheritable(status_fd, False)
    sys.path.insert(0, spec["sandbox_dir"])
    import sandbox  # type: ignore[import-not-found]  # found once sandbox_dir is on the path

    try:
        sandbox._prctl(sandbox.PR_SET_PDEATHSIG, signal.SIGKILL)
        if spec.get("cgroup"):
            with open(os.path.join(spec["cgroup"], "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        fds = [os.open(f"/proc/{spec['target']}/ns/{ns}", os.O_RDONLY) for ns in NAMESPACES]
        for fd, ns in zip(fds, NAMESPACES, strict=True):
            sandbox._check(sandbox._libc.setns(fd, 0), f"setns {ns}")
            os.close(fd)
        child = os.fork()
    except OSError as e:
        _fail(status_fd, e.strerror or str(e))
    if child == 0:
        _run(sandbox, spec, status_fd)
    os.close(status_fd)

    def forward(sig: int, _frame: object) -> None:
        try:
            os.kill(child, sig)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, forward)
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    os._exit(128 - code if code < 0 else code)


def _run(sandbox: Any, spec: dict, status_fd: int) -> None:
    try:
        if spec.get("tty"):  # stdin is the terminal's other end: make it this session's terminal
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        sandbox._prctl(sandbox.PR_SET_PDEATHSIG, signal.SIGKILL)
        try:
            os.chdir(spec["workdir"])
        except OSError:
            os.chdir("/")
        sandbox._identity(spec)
        argv = spec["argv"]
        try:
            os.execvpe(argv[0], argv, spec["env"])
        except OSError as e:  # in runc's words
            reason = ("executable file not found in $PATH" if e.errno == errno.ENOENT
                      else os.strerror(e.errno or 0).lower())
            raise RuntimeError(f'exec: "{argv[0]}": {reason}') from None
    except BaseException as e:  # noqa: BLE001 - whatever it is, the kubelet must hear of it
        _fail(status_fd, e.strerror if isinstance(e, OSError) and e.strerror else str(e) or repr(e))


def _fail(status_fd: int, message: str) -> None:
    os.write(status_fd, message.encode()[:4000])
    os._exit(128)


if __name__ == "__main__":
    main()
