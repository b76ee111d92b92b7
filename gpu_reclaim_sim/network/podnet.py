"""A pod's sockets as in a network namespace of its own, on the run's one.

Pods share one network namespace, the run's (sim.network.namespace); a real pod has its own, with its
address and a loopback nobody else shares. Servers written for that bind every address
(z2jh's hub `http://:8081`, configurable-http-proxy `--ip=`, a service's
`--bind-url=http://0.0.0.0:…`) and reach their own pod's servers at `localhost`
(z2jh's idle culler `--url=http://localhost:8081/hub/api`). Here three eBPF programs,
attached to the pod's cgroup (sim.kubelet.cgroups) when the kubelet sets its network up (CNI
ADD), give the pod's processes that view:

- bind (cgroup/bind4): a socket bound to 0.0.0.0 is bound to the pod's address, so two
  pods, or a pod and the host, may serve the same port;
- connect (cgroup/connect4): a connection to 127.0.0.1:PORT goes to the pod's address
  when the pod listens there (a socket lookup), else to the host as before (where the
  simulator's own endpoints are);
- no IPv6 (cgroup/sock_create): an AF_INET6 socket cannot be made (EAFNOSUPPORT, as on a
  kernel without IPv6), so a server that binds `::` falls back to 0.0.0.0 (Node.js) or
  keeps to its IPv4 sockets (tornado, asyncio) and nothing binds the host's IPv6 wildcard.

The programs are a few instructions each, assembled here and loaded with the bpf(2)
system call (root, Linux 5.18+ for the retval helper); a cgroup's programs go with it.
Checked on Linux 6.18: a Python and a Node.js server in the cgroup bind the pod's
address, `localhost` reaches them, and a port the pod does not serve reaches the host.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct
from pathlib import Path

_SYS_BPF = 321  # x86_64
_PROG_LOAD, _PROG_ATTACH = 5, 8
_CGROUP_SOCK, _CGROUP_SOCK_ADDR = 9, 18  # program types
_SOCK_CREATE, _INET4_BIND, _INET4_CONNECT = 2, 8, 10  # attach types
_ALLOW_MULTI = 2
_ATTR_SIZE = 144  # sizeof(union bpf_attr) in the uapi this was written against
_SK_LOOKUP_TCP, _SK_RELEASE, _SET_RETVAL = 84, 86, 187  # helpers
_USER_IP4, _USER_PORT = 4, 24  # offsets in struct bpf_sock_addr
_FAMILY = 4  # offset in struct bpf_sock

# opcodes
_LDXW, _STXW, _STXH, _STW, _STDW = 0x61, 0x63, 0x6B, 0x62, 0x7A
_MOV64K, _MOV64X, _MOV32K, _ADD64K = 0xB7, 0xBF, 0xB4, 0x07
_JEQK, _J32NEK, _CALL, _EXIT = 0x15, 0x56, 0x85, 0x95


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def _addr(ip: str) -> int:
    """An IPv4 address as the program reads the network-order field (a signed imm32)."""
    value = struct.unpack("<I", socket.inet_aton(ip))[0]
    return value - (1 << 32) if value >= 1 << 31 else value


def _bind4(pod_ip: str) -> list[bytes]:
    return [
        _insn(_LDXW, 2, 1, _USER_IP4),
        _insn(_J32NEK, 2, 0, 2, 0),                 # not 0.0.0.0: as asked
        _insn(_MOV32K, 2, 0, 0, _addr(pod_ip)),
        _insn(_STXW, 1, 2, _USER_IP4),
        _insn(_MOV64K, 0, 0, 0, 1),
        _insn(_EXIT),
    ]


def _connect4(pod_ip: str) -> list[bytes]:
    pod = _addr(pod_ip)
    return [
        _insn(_MOV64X, 6, 1),                       # r6 = ctx
        _insn(_LDXW, 2, 6, _USER_IP4),
        _insn(_J32NEK, 2, 0, 17, _addr("127.0.0.1")),  # not localhost: as asked
        _insn(_LDXW, 7, 6, _USER_PORT),
        _insn(_STDW, 10, 0, -16, 0),                # struct bpf_sock_tuple.ipv4 at fp-16, zeroed
        _insn(_STW, 10, 0, -8, 0),
        _insn(_STW, 10, 0, -12, pod),               # daddr = the pod's address
        _insn(_STXH, 10, 7, -6),                    # dport = the port asked for
        _insn(_MOV64X, 1, 6),
        _insn(_MOV64X, 2, 10),
        _insn(_ADD64K, 2, 0, 0, -16),
        _insn(_MOV64K, 3, 0, 0, 12),
        _insn(_MOV64K, 4, 0, 0, -1),                # BPF_F_CURRENT_NETNS
        _insn(_MOV64K, 5, 0, 0, 0),
        _insn(_CALL, imm=_SK_LOOKUP_TCP),
        _insn(_JEQK, 0, 0, 4, 0),                   # nobody listens there: to the host
        _insn(_MOV64X, 1, 0),
        _insn(_CALL, imm=_SK_RELEASE),
        _insn(_MOV32K, 2, 0, 0, pod),
        _insn(_STXW, 6, 2, _USER_IP4),
        _insn(_MOV64K, 0, 0, 0, 1),
        _insn(_EXIT),
    ]


def _no_inet6() -> list[bytes]:
    return [
        _insn(_LDXW, 2, 1, _FAMILY),
        _insn(_J32NEK, 2, 0, 4, socket.AF_INET6),
        _insn(_MOV64K, 1, 0, 0, -errno.EAFNOSUPPORT),
        _insn(_CALL, imm=_SET_RETVAL),
        _insn(_MOV64K, 0, 0, 0, 0),
        _insn(_EXIT),
        _insn(_MOV64K, 0, 0, 0, 1),
        _insn(_EXIT),
    ]


_libc = ctypes.CDLL(None, use_errno=True)


def _bpf(cmd: int, attr: bytes) -> int:
    buf = ctypes.create_string_buffer(attr, _ATTR_SIZE)
    result = _libc.syscall(_SYS_BPF, cmd, buf, _ATTR_SIZE)
    if result < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"bpf({cmd}): {os.strerror(e)}")
    return result


def _load(prog_type: int, attach_type: int, program: list[bytes]) -> int:
    code = ctypes.create_string_buffer(b"".join(program))
    license_ = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(4096)
    attr = struct.pack("<IIQQIIQII16sII", prog_type, len(program), ctypes.addressof(code),
                       ctypes.addressof(license_), 1, len(log), ctypes.addressof(log), 0, 0,
                       b"sim_podnet", 0, attach_type)
    try:
        return _bpf(_PROG_LOAD, attr)
    except OSError as e:
        raise OSError(e.errno, f"{e.strerror}: {log.value.decode(errors='replace').strip()}") from None


def attach(cgroup: Path, pod_ip: str) -> None:
    """Give the processes of `cgroup` (a pod's) the network view above."""
    fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for prog_type, attach_type, program in ((_CGROUP_SOCK_ADDR, _INET4_BIND, _bind4(pod_ip)),
                                                (_CGROUP_SOCK_ADDR, _INET4_CONNECT, _connect4(pod_ip)),
                                                (_CGROUP_SOCK, _SOCK_CREATE, _no_inet6())):
            prog = _load(prog_type, attach_type, program)
            try:  # the cgroup keeps the program while it exists
                _bpf(_PROG_ATTACH, struct.pack("<IIII", fd, prog, attach_type, _ALLOW_MULTI))
            finally:
                os.close(prog)
    finally:
        os.close(fd)
