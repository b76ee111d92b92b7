"""In a kernel: run code when the server stops, within the time it has.

    from jupyterhub_gpu_reclaim_lab import on_reclaim, deadline

    @on_reclaim
    def save():
        torch.save(model.state_dict(), os.path.expanduser("~/checkpoint.pt"))

The callbacks run, in the order first registered, when this kernel exits because its server
is stopping (a reclaim, or any other stop of the server), not when the kernel alone is
shut down or restarted. `deadline()` says until when they may run; a callback still running
then is killed with its kernel. A callback registered again is registered once; one that
raises is reported in the server's log and the next runs. Standard library only, apart from
ipykernel's connection file (window.py writes the deadline next to it)."""

from __future__ import annotations

import atexit
import datetime as dt
import os
import sys
import time
import traceback
from typing import Callable, TypeVar

from .stopping import deadline_file, read_deadline

Callback = TypeVar("Callback", bound=Callable[[], object])

_callbacks: dict[int, Callable[[], object]] = {}  # id → callback, in the order registered (held: ids stay unique)
_connection_file = ""
_pid = 0  # the process that registered: a forked child's exit is not the kernel's


def on_reclaim(callback: Callback) -> Callback:
    """Run `callback()` (no arguments) when this kernel's server stops, before `deadline()`;
    returns it, so it works as a decorator. RuntimeError outside a Jupyter kernel."""
    global _connection_file, _pid
    if not callable(callback):
        raise TypeError(f"on_reclaim needs a function without arguments, not {type(callback).__name__}")
    if _pid != os.getpid():
        _connection_file = _kernel_connection_file()
        _callbacks.clear()  # a forked child does not run its parent's callbacks
        _pid = os.getpid()
        atexit.register(_run)
    _callbacks.setdefault(id(callback), callback)
    return callback


def deadline() -> dt.datetime | None:
    """When the stopping server kills this kernel (UTC); None while it is not stopping."""
    if not _connection_file:
        try:
            connection_file = _kernel_connection_file()
        except RuntimeError:
            return None
    else:
        connection_file = _connection_file
    t = read_deadline(connection_file)
    return dt.datetime.fromtimestamp(t, dt.timezone.utc) if t is not None else None


def _kernel_connection_file() -> str:
    try:
        from ipykernel.connect import get_connection_file

        return get_connection_file()
    except Exception:
        raise RuntimeError("on_reclaim and deadline work in a Jupyter kernel (ipykernel) only") from None


def _run() -> None:
    """At the kernel's exit (atexit): the callbacks, if its server is stopping."""
    if os.getpid() != _pid:
        return
    end = read_deadline(_connection_file)
    if end is None:
        return  # the kernel alone is shut down or restarted
    err = sys.__stderr__  # the kernel's own, in the server's log (sys.stderr goes to no one now)
    try:
        waiting = list(_callbacks.values())
        for i, callback in enumerate(waiting):
            if time.time() >= end:
                print(f"on_reclaim: no time left for {len(waiting) - i} callback(s)", file=err)
                break
            try:
                callback()
            except Exception:
                print(f"on_reclaim: {getattr(callback, '__qualname__', callback)!r} failed:", file=err)
                traceback.print_exc(file=err)
    finally:
        if os.getpid() == _pid:  # not a forked child leaving a callback early
            deadline_file(_connection_file).unlink(missing_ok=True)
