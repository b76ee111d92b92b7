"""The container runtime's exec (what containerd's ExecSync/Exec are to a real kubelet):
start a command in a running container, with pipes or a terminal for its standard
streams. As root the command joins the container's namespaces, cgroup, user and
capabilities (sim.nsenter); without root (no sandbox) it is a process of the
simulator's user in the container's environment and working directory, as the
container itself is (sim.kubelet.runtime)."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import struct
import sys
import termios
from dataclasses import dataclass
from pathlib import Path

from . import nsenter, runtime, sandbox

NSENTER = Path(nsenter.__file__)


class ExecError(Exception):
    """A command that could not be started in the container (runc's message)."""


@dataclass
class Streams:
    """Which of the command's standard streams the client takes, and whether on a terminal
    (stdout and stderr then are one stream, the terminal's)."""

    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool


class _TerminalReader(asyncio.StreamReaderProtocol):
    """The terminal's master end: the EIO it reads once the last process on the terminal
    closed it is its end of file. (asyncio's reader raises an error before it hands out
    what it had read: what a short command printed would be lost when nobody had read it
    before the command ended.)"""

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(None if isinstance(exc, OSError) and exc.errno == errno.EIO else exc)


class ExecProcess:
    """A command running in a container: its process, and its standard streams (`stdout`
    and `stderr` readers, `write`/`close_stdin`, `resize` for a terminal)."""

    def __init__(self, proc: asyncio.subprocess.Process, terminal: int | None) -> None:
        self.proc = proc
        self._terminal = terminal  # the terminal's master end
        self.stdout: asyncio.StreamReader | None = proc.stdout
        self.stderr: asyncio.StreamReader | None = proc.stderr
        self._writer: asyncio.StreamWriter | None = proc.stdin
        self._transports: list[asyncio.BaseTransport] = []

    async def open_terminal(self) -> None:
        """The terminal's master end as a reader (stdout) and a writer (stdin)."""
        if self._terminal is None:
            return
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(lambda: _TerminalReader(reader),
                                                    os.fdopen(os.dup(self._terminal), "rb", 0))
        self._transports.append(transport)
        self.stdout = reader
        w_transport, w_protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(os.dup(self._terminal), "wb", 0))
        self._transports.append(w_transport)
        self._writer = asyncio.StreamWriter(w_transport, w_protocol, None, loop)

    async def write(self, data: bytes) -> None:
        if self._writer is None or self._writer.is_closing():
            return
        self._writer.write(data)
        try:
            await self._writer.drain()
        except (ConnectionError, BrokenPipeError):  # the command closed its stdin or ended
            pass

    def close_stdin(self) -> None:
        if self._writer is not None and self._terminal is None:
            self._writer.close()

    def resize(self, width: int, height: int) -> None:
        if self._terminal is not None:
            fcntl.ioctl(self._terminal, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))

    async def wait(self) -> int:
        code = await self.proc.wait()
        return 128 - code if code < 0 else code

    def kill(self) -> None:
        """The command and what it started (its session; in a sandbox the container's
        PID namespace keeps it, and the helper's death kills it)."""
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        for t in self._transports:
            t.close()
        if self._terminal is not None:
            os.close(self._terminal)
            self._terminal = None


async def start(container: runtime.ContainerProcess, argv: list[str], streams: Streams) -> ExecProcess:
    """Start `argv` in `container` (running); raises ExecError when it cannot start."""
    terminal = slave = None
    if streams.tty:
        terminal, slave = os.openpty()
    pipe = asyncio.subprocess.PIPE
    stdin = slave if slave is not None else (pipe if streams.stdin else asyncio.subprocess.DEVNULL)
    stdout = slave if slave is not None else (pipe if streams.stdout else asyncio.subprocess.DEVNULL)
    stderr = slave if slave is not None else (pipe if streams.stderr else asyncio.subprocess.DEVNULL)
    box, env = container.box, container.env
    try:
        if box is None or not runtime.sandbox_available():
            proc = await _start_plain(argv, env, container.cwd, stdin, stdout, stderr, streams.tty)
        else:
            proc = await _start_in_sandbox(container, argv, stdin, stdout, stderr, streams.tty)
    except BaseException:
        if terminal is not None:
            os.close(terminal)
        raise
    finally:
        if slave is not None:
            os.close(slave)
    process = ExecProcess(proc, terminal)
    await process.open_terminal()
    return process


async def _start_plain(argv: list[str], env: dict[str, str], cwd: str, stdin: int, stdout: int, stderr: int,
                       tty: bool) -> asyncio.subprocess.Process:
    try:
        return await asyncio.create_subprocess_exec(
            *argv, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr, start_new_session=True,
            preexec_fn=_take_terminal if tty else None)
    except OSError as e:
        reason = "executable file not found in $PATH" if isinstance(e, FileNotFoundError) else e.strerror
        raise ExecError(f'exec: "{argv[0]}": {reason}') from None


def _take_terminal() -> None:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


async def _start_in_sandbox(container: runtime.ContainerProcess, argv: list[str], stdin: int, stdout: int,
                            stderr: int, tty: bool) -> asyncio.subprocess.Process:
    box = container.box
    assert box is not None
    target = _pid_one(container.proc.pid)
    if target is None:
        raise ExecError("container not running")
    read_fd, write_fd = os.pipe()
    spec = {
        "target": target, "cgroup": str(container.cgroup) if container.cgroup else None,
        "argv": argv, "env": container.env, "workdir": box.workdir, "tty": tty,
        "uid": box.identity.uid, "gid": box.identity.gid, "groups": box.identity.groups,
        "caps": box.caps, "no_new_privs": box.no_new_privs, "status_fd": write_fd,
        "sandbox_dir": str(Path(sandbox.__file__).parent),
    }
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", str(NSENTER), env={nsenter.SPEC_ENV: nsenter.encode(spec)},
            cwd="/", stdin=stdin, stdout=stdout, stderr=stderr, start_new_session=True, pass_fds=(write_fd,))
    finally:
        os.close(write_fd)
    failure = await runtime._read_all(read_fd)
    if failure:
        await proc.wait()
        raise ExecError(failure)
    return proc


def _pid_one(outer: int) -> int | None:
    """The container's PID 1 on the host: the sandbox's child."""
    try:
        children = Path(f"/proc/{outer}/task/{outer}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None
