"""The what-if's replay (`whatif.what_if`) in a process of its own, within a time budget.

A replay is pure Python work: in a thread of the service it held the interpreter's lock
(GIL) for as long as it ran (an override such as ``idle_reclaim_after: 999d`` makes one
long session replay ten times slower), slowing the service's own cycles about threefold,
and it could not be stopped. In a child process, at a lower CPU priority, it shares neither
the lock nor the CPU ahead of the service, and a replay that runs past its budget is
killed. The child opens the store itself (read only: `what_if` writes nothing).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import multiprocessing
import os
import signal
from multiprocessing.connection import Connection
from typing import Any, Mapping

from ..policy.config import PolicyConfig
from ..policy.rules import PolicyRules
from ..store import Store
from .whatif import WhatIf, WhatIfError, what_if

#: seconds a what-if may run (both replays): the longest period (whatif.MAX_PERIOD, a month)
#: of a big hub takes minutes; past this, the admin is asked for a shorter one
BUDGET_S = 300.0
#: the child's niceness above the service's: the service's cycles go first on a busy CPU
NICENESS = 10
#: spawn, not fork: a fork of the service would copy its event loop, threads and connections
_CONTEXT = multiprocessing.get_context("spawn")


class OverBudget(WhatIfError):
    """The replay ran past its time budget and was stopped."""


class WhatIfFailed(Exception):
    """The replay's process failed (a bug, the store) or ended without an answer (killed:
    the out-of-memory killer, an operator): not the admin's input."""


def _ended(exitcode: int | None) -> str:
    """How a child process ended, in words."""
    if exitcode is None or exitcode >= 0:
        return f"exit code {exitcode}"
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = f"signal {-exitcode}"
    return f"killed by {name}" + (", as the out-of-memory killer kills" if -exitcode == signal.SIGKILL else "")


def _child(out: Connection, url: str, since: dt.datetime, until: dt.datetime, values: Mapping[str, Any],
           live: PolicyConfig | PolicyRules, now: dt.datetime) -> None:
    os.nice(NICENESS)
    try:
        with Store.open(url) as store:
            out.send(("ok", what_if(store, since, until, values, live=live, now=now)))
    except WhatIfError as e:
        out.send(("refused", str(e)))
    except BaseException as e:  # a bug, the store: the parent raises it as the what-if's failure
        out.send(("failed", f"{type(e).__name__}: {e}"))
    finally:
        out.close()


async def replay_in_process(store: Store, since: dt.datetime, until: dt.datetime, values: Mapping[str, Any], *,
                            live: PolicyConfig | PolicyRules, now: dt.datetime,
                            budget_s: float = BUDGET_S) -> WhatIf:
    """`what_if(store, …)` run in a child process; WhatIfError as it raises them, OverBudget
    when it runs longer than `budget_s` (the child is killed), WhatIfFailed when it fails
    otherwise or dies. Cancelled (the request went away), the child is killed too."""
    url = store.engine.url.render_as_string(hide_password=False)  # the child's own connection
    answers, out = _CONTEXT.Pipe(duplex=False)
    child = _CONTEXT.Process(target=_child, args=(out, url, since, until, values, live, now),
                             name="gpu-reclaim what-if", daemon=True)
    child.start()
    out.close()
    try:
        if not await asyncio.to_thread(answers.poll, budget_s):
            raise OverBudget(f"the what-if ran longer than its {budget_s:g} s and was stopped: "
                             "replay a shorter period")
        kind, answer = answers.recv()
    except EOFError:  # it died before its answer
        kind = "died"
    finally:
        answers.close()
        if child.is_alive():
            child.kill()
        await asyncio.to_thread(child.join)
    if kind == "refused":
        raise WhatIfError(answer)
    if kind == "died":
        raise WhatIfFailed(f"the what-if's process ended without an answer ({_ended(child.exitcode)})")
    if kind == "failed":
        raise WhatIfFailed(f"the what-if failed: {answer}")
    return answer
