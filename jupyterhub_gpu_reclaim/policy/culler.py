"""The policy for servers without GPUs and for users: jupyterhub-idle-culler 2.0's rules,
exactly (`policy.decide` sends GPU-less sessions here). Pure, no I/O."""

from __future__ import annotations

import datetime as dt

from .observations import Decision, Sample, SessionView
from .evidence import Measured
from .config import PolicyConfig


def decide_without_gpu(
    view: SessionView, samples: list[Sample], *, now: dt.datetime, config: PolicyConfig
) -> Decision:
    """jupyterhub-idle-culler 2.0's `handle_server`, for one ready server.

    inactive = now - last_activity (the latest sample's hub_last_activity; `started` when
    there is none); cull when inactive >= timeout (idle-culler compares with >=) — or,
    where a cull_arbiter_hook answered (`view.cull_arbiter`), when it said so — and the
    server kind (default / named) is culled. Otherwise, when max-age is set (non-zero),
    cull when now - started >= max_age, whatever the server kind. Admin servers are culled
    like others (--cull-admin-users only concerns deleting users)."""
    session = view.session
    latest = samples[-1] if samples else None
    last_activity = latest.hub_last_activity if latest is not None else None
    inactive = now - (last_activity or session.started)
    age = now - session.started
    measured = Measured(gpus=session.gpus, hub_last_activity=last_activity, inactive=inactive, age=age,
                        admin=session.admin, cull_arbiter=view.cull_arbiter)
    kind_culled = config.cull_named_servers if session.server else config.cull_default_servers
    timed_out = (inactive.total_seconds() >= config.cpu_timeout.total_seconds() if view.cull_arbiter is None
                 else view.cull_arbiter)
    if timed_out and kind_culled:
        why = (f"timeout {minutes(config.cpu_timeout)}" if view.cull_arbiter is None
               else "the cull_arbiter_hook says cull")
        return Decision(session.id, "reclaim", "idle-culler-timeout", f"inactive for {minutes(inactive)} ({why})",
                        None, measured)
    if config.cpu_max_age and age.total_seconds() >= config.cpu_max_age.total_seconds():
        return Decision(session.id, "reclaim", "idle-culler-max-age",
                        f"age {minutes(age)} (max age {minutes(config.cpu_max_age)})",
                        None, measured)
    return Decision(session.id, "keep", "idle-culler",
                    f"inactive for {minutes(inactive)}, " + ("under the timeout" if view.cull_arbiter is None
                                                            else "the cull_arbiter_hook says keep"),
                    None, measured)


def decide_user(
    *, admin: bool, created: dt.datetime | None, last_activity: dt.datetime | None,
    now: dt.datetime, config: PolicyConfig
) -> tuple[bool, str]:
    """jupyterhub-idle-culler 2.0's user rule (--cull-users), for a user none of whose
    servers is running: delete when inactive (now - last_activity, else now - created)
    >= timeout and the user is not an admin unless cull_admin_users; else when max-age is
    set and now - created >= max age. Returns (delete?, why)."""
    age = now - created if created is not None else None
    inactive = now - last_activity if last_activity is not None else age
    if inactive is not None and inactive >= config.cpu_timeout and (config.cull_admin_users or not admin):
        return True, f"inactive for {minutes(inactive)} (timeout {minutes(config.cpu_timeout)})"
    if config.cpu_max_age and age is not None and age >= config.cpu_max_age:
        return True, f"age {minutes(age)} (max age {minutes(config.cpu_max_age)})"
    return False, f"inactive for {minutes(inactive)}" if inactive is not None else "no activity recorded"


def minutes(td: dt.timedelta | None) -> str:
    if td is None:
        return "-"
    minutes = td.total_seconds() / 60
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"
