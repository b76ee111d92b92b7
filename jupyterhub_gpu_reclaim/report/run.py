"""The whole report from the command's arguments: what to ask Prometheus (`read_history`) and
the hub (for groups), in what pieces, and the figures put together as one JSON-able dict
(formats.py writes it as text or CSV). The admin page's report (web/usage_report.py) reads
Prometheus and puts its figures together with the same functions."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..durations import HOUR
from ..oneline import brief
from ..policy.config import PolicyConfig
from ..signals.http_source import HttpSource, SignalError, get_json, hide_password
from ..signals.gpu_readings import PodLabel
from ..timestamps import format_time
from ..wording import count
from . import promql
from .estimate import DEFAULT_POLICY, assumed, estimate
from .timelines import Pod, PodInfo, Timelines, pods_of
from .prometheus_range import PrometheusHistory, ReportError
from .runs import Asked, Run, asked, by_pod, labelled, stretches, valued_stretches
from .sessions import PodFacts, Session, sessions
from .usage import DAY_S, NO_PROFILE, NO_USER, Hours, day_bounds, groups_of, queue_summary, totals_by, usage_rows, waits

DEFAULT_STEP = 60  # seconds: the command's --step, and the admin page's step
MAX_GROUPS = 100_000  # a hub that pages for ever is an error, not a hang


@dataclass(frozen=True)
class ReportRequest:
    prometheus_url: str
    since: dt.datetime
    until: dt.datetime
    step: int = DEFAULT_STEP
    gpu_matchers: str = ""
    pod_label: PodLabel = "auto"
    hub_api_url: str | None = None
    hub_token: str | None = None
    max_series: int = 20_000
    max_samples: int = 1_000_000
    timeout: float = 120.0


class _Hub(HttpSource):
    def __init__(self, api_url: str, token: str, timeout: float) -> None:
        self.api_url = api_url.rstrip("/")
        self.timeout = timeout
        self._headers = {"Authorization": f"token {token}",
                         "Accept": "application/jupyterhub-pagination+json"}

    async def groups(self) -> dict[str, list[str]]:
        """{group: member names} from GET /groups, page by page."""
        out: dict[str, list[str]] = {}
        offset = 0
        while True:
            try:
                # a redirect is not followed: only the hub's own answer says who is in its groups
                # (one to another host came back without the token, from whoever answered there)
                body = await get_json(self._client(), f"{self.api_url}/groups", source="hub", timeout=self.timeout,
                                      params={"offset": str(offset), "limit": "200"}, allow_redirects=False)
            except SignalError as e:
                hint = (" (not followed: give --hub-api-url as the hub's own API URL)"
                        if e.status is not None and 300 <= e.status < 400 else "")
                raise ReportError(f"the hub's groups: {e.message}{hint}") from None
            items = body.get("items") if isinstance(body, dict) else body
            if not isinstance(items, list):
                raise ReportError(f"the hub's groups: not a list of groups: {brief(body)}")
            for group in items:
                name, users = (group.get("name"), group.get("users")) if isinstance(group, dict) else (None, None)
                if isinstance(name, str) and isinstance(users, list):
                    out[name] = [u for u in users if isinstance(u, str)]
            pagination = body.get("_pagination") if isinstance(body, dict) else None
            if not (isinstance(pagination, dict) and pagination.get("next")) or not items:
                return out
            offset += len(items)
            if offset >= MAX_GROUPS:
                raise ReportError(f"the hub's groups: more than {MAX_GROUPS}")


def grid(request: ReportRequest) -> tuple[float, float, int]:
    """The window on the step grid: (first step, last step, steps). A step at time t reads
    (t - step, t], so the first is a step after `since` and the last at `until` (a report
    to midnight ends with the day's last minute, not a minute of the next day)."""
    step = request.step
    start = math.floor(request.since.timestamp() / step) * step + step
    end = math.floor(request.until.timestamp() / step) * step
    if end < start:
        raise ReportError(f"the window from {format_time(request.since)} to {format_time(request.until)} "
                          f"holds no step of {step} s")
    return float(start), float(end), int((end - start) // step) + 1


@dataclass
class History:
    """What Prometheus holds of the request's window, read: each GPU's timeline, the hub
    users' pods, what kube-state-metrics says of each pod (Running, its profile, asking for
    a shared GPU, the GPUs it asked for), its Pending and unschedulable steps, and the pods
    left out for asking for no GPU."""

    timelines: Timelines
    pods: dict[Pod, PodInfo]
    facts: PodFacts
    pending: dict[Pod, list[Run]]
    unschedulable: dict[Pod, list[Run]]
    dropped: set[Pod]
    queries: int
    stale: int  # steps without a reading that end a session where kube-state-metrics shows none
    _sessions: list[Session] | None = field(default=None, repr=False)

    @property
    def requests(self) -> Mapping[Pod, Asked]:
        return self.facts.requests

    @property
    def sessions(self) -> list[Session]:
        """The pod instances' sessions (sessions.py), made once."""
        if self._sessions is None:
            self._sessions = list(sessions(self.timelines.gpus, self.facts, self.stale))
            self.timelines.gpus.clear()  # the sessions hold their steps now
        return self._sessions

    def days(self) -> list[tuple[str, int, int]]:
        """The window's UTC days: each step on the day its time begins."""
        t = self.timelines
        return day_bounds(t.start - t.step, t.step, t.steps)


async def read_history(request: ReportRequest, config: PolicyConfig) -> History:
    """The window's history from Prometheus (ReportError when it cannot be read)."""
    start, end, steps = grid(request)
    step = request.step
    prometheus = PrometheusHistory(request.prometheus_url, timeout=request.timeout,
                                   max_series=request.max_series, max_samples=request.max_samples)
    async with prometheus:
        stale = max(1, int(config.stale_after.total_seconds() // step))
        timelines = Timelines(start, step, steps, config.gpu_idle_threshold, request.pod_label, stale)
        # kube-state-metrics' part is asked meanwhile: Prometheus evaluates it while the GPU pages are read
        kube = asyncio.create_task(_kube_state(prometheus, start, steps, step))
        try:
            async for first, last, series in prometheus.pages(promql.gpu_queries(step, request.gpu_matchers),
                                                              promql.gpu_selector(request.gpu_matchers), start, end,
                                                              step):
                # read in a thread, so that the next page is asked for and computed meanwhile
                await asyncio.to_thread(timelines.add_page, first, last, series)
            pending, unschedulable, running, shared, profiles, requests = await kube
        finally:
            kube.cancel()
        # a day a list: each session's pod is a series of its own (its uid), so a month's list
        # grows with the sessions, and what is kept, a user a pod name, does not
        pods: dict[Pod, PodInfo] = {}
        for a in range(int(start - step), int(end), DAY_S):
            labels = await prometheus.series([promql.user_pods_selector()], a, min(a + DAY_S, end))
            pods.update(pods_of(labels, promql.USER_LABEL, promql.SERVER_LABEL, promql.COMPONENT_LABEL,
                                promql.SINGLEUSER))
        queries = prometheus.queries
    dropped = _without_gpu_request(timelines, requests)
    running = {pod: runs for pod, runs in running.items() if pod in requests}
    return History(timelines, pods, PodFacts(running, profiles, shared, requests), pending, unschedulable, dropped,
                   queries, stale)


async def _kube_state(prometheus: PrometheusHistory, start: float, steps: int, step: int) -> tuple:
    """The stretches of each pod Pending, unschedulable, Running and asking for a shared GPU,
    and of its profiles and the GPUs it asked for, one query at a time."""
    phases = await stretches(prometheus, promql.phases, start, steps, step)
    pending, running = (by_pod((labels, runs) for labels, runs in phases if labels.get("phase") == phase)
                        for phase in (promql.PENDING, promql.RUNNING))
    unschedulable = by_pod(await stretches(prometheus, promql.unschedulable, start, steps, step))
    shared = by_pod(await stretches(prometheus, promql.shared_requests, start, steps, step))
    # a profile belongs to the pod instance whose steps it covers, not to the name; so does a request
    profiles = labelled(await stretches(prometheus, promql.profiles, start, steps, step), promql.PROFILE_LABEL)
    requests = asked(await valued_stretches(prometheus, promql.gpu_requests, start, steps, step))
    return pending, unschedulable, running, shared, profiles, requests


async def build_report(request: ReportRequest) -> dict:
    config = PolicyConfig()
    history = await read_history(request, config)
    groups = None
    if request.hub_api_url and request.hub_token:
        async with _Hub(request.hub_api_url, request.hub_token, request.timeout) as hub:
            groups = await hub.groups()
    return assemble(request, history, groups, config)


def _without_gpu_request(timelines: Timelines, requests: Mapping[Pod, object]) -> set[Pod]:
    """Leave out the GPUs of pods that asked for none, where kube-state-metrics shows requests
    at all: with honor_labels true a free GPU's series carry the exporter's own pod."""
    if not requests:
        return set()
    dropped = {key for key, line in timelines.gpus.items() if line.pod not in requests}
    pods = {timelines.gpus[key].pod for key in dropped}
    for key in dropped:
        del timelines.gpus[key]
    return pods


def usage_tables(rows: Mapping[tuple[str, str, str], Hours], member: Mapping[str, list[str]],
                 with_groups: bool) -> dict:
    """The report's figures of the rows (day, user, profile): totals, per user (with each
    user's groups from `member`), group, profile and day, and the rows themselves."""
    totals = Hours()
    for hours in rows.values():
        totals.add(hours)

    def table(name: str, by: dict[str, Hours], extra=None) -> list[dict]:
        return [{name: key, **(extra(key) if extra else {}), **hours.rounded()}
                for key, hours in sorted(by.items(), key=lambda kv: (-kv[1].held, kv[0]))]

    return {
        "totals": totals.rounded(),
        "by_user": table("user", totals_by(rows, lambda k: [k[1]]), lambda u: {"groups": member.get(u, [])}),
        "by_group": table("group", totals_by(rows, lambda k: member.get(k[1]) or [])) if with_groups else [],
        "by_profile": table("profile", totals_by(rows, lambda k: [k[2]])),
        "by_day": sorted(table("day", totals_by(rows, lambda k: [k[0]])), key=lambda r: r["day"]),
        "rows": [{"day": day, "user": user, "groups": member.get(user, []), "profile": profile, **hours.rounded()}
                 for (day, user, profile), hours in sorted(rows.items())],
    }


def long_idle_steps(config: PolicyConfig, step: int) -> int:
    """"Idle in stretches of 2 h or more": the policy's idle_reclaim_after, in steps."""
    return int(config.idle_reclaim_after.total_seconds() // step)


def history_rows(history: History, config: PolicyConfig) -> dict[tuple[str, str, str], Hours]:
    """The history's GPU-hours per (day, user, profile)."""
    t = history.timelines
    return usage_rows(history.sessions, history.pods, history.days(), t.step, long_idle_steps(config, t.step))


def label_notes(history: History) -> list[str]:
    """Whose GPU-hours the history's labels could not tell, each a sentence for the report."""
    pods = history.pods
    notes = []
    unknown_profile = sorted({s.pod for s in history.sessions if s.pod in pods and not s.profile})
    if unknown_profile:
        notes.append(f"No profile is known for {count(len(unknown_profile), 'hub user pod')}: kube-state-metrics writes "
                     "kube_pod_annotations only for allow-listed annotations (--metric-annotations-allowlist="
                     "pods=[jupyterhub-gpu-reclaim/profile]), and only the service's spawner writes that "
                     "annotation; their hours are under " + NO_PROFILE + ".")
    strangers = sorted({s.pod for s in history.sessions if s.pod not in pods})
    if strangers:
        notes.append(f"No hub user is known for {count(len(strangers), 'pod')} holding GPUs in kube_pod_labels (no "
                     "hub.jupyter.org/username label: kube-state-metrics 2 writes only allow-listed labels, "
                     "--metric-labels-allowlist=pods=[hub.jupyter.org/username,hub.jupyter.org/servername]); "
                     "their hours are under " + NO_USER + ".")
    return notes


def request_notes(history: History) -> list[str]:
    """The pods left out for asking for no GPU, or that no pod asked for one."""
    notes = []
    if history.dropped:
        dropped = sorted(history.dropped)
        notes.append(
            f"Left out: {count(len(dropped), 'pod')} named by dcgm-exporter's series that asked kube-state-metrics "
            "for no GPU (a scrape with honor_labels: true gives a free GPU the exporter's own pod): "
            + ", ".join("/".join(pod) for pod in dropped[:5]) + (", …" if len(dropped) > 5 else "") + ".")
    elif not history.requests:
        notes.append("kube-state-metrics shows no pod asking for a GPU (kube_pod_container_resource_requests): "
                     "every pod dcgm-exporter names counts as holding its GPU, and the queue is empty.")
    return notes


def history_queue(history: History) -> dict:
    """The GPU queue of the history: its waits for a GPU summed up and its starts apart
    (queue_summary), and per UTC day (a wait counts on the day it began)."""
    t = history.timelines
    found = waits(history.pending, history.unschedulable, history.requests, history.pods, t.start - t.step, t.step)
    queue = queue_summary(found)
    by_day: dict[str, list] = {}
    for w in found:
        by_day.setdefault(dt.datetime.fromtimestamp(w.start, dt.timezone.utc).date().isoformat(), []).append(w)
    queue["by_day"] = [{"day": day, **queue_summary(ws)} for day, ws in sorted(by_day.items())]
    return queue


def history_estimate(history: History, config: PolicyConfig, policy: str = DEFAULT_POLICY) -> dict:
    """What the policy of `config` (named `policy`) would have freed in the history (an
    estimate: `estimate`), per UTC day of the hours freed too, and what it assumed."""
    t = history.timelines
    found = estimate(history.sessions, t.steps, t.step, config)
    h = t.step / HOUR.total_seconds()
    by_day = []
    for day, i0, i1 in history.days():
        freed = sum(gpus * max(0, min(b, i1) - max(a, i0)) for a, b, gpus in found.freed_steps) * h
        if freed:
            by_day.append({"day": day, "gpu_hours_freed": round(freed, 2)})
    return {**found.as_dict(), "by_day": by_day, "policy": policy, "assumed": assumed(config, policy)}


def assemble(request: ReportRequest, history: History, groups: dict[str, list[str]] | None,
             config: PolicyConfig) -> dict:
    timelines = history.timelines
    rows = history_rows(history, config)
    users = sorted({user for _, user, _ in rows})
    member = groups_of(users, groups) if groups is not None else {u: [] for u in users}
    notes = label_notes(history)
    if groups is None:
        notes.append("Groups were not asked for: --hub-api-url and a token in JUPYTERHUB_API_TOKEN give them.")
    notes += request_notes(history)
    return {
        "source": {"prometheus": hide_password(request.prometheus_url), "queries": history.queries,
                   "groups": "the hub" if groups is not None else None},
        "window": {"since": format_time(dt.datetime.fromtimestamp(timelines.start - timelines.step, dt.timezone.utc)),
                   "until": format_time(dt.datetime.fromtimestamp(
                       timelines.start + (timelines.steps - 1) * timelines.step, dt.timezone.utc)),
                   "step_s": timelines.step, "days": "UTC"},
        **counted_by(config),
        **usage_tables(rows, member, groups is not None),
        "queue": history_queue(history),
        "policy_estimate": history_estimate(history, config),
        "notes": notes,
    }


def counted_by(config: PolicyConfig) -> dict:
    """What the figures are counted by: the idle threshold and the long-idle span."""
    return {"idle_threshold_percent": config.gpu_idle_threshold,
            "long_idle_h": round(config.idle_reclaim_after.total_seconds() / HOUR.total_seconds(), 2)}
