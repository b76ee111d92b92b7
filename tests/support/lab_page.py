"""What the JupyterLab extension's browser tests share: its status bar item and warning as a
page shows them, a count of its polls, and the session as the service's API gives it."""

from __future__ import annotations

import re

from .web_client import Client, user_token

STATUS = ".jp-GpuReclaim-status"
# a time as the service's pages write it (static/localtime.js): its date on another day
WARNING = re.compile(r"stopped at (\d{4}-\d\d-\d\d )?\d\d:\d\d unless it is used")

# counts the frontend's requests for the state (an init script: before JupyterLab's own)
COUNT_POLLS = """
window.__gpuReclaimPolls = 0;
const fetch = window.fetch;
window.fetch = (input, init) => {
  if (String(input.url ?? input).split('?')[0].endsWith('/gpu-reclaim/status')) window.__gpuReclaimPolls++;
  return fetch(input, init);
};
"""


async def service_session(hub, api, user: str) -> dict | None:
    """The user's session as the service's API gives it."""
    c = Client(hub.info["url"], await user_token(api, user))
    try:
        _, body = await c.json("GET", "api/sessions")
    finally:
        await c.close()
    return next(iter(body.get("sessions") or []), None)


async def warned(hub, api, user: str) -> bool:
    return ((await service_session(hub, api, user)) or {}).get("state") == "warned"
