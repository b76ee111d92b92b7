"""What the admin page's usage report takes of Prometheus's days (web/usage_report.py), read
and counted as the command counts them: made in a process of its own (`child_process`), which
imports this module and what it needs of the report only."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ..policy.config import PolicyConfig
from .prometheus_range import ReportError
from .run import ReportRequest, history_estimate, history_queue, history_rows, label_notes, read_history, request_notes
from .usage import Hours


@dataclass(frozen=True)
class PrometheusPart:
    """The rows (day, user, profile), the notes, the GPU queue and the estimate of the
    policy of `config` (named `policy`)."""

    rows: dict[tuple[str, str, str], Hours]
    notes: list[str]
    queue: dict
    estimate: dict


def read_part(request: ReportRequest, config: PolicyConfig, policy: str, timeout: float) -> PrometheusPart:
    """Prometheus's part, read within `timeout` seconds (ReportError when it cannot be)."""

    async def read() -> PrometheusPart:
        try:
            history = await asyncio.wait_for(read_history(request, config), timeout)
        except TimeoutError:
            raise ReportError(f"no answer within {timeout:g} s") from None
        return PrometheusPart(history_rows(history, config), label_notes(history) + request_notes(history),
                              history_queue(history), history_estimate(history, config, policy))

    return asyncio.run(read())
