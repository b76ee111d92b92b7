"""Facts about processes and the machine (mostly read from /proc), and this process's
allocator."""

from __future__ import annotations

import math
import os
import platform
import resource


def keep_freed_memory() -> bool:
    """Make this process's allocator (glibc's malloc) keep the memory it frees instead of
    handing it back to the kernel, so that a timed list measures the server and the
    transfer, not the client's page faults in a 16 MiB body mapped afresh (what they cost:
    docs/benchmarks.md). Returns whether it could (False on a C library without mallopt)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # malloc.h
    return bool(mallopt(M_TRIM_THRESHOLD, 1 << 30) and mallopt(M_MMAP_THRESHOLD, 64 << 20))


def minor_faults() -> int:
    """Minor page faults of this process so far (memory touched for the first time)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def proc_status(pid: int | str = "self") -> dict[str, float]:
    """VmRSS and VmHWM of a process (this one by default), in MiB."""
    out: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out[key] = int(value.split()[0]) / 1024
    except OSError:
        pass
    return out


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return math.nan


def cpu_steal_seconds() -> float:
    """CPU time the hypervisor gave to others, summed over all CPUs (/proc/stat 'steal')."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return math.nan


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("" where it has none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def machine() -> str:
    """The machine in a line: cores, CPU, Python."""
    return f"{os.cpu_count()} cores, {cpu_model() or platform.processor()}, Python {platform.python_version()}"
