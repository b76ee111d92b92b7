"""Long pure-Python work of a web request (a what-if's replay, the usage report's Prometheus
days) run in a child process of its own, within a time budget.

In a thread of the service such work holds the interpreter's lock (GIL) for as long as it
runs, so the service's cycles and pages (`/health`) wait, it cannot be stopped, and the
memory it took stays with the service (CPython and malloc keep freed memory: a month's
report left the service at 2.3 GiB). In a child, at a lower CPU priority, it shares neither
the lock nor the CPU ahead of the service, its memory goes with it, and a child past its
budget is killed.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, TypeVar

#: the child's niceness above the service's: the service's cycles go first on a busy CPU
NICENESS = 10
#: spawn, not fork: a fork of the service would copy its event loop, threads and connections
_CONTEXT = multiprocessing.get_context("spawn")
T = TypeVar("T")


class OverBudget(Exception):
    """The child ran past its time budget and was stopped."""


class ChildFailed(Exception):
    """The child failed (a bug, a source it reads) or ended without an answer (killed: the
    out-of-memory killer, an operator): what happened, in words, for the one who asked."""


def _ended(exitcode: int | None) -> str:
    """How a child process ended, in words."""
    if exitcode is None or exitcode >= 0:
        return f"exit code {exitcode}"
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = f"signal {-exitcode}"
    return f"killed by {name}" + (", as the out-of-memory killer kills" if -exitcode == signal.SIGKILL else "")


def _child(out: Connection, target: Callable[..., Any], args: tuple, expected: tuple[type[Exception], ...]) -> None:
    os.nice(NICENESS)
    try:
        out.send(("ok", target(*args)))
    except expected as e:
        out.send(("raised", e))
    except BaseException as e:  # a bug, a source: the parent raises it as the child's failure
        out.send(("failed", f"{type(e).__name__}: {e}"))
    finally:
        out.close()


async def call_in_child(target: Callable[..., T], *args: Any, budget_s: float, name: str, what: str,
                        expected: tuple[type[Exception], ...] = ()) -> T:
    """`target(*args)` (a module's function; the arguments and the answer pickled) run in a
    child process named `name`, `what` in the messages. The exceptions of `expected` are raised as the child raised them;
    OverBudget when it runs longer than `budget_s` (the child is killed); ChildFailed when
    it fails otherwise or dies. Cancelled (the request went away), the child is killed too."""
    answers, out = _CONTEXT.Pipe(duplex=False)
    child = _CONTEXT.Process(target=_child, args=(out, target, args, expected), name=name, daemon=True)
    child.start()
    out.close()
    try:
        if not await asyncio.to_thread(answers.poll, budget_s):
            raise OverBudget(f"{what} ran longer than its {budget_s:g} s and was stopped")
        kind, answer = await asyncio.to_thread(answers.recv)  # a big answer takes a while to read
    except EOFError:  # it died before its answer
        kind = "died"
    finally:
        answers.close()
        if child.is_alive():
            child.kill()
        await asyncio.to_thread(child.join)
    if kind == "raised":
        raise answer
    if kind == "died":
        raise ChildFailed(f"{what}'s process ended without an answer ({_ended(child.exitcode)})")
    if kind == "failed":
        raise ChildFailed(f"{what} failed: {answer}")
    return answer
