"""The what-if's replay (`whatif.what_if`) in a process of its own, within a time budget
(`child_process`: a replay is pure Python work; an override such as
``idle_reclaim_after: 999d`` makes one long session replay ten times slower, and in a thread
of the service it slowed the service's cycles about threefold and could not be stopped). The
child opens the store itself (read only: `what_if` writes nothing).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Mapping

from .. import child_process
from ..policy.config import PolicyConfig
from ..policy.rules import PolicyRules
from ..store import Store
from .whatif import WhatIf, WhatIfError, what_if

#: seconds a what-if may run (both replays): the longest period (whatif.MAX_PERIOD, a month)
#: of a big hub takes minutes; past this, the admin is asked for a shorter one
BUDGET_S = 300.0
NAME = "gpu-reclaim what-if"


class OverBudget(WhatIfError):
    """The replay ran past its time budget and was stopped."""


class WhatIfFailed(Exception):
    """The replay's process failed (a bug, the store) or ended without an answer (killed:
    the out-of-memory killer, an operator): not the admin's input."""


def _replay(url: str, since: dt.datetime, until: dt.datetime, values: Mapping[str, Any],
            live: PolicyConfig | PolicyRules, now: dt.datetime) -> WhatIf:
    with Store.open(url) as store:
        return what_if(store, since, until, values, live=live, now=now)


async def replay_in_process(store: Store, since: dt.datetime, until: dt.datetime, values: Mapping[str, Any], *,
                            live: PolicyConfig | PolicyRules, now: dt.datetime,
                            budget_s: float = BUDGET_S) -> WhatIf:
    """`what_if(store, …)` run in a child process; WhatIfError as it raises them, OverBudget
    when it runs longer than `budget_s` (the child is killed), WhatIfFailed when it fails
    otherwise or dies. Cancelled (the request went away), the child is killed too."""
    url = store.engine.url.render_as_string(hide_password=False)  # the child's own connection
    try:
        return await child_process.call_in_child(_replay, url, since, until, values, live, now, budget_s=budget_s,
                                                 name=NAME, what="the what-if",
                                                 expected=(WhatIfError,))
    except child_process.OverBudget:
        raise OverBudget(f"the what-if ran longer than its {budget_s:g} s and was stopped: "
                         "replay a shorter period") from None
    except child_process.ChildFailed as e:
        raise WhatIfFailed(str(e)) from None
