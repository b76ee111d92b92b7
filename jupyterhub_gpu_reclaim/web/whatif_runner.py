"""Running a what-if for the admin page and the API: the period as admins write it, one
what-if at a time (a second is answered 429), the replay in a process of its own within a
time budget (`whatif_process`), so that the service's cycles go on at their pace meanwhile.
Bad input is `BadInput` (400), before anything is read; so is a replay past its budget. A
replay that fails or whose process dies is a 500 that says so."""

from __future__ import annotations

import asyncio
from typing import Any, Mapping

from tornado import web

from ..timestamps import utcnow
from ..replay.whatif import WhatIf, WhatIfError, check_period, override_policy
from ..replay.whatif_process import WhatIfFailed, replay_in_process
from .inputs import BadInput, parse_since

#: the period the form offers first
DEFAULT_SINCE = "7d"
RETRY_AFTER_S = 10

_running = asyncio.Lock()  # one what-if at a time in this process: each can take a while


async def run_what_if(handler: Any, since_text: Any, until_text: Any, values: Any) -> WhatIf:
    """The what-if the request asks for (`handler`: the page's or the API's handler, with
    its context). BadInput for bad input; 429 while another runs."""
    ctx = handler.ctx
    live = ctx.settings.rules
    now = utcnow()
    if not isinstance(since_text, str) or not since_text.strip():
        raise BadInput(f'since: give a time or a duration back from now, e.g. "{DEFAULT_SINCE}"')
    if until_text is not None and not isinstance(until_text, str):
        raise BadInput(f"until: not a time or a duration: {until_text!r}")
    if not isinstance(values, Mapping):
        raise BadInput("override: must be an object of policy settings, e.g. {\"idle_reclaim_after\": \"90m\"}")
    since = parse_since(since_text.strip(), "since", now)
    until = parse_since(until_text.strip(), "until", now) if until_text and until_text.strip() else now
    try:  # checked here too, so bad input never waits for another's replay
        override_policy(live, values)
        check_period(since, until, now)
    except WhatIfError as e:
        raise BadInput(str(e)) from None
    if _running.locked():
        handler.retry_after = RETRY_AFTER_S
        raise web.HTTPError(429, "another what-if is running; try again in a moment")
    async with _running:
        try:
            return await replay_in_process(ctx.store, since, until, values, live=live, now=now)
        except WhatIfError as e:  # OverBudget too
            raise BadInput(str(e)) from None
        except WhatIfFailed as e:  # not the admin's input: a 500, but one that says what happened
            raise web.HTTPError(500, f"{e}; nothing was changed: try again, or replay a shorter period") from None
